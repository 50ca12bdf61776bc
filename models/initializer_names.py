"""The kernel initializers a config names (``initializer``, ``initializer_params``), without TensorFlow.

OpenSeq2Seq's ``initializer`` is the default initializer of every variable
its model creates without one of its own, called with
``**initializer_params``; in its layers those are the kernels of the
convolutions and of the dense and attention projections (biases, batch and
layer normalization and embeddings set theirs). Here it is the initializer of
those kernels in the built-in models (``models.initializers`` makes the Keras
objects). A config names it by:

- TensorFlow 1's function, with TensorFlow 1's argument names and defaults
  (``variance_scaling_initializer``, ``xavier_initializer``,
  ``truncated_normal_initializer``, ...): a Python config's
  ``tf.variance_scaling_initializer`` arrives as that name;
- Keras' name or class name (``he_normal``, ``GlorotUniform``), with Keras'
  arguments and defaults;
- in a Python config, one of Keras' initializer classes or instances
  (``keras.initializers.HeNormal``, ``keras.initializers.VarianceScaling(2.0)``),
  recorded as its name and arguments.

:func:`check` returns the name and its arguments, every default filled in, as
``config.yaml`` records them; :func:`keras_form` says which Keras initializer
that is, with which arguments. The formulas, with n the fan of ``mode``
(fan_in = the kernel's inputs times its receptive field, fan_out its
outputs times it, fan_avg their mean):

- truncated normal (``variance_scaling`` with ``distribution``
  ``truncated_normal``, or TF 1's ``normal``, its older name): a normal of
  stddev sqrt(scale / n) / 0.8796..., redrawn beyond two of those stddevs,
  so that the variance after truncation is scale / n;
- ``untruncated_normal``: a normal of variance scale / n;
- ``uniform``: U(-sqrt(3 scale / n), sqrt(3 scale / n)), variance scale / n;
- ``tf.contrib.layers.variance_scaling_initializer(factor, mode, uniform)``
  and ``xavier_initializer`` (factor 1, FAN_AVG): uniform as above with
  scale = factor, else a truncated normal of stddev sqrt(1.3 factor / n)
  (variance 1.3 x 0.8796...^2 = 1.0059 factor / n).

References:
  TensorFlow 1.15, ``tensorflow/python/ops/init_ops.py`` (``VarianceScaling``)
  and ``tensorflow/contrib/layers/python/layers/initializers.py``.
"""

from core.params import ConfigError
from core.params import Param
from core.params import check_params
from core.params import non_negative
from core.params import positive
from core.registry import closest

INITIALIZER_KEY = 'initializer'
PARAMS_KEY = 'initializer_params'

# The stddev of a standard normal truncated to (-2, 2) (scipy.stats.truncnorm.std(-2, 2)).
TRUNCATED_STDDEV = 0.87962566103423978
# tf.contrib.layers.variance_scaling_initializer's truncated normal: stddev sqrt(1.3 factor / n).
CONTRIB_TRUNCATED_FACTOR = 1.3

_MODES = ('fan_in', 'fan_out', 'fan_avg')
_CONTRIB_MODES = ('FAN_IN', 'FAN_OUT', 'FAN_AVG')
_DISTRIBUTIONS = ('truncated_normal', 'normal', 'untruncated_normal', 'uniform')


def _seed():
  return Param(int, None, check=non_negative,
               doc="the kernels' seed: kernel k of the model draws with seed + k; None: from "
                   'random_seed')


def _scale(doc):
  return Param(float, 1.0, check=positive, doc=doc)


class Named:
  """One name a config may give: its arguments (``name -> Param``) and the Keras initializer it is.

  Args:
    who: how the docs name the function or class (``tf.variance_scaling_initializer``).
    params: its arguments, with their defaults.
    keras: ``f(checked params) -> (Keras class name, keyword arguments but the seed)``.
  """

  def __init__(self, who, params, keras):
    self.who = who
    self.params = params
    self.keras = keras

  @property
  def seeded(self):
    return 'seed' in self.params


def _variance_scaling(params):
  distribution = params['distribution']
  return 'VarianceScaling', {'scale': params['scale'], 'mode': params['mode'],
                             'distribution': ('truncated_normal' if distribution == 'normal'
                                              else distribution)}


def _contrib(factor, mode, uniform):
  """``tf.contrib.layers.variance_scaling_initializer`` as Keras' ``VarianceScaling``."""
  if uniform:
    return 'VarianceScaling', {'scale': factor, 'mode': mode.lower(), 'distribution': 'uniform'}
  # Keras' truncated normal has stddev sqrt(scale / n) / TRUNCATED_STDDEV.
  scale = CONTRIB_TRUNCATED_FACTOR * factor * TRUNCATED_STDDEV ** 2
  return 'VarianceScaling', {'scale': scale, 'mode': mode.lower(),
                             'distribution': 'truncated_normal'}


def _fixed(scale, mode, distribution):
  return lambda params: ('VarianceScaling', {'scale': scale, 'mode': mode,
                                             'distribution': distribution})


def _same(keras_class, *names):
  return lambda params: (keras_class, {n: params[n] for n in names})


_VARIANCE_SCALING_PARAMS = {
    'scale': _scale('the variance is scale / n'),
    'mode': Param(str, 'fan_in', choices=_MODES, doc='n: fan_in, fan_out or their mean'),
    'distribution': Param(str, 'truncated_normal', choices=_DISTRIBUTIONS,
                          doc="normal is TF 1's older name of truncated_normal"),
    'seed': _seed(),
}
CONTRIB_VARIANCE_SCALING = Named(
    'tf.contrib.layers.variance_scaling_initializer',
    {'factor': Param(float, 2.0, check=positive, doc='the variance is factor / n'),
     'mode': Param(str, 'FAN_IN', choices=_CONTRIB_MODES, doc='n: FAN_IN, FAN_OUT or their mean'),
     'uniform': Param(bool, False, doc='uniform, or a truncated normal of stddev sqrt(1.3 factor '
                                       '/ n)'),
     'seed': _seed()},
    lambda p: _contrib(p['factor'], p['mode'], p['uniform']))
_XAVIER = Named('tf.contrib.layers.xavier_initializer',
                {'uniform': Param(bool, True, doc='uniform, or a truncated normal of stddev '
                                                  'sqrt(1.3 / n)'),
                 'seed': _seed()},
                lambda p: _contrib(1.0, 'FAN_AVG', p['uniform']))


def _normal_params(stddev):
  return {'mean': Param(float, 0.0), 'stddev': Param(float, stddev, check=positive),
          'seed': _seed()}


def _keras_fixed(keras_class):
  return Named(f'keras.initializers.{keras_class}', {'seed': _seed()},
               lambda params: (keras_class, {}))


# TensorFlow 1's functions, by their names (tf.<name>; tf.contrib.layers.xavier_initializer;
# tf.contrib.layers.variance_scaling_initializer by its path, whose defaults are not those of
# tf.variance_scaling_initializer: factor 2, FAN_IN, a truncated normal of sqrt(1.3 factor / n)).
TF1_NAMES = {
    'variance_scaling_initializer': Named('tf.variance_scaling_initializer',
                                          _VARIANCE_SCALING_PARAMS, _variance_scaling),
    'xavier_initializer': _XAVIER,
    'xavier_initializer_conv2d': _XAVIER,
    'glorot_uniform_initializer': Named('tf.glorot_uniform_initializer', {'seed': _seed()},
                                        _fixed(1.0, 'fan_avg', 'uniform')),
    'glorot_normal_initializer': Named('tf.glorot_normal_initializer', {'seed': _seed()},
                                       _fixed(1.0, 'fan_avg', 'truncated_normal')),
    'truncated_normal_initializer': Named('tf.truncated_normal_initializer', _normal_params(1.0),
                                          _same('TruncatedNormal', 'mean', 'stddev')),
    'random_normal_initializer': Named('tf.random_normal_initializer', _normal_params(1.0),
                                       _same('RandomNormal', 'mean', 'stddev')),
    'random_uniform_initializer': Named(
        'tf.random_uniform_initializer',
        {'minval': Param(float, 0.0), 'maxval': Param(float, None, doc='None: 1'),
         'seed': _seed()},
        lambda p: ('RandomUniform', {'minval': p['minval'],
                                     'maxval': 1.0 if p['maxval'] is None else p['maxval']})),
    # limit factor * sqrt(3 / n), n the product of all but the last dimension: fan_in for kernels.
    'uniform_unit_scaling_initializer': Named(
        'tf.uniform_unit_scaling_initializer',
        {'factor': Param(float, 1.0, check=positive), 'seed': _seed()},
        lambda p: ('VarianceScaling', {'scale': p['factor'] ** 2, 'mode': 'fan_in',
                                       'distribution': 'uniform'})),
    'orthogonal_initializer': Named('tf.orthogonal_initializer',
                                    {'gain': Param(float, 1.0), 'seed': _seed()},
                                    _same('Orthogonal', 'gain')),
    'zeros_initializer': Named('tf.zeros_initializer', {}, _same('Zeros')),
    'ones_initializer': Named('tf.ones_initializer', {}, _same('Ones')),
    'constant_initializer': Named('tf.constant_initializer', {'value': Param(float, 0.0)},
                                  _same('Constant', 'value')),
    'contrib.layers.variance_scaling_initializer': CONTRIB_VARIANCE_SCALING,
}

# Keras' names (TF 1.15's tf.initializers.he_normal and the others draw the same).
KERAS_NAMES = {
    'variance_scaling': Named('keras.initializers.VarianceScaling', _VARIANCE_SCALING_PARAMS,
                              _variance_scaling),
    'glorot_uniform': _keras_fixed('GlorotUniform'),
    'glorot_normal': _keras_fixed('GlorotNormal'),
    'he_normal': _keras_fixed('HeNormal'),
    'he_uniform': _keras_fixed('HeUniform'),
    'lecun_normal': _keras_fixed('LecunNormal'),
    'lecun_uniform': _keras_fixed('LecunUniform'),
    'truncated_normal': Named('keras.initializers.TruncatedNormal', _normal_params(0.05),
                              _same('TruncatedNormal', 'mean', 'stddev')),
    'random_normal': Named('keras.initializers.RandomNormal', _normal_params(0.05),
                           _same('RandomNormal', 'mean', 'stddev')),
    'random_uniform': Named('keras.initializers.RandomUniform',
                            {'minval': Param(float, -0.05), 'maxval': Param(float, 0.05),
                             'seed': _seed()},
                            _same('RandomUniform', 'minval', 'maxval')),
    'orthogonal': Named('keras.initializers.Orthogonal',
                        {'gain': Param(float, 1.0), 'seed': _seed()}, _same('Orthogonal', 'gain')),
    'zeros': Named('keras.initializers.Zeros', {}, _same('Zeros')),
    'ones': Named('keras.initializers.Ones', {}, _same('Ones')),
    'constant': Named('keras.initializers.Constant', {'value': Param(float, 0.0)},
                      _same('Constant', 'value')),
}
NAMES = {**TF1_NAMES, **KERAS_NAMES}

# Keras' class names, read as its names.
KERAS_CLASSES = {named.who.rsplit('.', 1)[1]: name for name, named in KERAS_NAMES.items()}

ALLOWED = (f"TensorFlow 1's {', '.join(TF1_NAMES)}; Keras' {', '.join(KERAS_NAMES)} (or their "
           'class names); in a Python config, one of those Keras classes or an instance of one')


def _refuse(message, path=INITIALIZER_KEY):
  raise ConfigError(f'{path}: {message}', path, 'invalid')


def _keras_class_name(value):
  """The class name of a Keras initializer class or instance (``'HeNormal'``), else None."""
  cls = value if isinstance(value, type) else type(value)
  if cls.__module__.split('.')[0] not in ('keras', 'tf_keras'):
    return None
  return cls.__name__


def _from_object(value, params):
  """``(name, params)`` of a Keras initializer class or instance a Python config gives."""
  class_name = _keras_class_name(value)
  if class_name not in KERAS_CLASSES:
    what = (f'{class_name} is a Keras class but not one of the initializers read here'
            if class_name else
            f"expected an initializer's name or a Keras initializer, got {value!r} "
            f'({type(value).__name__})')
    _refuse(f'{what}; allowed: {ALLOWED}')
  name = KERAS_CLASSES[class_name]
  if isinstance(value, type):
    return name, params
  if params:
    _refuse(f'{class_name}(...) holds its arguments already; drop {PARAMS_KEY}', PARAMS_KEY)
  declared = NAMES[name].params
  config = value.get_config() if hasattr(value, 'get_config') else {}
  extra = sorted(k for k, v in config.items() if k not in declared and v is not None)
  if extra:
    _refuse(f'{class_name}(...) sets {", ".join(extra)}, which the kernels here do not take; '
            f'give {class_name} with {PARAMS_KEY} among {", ".join(declared) or "none"}')
  return name, {k: v for k, v in config.items() if k in declared}


def named(name, params):
  """The :class:`Named` a checked ``(name, params)`` stands for.

  ``variance_scaling_initializer`` is TensorFlow 1's
  ``tf.variance_scaling_initializer`` unless its arguments are those of
  ``tf.contrib.layers.variance_scaling_initializer`` (``factor``,
  ``uniform``, or a mode in capitals), the function of the same name.

  Raises:
    ConfigError: arguments of both functions.
  """
  entry = NAMES[KERAS_CLASSES.get(name, name)]
  if name != 'variance_scaling_initializer' or not isinstance(params, dict):
    return entry
  contrib = sorted(k for k in ('factor', 'uniform') if k in params)
  if isinstance(params.get('mode'), str) and params['mode'].isupper():
    contrib.append('mode: ' + params['mode'])
  if not contrib:
    return entry
  core = sorted(k for k in ('scale', 'distribution') if k in params)
  if core:
    _refuse(f'{", ".join(contrib)} (tf.contrib.layers.variance_scaling_initializer\'s) and '
            f'{", ".join(core)} (tf.variance_scaling_initializer\'s) are arguments of two '
            "functions of that name; give one function's", PARAMS_KEY)
  return CONTRIB_VARIANCE_SCALING


def check(initializer, params):
  """The config's ``initializer`` and ``initializer_params`` as ``config.yaml`` records them.

  Args:
    initializer: a name (:data:`NAMES`, or a Keras class name), or a Keras
      initializer class or instance.
    params: its arguments (None: none).

  Returns:
    ``(name, params)``: a name of :data:`NAMES` (a Keras class or instance
    becomes its Keras name, an instance's arguments the params) and every
    argument of it, defaults filled in.

  Raises:
    ConfigError: one line naming ``initializer`` or ``initializer_params``:
      an unknown name or object, an unknown argument or a bad value.
  """
  if params is not None and not isinstance(params, dict):
    _refuse(f'expected a mapping of arguments, got {params!r} ({type(params).__name__})',
            PARAMS_KEY)
  params = dict(params or {})
  if not isinstance(initializer, str):
    initializer, params = _from_object(initializer, params)
  if initializer not in NAMES and initializer not in KERAS_CLASSES:
    guess = closest(initializer, list(NAMES) + list(KERAS_CLASSES))
    hint = f' (did you mean {guess!r}?)' if guess is not None else ''
    _refuse(f'{initializer!r} is not an initializer here{hint}; allowed: {ALLOWED}')
  entry = named(initializer, params)
  return KERAS_CLASSES.get(initializer, initializer), check_params(params, entry.params,
                                                                   PARAMS_KEY)


def keras_form(name, params):
  """``(Keras class name, keyword arguments, takes a seed)`` of a checked ``(name, params)``."""
  entry = named(name, params)
  keras_class, kwargs = entry.keras(params)
  return keras_class, kwargs, entry.seeded


def describe(name, params):
  """``name`` as the one-line notes and docs say it: the function it is and the Keras initializer."""
  keras_class, kwargs, _ = keras_form(name, params)
  given = ', '.join(f'{k}={v!r}' for k, v in params.items())
  made = ', '.join(f'{k}={v!r}' for k, v in kwargs.items())
  return f'{named(name, params).who}({given}), as keras.initializers.{keras_class}({made})'
