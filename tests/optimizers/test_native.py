"""The native CPU kernels (optimizers/native.py): build, dispatch, in-place safety, errors.

Their numbers against the reference paths are checked in test_fused.py.
"""

import os
import runpy
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from optimizers import native
from optimizers import stages
from optimizers import validation
from optimizers import lars as lars_lib
from optimizers.lamb import LAMB
from optimizers.lars import LARSOptimizer
from optimizers.lars import KerasMomentum
from optimizers import pipeline as pipeline_lib
from optimizers.pipeline import larc_and_apply
from optimizers.settings import UpdateSettings

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


def test_a_build_on_first_use_says_so_in_one_line(tmp_path, monkeypatch, capsys):
  """The compiler is replaced by one that writes its output file: only the message is tested."""
  def compiler(command, **kwargs):
    if '-o' in command:
      with open(command[command.index('-o') + 1], 'wb') as f:
        f.write(b'library')
    return subprocess.CompletedProcess(command, 0, stdout='', stderr='')

  monkeypatch.setattr(native, 'BUILD_DIR', str(tmp_path))
  monkeypatch.setattr(native.subprocess, 'run', compiler)
  path = native.build()
  assert os.path.dirname(path) == str(tmp_path) and os.path.isfile(path)
  lines = capsys.readouterr().err.splitlines()
  assert len(lines) == 1 and lines[0].startswith('building the native optimizer kernels')
  assert path in lines[0] and '`python -m optimizers.native`' in lines[0]
  assert native.build() == path  # built: no second message
  assert capsys.readouterr().err == ''


@pytest.mark.filterwarnings('ignore:.*found in sys.modules:RuntimeWarning')
def test_python_m_optimizers_native_builds_ahead_of_time(monkeypatch, capsys):
  # What `python -m optimizers.native` runs (runpy is how -m runs a module), in this
  # process: a child would add only TensorFlow's start-up.
  monkeypatch.setattr(sys, 'argv', ['optimizers/native.py'])
  runpy.run_module('optimizers.native', run_name='__main__')
  assert capsys.readouterr().out.strip() == native.library_path()
  assert os.path.isfile(native.library_path())


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
  optimizer = KerasMomentum(0.1, momentum=0.9)
  optimizer.build(variables)
  params = validation.check_larc_params({'larc_eta': 0.002})
  assert 'LargebatchTrustMomentum' in op_types(
      lambda: larc_and_apply(optimizer, grads, variables, 0.1, params))


def forms(optimizer, grads, variables, larc_params=None):
  """The stages ``stages.step_stages`` chooses, as the chain's description names them."""
  larc = (stages.Larc(validation.check_larc_params(larc_params), variables)
          if larc_params is not None else None)
  return [s.describe() for s in stages.step_stages(optimizer, variables, grads, larc)]


def test_keras_clipping_on_the_optimizer_keeps_larc_separate():
  """Keras' clipnorm runs between LARC and the update, so the two must not be fused."""
  variables, grads = variables_and_grads()
  optimizer = KerasMomentum(0.1, momentum=0.9, clipnorm=1.0)
  params = {'larc_eta': 0.002}
  # LARC runs first on its own; the update is Keras' own apply, which clips
  # before update_step.
  assert forms(optimizer, grads, variables, params) == ['larc(clip)', 'kerasmomentum(keras)']
  # Without clipnorm, but with momentum 0 (the kernel's LARC needs momentum), the
  # update takes Momentum's own fused form (XLA: it has no native kernel of its own).
  assert forms(KerasMomentum(0.1, momentum=0.0), grads, variables, params) == [
      'larc(clip)', 'kerasmomentum(xla)']
  assert forms(KerasMomentum(0.1, momentum=0.9), grads, variables, params) == [
      'larc(clip)+kerasmomentum(native)']


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


# LargebatchLamb keeps u for its second pass for variables up to this many
# elements and recomputes it above (kMaxStored in largebatch_ops.cc).
LAMB_MAX_STORED = 1 << 22


def lamb_steps(values, grads, names, steps=2, **kwargs):
  """Applies LAMB ``steps`` times to fresh variables; returns their values."""
  variables = [keras.Variable(v, name=n) for v, n in zip(values, names)]
  optimizer = LAMB(0.01, beta_1=0.9, beta_2=0.99, weight_decay=0.1, **kwargs)
  optimizer.build(variables)
  step = tf.function(lambda: optimizer.apply(grads, variables))
  for _ in range(steps):
    step()
  return [v.numpy() for v in variables]


def test_lamb_stored_and_recomputed_second_pass_give_identical_values():
  """Without layer adaptation each element's update depends on that element alone.

  So a variable just above the kernel's limit (u recomputed) and one of its
  first LAMB_MAX_STORED elements (u stored) must agree bit for bit.
  """
  rng = np.random.default_rng(3)
  big = rng.normal(size=LAMB_MAX_STORED + 19).astype(np.float32)
  grad = rng.normal(size=big.shape).astype(np.float32)
  small, small_grad = big[:LAMB_MAX_STORED], grad[:LAMB_MAX_STORED]
  got = lamb_steps([big, small], [tf.constant(grad), tf.constant(small_grad)],
                   ['big_kernel', 'small_kernel'], exclude_from_layer_adaptation=['kernel'])
  np.testing.assert_array_equal(got[0][:LAMB_MAX_STORED], got[1])


def test_lamb_kernel_on_both_sides_of_the_stored_limit_matches_the_reference():
  rng = np.random.default_rng(4)
  sizes = (LAMB_MAX_STORED + 19, LAMB_MAX_STORED, 1001)
  values = [rng.normal(size=n).astype(np.float32) for n in sizes]
  grads = [tf.constant(rng.normal(size=n).astype(np.float32)) for n in sizes]
  names = ['above', 'at_limit', 'small']
  got = lamb_steps(values, grads, names)
  want = lamb_steps(values, grads, names, fused=False)
  for g, w, initial in zip(got, want, values):
    assert np.abs(g - initial).max() > 1e-4  # the update landed
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6 * np.abs(w).max())


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
    lars_lib.trust_momentum(native.load(), [variables[0]] * 2, [slots[0], slots[0]],
                            [grads[0]] * 2, 0.1, [True, True], 'lars', 0.9)


def test_float16_variables_take_the_xla_path():
  var = tf.Variable(np.ones((3, 2), np.float16))
  assert not native.applies([var], [], [tf.ones((3, 2), tf.float16)])
  optimizer = LARSOptimizer(0.1, eeta=1.0, weight_decay=0.0)
  optimizer.build([var])
  optimizer.apply([tf.ones((3, 2), tf.float16)], [var])
  assert var.numpy().dtype == np.float16 and np.all(var.numpy() < 1.0)


def test_switch_off_by_environment(monkeypatch):
  # load() reads the switch at every call, so this process shows it as a new one would.
  monkeypatch.setenv(native.ENV_SWITCH, '0')
  assert native.load() is None
  assert native.error() == f'{native.ENV_SWITCH}=0'
  variables, grads = variables_and_grads()
  optimizer = LARSOptimizer(0.1)
  optimizer.build(variables)
  assert 'LargebatchTrustMomentum' not in op_types(lambda: optimizer.apply(grads, variables))


def test_first_use_inside_a_traced_step_loads_quietly(tmp_path):
  # The library is first loaded while a step is traced; AutoGraph must not try
  # to convert the loader (it warns about every os and subprocess call it meets).
  code = ('import keras, tensorflow as tf\n'
          'from optimizers.compat import openseq2seq as opt_lib\n'
          'model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])\n'
          'x = tf.ones((4, 3))\n'
          '@tf.function\n'  # a def, which AutoGraph converts with what it calls
          'def step():\n'
          '  return opt_lib.optimize_loss(\n'
          '      lambda: tf.reduce_mean(model(x) ** 2), "LARS", {"momentum": 0.9},\n'
          '      lambda _: tf.constant(0.1), model=model, clip_gradients=1.0)\n'
          'print(float(step()) >= 0.0)\n')
  env = dict(os.environ, **{native.ENV_SWITCH: '1', 'PYTHONPATH': ROOT,
                            'TF_CPP_MIN_LOG_LEVEL': '3'})
  script = tmp_path / 'step.py'  # a file: AutoGraph converts only code whose source it can read
  script.write_text(code)
  result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          check=True, cwd=ROOT, timeout=300)
  assert result.stdout.strip().splitlines()[-1] == 'True'
  assert 'do_not_convert' not in result.stderr and 'AutoGraph' not in result.stderr, result.stderr


def random_gradients(seed=0):
  """float32 gradients of assorted shapes, a 0-d and an empty one among them."""
  rng = np.random.default_rng(seed)
  shapes = [(3, 3, 16, 16), (64,), (), (0,), (100003,), (7, 5)]
  return [rng.normal(scale=10.0 ** rng.integers(-4, 3), size=s).astype(np.float32)
          for s in shapes]


def kernel_statistics(grads, with_norm):
  """``stages.gradient_statistics`` in the form of the native kernel (its tensor-op form: no library)."""
  return stages.gradient_statistics(grads, with_norm, native.load())


def stats_of(grads, fn):
  has_nan, amax, norm = fn([tf.constant(g) for g in grads], True)
  return bool(has_nan), float(amax), float(norm)


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_gradient_stats_kernel_matches_numpy_and_the_tensor_ops(seed):
  grads = random_gradients(seed)
  flat = np.concatenate([g.ravel() for g in grads]).astype(np.float64)
  native_stats = stats_of(grads, kernel_statistics)
  reference = stats_of(grads, stages.gradient_statistics)
  assert native_stats[0] is False and reference[0] is False
  # The largest magnitude is exact in any order.
  assert native_stats[1] == reference[1] == float(np.max(np.abs(flat)))
  # The norm is summed in double: within float32 rounding of numpy's float64 norm.
  np.testing.assert_allclose(native_stats[2], np.sqrt(np.sum(flat ** 2)), rtol=1e-7)
  np.testing.assert_allclose(native_stats[2], reference[2], rtol=1e-6)


@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf])
# Tensor and element: the middle of the 2304- and the 100003-element tensors
# (the kernel's vector loop), the last of the 35-element one and the 0-d one
# (its remainder loop).
@pytest.mark.parametrize('where, index', [(0, 1152), (4, 50001), (5, 34), (2, 0)])
def test_gradient_stats_kernel_flags_any_non_finite_element(bad, where, index):
  grads = random_gradients()
  grads[where] = np.array(grads[where])
  grads[where].flat[index] = bad
  for fn in (kernel_statistics, stages.gradient_statistics):
    has_nan, amax, _ = stats_of(grads, fn)
    assert has_nan is True and amax == np.inf


def test_gradient_stats_kernel_edge_values():
  largest = np.finfo(np.float32).max
  # The largest float32 is finite. Its square overflows float32 but not the
  # kernel's double sum, so its norm is exact where the tensor ops' is inf.
  grads = [np.array([largest, -1.0], np.float32)]
  has_nan, amax, norm = stats_of(grads, kernel_statistics)
  assert has_nan is False and amax == float(largest) and norm == float(largest)
  assert stats_of(grads, stages.gradient_statistics) == (False, float(largest), np.inf)
  all_finite, amax, norm = native.load().largebatch_gradient_stats(gradients=[])
  assert (bool(all_finite), float(amax), float(norm)) == (True, 0.0, 0.0)
  zeros = stats_of([np.zeros((0, 3), np.float32), np.zeros(5, np.float32)], kernel_statistics)
  assert zeros == (False, 0.0, 0.0)


def test_gradient_stats_of_a_sparse_gradient_take_its_values_on_the_kernel():
  """An embedding's gradient (an index twice) counts as the dense tensor it sums to, on both paths."""
  rng = np.random.default_rng(4)
  dense = rng.normal(size=(7, 5)).astype(np.float32)
  values = rng.normal(scale=3.0, size=(4, 5)).astype(np.float32)
  sparse = tf.IndexedSlices(tf.constant(values), tf.constant([1, 6, 1, 0]), tf.constant([9, 5]))
  grads = [tf.constant(dense), sparse]
  as_dense = np.zeros([9, 5], np.float32)
  np.add.at(as_dense, [1, 6, 1, 0], values)
  flat = np.concatenate([dense.ravel(), as_dense.ravel()]).astype(np.float64)
  has_nan, amax, norm = (float(x) for x in kernel_statistics(grads, True))
  reference = [float(x) for x in stages.gradient_statistics(grads, True)]
  assert has_nan == reference[0] == 0.0
  assert amax == reference[1] == float(np.max(np.abs(flat)))
  np.testing.assert_allclose(norm, np.sqrt(np.sum(flat ** 2)), rtol=1e-7)
  np.testing.assert_allclose(norm, reference[2], rtol=1e-6)
  types = op_types(lambda: kernel_statistics(grads, True))
  assert 'LargebatchGradientStats' in types and 'IsFinite' not in types
  values[2, 3] = np.nan
  bad = tf.IndexedSlices(tf.constant(values), tf.constant([1, 6, 1, 0]), tf.constant([9, 5]))
  has_nan, amax, _ = kernel_statistics([tf.constant(dense), bad], False)
  assert bool(has_nan) and float(amax) == np.inf


def test_optimize_loss_takes_its_gradient_statistics_from_the_kernel():
  variables, _ = variables_and_grads()
  x = tf.constant(np.random.default_rng(3).normal(size=(5, 4)).astype(np.float32))
  pipeline = pipeline_lib.GradientPipeline(
      variables, UpdateSettings('SGD', {'learning_rate': 0.1}, clip_gradients=1.0))
  types = op_types(lambda: pipeline(
      lambda: tf.reduce_sum(tf.tanh(tf.matmul(x, variables[0]) + variables[1])))['loss'])
  assert 'LargebatchGradientStats' in types and 'IsFinite' not in types and 'L2Loss' not in types
  assert pipeline.describe_chain() == 'finite check → clip(1) → gradientdescent(keras)'


def test_a_unit_loss_scale_adds_no_multiplies_and_changes_no_bit():
  variables, _ = variables_and_grads()
  x = tf.constant(np.random.default_rng(3).normal(size=(5, 4)).astype(np.float32))
  loss_fn = lambda: tf.reduce_sum(tf.tanh(tf.matmul(x, variables[0]) + variables[1]))

  def gradients(scale):
    return pipeline_lib.scaled_gradients(loss_fn, variables, tf.constant(scale, tf.float32))[1]

  unit = [g.numpy() for g in tf.function(lambda: gradients(1.0))()]
  # Scaling by a power of two and back is exact: the multiplying path gives the same bits.
  for scale in (2.0, 1024.0):
    scaled = [g.numpy() for g in tf.function(lambda s=scale: gradients(s))()]
    for a, b in zip(unit, scaled):
      np.testing.assert_array_equal(a, b)

  def count_mul(scale):
    graph = tf.function(lambda: gradients(scale)).get_concrete_function().graph
    return sum(op.type == 'Mul' for op in graph.get_operations())
  # The loss by the scale and its gradient, and one 1/scale per gradient.
  assert count_mul(2.0) - count_mul(1.0) == 2 + len(variables)


def test_the_step_form_is_chosen_in_one_place_and_logged_once(monkeypatch, caplog):
  monkeypatch.setattr(stages, '_logged', set())
  variables, grads = variables_and_grads()
  optimizer = LARSOptimizer(0.1, fused=False)
  optimizer.build(variables)
  with caplog.at_level('INFO', logger='optimizers'):
    for _ in range(2):
      optimizer.apply(grads, variables)
    fused_optimizer = LARSOptimizer(0.1)
    fused_optimizer.build(variables)
    assert forms(fused_optimizer, grads, variables) == ['lars(native)']
    assert forms(fused_optimizer, grads, variables) == ['lars(native)']
  assert [r.getMessage() for r in caplog.records] == [
      'LARSOptimizer: step lars(keras)', 'LARSOptimizer: step lars(native)']


@pytest.mark.parametrize('make, larc, expected', [
    (lambda: LARSOptimizer(0.1), None, ['lars(native)']),
    (lambda: KerasMomentum(0.1, momentum=0.9), {'larc_eta': 0.002},
     ['larc(clip)+kerasmomentum(native)']),
    # Keras' clipnorm runs between LARC and the update: LARC on its own, then
    # Keras' own apply, its clipping and update_step variable by variable.
    (lambda: KerasMomentum(0.1, momentum=0.9, clipnorm=1.0), {'larc_eta': 0.002},
     ['larc(clip)', 'kerasmomentum(keras)']),
])
def test_a_step_is_chosen_once_and_its_stages_take_no_other_form(monkeypatch, make, larc,
                                                                  expected):
  asked = []
  choose = stages.step_stages

  def counted(*args, **kwargs):
    asked.append([s.describe() for s in choose(*args, **kwargs)])
    return choose(*args, **kwargs)

  monkeypatch.setattr(stages, 'step_stages', counted)
  variables, grads = variables_and_grads()
  optimizer = make()
  optimizer.build(variables)
  params = validation.check_larc_params(larc) if larc is not None else None
  larc_and_apply(optimizer, grads, variables, 0.1, params)
  assert asked == [expected]
  # The form chosen is the one taken: Keras' own apply runs no kernel; Keras' apply of
  # the package's optimizer asks once for a list of variables and keeps the answer.
  asked.clear()
  lars = LARSOptimizer(0.1)
  lars.build(variables)
  assert 'LargebatchTrustMomentum' not in op_types(
      lambda: lars.reference_apply(grads, variables))
  assert asked == []
  for _ in range(2):
    assert 'LargebatchTrustMomentum' in op_types(lambda: lars.apply(grads, variables))
  assert asked == [['lars(native)']]
