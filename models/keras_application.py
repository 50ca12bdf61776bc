"""Any model of ``keras.applications`` as an image classifier of this framework.

``model: keras_application`` with ``model_params.name: MobileNetV2`` builds the
application without its top (``include_top=False``), pooled globally
(``pooling``: 'avg' or 'max'), then ``dropout`` and a float32 ``Dense`` of
``num_classes`` named ``logits`` (no softmax: the task's loss takes logits).
The application's own arguments (``alpha`` of the MobileNets, ...) go in
``extra_kwargs``; the builder sets ``include_top``, ``weights``,
``input_shape``, ``pooling`` and ``classes`` itself.

Inputs. The image data layers give images normalized to zero mean and unit
variance per channel. Some applications normalize their input themselves:
EfficientNetV2, ConvNeXt and MobileNetV3 take ``include_preprocessing``, which
this builder passes as False unless ``model_params.include_preprocessing`` is
True, so the data layer's normalization is the one used. EfficientNet (B0-B7)
has no such argument and always divides its input by 255 (then a
``Normalization`` layer, the identity without ImageNet weights); the batch
norm after its stem convolution undoes the scale, so it trains from scratch,
but its ImageNet weights expect pixels in [0, 255]. The other applications
(ResNet50, MobileNetV2, DenseNet, ...) take their input as it comes.

Weights. ``weights: None`` initializes at random; a path loads a weights file
of the application without its top (Keras' ``*_notop.h5``, or a
``.weights.h5`` saved from the same application and arguments). Keras'
``'imagenet'`` download is refused: every worker would download it at start.

Weight decay. ``weight_decay`` is the L2 penalty of the other builders,
``weight_decay / 2 * sum(w ** 2)`` in ``model.losses``, on the kernels of
convolutions and dense layers (the pointwise one of a separable convolution),
not on depthwise filters, which hold few parameters (Howard et al. 2017), nor
on biases or normalization parameters. The config layer turns it off when the
optimizer decays weights itself (LARS, LAMB, AdamW).

Initializers. The application's layers keep the initializers Keras gives them,
unless the config gives ``initializer``: then every kernel of its convolutions
(depthwise and pointwise ones too) and dense layers is drawn again with it,
whatever the application had set (Keras has no default to tell an initializer
the application chose from one it left), and the logits' too; biases and
normalization parameters keep theirs. A weights file still loads over them.

Names. Keras names the variables of its applications its own way
(``bn_Conv1/gamma``, ``block_1_expand_BN/beta``, ``conv1_bn/gamma``,
``..._layernorm/gamma``): a LARS or LAMB exclusion list written for this
framework's ResNets, ``[batch_normalization, bias]``, matches none of their
normalization parameters (the optimizer pipeline warns about it).
``[gamma, beta, bias]`` names the normalization parameters and biases of every
application.

References:
  Howard et al. "MobileNets: Efficient Convolutional Neural Networks for Mobile
  Vision Applications", 2017. arXiv:1704.04861 (section 3.2).
"""

import inspect
import os
import re
import warnings

import keras

from core.params import ConfigError
from core.params import check_params
from core.registry import closest
from models import initializers
from models import schemas

# The arguments the builder gives an application; extra_kwargs may not give them.
_SET_BY_BUILDER = ('include_top', 'weights', 'input_tensor', 'input_shape', 'pooling', 'classes',
                   'classifier_activation', 'include_preprocessing')
# The most characters of the application's own message a ConfigError quotes (a
# weights file that does not fit is described with the values of a variable).
_LONGEST = 300
# Depthwise filters get no weight decay (see the module docstring).
_DEPTHWISE = (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)


def application_names():
  """The model functions of the installed ``keras.applications`` ('ConvNeXtBase', ...)."""
  return sorted(name for name in dir(keras.applications)
                if name[:1].isupper() and callable(getattr(keras.applications, name)))


def application(name):
  """The ``keras.applications`` function called ``name``.

  Raises:
    ConfigError: naming the closest spelling and every known name.
  """
  names = application_names()
  if name not in names:
    guess = closest(name, names)
    hint = f' (did you mean {guess!r}?)' if guess is not None else ''
    raise ConfigError(f'model_params.name: {name!r} is not a keras.applications model{hint}; '
                      f'known: {", ".join(names)}', 'model_params.name', 'invalid')
  return getattr(keras.applications, name)


def _arguments(fn, params):
  """The keyword arguments of the application besides those of the backbone's shape and weights."""
  name = params['name']
  accepted = inspect.signature(fn).parameters
  kwargs = {}
  if 'include_preprocessing' in accepted:
    kwargs['include_preprocessing'] = params['include_preprocessing']
  elif params['include_preprocessing']:
    raise ConfigError(f'model_params.include_preprocessing: keras.applications.{name} has no '
                      'such argument (its input is the data layer\'s, normalized); remove it',
                      'model_params.include_preprocessing', 'invalid')
  own = sorted(a for a in accepted if a not in _SET_BY_BUILDER)
  for key, value in params['extra_kwargs'].items():
    path = f'model_params.extra_kwargs.{key}'
    if key in _SET_BY_BUILDER:
      where = ('model_params.include_preprocessing' if key == 'include_preprocessing'
               else 'the builder (include_top=False, the logits head of num_classes)')
      raise ConfigError(f'{path}: set by {where}; remove it from extra_kwargs', path, 'invalid')
    if key not in accepted:
      guess = closest(key, own)
      hint = f' (did you mean {guess!r}?)' if guess is not None else ''
      raise ConfigError(f'{path}: keras.applications.{name} takes no argument {key!r}{hint}; '
                        f'its own: {", ".join(own) or "none"}', path, 'unknown')
    kwargs[key] = value
  return kwargs


def _weights(path):
  if path is not None and not os.path.isfile(path):
    raise ConfigError(f'model_params.weights: {path}: no such file (give the path of a weights '
                      'file of the application without its top, or null)', 'model_params.weights',
                      'invalid')
  return path


def _said(exc):
  """The application's message on one line, cut after its last whole sentence within ``_LONGEST``."""
  said = ' '.join(str(exc).split())
  if len(said) <= _LONGEST:
    return said
  end = said.rfind('. ', 0, _LONGEST)
  return (said[:end + 1] if end > 0 else said[:_LONGEST]) + ' ...'


# Keras' words for a weights file whose variables have other shapes than the model's.
_MISMATCH = re.compile(r'A total of (\d+) objects could not be loaded.*?object <\w+ name=([^,>]+)'
                       r'.*?variable\.shape=(\([^)]*\)), Received: value\.shape=(\([^)]*\))')


def _weights_problem(exc):
  """Why a weights file does not load, in words: not readable, or variables of other shapes."""
  said = ' '.join(str(exc).split())
  mismatch = _MISMATCH.search(said)
  if mismatch:
    count, layer, ours, theirs = mismatch.groups()
    return (f'{count} of its layers have variables of other shapes than the model\'s (e.g. '
            f'{layer}: {theirs} in the file, {ours} in the model)')
  if isinstance(exc, OSError) or 'file signature' in said or 'Unable to' in said:
    return f'not a readable Keras weights file ({_said(exc)})'
  return _said(exc)


def decayed_kernels(model):
  """The kernels of a model's convolution and dense layers, without the depthwise filters."""
  kernels = []
  for layer in model.layers:
    if isinstance(layer, _DEPTHWISE):
      continue
    for attribute in ('kernel', 'pointwise_kernel'):
      variable = getattr(layer, attribute, None)
      if isinstance(variable, keras.Variable) and variable.trainable:
        kernels.append((layer, attribute, variable))
  return kernels


def _add_weight_decay(model, weight_decay):
  """Puts L2 on the kernels of a built model, as ``kernel_regularizer`` would have at its build."""
  if weight_decay <= 0:
    return
  for layer, attribute, variable in decayed_kernels(model):
    # Keras' L2(l) adds l * sum(w**2); half the decay gives the gradient decay * w.
    regularizer = keras.regularizers.L2(weight_decay / 2)
    # The variable's regularizer is the one model.losses reads; the layer's
    # attribute keeps its config telling the same.
    variable.regularizer = regularizer
    setattr(layer, f'{attribute}_regularizer', regularizer)


def build_keras_application(params, image_shape, num_classes, kernel_initializer=None):
  """A ``keras.applications`` model with pooled features and float32 logits.

  Args:
    params: ``model_params``, see ``build_keras_application.PARAMS``.
    image_shape: ``(height, width, channels)`` of the data layer's images.
    num_classes: width of the logits.
    kernel_initializer: the config's initializer of the kernels
      (``models.initializers.KernelInitializers``): every kernel of the
      application's convolutions and dense layers is drawn again with it,
      before a weights file loads, and the logits' kernel with it; None: the
      application's own initializers and Glorot uniform logits.

  Returns:
    An uncompiled ``keras.Model`` named after the application, mapping images
    to float32 logits of shape ``[batch, num_classes]``; its other layers
    follow the global dtype policy.

  Raises:
    ConfigError: for bad ``params``, a missing weights file, or an image shape
      or weights file the application refuses (one line naming
      ``model_params.name``, the shape and what the application said).
  """
  params = check_params(params, build_keras_application.PARAMS, 'model_params')
  name = params['name']
  fn = application(name)
  kwargs = _arguments(fn, params)
  weights = _weights(params['weights'])
  shape = tuple(int(d) for d in image_shape)
  # Keras warns about each layer of a weights file that does not fit before it
  # raises: the warnings are shown only when the application is built.
  given = f', {kwargs}' if kwargs else ''
  try:
    # Built without weights, then loaded: a refused shape and a weights file that does
    # not fit are two mistakes of two keys.
    backbone = fn(include_top=False, weights=None, input_shape=shape, pooling=params['pooling'],
                  **kwargs)
  except (ValueError, OSError) as exc:
    raise ConfigError(f'model_params.name: keras.applications.{name}(input_shape={shape}{given}) '
                      f'refused: {_said(exc)}', 'model_params.name', 'invalid') from None
  if kernel_initializer is not None:
    initializers.reinitialize_kernels(backbone, kernel_initializer)
  if weights is not None:
    with warnings.catch_warnings(record=True) as caught:
      try:
        backbone.load_weights(weights)
      except (ValueError, OSError) as exc:
        raise ConfigError(f'model_params.weights: {weights}: {_weights_problem(exc)}; it does not '
                          f'load into keras.applications.{name}(include_top=False, '
                          f'input_shape={shape}{given}): give a weights file saved from that '
                          'model, or null', 'model_params.weights', 'invalid') from None
    for warning in caught:
      warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
  x = backbone.output
  if params['dropout'] > 0:
    x = keras.layers.Dropout(params['dropout'], name='head_dropout')(x)
  # float32 logits whatever the policy, so the softmax and loss are exact.
  logits = keras.layers.Dense(num_classes, dtype='float32', name='logits', kernel_initializer=(
      initializers.kernel(kernel_initializer, initializers.KERAS_DEFAULT)))(x)
  model = keras.Model(backbone.input, logits, name=name.lower())
  _add_weight_decay(model, params['weight_decay'])
  return model


build_keras_application.PARAMS = schemas.KERAS_APPLICATION_PARAMS
build_keras_application.TASK = 'image_classification'
build_keras_application.TAKES_INITIALIZER = True
