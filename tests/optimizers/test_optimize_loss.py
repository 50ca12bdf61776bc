"""optimize_loss: each stage against numpy, and the order of the stages."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import keras
import tensorflow as tf

import optimizers as optimizers_lib
from optimizers import allreduce
from optimizers import stages
from optimizers.catalog import make_optimizer
from optimizers.compat import openseq2seq as opt_lib
from optimizers.compat.openseq2seq import optimize_loss
from optimizers.compat.tf1 import MomentumOptimizer
from optimizers.lr_policies import poly_decay
from optimizers.pipeline import GradientPipeline
from optimizers.settings import UpdateSettings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def fresh_pipelines():
  opt_lib.clear_pipelines()
  yield
  opt_lib.clear_pipelines()


def quadratic(var, target):
  """0.5·‖w − t‖², whose gradient is w − t."""
  return lambda: 0.5 * tf.reduce_sum(tf.square(var - target))


def test_sgd_step_and_global_step():
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  loss = optimize_loss(quadratic(var, tf.constant([0.0, 0.0])), 'SGD', {'learning_rate': 0.1},
                       None, var_list=[var])
  assert float(loss) == pytest.approx(2.5)
  np.testing.assert_allclose(var.numpy(), [0.9, 1.8], rtol=1e-6)
  assert int(opt_lib.find_pipeline(var_list=[var]).global_step.numpy()) == 1


def test_learning_rate_follows_policy_of_global_step():
  var = keras.Variable(np.array([0.0], np.float32), name='w')
  decay = lambda step: poly_decay(step, 1.0, decay_steps=4, power=1.0)
  lrs = []
  for _ in range(4):
    before = var.numpy().copy()
    # Loss −w has gradient −1, so each step moves w by +lr.
    optimize_loss(lambda: -tf.reduce_sum(var), 'SGD', {}, decay, var_list=[var])
    lrs.append(float(var.numpy()[0] - before[0]))
  np.testing.assert_allclose(lrs, [1.0, 0.75, 0.5, 0.25], rtol=1e-6)


def numpy_larc(g, v, lr, eta, mode, min_update=1e-7, eps=1e-7):
  gn, vn = np.linalg.norm(g), np.linalg.norm(v)
  if mode == 'clip':
    c = min(1.0, max(eta * vn / (lr * (gn + eps)), min_update))
  else:
    c = max(eta * vn / (gn + eps), min_update)
  return c * g


@pytest.mark.parametrize('mode', ['clip', 'scale'])
def test_larc_matches_numpy(mode):
  w0 = np.array([[3.0, 4.0], [0.0, 1.0]], np.float32)
  b0 = np.array([0.5, -0.5], np.float32)
  w = keras.Variable(w0, name='kernel')
  b = keras.Variable(b0, name='bias')
  target_w = np.array([[1.0, 1.0], [1.0, 1.0]], np.float32)
  target_b = np.array([2.0, 2.0], np.float32)

  def loss():
    return 0.5 * tf.reduce_sum(tf.square(w - target_w)) + 0.5 * tf.reduce_sum(tf.square(b - target_b))

  lr = 0.5
  optimize_loss(loss, 'SGD', {'learning_rate': lr}, None, var_list=[w, b],
                larc_params={'larc_eta': 0.02, 'larc_mode': mode, 'skip_list': ['bias']})
  want_w = w0 - lr * numpy_larc(w0 - target_w, w0, lr, 0.02, mode)
  want_b = b0 - lr * (b0 - target_b)
  np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-6)
  np.testing.assert_allclose(b.numpy(), want_b, rtol=1e-6)


def test_global_norm_clipping():
  var = keras.Variable(np.array([3.0, 4.0], np.float32), name='w')
  optimize_loss(quadratic(var, tf.zeros(2)), 'SGD', {'learning_rate': 1.0}, None,
                var_list=[var], clip_gradients=1.0)
  # The gradient (3, 4) has norm 5; clipped to (0.6, 0.8).
  np.testing.assert_allclose(var.numpy(), [2.4, 3.2], rtol=1e-6)


def test_clip_helpers_keep_openseq2seq_names():
  grads, norm = opt_lib._clip_by_global_norm([tf.constant([3.0, 4.0]), None], 2.5, tf.constant(5.0))
  np.testing.assert_allclose(grads[0].numpy(), [1.5, 2.0])
  assert grads[1] is None and float(norm) == 5.0
  var = keras.Variable([1.0])
  pairs = opt_lib._clip_gradients_by_norm([(tf.constant([6.0, 8.0]), var)], 5.0)
  np.testing.assert_allclose(pairs[0][0].numpy(), [3.0, 4.0])
  assert pairs[0][1] is var


def numpy_pipeline_step(ws, gs, lr, clip, eta, swapped=False):
  """The order of docs/math.md: clip the global norm, then LARC (clip mode), then SGD; or the two swapped."""
  def clip_all(gs):
    norm = np.sqrt(sum(np.sum(g * g) for g in gs))
    return [g * clip / max(norm, clip) for g in gs]

  def larc_all(gs):
    return [numpy_larc(g, w, lr, eta, 'clip') for g, w in zip(gs, ws)]

  gs = clip_all(larc_all(gs)) if swapped else larc_all(clip_all(gs))
  return [w - lr * g for w, g in zip(ws, gs)]


def test_clipping_happens_before_larc():
  """Clipping is global and LARC per variable: a large and a small gradient tell the orders apart."""
  ws = [np.array([3.0, 4.0], np.float32), np.array([0.0, 5.0], np.float32)]
  gs = [np.array([30.0, -40.0], np.float32), np.array([0.06, 0.08], np.float32)]
  v1, v2 = keras.Variable(ws[0], name='a'), keras.Variable(ws[1], name='b')
  optimize_loss(lambda: tf.reduce_sum(v1 * gs[0]) + tf.reduce_sum(v2 * gs[1]), 'SGD',
                {'learning_rate': 1.0}, None, var_list=[v1, v2], clip_gradients=1.0,
                larc_params={'larc_eta': 0.1})
  want = numpy_pipeline_step(ws, gs, 1.0, 1.0, 0.1)
  swapped = numpy_pipeline_step(ws, gs, 1.0, 1.0, 0.1, swapped=True)
  assert np.abs(want[1] - swapped[1]).max() > 0.05  # the two orders are distinguishable here
  np.testing.assert_allclose(v1.numpy(), want[0], rtol=1e-6)
  np.testing.assert_allclose(v2.numpy(), want[1], rtol=1e-6)


def test_non_finite_gradient_skips_update_and_moves_scaler():
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  bad = tf.Variable(False)

  def loss():
    return tf.reduce_sum(var) * tf.where(bad, np.inf, 1.0)

  kwargs = dict(var_list=[var], loss_scaling='Backoff',
                loss_scaling_params={'scale_max': 1024.0, 'step_window': 100})
  optimize_loss(loss, 'Momentum', {'learning_rate': 0.1, 'momentum': 0.9}, None, **kwargs)
  pipeline = opt_lib.find_pipeline(var_list=[var])
  after_good = var.numpy().copy()
  slot = pipeline.optimizer.get_slot(var, 'momentum').numpy().copy()
  assert float(pipeline.loss_scale) == 1024.0
  bad.assign(True)
  optimize_loss(loss, 'Momentum', {'learning_rate': 0.1, 'momentum': 0.9}, None, **kwargs)
  np.testing.assert_array_equal(var.numpy(), after_good)
  np.testing.assert_array_equal(pipeline.optimizer.get_slot(var, 'momentum').numpy(), slot)
  assert int(pipeline.global_step.numpy()) == 1
  assert float(pipeline.loss_scale) == 512.0


def test_float16_gradients_underflow_without_loss_scaling_and_train_with_backoff():
  """A float16 model whose gradients (~1e-8) flush to zero unless the loss is scaled."""
  x = tf.constant(1e-4, tf.float16)
  y = tf.constant(0.5e-4, tf.float16)
  results = {}
  for scaling in (1.0, 'Backoff'):
    opt_lib.clear_pipelines()
    var = tf.Variable(tf.ones([4], tf.float16), name=f'w_{scaling}')

    def loss(var=var):
      return tf.reduce_sum(tf.square(var * x - y))

    for _ in range(30):
      optimize_loss(loss, 'SGD', {'learning_rate': 1e7}, None, var_list=[var], dtype='mixed',
                    loss_scaling=scaling)
    results[scaling] = var.numpy().astype(np.float64)
  np.testing.assert_array_equal(results[1.0], np.ones(4))  # no gradient ever arrived
  np.testing.assert_allclose(results['Backoff'], 0.5 * np.ones(4), atol=0.01)


def linear_data(n):
  rng = np.random.default_rng(1)
  return rng.normal(size=(n, 5)).astype(np.float32), rng.normal(size=(n, 3)).astype(np.float32)


def make_linear_model():
  keras.utils.set_random_seed(3)
  return keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])


def test_iter_size_4_equals_one_batch_of_4b():
  x, y = linear_data(64)
  big = make_linear_model()
  small = make_linear_model()
  mse = lambda m, xb, yb: lambda: tf.reduce_mean(tf.square(m(xb) - yb))
  params = {'learning_rate': 0.1, 'momentum': 0.9}
  for step in range(3):
    xb, yb = x[step * 16:(step + 1) * 16], y[step * 16:(step + 1) * 16]
    optimize_loss(mse(big, xb, yb), 'Momentum', params, None, model=big)
    for k in range(4):
      optimize_loss(mse(small, xb[4 * k:4 * k + 4], yb[4 * k:4 * k + 4]), 'Momentum', params, None,
                    model=small, iter_size=4)
  for a, b in zip(big.trainable_variables, small.trainable_variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
  assert int(opt_lib.find_pipeline(model=small).global_step.numpy()) == 3


def test_skip_update_placeholder_controls_accumulation():
  var = keras.Variable(np.array([0.0], np.float32), name='w')
  grads = iter([1.0, 3.0])
  for skip in (True, False):
    g = next(grads)
    optimize_loss(lambda g=g: -g * tf.reduce_sum(var), 'SGD', {'learning_rate': 1.0}, None,
                  var_list=[var], iter_size=2, skip_update_ph=tf.constant(skip))
  np.testing.assert_allclose(var.numpy(), [2.0])  # the mean of the two gradients


def test_an_update_forced_early_by_skip_update_divides_by_iter_size():
  # SPEC's order of an update, step 2 (docs/math.md): OpenSeq2Seq divides each micro-batch's
  # gradient by iter_size, so two micro-batches forced out of four give (1 + 3) / 4, not their mean.
  var = keras.Variable(np.array([0.0], np.float32), name='w')
  for g, skip in ((1.0, True), (3.0, False)):
    optimize_loss(lambda g=g: -g * tf.reduce_sum(var), 'SGD', {'learning_rate': 1.0}, None,
                  var_list=[var], iter_size=4, skip_update_ph=tf.constant(skip))
  np.testing.assert_allclose(var.numpy(), [1.0])
  assert int(opt_lib.find_pipeline(var_list=[var]).global_step.numpy()) == 1


def test_allreduce_runs_once_per_update_after_accumulation_and_before_finite_check(monkeypatch):
  """A stand-in allreduce that doubles the gradients and counts its calls pins stages 2-4."""
  calls = []

  def fake_allreduce(grads, compression=None):
    calls.append(len(grads))
    return [g * 2.0 if g is not None else None for g in grads]

  monkeypatch.setattr(allreduce, 'average', fake_allreduce)
  monkeypatch.setattr(allreduce, 'join_started_horovod', lambda: None)
  var = keras.Variable(np.array([0.0], np.float32), name='w')
  for g in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0):
    optimize_loss(lambda g=g: -g * tf.reduce_sum(var), 'SGD', {'learning_rate': 1.0}, None,
                  var_list=[var], iter_size=3, on_horovod=True)
  # Two updates: 2·mean(1,2,3) + 2·mean(4,5,6) = 4 + 10.
  np.testing.assert_allclose(var.numpy(), [14.0])
  assert len(calls) == 2
  pipeline = opt_lib.find_pipeline(var_list=[var])
  assert int(pipeline.allreduce_count.numpy()) == 2


def test_whole_step_in_one_tf_function_traces_once():
  x, y = linear_data(32)
  model = make_linear_model()
  params = {'learning_rate': 0.05, 'momentum': 0.9, 'weight_decay': 1e-4, 'eeta': 0.01}
  pipeline = opt_lib.get_pipeline('LARS', params, None, model=model, clip_gradients=5.0,
                                  larc_params={'larc_eta': 0.01}, loss_scaling='Backoff')

  @tf.function
  def step(xb, yb):
    return optimize_loss(lambda: tf.reduce_mean(tf.square(model(xb) - yb)), 'LARS', params, None,
                         model=model, clip_gradients=5.0, larc_params={'larc_eta': 0.01},
                         loss_scaling='Backoff')

  losses = [float(step(x[i:i + 8], y[i:i + 8])) for i in range(0, 32, 8)] * 1
  for _ in range(3):
    losses.append(float(step(x[:8], y[:8])))
  assert step.experimental_get_tracing_count() == 1
  assert int(pipeline.global_step.numpy()) == 7
  assert losses[-1] < losses[-3]


def test_summaries_are_written(tmp_path):
  var = keras.Variable(np.array([3.0, 4.0], np.float32), name='w')
  writer = tf.summary.create_file_writer(str(tmp_path))
  with writer.as_default():
    optimize_loss(quadratic(var, tf.zeros(2)), 'SGD', {'learning_rate': 0.1}, None,
                  var_list=[var], summaries=list(optimizers_lib.OPTIMIZER_SUMMARIES),
                  larc_params={'larc_eta': 0.01})
  writer.flush()
  tags = set()
  for path in tmp_path.iterdir():
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      tags.update(v.tag for v in event.summary.value)
  assert {'learning_rate', 'loss_scale', 'global_gradient_norm', 'gradients/w',
          'gradient_norm/w', 'variables/w', 'variable_norm/w', 'larc_grad_update/w',
          'larc_clip_on/w'} <= tags


@pytest.mark.parametrize('kwargs,match', [
    ({'optimizer': 'Adamm'}, "unknown optimizer 'Adamm'.*known: .*Adagrad, Adam, AdamW"),
    ({'larc_params': {'larc_eta': 0.1, 'eta': 1}}, "larc_params: unknown key 'eta'"),
    ({'larc_params': {'larc_eta': 0.1, 'larc_mode': 'cap'}}, 'larc_mode.*clip, scale'),
    ({'larc_params': {'larc_mode': 'clip'}}, 'larc_eta is required'),
    ({'iter_size': 0}, 'iter_size must be an integer >= 1'),
    ({'summaries': ['weights']}, "unknown summary 'weights'"),
    ({'loss_scaling': 'Exponential'}, 'loss_scaling'),
    ({'dtype': 'float64'}, "dtype: 'float64' is not allowed"),
    ({'clip_gradients': -1.0}, 'clip_gradients'),
    ({'optimizer': 'LARS', 'optimizer_params': {'learning_rate': 0.1, 'eeta': -1.0}}, 'eeta'),
    ({'optimizer': 'LARS', 'optimizer_params': {'learning_rate': -0.1}}, 'learning_rate'),
    ({'optimizer': 'Momentum', 'optimizer_params': {'learning_rate': 0.1, 'momentum': -0.5}},
     'momentum'),
])
def test_bad_input_raises_value_error(kwargs, match):
  var = keras.Variable(np.array([1.0], np.float32), name='w')
  args = {'optimizer': 'SGD', 'optimizer_params': {'learning_rate': 0.1}}
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    optimize_loss(lambda: tf.reduce_sum(var), args.pop('optimizer'), args.pop('optimizer_params'),
                  None, var_list=[var], **args)


def test_regularization_loss_sums_model_losses():
  model = keras.Sequential([keras.Input((2,)),
                            keras.layers.Dense(1, kernel_regularizer=keras.regularizers.L2(0.5),
                                               kernel_initializer='ones')])
  assert float(opt_lib.get_regularization_loss(model)) == pytest.approx(0.5 * 2.0)
  with pytest.raises(ValueError, match='Keras model'):
    opt_lib.get_regularization_loss()


def test_mixed_bfloat16_model_trains_with_float32_variables():
  keras.mixed_precision.set_dtype_policy('mixed_bfloat16')
  try:
    model = make_linear_model()
  finally:
    keras.mixed_precision.set_dtype_policy('float32')
  assert all(v.dtype == tf.float32 for v in model.trainable_variables)
  x, y = linear_data(32)
  loss = lambda: tf.reduce_mean(tf.square(tf.cast(model(x), tf.float32) - y))
  first = float(loss())
  for _ in range(20):
    optimize_loss(loss, 'Momentum', {'learning_rate': 0.05, 'momentum': 0.9}, None, model=model,
                  dtype='mixed_bfloat16')
  pipeline = opt_lib.find_pipeline(model=model)
  assert not pipeline.masters.has_half  # Keras' policy already keeps float32 masters
  assert float(loss()) < 0.5 * first


def test_float16_dtype_updates_float16_variables_directly():
  var = tf.Variable(tf.constant([1.0, 2.0], tf.float16), name='w16')
  optimize_loss(lambda: tf.reduce_sum(tf.square(var)), 'SGD', {'learning_rate': 0.25}, None,
                var_list=[var], dtype=tf.float16, loss_scaling=128.0)
  # w − 0.25·2w = 0.5·w, exact in float16.
  np.testing.assert_array_equal(var.numpy(), np.array([0.5, 1.0], np.float16))
  assert var.dtype == tf.float16


def test_a_second_call_with_other_arguments_names_what_changed():
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  loss = quadratic(var, tf.zeros(2))
  optimize_loss(loss, 'Momentum', {'learning_rate': 0.1, 'momentum': 0.9}, None, var_list=[var])
  # The same arguments made anew (a new dict, a new list) are the same arguments.
  optimize_loss(loss, 'Momentum', {'learning_rate': 0.1, 'momentum': 0.9}, None, var_list=[var])
  with pytest.raises(ValueError, match=r"different arguments: optimizer_params \(created with "
                                       r"\{'learning_rate': 0.1, 'momentum': 0.9\}, now "
                                       r"\{'learning_rate': 0.2, 'momentum': 0.9\}\)"):
    optimize_loss(loss, 'Momentum', {'learning_rate': 0.2, 'momentum': 0.9}, None, var_list=[var])
  with pytest.raises(ValueError, match=r"optimizer \(created with 'Momentum', now 'SGD'\), "
                                       r"optimizer_params .*iter_size \(created with 1, now 2\)"):
    optimize_loss(loss, 'SGD', {'learning_rate': 0.2}, None, var_list=[var], iter_size=2)
  assert int(opt_lib.find_pipeline(var_list=[var]).global_step.numpy()) == 2
  # clear_pipelines (exported by the package) starts afresh with the new arguments.
  import optimizers  # pylint: disable=import-outside-toplevel
  optimizers.clear_pipelines()
  optimize_loss(loss, 'SGD', {'learning_rate': 0.2}, None, var_list=[var], iter_size=2)
  assert int(optimizers.find_pipeline(var_list=[var]).global_step.numpy()) == 0


def test_a_schedule_made_anew_is_the_same_unless_its_values_change():
  var = keras.Variable(np.array([1.0], np.float32), name='w')

  def schedule(lr):
    return lambda step: poly_decay(step, lr, decay_steps=10)

  optimize_loss(lambda: tf.reduce_sum(var), 'SGD', {}, schedule(0.1), var_list=[var])
  optimize_loss(lambda: tf.reduce_sum(var), 'SGD', {}, schedule(0.1), var_list=[var])
  with pytest.raises(ValueError, match='learning_rate_decay_fn'):
    optimize_loss(lambda: tf.reduce_sum(var), 'SGD', {}, schedule(0.5), var_list=[var])


def doc_block(page, marker):
  """The first python code block after ``marker`` in ``page`` (a path under the checkout)."""
  with open(os.path.join(ROOT, page), encoding='utf-8') as f:
    text = f.read()
  text = text[text.index(marker):]
  start = text.index('```python\n') + len('```python\n')
  return text[start:text.index('```', start)]


@pytest.mark.slow  # a child process that trains 80 micro-batches
def test_the_custom_loop_of_the_docs_runs_from_outside_the_checkout(tmp_path):
  """docs/optimizers.md's loop, as a user runs it: a file of their own elsewhere, PYTHONPATH set."""
  assert not str(tmp_path).startswith(ROOT + os.sep)
  script = tmp_path / 'my_loop.py'
  script.write_text(doc_block('docs/optimizers.md', '<!-- the loop below runs in tests'))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT)
  result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr
  match = re.search(r'global step (\d+), loss ([\d.]+) -> ([\d.]+), learning rate ([\d.]+), '
                    r'loss scale (\d+)', result.stdout)
  assert match, result.stdout
  step, first, last, lr, scale = (float(v) for v in match.groups())
  assert step == 40  # 80 micro-batches, iter_size 2, none skipped
  assert last < 0.1 * first
  # The rate of the next update: the decay starts after the 5 warm-up steps and lasts 40.
  assert lr == pytest.approx(float(poly_decay(40, 0.05, decay_steps=40, warmup_steps=5)), abs=1e-4)
  assert scale == 2 ** 14


def test_the_pipeline_returns_the_metrics_of_each_micro_step():
  """Accumulation over two micro-steps, then a non-finite one, against the schedule and Backoff."""
  var = keras.Variable(np.array([0.0], np.float32), name='w')
  bad = tf.Variable(False)
  schedule = lambda step: 0.5 / tf.cast(step + 1, tf.float32)  # noqa: E731
  pipeline = GradientPipeline(
      [var], UpdateSettings('SGD', {}, schedule, iter_size=2, loss_scaling='Backoff',
                            loss_scaling_params={'scale_max': 8.0, 'step_window': 100},
                            log_global_norm=True))

  def step(g):
    def loss():
      value = -g * tf.reduce_sum(var) * tf.where(bad, np.inf, 1.0)
      return value, {'gradient': tf.constant(-g)}
    return {k: v.numpy() for k, v in pipeline(loss).items()}

  first = step(1.0)
  assert (first['applied'], first['skipped'], first['global_step']) == (False, False, 0)
  assert first['gradient'] == -1.0 and first['global_norm'] == 0.0  # no update yet
  assert first['learning_rate'] == first['next_learning_rate'] == pytest.approx(0.5)
  second = step(2.0)
  assert (second['applied'], second['skipped'], second['global_step']) == (True, False, 1)
  # The mean gradient −1.5: its norm, and w ← 0 + 0.5·1.5 at the rate of step 0.
  assert second['global_norm'] == pytest.approx(1.5)
  assert second['learning_rate'] == pytest.approx(0.5)
  assert second['next_learning_rate'] == pytest.approx(0.25)
  np.testing.assert_allclose(var.numpy(), [0.75], rtol=1e-6)
  assert second['loss_scale'] == second['next_loss_scale'] == 8.0
  bad.assign(True)
  step(1.0)
  third = step(1.0)
  assert (third['applied'], third['skipped'], third['global_step']) == (False, True, 1)
  assert third['loss_scale'] == 8.0 and third['next_loss_scale'] == 4.0  # Backoff halves it
  np.testing.assert_allclose(var.numpy(), [0.75], rtol=1e-6)


def test_make_optimizer_builds_agn_around_the_optimizer_agn_params_name():
  agn = make_optimizer('AGN', {'momentum': 0.5}, 0.1,
                               agn_params={'optimizer': 'Momentum', 'communication_period': 1})
  assert isinstance(agn, optimizers_lib.AGNOptimizer) and agn.communication_period == 1
  assert isinstance(agn.local_optimizer, MomentumOptimizer)
  assert agn.local_optimizer.momentum == 0.5
  var = keras.Variable(np.array([1.0], np.float32), name='w')
  agn.build([var])
  for _ in range(2):
    agn.apply([tf.constant([1.0])], [var])
  # One worker, τ = 1: Keras momentum, v ← 0.5·v − 0.1·g; w ← w + v: 1 − 0.1 − 0.15.
  np.testing.assert_allclose(var.numpy(), [0.75], rtol=1e-6)
  with pytest.raises(ValueError, match='wraps another optimizer'):
    make_optimizer('AGN', {}, 0.1)


def test_openseq2seq_module_path_gives_the_same_objects():
  # Ported code keeps OpenSeq2Seq's import lines: open_seq2seq.optimizers.optimizers -> optimizers.optimizers.
  from optimizers import optimizers as ported  # pylint: disable=import-outside-toplevel
  assert ported.optimize_loss is optimize_loss is optimizers_lib.optimize_loss
  assert ported._clip_by_global_norm is opt_lib._clip_by_global_norm
  assert ported._clip_gradients_by_norm is opt_lib._clip_gradients_by_norm
  assert ported.get_regularization_loss is opt_lib.get_regularization_loss
  assert ported.OPTIMIZER_CLS_NAMES is optimizers_lib.OPTIMIZER_CLS_NAMES
  assert ported.OPTIMIZER_SUMMARIES == optimizers_lib.OPTIMIZER_SUMMARIES
  assert (ported.MomentumOptimizer, ported.GradientPipeline) == (MomentumOptimizer, GradientPipeline)
