"""The native CPU kernels (optimizers/native.py): build, dispatch, in-place safety, errors.

Their numbers against the reference paths are checked in test_fused.py.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from optimizers import native
from optimizers import stages
from optimizers.lamb import LAMB
from optimizers.lars import LARSOptimizer
from optimizers.optimizers import MomentumOptimizer
from optimizers.optimizers import larc_and_apply

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def native_on(monkeypatch):
  monkeypatch.setenv(native.ENV_SWITCH, '1')
  assert native.load() is not None, native.error()


def variables_and_grads():
  rng = np.random.default_rng(0)
  variables = [keras.Variable(rng.normal(size=s).astype(np.float32), name=n)
               for s, n in (((4, 3), 'kernel'), ((3,), 'bias'))]
  grads = [tf.constant(rng.normal(size=v.shape).astype(np.float32)) for v in variables]
  return variables, grads


def op_types(fn, *args):
  """The op types in the graph of a tf.function, its nested functions included."""
  graph = tf.function(fn).get_concrete_function(*args).graph
  types = {op.type for op in graph.get_operations()}
  for function in graph._functions.values():  # pylint: disable=protected-access
    types |= {node.op for node in function.cached_definition.node_def}
  return types


def test_library_is_built_once_and_reused():
  path = native.build()
  assert os.path.isfile(path) and path == native.library_path()
  mtime = os.path.getmtime(path)
  assert native.build() == path
  assert os.path.getmtime(path) == mtime


@pytest.mark.parametrize('make, op', [
    (lambda: LARSOptimizer(0.1, skip_list=['bias']), 'LargebatchTrustMomentum'),
    (lambda: LAMB(0.01, weight_decay=0.01), 'LargebatchLamb'),
])
def test_optimizers_dispatch_to_the_kernels(make, op):
  variables, grads = variables_and_grads()
  optimizer = make()
  optimizer.build(variables)
  assert op in op_types(lambda: optimizer.apply(grads, variables))


def test_momentum_with_larc_dispatches_to_one_kernel():
  variables, grads = variables_and_grads()
  optimizer = MomentumOptimizer(0.1, momentum=0.9)
  optimizer.build(variables)
  params = stages.check_larc_params({'larc_eta': 0.002})
  assert 'LargebatchTrustMomentum' in op_types(
      lambda: larc_and_apply(optimizer, grads, variables, 0.1, params))


def test_keras_clipping_on_the_optimizer_keeps_larc_separate():
  """Keras' clipnorm runs between LARC and the update, so the two must not be fused."""
  variables, grads = variables_and_grads()
  optimizer = MomentumOptimizer(0.1, momentum=0.9, clipnorm=1.0)
  assert not optimizer.fused_larc_applies(grads, variables)
  assert not MomentumOptimizer(0.1, momentum=0.0).fused_larc_applies(grads, variables)


def test_kernels_are_not_used_inside_xla_and_results_agree():
  """A jit_compile=True step cannot hold a custom op: it takes the XLA path, same numbers."""
  results = []
  for jit in (False, True):
    variables, grads = variables_and_grads()
    optimizer = LARSOptimizer(0.1, eeta=0.01)
    optimizer.build(variables)
    step = lambda: optimizer.apply(grads, variables)  # noqa: E731
    types = op_types(tf.function(step, jit_compile=jit) if jit else step)
    assert ('LargebatchTrustMomentum' in types) != jit
    tf.function(step, jit_compile=jit)()
    results.append([v.numpy() for v in variables])
  for got, want in zip(*results):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_a_value_read_before_the_update_keeps_its_old_contents():
  """The kernel writes in place only into a buffer no tensor shares (copy on write)."""
  variables, grads = variables_and_grads()
  optimizer = LARSOptimizer(0.5, eeta=0.1)
  optimizer.build(variables)
  before = tf.identity(variables[0].value)  # eager reads share the variable's buffer
  before_copy = before.numpy().copy()
  optimizer.apply(grads, variables)
  np.testing.assert_array_equal(before.numpy(), before_copy)
  assert not np.allclose(variables[0].numpy(), before_copy)


def test_same_variable_twice_is_a_clear_error():
  variables, grads = variables_and_grads()
  slots = [tf.Variable(tf.zeros(v.shape)) for v in variables]
  with pytest.raises(tf.errors.InvalidArgumentError, match='given twice'):
    native.trust_momentum([variables[0]] * 2,
                          [slots[0], slots[0]], [grads[0]] * 2, 0.1, [True, True], 'lars', 0.9)


def test_float16_variables_take_the_xla_path():
  var = tf.Variable(np.ones((3, 2), np.float16))
  assert not native.applies([var], [], [tf.ones((3, 2), tf.float16)])
  optimizer = LARSOptimizer(0.1, eeta=1.0, weight_decay=0.0)
  optimizer.build([var])
  optimizer.apply([tf.ones((3, 2), tf.float16)], [var])
  assert var.numpy().dtype == np.float16 and np.all(var.numpy() < 1.0)


def test_switch_off_by_environment():
  code = ('from optimizers import native\n'
          'print(native.load() is None, native.error())\n')
  env = dict(os.environ, **{native.ENV_SWITCH: '0', 'PYTHONPATH': ROOT,
                            'TF_CPP_MIN_LOG_LEVEL': '3'})
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env,
                       check=True, cwd=ROOT).stdout
  assert out.strip().splitlines()[-1] == f'True {native.ENV_SWITCH}=0'
