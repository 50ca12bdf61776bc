"""LARC that skips some variables, then every registered optimizer's update, inside tf.function.

The variables LARC skips keep their plain gradients while the others get
scaled ones; the update must accept that mix on every update path (the native
kernel, XLA, Keras' per-variable reference), and a skipped variable must move
exactly as it does without LARC (LARC leaves its gradient alone).
"""

import numpy as np
import pytest
import tensorflow as tf

from optimizers import native
from optimizers.compat import openseq2seq as opt_lib
from optimizers.registry import OPTIMIZER_CLS_NAMES

NAMES = sorted(n for n in OPTIMIZER_CLS_NAMES if n.lower() != 'agn')
# default: the native kernel where one applies; xla: with the native kernels
# turned off; reference: Keras' per-variable update (fused=False).
NATIVE = {'lars', 'lamb', 'momentum', 'kerasmomentum'}
FUSED_ARGUMENT = {'lars', 'lamb'}
CASES = ([(n, 'default') for n in NAMES] + [(n, 'xla') for n in NAMES if n.lower() in NATIVE]
         + [(n, 'reference') for n in NAMES if n.lower() in FUSED_ARGUMENT])
# Small enough that LARC's clip mode scales the kernel's gradient (factor < 1).
LARC = {'larc_eta': 1e-3, 'larc_mode': 'clip', 'skip_list': ['bias']}


def _params(name, path):
  params = {'learning_rate': 0.05}
  if name.lower() in ('momentum', 'kerasmomentum', 'lars'):
    params['momentum'] = 0.9
  if name.lower() == 'adamw':
    params['weight_decay'] = 0.004  # TF 1's AdamWOptimizer has no default
  if path == 'reference':
    params['fused'] = False
  return params


def _train(name, path, larc_params, steps=2):
  opt_lib.clear_pipelines()
  kernel = tf.Variable(_train.initial_kernel, name='kernel')
  bias = tf.Variable(np.array([0.1, -0.2, 0.3], np.float32), name='bias')
  x = tf.constant(np.linspace(-2.0, 2.0, 20, dtype=np.float32).reshape(5, 4))
  y = tf.constant(np.linspace(1.0, -1.0, 15, dtype=np.float32).reshape(5, 3))

  @tf.function
  def step():
    loss = lambda: tf.reduce_mean(tf.square(tf.matmul(x, kernel) + bias - y))
    return opt_lib.optimize_loss(loss, name, optimizer_params=_params(name, path),
                                 learning_rate_decay_fn=None, var_list=[kernel, bias],
                                 larc_params=larc_params)

  after = []
  for _ in range(steps):
    step()
    after.append((kernel.numpy(), bias.numpy()))
  return after


_train.initial_kernel = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)


@pytest.mark.parametrize('name,path', CASES)
def test_larc_skipping_a_variable_then_the_update_inside_tf_function(name, path, monkeypatch):
  if path == 'xla':
    monkeypatch.setenv(native.ENV_SWITCH, '0')
  (_, plain_bias), _ = _train(name, path, None)
  (kernel, bias), (kernel2, bias2) = _train(name, path, LARC)
  # The skipped bias, after the first update: the same as without LARC.
  np.testing.assert_allclose(bias, plain_bias, rtol=1e-6, atol=1e-7)
  # The kernel moved (trust-ratio and Adam-like updates hardly notice LARC's scale).
  assert not np.allclose(kernel, _train.initial_kernel)
  # A second update through the same traced step.
  assert np.all(np.isfinite(kernel2)) and np.all(np.isfinite(bias2))
  assert not np.array_equal(bias2, bias)


def test_the_native_kernels_are_built_here():
  # path=default takes the native kernels for LARS, LAMB and Momentum on this machine.
  assert native.load() is not None, native.error()
