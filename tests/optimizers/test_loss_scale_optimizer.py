"""The loss-scale optimizers: MixedPrecisionLossScaleOptimizer and MixedPrecisionOptimizerWrapper,
and LossScaleOptimizer in model.fit (a float16 model whose gradients underflow unscaled)."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import optimizers
from optimizers import AutomaticLossScaler
from optimizers import LARSOptimizer
from optimizers import MixedPrecisionLossScaleOptimizer
from optimizers import MixedPrecisionOptimizerWrapper


def test_dynamic_loss_scale_defaults_and_scaled_gradients():
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  opt = MixedPrecisionLossScaleOptimizer(keras.optimizers.SGD(0.1), 'dynamic')
  assert float(opt.loss_scale) == 2.0 ** 15
  grads_and_vars = opt.compute_gradients(lambda: tf.reduce_sum(var * var), var_list=[var])
  # Gradients come back unscaled: d/dw Σw² = 2w.
  np.testing.assert_allclose(grads_and_vars[0][0].numpy(), [2.0, 4.0], rtol=1e-6)


def test_non_finite_step_changes_nothing_and_halves_dynamic_scale():
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  opt = MixedPrecisionLossScaleOptimizer(LARSOptimizer(0.1), 'dynamic')
  gs = tf.Variable(0, dtype=tf.int64)
  applied = opt.apply_gradients([(tf.constant([np.nan, 1.0]), var)], global_step=gs)
  assert not bool(applied)
  np.testing.assert_array_equal(var.numpy(), [1.0, 2.0])
  np.testing.assert_array_equal(opt.get_slot(var, 'momentum').numpy(), [0.0, 0.0])
  assert int(gs.numpy()) == 0 and float(opt.loss_scale) == 2.0 ** 14
  applied = opt.apply_gradients([(tf.constant([1.0, 1.0]), var)], global_step=gs)
  assert bool(applied) and int(gs.numpy()) == 1
  assert not np.array_equal(var.numpy(), [1.0, 2.0])


def test_dynamic_scale_grows_after_2000_finite_steps():
  var = keras.Variable(np.array([0.0], np.float32), name='w')
  opt = MixedPrecisionLossScaleOptimizer(keras.optimizers.SGD(0.0), 'dynamic')

  @tf.function
  def step():
    opt.apply_gradients([(tf.constant([1.0]), var)])

  for _ in range(1999):
    step()
  assert float(opt.loss_scale) == 2.0 ** 15
  step()
  assert float(opt.loss_scale) == 2.0 ** 16


def test_minimize_with_automatic_scaler_and_tf1_methods():
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  scaler = AutomaticLossScaler('Backoff', {'scale_max': 8.0})
  opt = MixedPrecisionLossScaleOptimizer(keras.optimizers.SGD(0.5), scaler)
  gs = tf.Variable(0, dtype=tf.int64)
  opt.minimize(lambda: tf.reduce_sum(var * var), global_step=gs, var_list=[var])
  np.testing.assert_allclose(var.numpy(), [0.0, 0.0], atol=1e-7)
  assert int(gs.numpy()) == 1 and float(opt.loss_scale) == 8.0
  assert opt.get_name() == opt.optimizer.name
  assert len(opt.variables()) >= 2


def test_wrapper_keeps_float32_masters_for_float16_variables():
  var = tf.Variable(tf.constant([1.0, 1.0], tf.float16), name='w16')
  opt = MixedPrecisionOptimizerWrapper(keras.optimizers.SGD(1e-4), loss_scale=1024)
  for _ in range(10):
    opt.minimize(lambda: tf.reduce_sum(var), var_list=[var])
  # Each step subtracts 1e-4; float16 spacing at 1.0 is 2^-10 ≈ 9.8e-4, so only
  # a float32 master accumulates the ten steps (1.0 − 1e-3 rounds to 0.999).
  masters = opt.master_weights([var]).masters
  np.testing.assert_allclose(masters[0].numpy(), [0.999, 0.999], rtol=1e-6)
  np.testing.assert_allclose(var.numpy().astype(np.float32), [0.999, 0.999], atol=5e-4)


def test_wrapper_with_keras_mixed_policy_uses_float32_variables():
  keras.mixed_precision.set_dtype_policy('mixed_bfloat16')
  try:
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
  finally:
    keras.mixed_precision.set_dtype_policy('float32')
  opt = MixedPrecisionOptimizerWrapper(keras.optimizers.SGD(0.1), loss_scale=None)
  x = tf.ones([4, 3])
  opt.minimize(lambda: tf.reduce_mean(tf.cast(layer(x), tf.float32)), var_list=layer.trainable_variables)
  masters = opt.master_weights(layer.trainable_variables)
  assert not masters.has_half
  assert all(v.dtype == tf.float32 for v in layer.trainable_variables)


def test_bad_loss_scale():
  with pytest.raises(ValueError, match='loss_scaling'):
    MixedPrecisionLossScaleOptimizer(keras.optimizers.SGD(0.1), 'sometimes')


# ---------------------------------------------------------------------------
# LossScaleOptimizer in model.fit

N, BATCH, EPOCHS = 64, 16, 2
LR, EETA = 1.0, 0.1
# The second head's loss weight: its gradient (about 1e-8) flushes to zero in
# float16 unless the loss is scaled; the first head's never does.
SMALL = 1e-8
WEIGHTS = np.array([1.0, SMALL])


def data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(N, 3)).astype(np.float32)
  y = (x @ rng.normal(size=(3, 2))).astype(np.float32)
  return x, y


def weighted_mse(y, p):
  return tf.reduce_mean(tf.square(y - p) * tf.constant(WEIGHTS, tf.float32), axis=-1)


def two_heads():
  """Two float16 linear heads with their own kernels, so LARS adapts each on its own."""
  keras.utils.set_random_seed(0)
  inputs = keras.Input((3,))
  heads = [keras.layers.Dense(1, use_bias=False, dtype='mixed_float16', name=f'head{i}')(inputs)
           for i in range(2)]
  return keras.Model(inputs, keras.layers.Concatenate(dtype='mixed_float16')(heads))


def numpy_fit(kernels, x, y, underflow_steps=(), skipped_steps=()):
  """LARS (momentum 0, no weight decay) on the two heads in float64.

  The steps in ``underflow_steps`` see a zero gradient for the second head, as
  float16 computes it at a loss scale of 1; those in ``skipped_steps`` change
  nothing (an overflow).
  """
  kernels = [k.astype(np.float64) for k in kernels]
  step = 0
  for _ in range(EPOCHS):
    for start in range(0, N, BATCH):
      xb, yb = x[start:start + BATCH].astype(np.float64), y[start:start + BATCH]
      for h in range(0 if step in skipped_steps else 2):
        d_pred = 2.0 * WEIGHTS[h] * (xb @ kernels[h] - yb[:, h:h + 1]) / (2 * BATCH)
        g = xb.T @ d_pred
        if h == 1 and step in underflow_steps:
          g = np.zeros_like(g)
        gn, wn = np.linalg.norm(g), np.linalg.norm(kernels[h])
        trust = EETA * wn / gn if gn > 0 and wn > 0 else 1.0
        kernels[h] = kernels[h] - LR * trust * g
      step += 1
  return kernels


def fit(optimizer):
  x, y = data()
  model = two_heads()
  initial = [v.numpy() for v in model.trainable_variables]
  model.compile(optimizer=optimizer, loss=weighted_mse, auto_scale_loss=False)
  model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
  return initial, [v.numpy() for v in model.trainable_variables], x, y


def lars():
  return optimizers.LARSOptimizer(LR, momentum=0.0, weight_decay=0.0, eeta=EETA)


def test_without_loss_scaling_the_small_head_never_learns():
  initial, final, x, y = fit(lars())
  np.testing.assert_array_equal(final[1], initial[1])  # every gradient flushed to zero
  assert not np.allclose(final[0], initial[0])
  np.testing.assert_allclose(final[0], numpy_fit(initial, x, y)[0], rtol=2e-2)


@pytest.mark.parametrize('loss_scaling, underflow, skipped, final_scale', [
    ('Backoff', (), (), 2.0 ** 14),
    # Dynamic scaling starts at 2**15, where the first head's gradient of the
    # fourth batch overflows float16: that step is skipped and the scale halved.
    ('dynamic', (), (3,), 2.0 ** 14),
    (2.0 ** 14, (), (), 2.0 ** 14),
    # LogMax starts at scale 1: its first step still underflows, then amax sets the scale.
    ('LogMax', (0,), (), None),
])
def test_each_scaler_lets_the_small_head_learn(loss_scaling, underflow, skipped, final_scale):
  optimizer = optimizers.LossScaleOptimizer(lars(), loss_scaling)
  initial, final, x, y = fit(optimizer)
  want = numpy_fit(initial, x, y, underflow_steps=underflow, skipped_steps=skipped)
  for got, expected in zip(final, want):
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=1e-4)
  assert not np.allclose(final[1], initial[1])
  assert int(optimizer.iterations.numpy()) == EPOCHS * N // BATCH - len(skipped)
  scale = float(optimizer.loss_scale.numpy())
  if final_scale is not None:
    assert scale == final_scale
  else:
    assert 2.0 ** 13 < scale < 2.0 ** 14


@pytest.mark.parametrize('loss_scaling, scale_after', [('Backoff', 2.0 ** 13),
                                                       ('dynamic', 2.0 ** 14), (8.0, 8.0)])
def test_a_non_finite_step_is_skipped_as_keras_skips_it(loss_scaling, scale_after):
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  optimizer = optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), loss_scaling)
  optimizer.apply([tf.constant([math.inf, 1.0])], [var])
  np.testing.assert_array_equal(var.numpy(), [1.0, 2.0])
  assert int(optimizer.iterations.numpy()) == 0
  assert float(optimizer.loss_scale.numpy()) == scale_after
  # A finite step divides by the scale in use and applies.
  scale = float(optimizer.loss_scale.numpy())
  optimizer.apply([tf.constant([scale, 2 * scale])], [var])
  np.testing.assert_allclose(var.numpy(), [0.9, 1.8], rtol=1e-6)
  assert int(optimizer.iterations.numpy()) == 1


def test_compile_under_mixed_float16_does_not_wrap_it_again():
  previous = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_dtype_policy('mixed_float16')
  try:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = optimizers.LossScaleOptimizer(lars(), 'Backoff')
    model.compile(optimizer=optimizer, loss='mse')
    assert model.optimizer is optimizer
  finally:
    keras.mixed_precision.set_dtype_policy(previous)


def test_bad_loss_scaling_is_a_clear_error():
  with pytest.raises(ValueError, match="loss_scaling: unknown value 'Bakoff'"):
    optimizers.LossScaleOptimizer(lars(), 'Bakoff')
  with pytest.raises(ValueError, match='step_windw'):
    optimizers.LossScaleOptimizer(lars(), 'Backoff', {'step_windw': 10})
