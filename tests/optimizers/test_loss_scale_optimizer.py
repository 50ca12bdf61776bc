"""MixedPrecisionLossScaleOptimizer and MixedPrecisionOptimizerWrapper."""

import numpy as np
import pytest
import keras
import tensorflow as tf

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
