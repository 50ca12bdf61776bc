"""Batch normalization through TensorFlow's fused kernel.

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
"""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package='largebatch')
class BatchNormalization(keras.layers.BatchNormalization):
  """``keras.layers.BatchNormalization`` computed by TensorFlow's fused kernel where it applies."""

  def _fused_applies(self, inputs, mask):
    rank = len(inputs.shape)
    return (rank == 4 and self.axis in (-1, 3) and mask is None and self.center and self.scale
            and not self.renorm)

  def call(self, inputs, training=None, mask=None):
    if not self._fused_applies(inputs, mask):
      return super().call(inputs, training=training, mask=mask)
    # The kernel takes float32 or bfloat16 activations with float32 statistics
    # on the CPU; float16 is computed in float32, as Keras does.
    x = tf.cast(inputs, tf.float32) if inputs.dtype == tf.float16 else inputs
    gamma = tf.cast(self.gamma, tf.float32)
    beta = tf.cast(self.beta, tf.float32)
    if training and self.trainable:
      y, mean, unbiased, _, _, _ = tf.raw_ops.FusedBatchNormV3(
          x=x, scale=gamma, offset=beta, mean=tf.constant([], tf.float32),
          variance=tf.constant([], tf.float32), epsilon=self.epsilon, data_format='NHWC',
          is_training=True)
      count = tf.cast(tf.size(x, out_type=tf.int64) // tf.cast(tf.shape(x)[-1], tf.int64),
                      tf.float32)
      variance = unbiased * ((count - 1.0) / count)
      momentum = self.momentum
      self.moving_mean.assign(self.moving_mean * momentum + mean * (1.0 - momentum))
      self.moving_variance.assign(self.moving_variance * momentum + variance * (1.0 - momentum))
    else:
      y, _, _, _, _, _ = tf.raw_ops.FusedBatchNormV3(
          x=x, scale=gamma, offset=beta, mean=tf.cast(self.moving_mean, tf.float32),
          variance=tf.cast(self.moving_variance, tf.float32), epsilon=self.epsilon,
          data_format='NHWC', is_training=False)
    return tf.cast(y, self.compute_dtype)
