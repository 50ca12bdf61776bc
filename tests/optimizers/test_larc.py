"""LARC's factor where a norm or the learning rate is 0, on every path, against numpy.

The paths: the reference stage (one ``tf.norm`` per tensor), the stage with
fused norms that the XLA path uses, and the native kernel that runs LARC and
momentum in one pass. Each must give c = 1 for a zero-norm variable or
gradient, and in clip mode for lr = 0, and the formula otherwise.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from optimizers import backend
from optimizers import native
from optimizers import pipeline as pipeline_lib
from optimizers import stages
from optimizers import validation
from optimizers.compat import openseq2seq as opt_lib
from optimizers.compat.openseq2seq import optimize_loss
from optimizers.lars import KerasMomentum
from optimizers.lr_policies import poly_decay
from tests.optimizers import references

ETA, MIN_UPDATE, EPS = 0.02, 1e-7, 1e-7


def numpy_factor(g, v, lr, mode, eta=ETA, min_update=MIN_UPDATE, eps=EPS):
  """The LARC factor of the numerical contract, in float64."""
  gn, vn = np.linalg.norm(np.float64(g)), np.linalg.norm(np.float64(v))
  if vn == 0 or gn == 0 or (mode == 'clip' and lr == 0):
    return 1.0
  if mode == 'clip':
    return min(1.0, max(eta * vn / (lr * (gn + eps)), min_update))
  return max(eta * vn / (gn + eps), min_update)


def case():
  """A kernel (both norms > 0), a zero bias, a zero beta and a variable with a zero gradient."""
  rng = np.random.default_rng(0)
  values = {'dense/kernel': rng.normal(size=(4, 3)), 'dense/bias': np.zeros(3),
            'batch_normalization/beta': np.zeros(5), 'frozen/kernel': rng.normal(size=(2, 2))}
  grads = [rng.normal(size=(4, 3)), rng.normal(size=3), rng.normal(size=5), np.zeros((2, 2))]
  variables = [keras.Variable(v.astype(np.float32), name=n.split('/')[1])
               for n, v in values.items()]
  return variables, [g.astype(np.float32) for g in grads]


def larc_factors(path, grads, variables, lr, params):
  """The factors and the variables after one momentum step (m = 0.9, from zero slots)."""
  optimizer = KerasMomentum(lr, momentum=0.9)
  optimizer.build(variables)
  tensors = [tf.constant(g) for g in grads]
  if path == 'native':
    larc = stages.Larc(params, variables)
    chosen = stages.step_stages(optimizer, variables, tensors, larc)
    assert [type(s) for s in chosen] == [stages.FusedLarcStep], native.error()
    factors = pipeline_lib.larc_and_apply(optimizer, tensors, variables, lr, params)
  else:
    larc = references.larc_reference if path == 'reference' else stages.larc
    scaled, factors = larc(tensors, variables, lr, params)
    optimizer.apply(scaled, variables)
  return [float(factors[i]) for i in range(len(variables))]


@pytest.mark.parametrize('path', ['reference', 'xla', 'native'])
@pytest.mark.parametrize('mode', ['clip', 'scale'])
@pytest.mark.parametrize('lr', [0.0, 0.5])
def test_factor_is_one_for_zero_norms_and_zero_lr(path, mode, lr, monkeypatch):
  monkeypatch.setenv(native.ENV_SWITCH, '1')
  variables, grads = case()
  before = [v.numpy().copy() for v in variables]
  params = validation.check_larc_params({'larc_eta': ETA, 'larc_mode': mode})
  got = larc_factors(path, grads, variables, lr, params)
  want = [numpy_factor(g, w, lr, mode) for g, w in zip(grads, before)]
  np.testing.assert_allclose(got, want, rtol=1e-6)
  # The zero bias and beta, and the zero gradient, pass unchanged (not min_update, not NaN).
  assert got[1:] == [1.0, 1.0, 1.0]
  if mode == 'clip' and lr > 0:
    assert got[0] < 1.0  # the formula still applies where both norms are positive
  for var, w, g, c in zip(variables, before, grads, want):
    np.testing.assert_allclose(var.numpy(), w - lr * c * g, rtol=1e-6, atol=1e-7)


def numpy_warmup_run(w0, b0, target_w, target_b, lrs, mode, momentum, optimizer='KerasMomentum'):
  """optimize_loss with LARC and momentum in numpy.

  ``KerasMomentum``: v ← m·v − lr·c·g; w ← w + v. ``Momentum`` (TF 1's):
  a ← m·a + c·g; w ← w − lr·a.
  """
  ws, vs = [w0.astype(np.float64), b0.astype(np.float64)], [np.zeros_like(w0), np.zeros_like(b0)]
  targets = [target_w, target_b]
  for lr in lrs:
    grads = [w - t for w, t in zip(ws, targets)]
    factors = [numpy_factor(g, w, lr, mode) for g, w in zip(grads, ws)]
    if optimizer == 'Momentum':
      vs = [momentum * v + c * g for v, c, g in zip(vs, factors, grads)]
      ws = [w - lr * v for w, v in zip(ws, vs)]
    else:
      vs = [momentum * v - lr * c * g for v, c, g in zip(vs, factors, grads)]
      ws = [w + v for w, v in zip(ws, vs)]
  return ws


@pytest.mark.parametrize('optimizer', ['Momentum', 'KerasMomentum'])
@pytest.mark.parametrize('native_kernels', ['1', '0'])
@pytest.mark.parametrize('mode', ['clip', 'scale'])
def test_warmup_from_zero_trains_zero_initialised_bias(native_kernels, mode, optimizer,
                                                       monkeypatch):
  """A warm-up that starts at lr 0, as the shipped schedules do: every step lands, no NaN.

  Backoff loss scaling would skip a step with a non-finite gradient and halve
  the scale; the global step and the scale show that none was skipped.
  """
  monkeypatch.setenv(native.ENV_SWITCH, native_kernels)
  opt_lib.clear_pipelines()
  w0 = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
  b0 = np.zeros(2, np.float32)
  target_w = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
  target_b = np.array([0.3, -0.7], np.float32)
  w, b = keras.Variable(w0, name='kernel'), keras.Variable(b0, name='bias')

  def loss():
    return (0.5 * tf.reduce_sum(tf.square(w - target_w))
            + 0.5 * tf.reduce_sum(tf.square(b - target_b)))

  schedule = lambda step: poly_decay(step, 0.5, decay_steps=20, warmup_steps=3)  # noqa: E731
  kwargs = dict(var_list=[w, b], loss_scaling='Backoff',
                larc_params={'larc_eta': ETA, 'larc_mode': mode})
  step = tf.function(lambda: optimize_loss(loss, optimizer, {'momentum': 0.9}, schedule,
                                           **kwargs))
  steps = 6
  for _ in range(steps):
    step()
  pipeline = opt_lib.get_pipeline(optimizer, {'momentum': 0.9}, schedule, **kwargs)
  assert int(pipeline.global_step.numpy()) == steps
  assert float(pipeline.loss_scale.numpy()) == 2.0 ** 14
  lrs = [float(poly_decay(s, 0.5, decay_steps=20, warmup_steps=3)) for s in range(steps)]
  assert lrs[0] == 0.0
  want_w, want_b = numpy_warmup_run(w0, b0, target_w, target_b, lrs, mode, 0.9, optimizer)
  np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(b.numpy(), want_b, rtol=1e-5, atol=1e-7)
  # The bias moved at the base rate: its first non-zero step had c = 1.
  assert np.all(np.abs(b.numpy()) > 0.05)
  opt_lib.clear_pipelines()


@pytest.mark.slow
def test_run_py_with_larc_and_a_warmup_from_zero_skips_no_step(tmp_path):
  """run.py, Momentum + LARC (clip), lr 0 at step 0, Backoff: every micro-step is an update."""
  from tests.test_run import SGD_CONFIG, SHORT, checkpoint_values, run  # pylint: disable=import-outside-toplevel
  steps = 8
  result = run('--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(tmp_path / 'run'),
               *SHORT, '--set', f'max_steps={steps}', '--set', 'batch_size_per_gpu=32',
               '--set', 'lr_policy_params={learning_rate: 0.1, power: 1.0, decay_steps: 100, '
               'warmup_steps: 4}',
               '--set', 'larc_params={larc_eta: 0.002}', '--set', 'loss_scaling=Backoff')
  values = checkpoint_values(tf.train.latest_checkpoint(str(tmp_path / 'run')))
  assert int(values['global_step/.ATTRIBUTES/VARIABLE_VALUE']) == steps, result.stdout
  # One batch per micro-step: a skipped update would have taken more batches.
  assert int(values['data_position/.ATTRIBUTES/VARIABLE_VALUE']) == steps
  scale = [v for k, v in values.items() if k.startswith('loss_scaler/') and '/scale/' in k]
  assert len(scale) == 1 and float(scale[0]) == 2.0 ** 14  # never halved by an overflow
  model = [v for k, v in values.items() if k.startswith('model/')]
  assert model and all(np.all(np.isfinite(v)) for v in model)
