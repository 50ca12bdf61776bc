"""The settings the optimizers package owns, declared and checked without TensorFlow.

``optimize_loss`` and the config layer check these settings with the one
validator here: LARC's ``larc_params``, the allreduce ``compression``, AGN's
``agn_params``, and the names of the loss-scaling algorithms and of the
summaries ``optimize_loss`` can write. The config layer reports a mistake as
the :class:`core.params.ConfigError` these raise (a one-line message starting
with the key path); ``optimize_loss`` raises the same check's ValueError.
"""

from core.params import REQUIRED
from core.params import ConfigError
from core.params import ListParam
from core.params import Param
from core.params import check_params
from core.params import non_negative
from core.params import positive

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
