"""Image classification: softmax cross-entropy, top-1/top-5 accuracy, images in, classes out.

The framework's first task, as the trainer had it before tasks: the model is
``build(model_params, image_shape, num_classes)``; the loss of a batch
``(images, labels)`` is the mean cross-entropy of the logits (with the
config's ``label_smoothing``); the train metric is top-1 ``accuracy``; an
evaluation gives ``loss``, ``accuracy`` and ``top5_accuracy`` over the whole
eval split (``framework.evaluation``); the best checkpoint has the highest
``accuracy``; the SavedModel takes images as the data set stores them
(``framework.export``).
"""

import keras
import tensorflow as tf

from framework import evaluation
from framework import export
from framework.tasks import base
from models import MODELS


class ImageClassificationTask(base.Task):
  """Classifies images; see the module docstring."""

  NAME = 'image_classification'
  TRAIN_METRICS = ('accuracy',)
  EVAL_METRICS = ('accuracy', 'top5_accuracy', 'loss')
  BEST_METRIC = 'accuracy'
  HIGHER_IS_BETTER = True

  def __init__(self, config, eval_config=None):
    super().__init__(config, eval_config)
    self.label_smoothing = config['label_smoothing']
    self._eval_step = None  # compiled by the first evaluate()

  @property
  def example_unit(self):
    return 'images'

  def build_model(self, data_layer):
    cfg = self.config
    return MODELS.resolve(cfg['model'])(cfg['model_params'], data_layer.image_shape,
                                        data_layer.num_classes)

  def loss(self, model, batch):
    """Mean cross-entropy of a batch ``(images, labels)`` and its top-1 ``accuracy``."""
    images, labels = batch
    logits = model(images, training=True)
    accuracy = tf.reduce_mean(tf.cast(tf.math.in_top_k(
        labels, tf.cast(logits, tf.float32), 1), tf.float32))
    one_hot = tf.one_hot(labels, tf.shape(logits)[-1])
    loss = tf.reduce_mean(keras.losses.categorical_crossentropy(
        one_hot, tf.cast(logits, tf.float32), from_logits=True,
        label_smoothing=self.label_smoothing))
    return loss, {'accuracy': accuracy}

  def evaluate(self, model, data_layer, batch_size):
    """``loss``, ``accuracy``, ``top5_accuracy`` and ``examples`` over the split, all workers."""
    if self._eval_step is None:
      self._eval_step = evaluation.make_eval_step(model)
    return evaluation.evaluate(self._eval_step, data_layer.dataset(batch_size))

  def describe_eval(self, metrics):
    return (f'loss {metrics["loss"]:.4f}, top-1 {metrics["accuracy"]:.4f}, top-5 '
            f'{metrics["top5_accuracy"]:.4f} ({metrics["examples"]} examples)')

  def describe_final(self, metrics):
    return (f'accuracy: {metrics["accuracy"]:.4f} (top-5 {metrics["top5_accuracy"]:.4f}, '
            f'loss {metrics["loss"]:.4f})')

  def serving_function(self, model, data_layer):
    return export.serving_function(model, data_layer)

  def describe_export(self, data_layer):
    spec, _ = data_layer.serving_input()
    return (f'takes {spec.dtype.name} images {list(spec.shape)}, returns probabilities and '
            'classes')
