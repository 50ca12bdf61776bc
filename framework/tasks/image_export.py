"""An image classifier's SavedModel: raw images in, probabilities, classes and class names out.

The signature (:func:`serving_function`) takes a batch of images as the data
set stores them (uint8 pixels for Fashion-MNIST and CIFAR-10, JPEG bytes for
ImageNet), applies the preprocessing of the eval path, and returns the class
``probabilities`` (float32 ``[B, num_classes]``), the top-1 ``classes``
(int32 ``[B]``) and their ``class_names`` (string ``[B]``); the names, one a
line in index order, are also the SavedModel's asset ``assets/class_names.txt``
and ``class_names`` in ``export.json``. A data layer that names no classes
gives their indices as names (``'0'``, ``'1'``, ...).
"""

import tensorflow as tf

from framework.tasks.export import ExportError

# An image classifier's class names, one a line in index order, among the SavedModel's assets.
CLASS_NAMES_FILE = 'class_names.txt'


def class_names(data_layer):
  """An image classifier's class names in index order: the data layer's, else ``'0'``, ``'1'``...

  Raises:
    ExportError: a name that holds a line break (the asset has one name a line).
  """
  names = getattr(data_layer, 'class_names', None)
  if names is None:
    return [str(i) for i in range(data_layer.num_classes)]
  names = [str(name) for name in names]
  for index, name in enumerate(names):
    if '\n' in name or '\r' in name:
      raise ExportError(f'class {index} of the data layer is named {name!r}: a class name cannot '
                        f'hold a line break ({CLASS_NAMES_FILE} has one name a line)')
  return names


def class_names_assets(names):
  """The SavedModel assets of an image classifier: ``{CLASS_NAMES_FILE: one name a line}``."""
  return {CLASS_NAMES_FILE: ''.join(name + '\n' for name in names)}


def serving_function(model, data_layer):
  """The ``tf.function`` of the serving signature: raw images -> probabilities, classes, names."""
  spec, preprocess = data_layer.serving_input()
  names = tf.constant(class_names(data_layer))

  @tf.function(input_signature=[spec])
  def serve(images):
    logits = tf.cast(model(preprocess(images), training=False), tf.float32)
    classes = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {'probabilities': tf.nn.softmax(logits), 'classes': classes,
            'class_names': tf.gather(names, classes)}
  return serve
