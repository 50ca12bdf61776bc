"""An image classifier's evaluation: loss, top-1 and top-5 accuracy over the split and workers."""

import keras
import numpy as np
import tensorflow as tf

from framework.engines import distributed


def make_eval_step(model, batch_statistics=False):
  """The compiled step ``(images, labels) -> [loss sum, top-1 hits, top-5 hits, examples]``.

  With fewer than five classes "top-5" is top-k over all classes. With
  ``batch_statistics`` the model runs as in training (batch normalization by
  the batch's own statistics, not its moving averages, which lag the weights
  at a high rate): the caller restores what the call moved
  (:func:`keeping_state`).
  """

  def eval_step(images, labels):
    logits = tf.cast(model(images, training=batch_statistics), tf.float32)
    losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    top1 = tf.cast(tf.math.in_top_k(labels, logits, 1), tf.float32)
    k = min(5, logits.shape[-1])
    top5 = tf.cast(tf.math.in_top_k(labels, logits, k), tf.float32)
    return tf.stack([tf.reduce_sum(losses), tf.reduce_sum(top1), tf.reduce_sum(top5),
                     tf.cast(tf.shape(labels)[0], tf.float32)])

  return tf.function(eval_step, reduce_retracing=True)


def evaluate(eval_step, dataset):
  """Runs ``eval_step`` over ``dataset`` (this worker's shard) and sums over all workers.

  Returns:
    dict with ``loss``, ``accuracy``, ``top5_accuracy`` (means over the
    examples of every worker) and ``examples``.
  """
  totals = np.zeros(4, np.float64)
  for images, labels in dataset:
    totals += eval_step(images, labels).numpy()
  totals = distributed.sum_array(totals)
  n = max(totals[3], 1.0)
  return {'loss': totals[0] / n, 'accuracy': totals[1] / n, 'top5_accuracy': totals[2] / n,
          'examples': int(totals[3])}


def has_batch_normalization(model):
  """Whether any layer of ``model`` (nested ones too) is a batch normalization."""
  return any(isinstance(layer, keras.layers.BatchNormalization)
             for layer in model._flatten_layers(include_self=False))  # pylint: disable=protected-access


class keeping_state:  # pylint: disable=invalid-name
  """``with keeping_state(model):`` puts the model's non-trainable variables (batch
  normalization's moving averages) back as they were when the block ends."""

  def __init__(self, model):
    self.model = model
    self.saved = None

  def __enter__(self):
    self.saved = [v.numpy() for v in self.model.non_trainable_variables]
    return self

  def __exit__(self, *exc):
    for variable, value in zip(self.model.non_trainable_variables, self.saved):
      variable.assign(value)
    return False
