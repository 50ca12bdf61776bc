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


# ---------------------------------------------------------------------------
# Ghost batch norm

def ghost_reference(x, size, gamma, beta, epsilon):
  """Numpy: each group of ``size`` consecutive examples normalised by its own moments."""
  groups = x.astype(np.float64).reshape(-1, size, *x.shape[1:])
  mean = groups.mean(axis=(1, 2, 3), keepdims=True)
  variance = groups.var(axis=(1, 2, 3), keepdims=True)
  y = (groups - mean) / np.sqrt(variance + epsilon) * gamma + beta
  return y.reshape(x.shape), mean.reshape(-1, x.shape[-1]), variance.reshape(-1, x.shape[-1])


def ghost_layer(size, momentum=0.8, epsilon=1e-3):
  layer = BatchNormalization(ghost_batch_size=size, momentum=momentum, epsilon=epsilon)
  layer.build((None, 5, 7, 6))
  rng = np.random.default_rng(7)
  layer.set_weights([rng.normal(1.0, 0.3, 6).astype(np.float32),
                     rng.normal(0.0, 0.3, 6).astype(np.float32),
                     rng.normal(0.5, 0.1, 6).astype(np.float32),
                     rng.uniform(0.5, 2.0, 6).astype(np.float32)])
  return layer


def ghost_images(batch=12, seed=11):
  rng = np.random.default_rng(seed)
  # Groups with different means and scales, so group and batch statistics differ.
  shift = np.repeat(rng.normal(0.0, 3.0, (batch // 4, 1, 1, 1)), 4, axis=0)
  return (rng.normal(0.0, 1.0, (batch, 5, 7, 6)) + shift).astype(np.float32)


@pytest.mark.parametrize('static_batch', [True, False], ids=['fused-per-group', 'moments'])
def test_ghost_batch_norm_matches_numpy(static_batch):
  layer = ghost_layer(4)
  x = ghost_images()
  before_mean, before_var = layer.moving_mean.numpy(), layer.moving_variance.numpy()
  signature = [tf.TensorSpec([12 if static_batch else None, 5, 7, 6], tf.float32)]
  y = tf.function(lambda t: layer(t, training=True), input_signature=signature)(x).numpy()
  expected, means, variances = ghost_reference(x, 4, layer.gamma.numpy(), layer.beta.numpy(), 1e-3)
  np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
  # The moving statistics follow the mean over the 3 groups of their means and biased variances.
  np.testing.assert_allclose(layer.moving_mean.numpy(),
                             0.8 * before_mean + 0.2 * means.mean(axis=0), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(layer.moving_variance.numpy(),
                             0.8 * before_var + 0.2 * variances.mean(axis=0), rtol=1e-5, atol=1e-5)
  # The whole batch's variance is far larger than the groups' (the shifts differ by group).
  assert np.all(x.var(axis=(0, 1, 2)) > 1.5 * variances.mean(axis=0))


def test_ghost_paths_have_the_same_gradients():
  x = tf.constant(ghost_images(seed=12))
  weights = tf.constant(np.random.default_rng(13).normal(size=x.shape).astype(np.float32))
  results = []
  for batch in (12, None):
    layer = ghost_layer(4)

    def loss_and_grads(t, layer=layer):
      with tf.GradientTape() as tape:
        tape.watch(t)
        loss = tf.reduce_sum(layer(t, training=True) * weights)
      return tape.gradient(loss, [t, layer.gamma, layer.beta])

    signature = [tf.TensorSpec([batch, 5, 7, 6], tf.float32)]
    results.append(tf.function(loss_and_grads, input_signature=signature)(x))
  for fused, moments in zip(*results):
    np.testing.assert_allclose(fused.numpy(), moments.numpy(), rtol=1e-4, atol=1e-4)


def test_one_ghost_group_is_plain_batch_norm():
  x = tf.constant(ghost_images(seed=14))
  plain, ghost = ghost_layer(None), ghost_layer(12)
  outputs = [layer(x, training=True).numpy() for layer in (plain, ghost)]
  np.testing.assert_array_equal(outputs[0], outputs[1])
  np.testing.assert_array_equal(plain.moving_variance.numpy(), ghost.moving_variance.numpy())
  # Inference ignores the groups.
  np.testing.assert_array_equal(plain(x, training=False).numpy(), ghost(x, training=False).numpy())


def test_ghost_batch_size_errors_and_config_round_trip():
  with pytest.raises(ValueError, match='must be a multiple of ghost_batch_size=5'):
    ghost_layer(5)(tf.constant(ghost_images()), training=True)
  with pytest.raises(ValueError, match='positive integer'):
    BatchNormalization(ghost_batch_size=0)
  clone = keras.layers.deserialize(keras.layers.serialize(ghost_layer(4)))
  assert type(clone) is BatchNormalization and clone.ghost_batch_size == 4


# ---------------------------------------------------------------------------
# Precise statistics

def two_bn_model(ghost=None):
  inputs = keras.Input((6, 6, 2))
  x = keras.layers.Conv2D(3, 3, padding='same', use_bias=False, name='conv1')(inputs)
  x = BatchNormalization(momentum=0.9, ghost_batch_size=ghost, name='bn1')(x)
  x = keras.layers.ReLU()(x)
  x = keras.layers.Conv2D(4, 3, padding='same', use_bias=False, name='conv2')(x)
  x = BatchNormalization(momentum=0.9, ghost_batch_size=ghost, name='bn2')(x)
  return keras.Model(inputs, x)


def numpy_forward_statistics(model, batches, ghost=None):
  """Per-batch (mean, biased variance) of each BN input, the network run in numpy."""
  k1, k2 = (model.get_layer(n).kernel.numpy().astype(np.float64) for n in ('conv1', 'conv2'))
  bn1 = model.get_layer('bn1')

  def conv(x, k):
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros(x.shape[:3] + (k.shape[-1],))
    for i in range(3):
      for j in range(3):
        out += np.einsum('nhwc,cd->nhwd', padded[:, i:i + x.shape[1], j:j + x.shape[2]], k[i, j])
    return out

  def stats(x):
    groups = x.reshape(-1, ghost or len(x), *x.shape[1:])
    return groups.mean(axis=(1, 2, 3)).mean(0), groups.var(axis=(1, 2, 3)).mean(0), groups

  per_layer = [[], []]
  for batch in batches:
    a = conv(batch.astype(np.float64), k1)
    mean, var, groups = stats(a)
    per_layer[0].append((mean, var))
    m = groups.mean(axis=(1, 2, 3), keepdims=True)
    v = groups.var(axis=(1, 2, 3), keepdims=True)
    normed = ((groups - m) / np.sqrt(v + bn1.epsilon) * bn1.gamma.numpy() + bn1.beta.numpy())
    b = conv(np.maximum(normed.reshape(a.shape), 0.0), k2)
    per_layer[1].append(stats(b)[:2])
  return [(np.mean([s[0] for s in layer], 0), np.mean([s[1] for s in layer], 0))
          for layer in per_layer]


@pytest.mark.parametrize('ghost', [None, 2])
def test_precise_statistics_average_the_batch_statistics(ghost):
  from models.batch_norm import precise_statistics  # pylint: disable=import-outside-toplevel
  keras.utils.set_random_seed(3)
  model = two_bn_model(ghost)
  rng = np.random.default_rng(4)
  batches = [(rng.normal(0.5 * i, 1.0 + i, (8, 6, 6, 2))).astype(np.float32) for i in range(3)]
  weights = [w.numpy() for w in model.trainable_weights]
  expected = numpy_forward_statistics(model, batches, ghost)
  assert precise_statistics(model, batches) == 3
  for name, (mean, variance) in zip(('bn1', 'bn2'), expected):
    layer = model.get_layer(name)
    np.testing.assert_allclose(layer.moving_mean.numpy(), mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), variance, rtol=1e-4, atol=1e-5)
  for before, after in zip(weights, model.trainable_weights):
    np.testing.assert_array_equal(before, after.numpy())  # statistics only
  # Two workers with the same batches: sums double, the averages stay.
  twice = precise_statistics(model, batches, all_workers_sum=lambda a: 2.0 * a)
  assert twice == 6
  np.testing.assert_allclose(model.get_layer('bn2').moving_mean.numpy(), expected[1][0],
                             rtol=1e-4, atol=1e-5)


def test_precise_statistics_reject_other_batch_norm_layers():
  from models.batch_norm import precise_statistics  # pylint: disable=import-outside-toplevel
  model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.BatchNormalization()])
  with pytest.raises(ValueError, match='1 are not'):
    precise_statistics(model, [np.zeros((2, 4, 4, 1), np.float32)])
