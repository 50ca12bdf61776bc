"""What an image classifier's builder must return, checked once the model is built.

A builder (a function, or a ``keras.Model`` subclass called the same way) is
``build(model_params, image_shape, num_classes)`` and returns a
``keras.Model`` mapping a batch of images to logits ``[batch, num_classes]``.
The task's loss is a softmax cross-entropy that takes logits
(``from_logits=True``): a model whose output is already a softmax would be
trained on the softmax of a softmax, which learns slowly and reports a wrong
loss, without any error. :func:`check_image_classifier` refuses it, and a
wrong output shape, in one line before anything is trained.
"""

import keras
import numpy as np
import tensorflow as tf

from core.params import ConfigError

SOFTMAX = 'softmax'
# Layers whose ``activation`` attribute, if softmax, makes the model's output one.
_ACTIVATION_ATTRIBUTE = 'activation'


def _is_softmax(function):
  """Whether an activation (a function, or its name) is Keras', keras.ops' or TensorFlow's softmax."""
  if isinstance(function, str):
    return function == SOFTMAX
  return (function in (keras.activations.softmax, keras.ops.softmax, tf.nn.softmax)
          or getattr(function, '__name__', None) == SOFTMAX)


def _output_layer(model):
  """The layer that produces the model's (single) output, or None when the model does not say.

  A functional or Sequential model knows it from its graph; a subclassed one
  does not.
  """
  try:
    outputs = model.outputs
  except (AttributeError, ValueError):
    outputs = None
  if outputs and len(outputs) == 1:
    history = getattr(outputs[0], '_keras_history', None)
    if history is not None:
      return history[0]
  if isinstance(model, keras.Sequential) and model.layers:
    return model.layers[-1]
  return None


def output_activation(model, image_shape=None):
  """``'softmax'`` when the model's output is a softmax, else None.

  The output layer is a ``Softmax`` layer, ``keras.ops.softmax``, an
  ``Activation('softmax')``, or a layer built with ``activation='softmax'``
  (``Dense``, ``Conv2D``, ...); a nested model is looked into. A log-softmax
  output is not a softmax: it is a valid logit (its softmax is that of its
  input). A model that does not say which layer is its output (a subclassed
  one), or whose output is a ``Lambda`` of another function, is called, when
  ``image_shape`` is given, on two random images at inference: outputs that
  are all >= 0 and sum to 1 in each row are a softmax. No other model is
  called.

  Args:
    model: a built ``keras.Model``.
    image_shape: ``(height, width, channels)`` of its input, to call a
      subclassed model; None tells nothing of such a model.

  Returns:
    'softmax' or None.
  """
  layer = _output_layer(model)
  while isinstance(layer, keras.Model):
    inner = _output_layer(layer)
    if inner is None or inner is layer:
      break
    layer = inner
  if layer is not None:
    # The layer, or keras.ops.softmax applied in a functional model (an operation of that name).
    if isinstance(layer, keras.layers.Softmax) or type(layer).__name__ == 'Softmax':
      return SOFTMAX
    if _is_softmax(getattr(layer, _ACTIVATION_ATTRIBUTE, None)):
      return SOFTMAX
    if not isinstance(layer, keras.layers.Lambda):
      return None
    if _is_softmax(layer.function):
      return SOFTMAX
  # A subclassed model, or a Lambda's own function: the output itself tells.
  if image_shape is None:
    return None
  outputs = _call(model, image_shape)
  rows = outputs.reshape(outputs.shape[0], -1).astype(np.float64)
  if rows.shape[1] > 1 and (rows >= 0).all() and np.allclose(rows.sum(axis=1), 1, atol=1e-4):
    return SOFTMAX
  return None


def _describe(model):
  return getattr(model, '__name__', None) or getattr(type(model), '__name__', repr(model))


def _call(model, image_shape):
  """The model's output (numpy) for two random images at inference."""
  # A generator of its own: the run's random streams are left as they were.
  images = np.random.default_rng(0).normal(size=(2,) + tuple(image_shape)).astype(np.float32)
  output = model(images, training=False)
  if isinstance(output, (list, tuple, dict)):
    raise ConfigError(f'model: {_describe(model)} returns {type(output).__name__} of '
                      f'{len(output)} outputs; an image classifier returns one tensor of logits',
                      'model', 'invalid')
  return keras.ops.convert_to_numpy(output)


def output_shape(model, image_shape):
  """The shape of the model's output for a batch of images, the batch as None.

  A functional model answers from its graph; another one is called once, on
  two images, at inference.
  """
  try:
    outputs = model.outputs
  except (AttributeError, ValueError):
    outputs = None
  if outputs:
    if len(outputs) != 1:
      return tuple(tuple(o.shape) for o in outputs)
    return tuple(outputs[0].shape)
  return (None,) + tuple(_call(model, image_shape).shape[1:])


def check_image_classifier(model, name, image_shape, num_classes):
  """Refuses what a builder returned unless it is an image classifier giving logits.

  Args:
    model: what the builder returned.
    name: how the config names the builder (for the message).
    image_shape: ``(height, width, channels)`` the builder was given.
    num_classes: the width of the logits the task expects.

  Raises:
    ConfigError: one line starting ``model:``: not a ``keras.Model``, an
      output of another shape than ``(None, num_classes)``, or a softmax
      output.
  """
  if not isinstance(model, keras.Model):
    raise ConfigError(f'model: {name} returned {type(model).__name__}, not a keras.Model; a '
                      'builder is build(model_params, image_shape, num_classes) -> keras.Model',
                      'model', 'invalid')
  expected = (None, num_classes)
  shape = output_shape(model, image_shape)
  if shape != expected:
    raise ConfigError(f'model: {name}\'s output has shape {shape}; the image_classification task '
                      f'takes logits of shape {expected} (num_classes {num_classes} from the data '
                      'layer)', 'model', 'invalid')
  if output_activation(model, image_shape) == SOFTMAX:
    raise ConfigError(f'model: {name}\'s output is a softmax; the image_classification loss '
                      'takes logits: remove the final softmax (e.g. activation=None in the last '
                      'Dense)', 'model', 'invalid')


def builder_name(model_key):
  """How a config's ``model`` (a name or the builder itself) is named in messages."""
  if isinstance(model_key, str):
    return model_key
  return _describe(model_key)
