"""Batch normalization through TensorFlow's fused kernel, with ghost batches and precise statistics.

Keras 3's ``BatchNormalization`` computes the moments and the normalisation
with separate element-wise ops on the TensorFlow backend: about ten passes
over every activation tensor forward, more backward. On a CPU, where a
ResNet's activations are far larger than the cache, those passes cost a fifth
of a ResNet-8 train step in float32 and two fifths in ``mixed_bfloat16``.
TensorFlow's ``FusedBatchNormV3`` (oneDNN on CPU, cuDNN on GPU) does the same
arithmetic in one kernel, and its gradient in another.

:class:`BatchNormalization` is Keras' layer (same variables, names, config,
checkpoints) whose ``call`` takes the fused kernel for the common case: 4-D
channels-last inputs, center and scale on, no renorm, no mask. The
arithmetic is Keras': the output is ``(x - mean) / sqrt(var + epsilon) *
gamma + beta`` with the batch's mean and biased variance in training and the
moving statistics otherwise, and the moving statistics are updated with the
biased batch variance (the kernel returns the unbiased one, n / (n - 1)
times larger, which is undone). The epsilon is passed as given (the
``tf.compat.v1.nn.fused_batch_norm`` wrapper would raise it to 1.001e-5).
Only the rounding differs, since the kernel sums in another order;
``tests/models/test_batch_norm.py`` compares both layers.

Two additions serve large batches (docs/large_batch.md):

- **Ghost batch norm** (``ghost_batch_size``, Hoffer et al. 2017): in
  training, the batch is split into consecutive groups of ``ghost_batch_size``
  examples and each group is normalised with its own mean and variance, as if
  it were a small batch of its own; Keras 2's ``virtual_batch_size``, which
  Keras 3 dropped. The moving statistics are updated with the mean over the
  groups of their means and of their (biased) variances. With one group it is
  plain batch norm. Inference is unchanged.
- **Precise statistics** (:func:`precise_statistics`, the PreciseBN of
  Wu & Johnson 2021): replaces every layer's moving mean and variance by the
  plain average of its batch statistics over a number of training batches,
  instead of an exponential average that trails the weights.

References:
  Hoffer, Hubara, Soudry. "Train longer, generalize better: closing the
  generalization gap in large batch training of neural networks", NeurIPS 2017.
  Wu, Johnson. "Rethinking 'Batch' in BatchNorm", 2021, arXiv:2105.07576.
"""

import keras
import numpy as np
import tensorflow as tf

_HALF_TYPES = (tf.float16, tf.bfloat16)


@keras.saving.register_keras_serializable(package='largebatch')
class BatchNormalization(keras.layers.BatchNormalization):
  """``keras.layers.BatchNormalization`` computed by TensorFlow's fused kernel where it applies.

  Args:
    ghost_batch_size: None (plain batch norm), or normalise each consecutive
      group of this many examples of a training batch with the group's own
      statistics; the batch must be a multiple of it. Channels-last inputs only.
    **kwargs: the arguments of ``keras.layers.BatchNormalization``.
  """

  # The running sums of :func:`precise_statistics`, set only while it runs;
  # a plain object, so Keras does not track or save it.
  _statistics_sum = None

  def __init__(self, ghost_batch_size=None, **kwargs):
    super().__init__(**kwargs)
    if ghost_batch_size is not None and (isinstance(ghost_batch_size, bool)
                                         or not isinstance(ghost_batch_size, int)
                                         or ghost_batch_size < 1):
      raise ValueError(f'ghost_batch_size must be None or a positive integer, got '
                       f'{ghost_batch_size!r}')
    self.ghost_batch_size = ghost_batch_size

  def build(self, input_shape):
    super().build(input_shape)
    if self.ghost_batch_size is not None and self.axis not in (-1, len(input_shape) - 1):
      raise ValueError(f'{self.name}: ghost_batch_size needs channels-last inputs (axis -1), '
                       f'got axis {self.axis}')

  def get_config(self):
    return {**super().get_config(), 'ghost_batch_size': self.ghost_batch_size}

  def _fused_applies(self, inputs, mask):
    rank = len(inputs.shape)
    return (rank == 4 and self.axis in (-1, 3) and mask is None and self.center and self.scale
            and not self.renorm)

  def call(self, inputs, training=None, mask=None):
    training = bool(training) and self.trainable
    ghost = training and self.ghost_batch_size is not None and mask is None
    fused = self._fused_applies(inputs, mask)
    if ghost and not (fused and inputs.shape[0] is not None):
      y, mean, variance = self._ghost_normalize(inputs)
      self._update_moving_statistics(mean, variance)
      return y
    if not fused:
      if training and self._statistics_sum is not None:
        raise ValueError(f'{self.name}: precise statistics need 4-D channels-last inputs or '
                         'ghost_batch_size')
      return super().call(inputs, training=training, mask=mask)
    # The kernel takes float32 or bfloat16 activations with float32 statistics
    # on the CPU; float16 is computed in float32, as Keras does.
    x = tf.cast(inputs, tf.float32) if inputs.dtype == tf.float16 else inputs
    gamma = tf.cast(self.gamma, tf.float32)
    beta = tf.cast(self.beta, tf.float32)
    if training:
      # A ghost group is a contiguous slice of the batch: one kernel call per
      # group costs a split and a concat, far less than the unfused moments.
      groups = self._ghost_groups(inputs.shape[0]) if ghost else 1
      outputs, means, variances = [], [], []
      for piece in (tf.split(x, groups, axis=0) if groups > 1 else [x]):
        y, mean, unbiased, _, _, _ = tf.raw_ops.FusedBatchNormV3(
            x=piece, scale=gamma, offset=beta, mean=tf.constant([], tf.float32),
            variance=tf.constant([], tf.float32), epsilon=self.epsilon, data_format='NHWC',
            is_training=True)
        count = tf.cast(tf.size(piece, out_type=tf.int64)
                        // tf.cast(tf.shape(piece)[-1], tf.int64), tf.float32)
        outputs.append(y)
        means.append(mean)
        variances.append(unbiased * ((count - 1.0) / count))
      if groups > 1:
        y = tf.concat(outputs, axis=0)
        self._update_moving_statistics(tf.add_n(means) / groups, tf.add_n(variances) / groups)
      else:
        self._update_moving_statistics(means[0], variances[0])
    else:
      y, _, _, _, _, _ = tf.raw_ops.FusedBatchNormV3(
          x=x, scale=gamma, offset=beta, mean=tf.cast(self.moving_mean, tf.float32),
          variance=tf.cast(self.moving_variance, tf.float32), epsilon=self.epsilon,
          data_format='NHWC', is_training=False)
    return tf.cast(y, self.compute_dtype)

  def _ghost_groups(self, batch):
    if batch % self.ghost_batch_size:
      raise ValueError(f'{self.name}: the batch ({batch}) must be a multiple of '
                       f'ghost_batch_size={self.ghost_batch_size}')
    return batch // self.ghost_batch_size

  def _ghost_normalize(self, inputs):
    """Normalises each group of ``ghost_batch_size`` examples by its own moments.

    Returns:
      ``(y, mean, variance)``: the output in the compute dtype, and the mean
      over the groups of their means and biased variances (float32, per channel).
    """
    x = tf.cast(inputs, tf.float32) if inputs.dtype in _HALF_TYPES else inputs
    size = self.ghost_batch_size
    shape = tf.shape(x)
    tf.debugging.assert_equal(
        shape[0] % size, 0,
        message=f'{self.name}: the batch must be a multiple of ghost_batch_size={size}')
    grouped = tf.reshape(x, tf.concat([[shape[0] // size, size], shape[1:]], axis=0))
    axes = list(range(1, len(inputs.shape)))  # all but the group and channel axes
    mean, variance = tf.nn.moments(grouped, axes=axes, keepdims=True)
    gamma = tf.cast(self.gamma, x.dtype) if self.scale else 1.0
    beta = tf.cast(self.beta, x.dtype) if self.center else 0.0
    multiplier = tf.math.rsqrt(variance + self.epsilon) * gamma
    y = grouped * multiplier + (beta - mean * multiplier)
    channels = tf.shape(mean)[-1]
    return (tf.cast(tf.reshape(y, shape), self.compute_dtype),
            tf.reduce_mean(tf.reshape(mean, [-1, channels]), axis=0),
            tf.reduce_mean(tf.reshape(variance, [-1, channels]), axis=0))

  def _update_moving_statistics(self, mean, variance):
    if self._statistics_sum is not None:
      self._statistics_sum.add(mean, variance)
    momentum = self.momentum
    dtype = self.moving_mean.dtype
    self.moving_mean.assign(self.moving_mean * momentum + tf.cast(mean, dtype) * (1.0 - momentum))
    self.moving_variance.assign(self.moving_variance * momentum
                                + tf.cast(variance, dtype) * (1.0 - momentum))


class _StatisticsSum:
  """Per-channel sums of one layer's batch means and variances, and their count."""

  def __init__(self, channels):
    self.mean = tf.Variable(tf.zeros([channels], tf.float64), trainable=False)
    self.variance = tf.Variable(tf.zeros([channels], tf.float64), trainable=False)

  def add(self, mean, variance):
    self.mean.assign_add(tf.cast(mean, tf.float64))
    self.variance.assign_add(tf.cast(variance, tf.float64))


def batch_norm_layers(model):
  """Every batch-norm layer of ``model`` and of the models and layers nested in it, once each."""
  found, stack, seen = [], [model], set()
  while stack:
    layer = stack.pop()
    if id(layer) in seen:
      continue
    seen.add(id(layer))
    if isinstance(layer, keras.layers.BatchNormalization):
      found.append(layer)
    stack.extend(reversed(getattr(layer, 'layers', None) or []))
  return found


def precise_statistics(model, batches, all_workers_sum=None):
  """Sets each batch-norm layer's moving statistics to the average over ``batches``.

  Runs the model in training mode on each batch (so every layer sees the
  activations training produces), records the batch mean and biased variance
  each batch-norm layer normalises with (the group averages with
  ``ghost_batch_size``), and assigns their plain averages to
  ``moving_mean`` and ``moving_variance``. Weights are not changed.

  Args:
    model: a Keras model whose batch-norm layers are :class:`BatchNormalization`.
    batches: an iterable of image batches (or ``(images, labels)`` pairs).
    all_workers_sum: optional ``f(numpy array) -> numpy array`` summing an
      array over all workers (Horovod), so that every worker ends with the
      averages over all workers' batches.

  Returns:
    The number of batches used (over all workers).

  Raises:
    ValueError: for a batch-norm layer of another class, or when ``batches`` is empty.
  """
  layers = batch_norm_layers(model)
  foreign = [layer.name for layer in layers if not isinstance(layer, BatchNormalization)]
  if foreign:
    raise ValueError(f'precise statistics need models.batch_norm.BatchNormalization layers; '
                     f'{len(foreign)} are not, e.g. {foreign[0]}')
  if not layers:
    return 0
  sums = [_StatisticsSum(layer.moving_mean.shape[0]) for layer in layers]
  forward = tf.function(lambda images: model(images, training=True))
  count = 0
  try:
    for layer, total in zip(layers, sums):
      object.__setattr__(layer, '_statistics_sum', total)
    for batch in batches:
      forward(batch[0] if isinstance(batch, (tuple, list)) else batch)
      count += 1
  finally:
    for layer in layers:
      object.__setattr__(layer, '_statistics_sum', None)
  flat = np.concatenate([np.concatenate([s.mean.numpy(), s.variance.numpy()]) for s in sums]
                        + [np.array([count], np.float64)])
  if all_workers_sum is not None:
    flat = np.asarray(all_workers_sum(flat), np.float64)
  total_count = flat[-1]
  if total_count == 0:
    raise ValueError('precise statistics: no batches')
  offset = 0
  for layer in layers:
    channels = layer.moving_mean.shape[0]
    mean = flat[offset:offset + channels] / total_count
    variance = flat[offset + channels:offset + 2 * channels] / total_count
    offset += 2 * channels
    layer.moving_mean.assign(tf.cast(mean, layer.moving_mean.dtype))
    layer.moving_variance.assign(tf.cast(variance, layer.moving_variance.dtype))
  return int(total_count)
