"""The fused batch norm against Keras' own layer and against numpy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from models.batch_norm import BatchNormalization


def pair(momentum=0.9, epsilon=1e-5, policy='float32'):
  """Keras' layer and the fused one, built on the same shape with the same (random) weights."""
  keras.mixed_precision.set_dtype_policy(policy)
  try:
    layers = [cls(momentum=momentum, epsilon=epsilon)
              for cls in (keras.layers.BatchNormalization, BatchNormalization)]
  finally:
    keras.mixed_precision.set_dtype_policy('float32')
  rng = np.random.default_rng(0)
  values = [rng.normal(1.0, 0.3, 6), rng.normal(0.0, 0.3, 6), rng.normal(0.5, 0.1, 6),
            rng.uniform(0.5, 2.0, 6)]  # gamma, beta, moving mean, moving variance
  for layer in layers:
    layer.build((None, 5, 7, 6))
    layer.set_weights([v.astype(np.float32) for v in values])
  return layers


def images(dtype=np.float32, seed=1):
  rng = np.random.default_rng(seed)
  return tf.constant((rng.normal(2.0, 3.0, (8, 5, 7, 6))).astype(dtype))


def test_training_output_gradients_and_moving_statistics_match_keras():
  keras_bn, fused = pair()
  x = images()
  # Random weights: with one weight per channel the input gradient would be 0 in exact arithmetic.
  weights = tf.constant(np.random.default_rng(9).normal(size=x.shape).astype(np.float32))
  results = []
  for layer in (keras_bn, fused):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = layer(x, training=True)
      loss = tf.reduce_sum(y * weights)
    grads = tape.gradient(loss, [x, layer.gamma, layer.beta])
    results.append([y] + grads + [layer.moving_mean, layer.moving_variance])
  for ours, theirs in zip(results[1], results[0]):
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-5)


def test_training_output_and_moving_statistics_match_numpy():
  _, fused = pair(momentum=0.8, epsilon=1e-3)
  x = images(seed=2)
  before_mean, before_var = fused.moving_mean.numpy(), fused.moving_variance.numpy()
  y = fused(x, training=True).numpy()
  xs = x.numpy().astype(np.float64)
  mean = xs.mean(axis=(0, 1, 2))
  variance = xs.var(axis=(0, 1, 2))  # biased, as Keras uses for the moving variance
  expected = (xs - mean) / np.sqrt(variance + 1e-3) * fused.gamma.numpy() + fused.beta.numpy()
  np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(fused.moving_mean.numpy(), 0.8 * before_mean + 0.2 * mean,
                             rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(fused.moving_variance.numpy(), 0.8 * before_var + 0.2 * variance,
                             rtol=1e-6, atol=1e-6)


def test_inference_uses_the_moving_statistics():
  keras_bn, fused = pair()
  x = images(seed=3)
  expected = ((x.numpy() - fused.moving_mean.numpy()) / np.sqrt(fused.moving_variance.numpy()
              + 1e-5) * fused.gamma.numpy() + fused.beta.numpy())
  for layer in (keras_bn, fused):
    np.testing.assert_allclose(layer(x, training=False).numpy(), expected, rtol=1e-5, atol=1e-5)
  # Not trainable: training=True also normalises with the moving statistics, and keeps them.
  fused.trainable = False
  np.testing.assert_allclose(fused(x, training=True).numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('policy', ['mixed_bfloat16', 'mixed_float16'])
def test_mixed_precision_matches_keras(policy):
  keras_bn, fused = pair(policy=policy)
  dtype = {'mixed_bfloat16': tf.bfloat16, 'mixed_float16': tf.float16}[policy]
  x = tf.cast(images(seed=4), dtype)
  ours, theirs = fused(x, training=True), keras_bn(x, training=True)
  assert ours.dtype == theirs.dtype == dtype
  # Both compute in float32; the outputs differ by at most one rounding to the half type.
  tolerance = {'mixed_bfloat16': 2 ** -7, 'mixed_float16': 2 ** -10}[policy]
  np.testing.assert_allclose(tf.cast(ours, tf.float32).numpy(), tf.cast(theirs, tf.float32).numpy(),
                             rtol=tolerance, atol=tolerance)
  np.testing.assert_allclose(fused.moving_variance.numpy(), keras_bn.moving_variance.numpy(),
                             rtol=1e-5)


def test_other_shapes_take_keras_path_and_config_round_trips():
  layer = BatchNormalization(momentum=0.7, epsilon=1e-4)
  x = tf.constant(np.random.default_rng(5).normal(size=(16, 6)).astype(np.float32))
  y = layer(x, training=True).numpy()  # 2-D: Keras' own computation
  expected = (x.numpy() - x.numpy().mean(0)) / np.sqrt(x.numpy().var(0) + 1e-4)
  np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
  clone = keras.layers.deserialize(keras.layers.serialize(layer))
  assert type(clone) is BatchNormalization
  assert clone.momentum == 0.7 and clone.epsilon == 1e-4
