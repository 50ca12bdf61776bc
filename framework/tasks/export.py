"""Exports a trained model as a TensorFlow SavedModel for serving, with the task's signature.

The ``serving_default`` signature is the task's (``framework.tasks``): an
image classifier's takes images and returns class probabilities, classes and
names (``framework.tasks.image_export``); a sequence model's takes a batch of
words as strings and returns their ``pronunciations`` as strings. The task's
assets go into the SavedModel's ``assets/`` and what it records, with the
checkpoint and step, into ``export.json`` beside it. Load it with
``tf.saved_model.load(path)``; TensorFlow Serving serves it as is.
"""

import json
import os
import shutil
import tempfile

import tensorflow as tf

SIGNATURE = 'serving_default'
INFO_FILE = 'export.json'


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


def export_saved_model(model, directory, info, serve, assets=None):
  """Writes the SavedModel of ``model`` to ``directory`` (see the module docstring).

  The SavedModel is written next to ``directory`` first and renamed into place,
  so an interrupted export leaves no half-written model.

  Args:
    model: the Keras model, its weights restored.
    directory: a new or empty directory.
    info: a JSON-able dict written as ``export.json`` beside the model (the
      checkpoint and step it came from).
    serve: the ``tf.function`` of the serving signature (the task's
      ``serving_function``).
    assets: ``{file name: text}`` written into the SavedModel's ``assets/``
      (the task's ``export_assets``), or None for none.

  Raises:
    ExportError: for a directory that is a file or not empty.
  """
  check_export_dir(directory)
  directory = os.path.abspath(directory)
  parent = os.path.dirname(directory)
  os.makedirs(parent, exist_ok=True)
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
