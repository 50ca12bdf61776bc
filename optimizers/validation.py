"""Every check of the optimizers package's settings and arguments, without TensorFlow.

``optimize_loss`` and the config layer check these settings with the one
validator here: LARC's ``larc_params``, the allreduce ``compression``, AGN's
``agn_params``, the names of the summaries ``optimize_loss`` can write, and
``loss_scaling`` with its ``loss_scaling_params`` (every algorithm's keys,
types, ranges and the relations between them; the loss scalers run the same
check when they are built). The config layer reports a mistake as the
:class:`core.params.ConfigError` these raise, or wraps their ValueError, in a
one-line message starting with the key path; ``optimize_loss`` raises the
same check's ValueError. ``number`` and ``count`` are the argument checks the
lr policies and loss scalers share.
"""
import math
import numbers

from core.params import REQUIRED
from core.params import ConfigError
from core.params import ListParam
from core.params import Param
from core.params import check_params
from core.params import non_negative
from core.params import positive
from core.params import reject_unknown_keys

# ---------------------------------------------------------------------------
# Numbers: each check raises a ValueError naming the argument

def number(name, value, positive=False, minimum=None, below=None):
  """Returns ``value`` as a Python float after checking it.

  Args:
    name: the argument name, used in the error message.
    value: a Python or numpy real number (not a bool, not a tensor).
    positive: when True, the value must be > 0.
    minimum: when set, the value must be >= minimum.
    below: when set, the value must be < below.

  Raises:
    ValueError: for a non-number, a non-finite number or one out of range.
  """
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise ValueError(f'{name}: expected a number, got {value!r} ({type(value).__name__})')
  value = float(value)
  if not math.isfinite(value):
    raise ValueError(f'{name}: must be finite, got {value!r}')
  if positive and value <= 0:
    raise ValueError(f'{name}: must be > 0, got {value!r}')
  if minimum is not None and value < minimum:
    raise ValueError(f'{name}: must be >= {minimum}, got {value!r}')
  if below is not None and value >= below:
    raise ValueError(f'{name}: must be < {below}, got {value!r}')
  return value


def count(name, value):
  """Returns ``value`` as a positive int; raises ValueError naming ``name``."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
    raise ValueError(f'{name}: expected an integer >= 1, got {value!r}')
  return int(value)


# ---------------------------------------------------------------------------
# Settings

# The summaries optimize_loss can write with tf.summary.
SUMMARY_NAMES = [
    'learning_rate',
    'gradients',
    'gradient_norm',
    'global_gradient_norm',
    'variables',
    'variable_norm',
    'larc_summaries',
    'loss_scale',
]

# One summary name (the config's ``summaries`` is a list of them).
SUMMARY = Param(str, REQUIRED, choices=SUMMARY_NAMES)

# The automatic loss scalers by name (any case); a number is a fixed scale.
LOSS_SCALING_ALGOS = ('Backoff', 'LogMax', 'dynamic')

# How gradients travel in the allreduce: as they are, or as float16.
COMPRESSIONS = ('none', 'fp16')

LARC_MODES = ('clip', 'scale')

LARC_SCHEMA = {
    'larc_eta': Param(float, REQUIRED, check=positive, doc='trust coefficient eta'),
    'larc_mode': Param(str, 'clip', choices=LARC_MODES, doc='clip the lr at the base lr, or scale it'),
    'min_update': Param(float, 1e-7, check=non_negative, doc='lower bound of the LARC factor'),
    'epsilon': Param(float, 1e-7, check=non_negative, doc='added to the gradient norm'),
    'skip_list': ListParam(Param(str, REQUIRED), None,
                           doc='variables whose name or path contains one of these are not adapted'),
    'exclude_from_layer_adaptation': ListParam(Param(str, REQUIRED), None,
                                               doc='the same as skip_list (the LARS/LAMB name)'),
}

HOROVOD_SCHEMA = {
    'compression': Param(str, 'none', choices=COMPRESSIONS, doc='gradient compression for allreduce'),
}

AGN_SCHEMA = {
    'optimizer': Param(str, REQUIRED, doc='the optimizer AGN wraps, e.g. Momentum'),
    'communication_period': Param(int, 10, check=positive, doc='local steps between center updates'),
}


def larc_settings(larc_params, path='larc_params'):
  """Checks ``larc_params`` and returns a new dict with every key, defaults filled in.

  Raises:
    ConfigError: naming the key path of the first mistake.
  """
  return check_params(larc_params, LARC_SCHEMA, path)


def check_larc_params(larc_params):
  """:func:`larc_settings` for ``optimize_loss``: the same check, worded for its arguments.

  Raises:
    ValueError: for an unknown key, a missing ``larc_eta``, a bad
      ``larc_mode`` or a value out of range.
  """
  if not isinstance(larc_params, dict):
    raise ValueError(f'larc_params must be a dict, got {larc_params!r}')
  try:
    return larc_settings(larc_params)
  except ConfigError as exc:
    key = (exc.path or '').split('.')[1:2]
    if exc.problem == 'unknown':
      raise ValueError(f'larc_params: unknown key {key[0]!r}; allowed keys: '
                       f'{", ".join(LARC_SCHEMA)}') from None
    if exc.problem == 'missing':
      raise ValueError(f'larc_params: {key[0]} is required (e.g. 0.001)') from None
    if key == ['larc_mode']:
      raise ValueError(f'larc_params.larc_mode: {larc_params["larc_mode"]!r} is not allowed; '
                       f'allowed: {", ".join(LARC_MODES)}') from None
    raise ValueError(str(exc)) from None


def check_summaries(summaries):
  """Returns ``summaries`` as a list after checking each name with ``SUMMARY``, for ``optimize_loss``.

  Raises:
    ValueError: for a name not in ``SUMMARY_NAMES``.
  """
  summaries = list(summaries or [])
  for index, summary in enumerate(summaries):
    try:
      SUMMARY.validate(summary, f'summaries.{index}')
    except ConfigError:
      raise ValueError(f'summaries: unknown summary {summary!r}; allowed: '
                       f'{", ".join(SUMMARY_NAMES)}') from None
  return summaries


def check_compression(compression, path='horovod_params.compression'):
  """Returns the allreduce ``compression`` name (None means 'none').

  Raises:
    ConfigError: for a name not in ``COMPRESSIONS``.
  """
  if compression is None:
    return 'none'
  return HOROVOD_SCHEMA['compression'].validate(compression, path)


# ---------------------------------------------------------------------------
# Loss scaling

# The parameters of each loss-scaling algorithm (by its name in lower case)
# with their defaults; docs/math.md (loss scaling) states the rules they drive.
LOSS_SCALER_DEFAULTS = {
    'backoff': {'scale_min': 1.0, 'scale_max': 2.0 ** 14, 'step_factor': 2.0, 'step_window': 2000},
    'logmax': {'scale_min': 1.0, 'scale_max': 2.0 ** 14, 'log_max': 16.0, 'beta1': 0.99,
               'beta2': 0.999, 'overflow_std_dev': 3.09},
    'dynamic': {'initial_scale': 2.0 ** 15, 'growth_steps': 2000, 'multiplier': 2.0,
                'min_scale': 1.0},
}

# OpenSeq2Seq's automatic algorithms; 'dynamic' is Keras' rule.
AUTOMATIC_ALGOS = ('backoff', 'logmax')

_LOSS_SCALING_ALLOWED = "allowed: a positive number, 'Backoff', 'LogMax', 'dynamic'"


def algorithm_key(algorithm, allowed):
  """Returns the name ``algorithm`` in lower case after checking it is one of ``allowed``.

  Raises:
    ValueError: for a name not in ``allowed`` (any case), listing them.
  """
  key = algorithm.lower() if isinstance(algorithm, str) else None
  if key not in allowed:
    raise ValueError(f'algorithm: unknown loss scaling algorithm {algorithm!r}; '
                     f'allowed (any case): {", ".join(allowed)}')
  return key


def loss_scaler_params(algorithm, params=None, path='params'):
  """Checks the parameters of one loss-scaling algorithm; returns all of them, defaults filled in.

  The one check of these parameters: each scaler runs it when it is built,
  and the config layer (through :func:`check_loss_scaling`) before TensorFlow
  is imported.

  Args:
    algorithm: 'Backoff', 'LogMax' or 'dynamic', in any case.
    params: a dict of some of the algorithm's parameters (the keys of
      ``LOSS_SCALER_DEFAULTS``), or None for all defaults.
    path: the name of ``params`` in a message about its keys.

  Returns:
    A new dict holding every parameter of the algorithm, in the order of
    ``LOSS_SCALER_DEFAULTS``: scales and rates as floats, step counts as ints.

  Raises:
    ValueError: for an unknown algorithm; for ``params`` that is not a mapping
      or holds a key the algorithm does not take (naming the closest key and
      all of them); for a value of the wrong type or out of range, and for
      bounds in the wrong order (``scale_max`` < ``scale_min``,
      ``initial_scale`` < ``min_scale``).
  """
  key = algorithm_key(algorithm, tuple(LOSS_SCALER_DEFAULTS))
  if params is None:
    params = {}
  if not isinstance(params, dict):
    raise ValueError(f'{path}: expected a mapping, got {params!r}')
  what = 'dynamic loss scaling' if key == 'dynamic' else f'the {algorithm!r} algorithm'
  reject_unknown_keys(params, LOSS_SCALER_DEFAULTS[key], path, error=ValueError, what=what)
  return _VALUE_CHECKS[key]({**LOSS_SCALER_DEFAULTS[key], **params})


def _scale_range(params):
  """``scale_min`` and ``scale_max`` as floats, with 0 < scale_min <= scale_max."""
  scale_min = number('scale_min', params['scale_min'], positive=True)
  scale_max = number('scale_max', params['scale_max'], positive=True)
  if scale_max < scale_min:
    raise ValueError(f'scale_max: must be >= scale_min ({scale_min!r}), got {scale_max!r}')
  return {'scale_min': scale_min, 'scale_max': scale_max}


def _factor(name, value):
  """``value`` as a float > 1: the factor a scale grows and shrinks by."""
  factor = number(name, value)
  if factor <= 1:
    raise ValueError(f'{name}: must be > 1, got {value!r}')
  return factor


def _backoff_values(params):
  return {**_scale_range(params), 'step_factor': _factor('step_factor', params['step_factor']),
          'step_window': count('step_window', params['step_window'])}


def _logmax_values(params):
  values = _scale_range(params)
  values['log_max'] = number('log_max', params['log_max'])
  for name in ('beta1', 'beta2'):
    values[name] = number(name, params[name], minimum=0.0, below=1.0)
  values['overflow_std_dev'] = number('overflow_std_dev', params['overflow_std_dev'],
                                             minimum=0.0)
  return values


def _dynamic_values(params):
  values = {'initial_scale': number('initial_scale', params['initial_scale'], positive=True),
            'growth_steps': count('growth_steps', params['growth_steps']),
            'multiplier': _factor('multiplier', params['multiplier']),
            'min_scale': number('min_scale', params['min_scale'], positive=True)}
  if values['initial_scale'] < values['min_scale']:
    raise ValueError(f'initial_scale: must be >= min_scale ({values["min_scale"]!r}), '
                     f'got {params["initial_scale"]!r}')
  return values


_VALUE_CHECKS = {'backoff': _backoff_values, 'logmax': _logmax_values, 'dynamic': _dynamic_values}


def is_fixed_scale(loss_scaling):
  """Whether ``loss_scaling`` is a fixed scale: a finite real number > 0 (a bool is not)."""
  return (isinstance(loss_scaling, numbers.Real) and not isinstance(loss_scaling, bool)
          and math.isfinite(loss_scaling) and loss_scaling > 0)


def reject_params(params, loss_scaling):
  """Refuses ``loss_scaling_params`` given with a fixed scale or a scaler object, which take none."""
  if params:
    raise ValueError(f'loss_scaling_params: only used with Backoff, LogMax or dynamic loss scaling, '
                     f'got {params!r} with loss_scaling={loss_scaling!r}')


def check_loss_scaling(loss_scaling, params=None):
  """Checks ``loss_scaling`` and ``loss_scaling_params`` together, as ``optimize_loss`` takes them.

  Args:
    loss_scaling: a positive number (a fixed scale), or 'Backoff', 'LogMax'
      or 'dynamic' in any case.
    params: the ``loss_scaling_params`` (None: the algorithm's defaults).

  Returns:
    The algorithm's parameters with defaults filled in
    (:func:`loss_scaler_params`); {} for a fixed scale.

  Raises:
    ValueError: for any other ``loss_scaling``, for ``params`` given with a
      fixed scale, and for bad parameters.
  """
  if is_fixed_scale(loss_scaling):
    reject_params(params, loss_scaling)
    return {}
  key = loss_scaling.lower() if isinstance(loss_scaling, str) else None
  if key not in LOSS_SCALER_DEFAULTS:
    raise ValueError(f'loss_scaling: unknown value {loss_scaling!r}; {_LOSS_SCALING_ALLOWED}')
  # Backoff and LogMax keys are named as AutomaticLossScaler's ``params``.
  path = 'loss_scaling_params' if key == 'dynamic' else 'params'
  return loss_scaler_params(loss_scaling, params, path)
