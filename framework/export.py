"""Exports a trained model as a TensorFlow SavedModel for serving.

The ``serving_default`` signature is the task's (``framework.tasks``). An
image classifier's (:func:`serving_function`) takes a batch of images as the
data set stores them (uint8 pixels for Fashion-MNIST and CIFAR-10, JPEG bytes
for ImageNet), applies the preprocessing of the eval path, and returns the
class ``probabilities`` (float32 ``[B, num_classes]``), the top-1
``classes`` (int32 ``[B]``) and their ``class_names`` (string ``[B]``); the
names, one a line in index order, are also the SavedModel's asset
``assets/class_names.txt`` and ``class_names`` in ``export.json``. A data
layer that names no classes gives their indices as names (``'0'``, ``'1'``,
...). A sequence model's takes a batch of words as strings and returns their
``pronunciations`` as strings. Load it with ``tf.saved_model.load(path)``;
TensorFlow Serving serves it as is.
"""

import json
import os
import shutil
import tempfile

import tensorflow as tf

SIGNATURE = 'serving_default'
INFO_FILE = 'export.json'
# An image classifier's class names, one a line in index order, among the SavedModel's assets.
CLASS_NAMES_FILE = 'class_names.txt'


class ExportError(RuntimeError):
  """The SavedModel cannot be written where asked (named in the message)."""


def check_export_dir(directory):
  """Refuses an export directory that is a file or holds files; nothing is overwritten.

  Raises:
    ExportError: naming the directory and what to do.
  """
  if os.path.isfile(directory):
    raise ExportError(f'--export_dir {directory} is a file; give a new directory')
  # The nearest part of the path that exists must be a directory: a file there
  # would otherwise surface later as "Not a directory", far from its cause.
  existing = os.path.dirname(os.path.abspath(directory))
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise ExportError(f'--export_dir {directory}: {existing} is a file, not a directory; give a '
                      'path whose parents are directories (or do not exist yet)')
  if os.path.isdir(directory) and os.listdir(directory):
    raise ExportError(f'--export_dir {directory} is not empty; give a new directory, an export '
                      'is never written over another')


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


def export_saved_model(model, data_layer, directory, info, serve=None, assets=None):
  """Writes the SavedModel of ``model`` to ``directory`` (see the module docstring).

  The SavedModel is written next to ``directory`` first and renamed into place,
  so an interrupted export leaves no half-written model.

  Args:
    model: the Keras model, its weights restored.
    data_layer: the eval data layer (input spec and preprocessing).
    directory: a new or empty directory.
    info: a JSON-able dict written as ``export.json`` beside the model (the
      checkpoint and step it came from).
    serve: the ``tf.function`` of the serving signature (the task's); default
      an image classifier's, :func:`serving_function`, with its class names
      as an asset and in ``info`` unless ``assets`` is given.
    assets: ``{file name: text}`` written into the SavedModel's ``assets/``
      (the task's ``export_assets``), or None for none.

  Raises:
    ExportError: for a directory that is a file or not empty.
  """
  check_export_dir(directory)
  directory = os.path.abspath(directory)
  parent = os.path.dirname(directory)
  os.makedirs(parent, exist_ok=True)
  if serve is None:
    serve = serving_function(model, data_layer)
    if assets is None:
      names = class_names(data_layer)
      assets, info = class_names_assets(names), dict(info, class_names=names)
  module = tf.Module()
  module.model = model
  module.serve = serve
  staging = tempfile.mkdtemp(prefix='.export-', dir=parent)
  # The assets' files are written beside the staging directory: saving copies them into it.
  sources = tempfile.mkdtemp(prefix='.export-assets-', dir=parent)
  try:
    # Tracked by the module, so that tf.saved_model.save copies each into assets/.
    module.assets = []
    for name, text in (assets or {}).items():
      path = os.path.join(sources, name)
      with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
      module.assets.append(tf.saved_model.Asset(path))
    tf.saved_model.save(module, staging, signatures={SIGNATURE: module.serve})
    with open(os.path.join(staging, INFO_FILE), 'w', encoding='utf-8') as f:
      json.dump(info, f, indent=2)
    if os.path.isdir(directory):
      os.rmdir(directory)  # empty, checked above
    os.replace(staging, directory)
  finally:
    shutil.rmtree(sources, ignore_errors=True)
    if os.path.isdir(staging):
      shutil.rmtree(staging)
