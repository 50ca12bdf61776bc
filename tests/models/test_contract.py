"""What an image classifier's builder must return: a keras.Model of [batch, num_classes] logits."""

import types

import keras
import numpy as np
import pytest

from core.params import ConfigError
from framework.tasks.image_classification import ImageClassificationTask
from models import contract

SHAPE = (8, 8, 3)


def functional(*head):
  """A small functional classifier ending in the layers ``head``."""
  inputs = keras.Input(SHAPE)
  x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(inputs))
  for layer in head:
    x = layer(x)
  return keras.Model(inputs, x)


class Subclassed(keras.Model):
  """A classifier that does not say which layer is its output; a class builder too."""

  def __init__(self, params, image_shape, num_classes):
    super().__init__()
    del image_shape
    self.pool = keras.layers.GlobalAveragePooling2D()
    self.dense = keras.layers.Dense(num_classes)
    self.softmax = (params or {}).get('softmax', False)

  def call(self, inputs):
    logits = self.dense(self.pool(inputs))
    return keras.ops.softmax(logits) if self.softmax else logits


SOFTMAX_OUTPUTS = {
    'dense_activation': lambda: functional(keras.layers.Dense(5, activation='softmax')),
    'dense_function': lambda: functional(
        keras.layers.Dense(5, activation=keras.activations.softmax)),
    'softmax_layer': lambda: functional(keras.layers.Dense(5), keras.layers.Softmax()),
    'activation_layer': lambda: functional(keras.layers.Dense(5),
                                           keras.layers.Activation('softmax')),
    'sequential': lambda: keras.Sequential([keras.Input(SHAPE), keras.layers.Flatten(),
                                            keras.layers.Dense(5), keras.layers.Softmax()]),
    'nested': lambda: functional(keras.Sequential([keras.layers.Dense(5, activation='softmax')])),
    'subclassed': lambda: Subclassed({'softmax': True}, SHAPE, 5),
    'ops_softmax': lambda: functional(keras.layers.Dense(5), keras.ops.softmax),
    'lambda_softmax': lambda: functional(keras.layers.Dense(5),
                                         keras.layers.Lambda(keras.activations.softmax)),
    'lambda_other': lambda: functional(keras.layers.Dense(5),
                                       keras.layers.Lambda(lambda x: keras.ops.softmax(2 * x))),
}
LOGIT_OUTPUTS = {
    'dense': lambda: functional(keras.layers.Dense(5)),
    'log_softmax': lambda: functional(keras.layers.Dense(5),
                                      keras.layers.Activation('log_softmax')),
    'relu_then_dense': lambda: functional(keras.layers.Dense(5, activation='relu'),
                                          keras.layers.Dense(5)),
    'sequential': lambda: keras.Sequential([keras.Input(SHAPE), keras.layers.Flatten(),
                                            keras.layers.Dense(5)]),
    'subclassed': lambda: Subclassed({}, SHAPE, 5),
    'lambda_other': lambda: functional(keras.layers.Dense(5), keras.layers.Lambda(lambda x: 2 * x)),
}


@pytest.mark.parametrize('kind', sorted(SOFTMAX_OUTPUTS))
def test_softmax_outputs_are_found(kind):
  assert contract.output_activation(SOFTMAX_OUTPUTS[kind](), SHAPE) == 'softmax'


@pytest.mark.parametrize('kind', sorted(LOGIT_OUTPUTS))
def test_logits_are_not_a_softmax(kind):
  model = LOGIT_OUTPUTS[kind]()
  assert contract.output_activation(model, SHAPE) is None
  contract.check_image_classifier(model, 'mine', SHAPE, 5)


def test_a_softmax_output_is_refused_in_one_line():
  with pytest.raises(ConfigError) as info:
    contract.check_image_classifier(SOFTMAX_OUTPUTS['dense_activation'](), 'mine', SHAPE, 5)
  assert str(info.value) == (
      "model: mine's output is a softmax; the image_classification loss takes logits: remove the "
      'final softmax (e.g. activation=None in the last Dense)')


def test_another_output_shape_or_object_is_refused_in_one_line():
  with pytest.raises(ConfigError) as info:
    contract.check_image_classifier(functional(keras.layers.Dense(7)), 'mine', SHAPE, 5)
  assert str(info.value) == (
      "model: mine's output has shape (None, 7); the image_classification task takes logits of "
      'shape (None, 5) (num_classes 5 from the data layer)')
  with pytest.raises(ConfigError, match=r"output has shape \(None, 3, 3, 4\)"):
    inputs = keras.Input(SHAPE)
    contract.check_image_classifier(keras.Model(inputs, keras.layers.Conv2D(4, 6)(inputs)),
                                    'mine', SHAPE, 5)
  with pytest.raises(ConfigError, match=r"output has shape \(None, 7\)"):
    contract.check_image_classifier(Subclassed({}, SHAPE, 7), 'mine', SHAPE, 5)
  with pytest.raises(ConfigError, match=r'^model: mine returned dict, not a keras.Model; a builder '
                                        r'is build\(model_params, image_shape, num_classes\)'):
    contract.check_image_classifier({}, 'mine', SHAPE, 5)


def task_model(model, params=None, num_classes=5):
  task = ImageClassificationTask({'model': model, 'model_params': params or {},
                                  'label_smoothing': 0.0})
  return task.build_model(types.SimpleNamespace(image_shape=SHAPE, num_classes=num_classes))


def test_the_task_takes_a_function_or_a_class_and_checks_what_it_builds():
  def build(params, image_shape, num_classes):
    del params, image_shape
    return functional(keras.layers.Dense(num_classes))

  assert task_model(build).output_shape == (None, 5)
  model = task_model(Subclassed)
  assert isinstance(model, Subclassed)
  assert model(np.zeros((1,) + SHAPE, np.float32)).shape == (1, 5)
  with pytest.raises(ConfigError, match="^model: Subclassed's output is a softmax"):
    task_model(Subclassed, {'softmax': True})
  def five_classes(params, image_shape, num_classes):
    del params, image_shape, num_classes
    return functional(keras.layers.Dense(5))

  with pytest.raises(ConfigError, match=r"^model: five_classes's output has shape \(None, 5\); .* "
                                        r'shape \(None, 10\)'):
    task_model(five_classes, num_classes=10)


def test_the_builder_is_named_as_the_config_names_it():
  assert contract.builder_name('keras_application') == 'keras_application'
  assert contract.builder_name(Subclassed) == 'Subclassed'
