"""LARSOptimizer against a numpy transcription of the tf.contrib.opt contract."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from optimizers.lars import LARSOptimizer
from optimizers.lars import trust_ratio


def numpy_lars(w, g_seq, lr, momentum, wd, eeta, eps, nesterov, skipped, decay=True,
               adapt=True):
  """Reference: the update rule of docs/math.md, step by step, in float64.

  ``skipped`` (a ``skip_list`` match) turns off both the weight decay and the
  trust ratio; ``decay`` and ``adapt`` turn off one each.
  """
  w = np.array(w, np.float64)
  v = np.zeros_like(w)
  decay, adapt = decay and not skipped, adapt and not skipped
  wd = wd if decay else 0.0
  for g in g_seq:
    g = np.array(g, np.float64)
    wn, gn = np.linalg.norm(w), np.linalg.norm(g)
    trust = eeta * wn / (gn + wd * wn + eps) if adapt and wn > 0 and gn > 0 else 1.0
    scaled_lr, gp = lr * trust, g + wd * w
    v = momentum * v + scaled_lr * gp
    w = w - (scaled_lr * gp + momentum * v) if nesterov else w - v
  return w, v


GRADS = [[0.1, -0.2, 0.3, 0.05], [0.3, 0.1, -0.2, 0.0], [-0.05, 0.2, 0.1, 0.4]]


@pytest.mark.parametrize('nesterov', [False, True])
@pytest.mark.parametrize('skip', [False, True])
def test_three_steps_match_numpy(nesterov, skip):
  w0 = [1.0, -2.0, 0.5, 3.0]
  var = keras.Variable(np.array(w0, np.float32), name='kernel')
  opt = LARSOptimizer(0.5, momentum=0.9, weight_decay=0.01, eeta=0.02, epsilon=1e-5,
                      use_nesterov=nesterov, skip_list=['kernel'] if skip else ['bias'])
  gs = tf.Variable(0, dtype=tf.int64)
  for g in GRADS:
    opt.apply_gradients([(tf.constant(g), var)], global_step=gs)
  want_w, want_v = numpy_lars(w0, GRADS, 0.5, 0.9, 0.01, 0.02, 1e-5, nesterov, skip)
  np.testing.assert_allclose(var.numpy(), want_w, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(opt.get_slot(var, 'momentum').numpy(), want_v, rtol=1e-5, atol=1e-8)
  assert int(gs.numpy()) == 3


def test_skip_list_matches_path_substring():
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name='dense'),
                            keras.layers.BatchNormalization(name='batch_normalization')],
                           name='net')
  opt = LARSOptimizer(0.1, skip_list=['batch_normalization', 'bias'])
  skipped = {v.path: opt.is_skipped(v) for v in model.trainable_variables}
  assert skipped == {'net/dense/kernel': False, 'net/dense/bias': True,
                     'net/batch_normalization/gamma': True, 'net/batch_normalization/beta': True}


def test_zero_weight_norm_uses_trust_one():
  var = keras.Variable(np.zeros(3, np.float32), name='w')
  opt = LARSOptimizer(0.1, momentum=0.0, weight_decay=0.5, eeta=0.001)
  opt.apply_gradients([(tf.constant([1.0, 2.0, 3.0]), var)])
  # trust = 1 (‖w‖ = 0), grad' = g + 0.5·0 = g, w = 0 - 0.1·g.
  np.testing.assert_allclose(var.numpy(), [-0.1, -0.2, -0.3], rtol=1e-6)


def test_zero_gradient_norm_uses_trust_one():
  var = keras.Variable(np.array([3.0, 4.0], np.float32), name='w')
  opt = LARSOptimizer(0.1, momentum=0.0, weight_decay=0.5, eeta=0.001)
  opt.apply_gradients([(tf.constant([0.0, 0.0]), var)])
  # trust = 1 (‖g‖ = 0), grad' = 0.5·w, w = w − 0.1·0.5·w = 0.95·w.
  np.testing.assert_allclose(var.numpy(), [2.85, 3.8], rtol=1e-6)


def test_trust_ratio_formula():
  got = trust_ratio(tf.constant([5.0, 0.0, 2.0]), tf.constant([1.0, 1.0, 0.0]), 0.01, 0.1, 0.5)
  np.testing.assert_allclose(got.numpy(), [0.01 * 5 / (1 + 0.5 + 0.5), 1.0, 1.0], rtol=1e-6)


def test_compute_lr_returns_scaled_lr_and_decayed_grad():
  var = keras.Variable(np.array([3.0, 4.0], np.float32), name='w')
  opt = LARSOptimizer(0.2, weight_decay=0.1, eeta=0.01, epsilon=0.0)
  lr, grad = opt.compute_lr(tf.constant([0.6, 0.8]), var)
  assert float(lr) == pytest.approx(0.2 * 0.01 * 5 / (1 + 0.1 * 5), rel=1e-6)
  np.testing.assert_allclose(grad.numpy(), [0.6 + 0.3, 0.8 + 0.4], rtol=1e-6)


@pytest.mark.parametrize('nesterov', [False, True])
def test_sparse_gradient_falls_back_to_momentum_with_base_lr(nesterov):
  var = keras.Variable(np.arange(8, dtype=np.float32).reshape(4, 2), name='embedding')
  opt = LARSOptimizer(0.1, momentum=0.5, weight_decay=0.1, eeta=0.001, use_nesterov=nesterov)
  w = np.arange(8, dtype=np.float64).reshape(4, 2)
  accum = np.zeros_like(w)
  steps = [([0, 2, 0], [[1.0, 1.0], [2.0, -1.0], [0.5, 0.5]]), ([2], [[1.0, 3.0]])]
  for indices, values in steps:
    grad = tf.IndexedSlices(tf.constant(values, tf.float32), tf.constant(indices),
                            tf.constant([4, 2]))
    opt.apply_gradients([(grad, var)])
    rows = {}
    for i, v in zip(indices, values):
      rows[i] = rows.get(i, 0) + np.array(v)
    for i, g in rows.items():
      accum[i] = 0.5 * accum[i] + g
      w[i] -= 0.1 * (g + 0.5 * accum[i]) if nesterov else 0.1 * accum[i]
  np.testing.assert_allclose(var.numpy(), w, rtol=1e-6)


@pytest.mark.parametrize('name', ['learning_rate', 'momentum', 'weight_decay', 'eeta', 'epsilon'])
def test_negative_hyperparameters_raise(name):
  kwargs = {'learning_rate': 0.1, name: -1.0}
  with pytest.raises(ValueError, match=name):
    LARSOptimizer(**kwargs)


def test_tf1_methods():
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  opt = LARSOptimizer(0.1, momentum=0.0, weight_decay=0.0, eeta=1.0)
  gs = tf.Variable(5, dtype=tf.int64)
  grads_and_vars = opt.compute_gradients(lambda: tf.reduce_sum(var * var), var_list=[var])
  np.testing.assert_allclose(grads_and_vars[0][0].numpy(), [2.0, 4.0])
  opt.minimize(lambda: tf.reduce_sum(var * var), global_step=gs, var_list=[var])
  # trust = ‖w‖/‖g‖ = 1/2, so w ← w − 0.1·0.5·2w = 0.9·w.
  np.testing.assert_allclose(var.numpy(), [0.9, 1.8], rtol=1e-6)
  assert int(gs.numpy()) == 6
  assert opt.get_slot_names() == ['momentum']
  assert opt.get_slot(var, 'momentum') is not None
  assert opt.get_slot(var, 'nope') is None
  assert opt.get_name() == 'LARSOptimizer'
  assert len(opt.variables()) == len(opt.variables) >= 2
  assert (LARSOptimizer.GATE_NONE, LARSOptimizer.GATE_OP, LARSOptimizer.GATE_GRAPH) == (0, 1, 2)


def test_keras_fit_trains_and_config_round_trips():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(256, 8)).astype(np.float32)
  true_w = rng.normal(size=(8, 1)).astype(np.float32)
  y = x @ true_w
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu'),
                            keras.layers.Dense(1)])
  opt = LARSOptimizer(0.05, momentum=0.9, weight_decay=1e-4, eeta=0.01,
                      skip_list=['bias'], use_nesterov=True)
  model.compile(optimizer=opt, loss='mse')
  first = model.evaluate(x, y, verbose=0)
  model.fit(x, y, batch_size=32, epochs=10, verbose=0)
  last = model.evaluate(x, y, verbose=0)
  assert last < 0.1 * first

  config = opt.get_config()
  clone = LARSOptimizer.from_config(config)
  assert clone.get_config() == config
  assert clone.skip_list == ['bias'] and clone.use_nesterov and clone.eeta == 0.01
  restored = keras.optimizers.deserialize(keras.optimizers.serialize(opt),
                                          custom_objects={'LARSOptimizer': LARSOptimizer})
  assert isinstance(restored, LARSOptimizer) and restored.skip_list == ['bias']


def test_inside_tf_function_traces_once():
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  opt = LARSOptimizer(0.1)
  opt.build([var])

  @tf.function
  def step(g):
    opt.apply_gradients([(g, var)])

  for i in range(4):
    step(tf.constant([0.1 * i, 0.2]))
  assert step.experimental_get_tracing_count() == 1
  assert int(opt.iterations.numpy()) == 4


def test_keras_convention_defaults():
  """learning_rate 0.01 as Keras' SGD; weight_decay None (as Keras accepts it) means none.

  The default weight decay stays tf.contrib's 1e-4 (the documented signature).
  """
  var = keras.Variable(np.array([1.0, -2.0, 0.5, 3.0], np.float32), name='kernel')
  opt = LARSOptimizer(weight_decay=None)
  assert float(np.asarray(opt.learning_rate)) == pytest.approx(0.01)
  assert opt.weight_decay == 0.0 and LARSOptimizer().weight_decay == pytest.approx(1e-4)
  for g in GRADS:
    opt.apply_gradients([(tf.constant(g), var)])
  want, _ = numpy_lars([1.0, -2.0, 0.5, 3.0], GRADS, 0.01, 0.9, 0.0, 0.001, 0.0, False, False)
  np.testing.assert_allclose(var.numpy(), want, rtol=1e-6)
