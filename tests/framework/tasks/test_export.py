"""An image classifier's SavedModel: its class names as an output, an asset and in export.json."""

import json

import numpy as np
import pytest
import tensorflow as tf

from framework.tasks import export
from framework.tasks import image_export
from framework.tasks.image_classification import ImageClassificationTask
from tests.tiny_classifier import tiny_model

NAMES = ('cat', 'dog', 'emu')


class StubLayer:
  """What an export asks of an eval data layer: float32 4x4x1 images served as they are."""

  image_shape = (4, 4, 1)
  num_classes = 3

  def __init__(self, class_names=NAMES):
    self.class_names = class_names

  def serving_input(self):
    return tf.TensorSpec([None, 4, 4, 1], tf.float32, name='images'), lambda images: images


def softmax(logits):
  shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return shifted / shifted.sum(axis=-1, keepdims=True)


def test_the_signature_returns_the_top_class_name_beside_the_probabilities_and_classes(tmp_path):
  directory = tmp_path / 'export'
  model, layer = tiny_model(), StubLayer()
  names = image_export.class_names(layer)
  export.export_saved_model(model, str(directory), {'step': 7, 'class_names': names},
                            serve=image_export.serving_function(model, layer),
                            assets=image_export.class_names_assets(names))
  means = np.array([0.0, 0.3, 1.0], np.float32)
  images = np.broadcast_to(means[:, None, None, None], (3, 4, 4, 1)).astype(np.float32)
  served = tf.saved_model.load(str(directory)).signatures[export.SIGNATURE]
  out = served(images=tf.constant(images))
  assert sorted(out) == ['class_names', 'classes', 'probabilities']
  logits = np.stack([5 - 10 * means, np.zeros(3), 10 * means - 5], axis=1)
  np.testing.assert_allclose(out['probabilities'].numpy(), softmax(logits), rtol=1e-5)
  assert out['classes'].numpy().tolist() == [0, 0, 2]
  assert [n.decode() for n in out['class_names'].numpy()] == ['cat', 'cat', 'emu']
  # The names, one a line in index order, as an asset of the SavedModel and in export.json.
  assert (directory / 'assets' / image_export.CLASS_NAMES_FILE).read_text() == 'cat\ndog\nemu\n'
  assert json.loads((directory / export.INFO_FILE).read_text()) == {
      'step': 7, 'class_names': ['cat', 'dog', 'emu']}
  loaded = tf.saved_model.load(str(directory))
  assert loaded.assets[0].asset_path.numpy().decode().endswith('assets/class_names.txt')
  # Nothing beside the export was left behind (the asset's source, the staging directory).
  assert sorted(p.name for p in tmp_path.iterdir()) == ['export']


def test_the_task_exports_as_run_py_does_and_a_layer_without_names_gives_their_indices(tmp_path):
  task = ImageClassificationTask({'label_smoothing': 0.0})
  layer = StubLayer(class_names=None)
  model = tiny_model()
  directory = tmp_path / 'export'
  # As framework.run.launch.export calls it.
  export.export_saved_model(model, str(directory),
                            {'task': task.NAME, **task.export_info(layer)},
                            serve=task.serving_function(model, layer),
                            assets=task.export_assets(layer))
  assert (directory / 'assets' / 'class_names.txt').read_text() == '0\n1\n2\n'
  assert json.loads((directory / 'export.json').read_text())['class_names'] == ['0', '1', '2']
  served = tf.saved_model.load(str(directory)).signatures['serving_default']
  assert served(images=tf.ones([1, 4, 4, 1]))['class_names'].numpy().tolist() == [b'2']
  assert task.describe_export(StubLayer()) == (
      'takes float32 images [None, 4, 4, 1], returns probabilities, classes and class_names '
      '(the 3 names also in assets/class_names.txt and export.json)')


def test_a_class_name_with_a_line_break_is_refused_in_one_line():
  with pytest.raises(export.ExportError) as error:
    image_export.class_names(StubLayer(class_names=('cat', 'big\ndog', 'emu')))
  assert str(error.value) == (
      "class 1 of the data layer is named 'big\\ndog': a class name cannot hold a line break "
      '(class_names.txt has one name a line)')
