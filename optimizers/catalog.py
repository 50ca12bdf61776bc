"""The optimizers ``optimize_loss`` and configs name, and ``make_optimizer``, which builds them.

``OPTIMIZER_CLS_NAMES`` maps the names a config or ``optimize_loss`` may give
(any case) to Keras 3 optimizer classes; ``make_optimizer`` builds one from a
name, a class or an instance, and builds AGN around the optimizer named in a
config's ``agn_params``.
"""

import keras

from optimizers.registry import OPTIMIZER_CLS_NAMES


def make_optimizer(optimizer, optimizer_params, learning_rate, agn_params=None):
  """Creates the optimizer named or given by ``optimizer``.

  Args:
    optimizer: a name in OPTIMIZER_CLS_NAMES, an optimizer class, or an instance.
    optimizer_params: keyword arguments of the class (not ``learning_rate``); for
      a wrapper (AGN), of the optimizer it wraps.
    learning_rate: the initial learning rate.
    agn_params: for a wrapper (AGN): ``{'optimizer': the name of the optimizer it
      wraps, 'communication_period': τ}`` (a config's ``agn_params``).

  Returns:
    A Keras 3 optimizer, or an ``AGNOptimizer`` around one.
  """
  if isinstance(optimizer, str):
    optimizer = OPTIMIZER_CLS_NAMES[optimizer]
  if is_instance(optimizer):
    return optimizer
  if getattr(optimizer, 'WRAPS_OPTIMIZER', False):
    if agn_params is None:
      raise ValueError(f'{optimizer.__name__} wraps another optimizer: pass an instance, e.g. '
                       'AGNOptimizer(MomentumOptimizer(...)), or in a config use optimizer: AGN '
                       'with agn_params: {optimizer: Momentum}')
    inner = make_optimizer(agn_params['optimizer'], optimizer_params, learning_rate)
    return optimizer(inner, communication_period=agn_params.get('communication_period', 10))
  if not callable(optimizer):
    raise ValueError(f'optimizer must be a name ({", ".join(OPTIMIZER_CLS_NAMES)}), a class '
                     f'or an instance, got {optimizer!r}')
  try:
    return optimizer(learning_rate=learning_rate, **optimizer_params)
  except TypeError as exc:
    raise ValueError(f'optimizer_params do not fit {getattr(optimizer, "__name__", optimizer)}: '
                     f'{exc}') from None


def is_instance(optimizer):
  """Whether ``optimizer`` is built already: a Keras optimizer, or a wrapper of one (AGN)."""
  return isinstance(optimizer, keras.optimizers.Optimizer) or (
      not isinstance(optimizer, type) and getattr(optimizer, 'WRAPS_OPTIMIZER', False))


class _Named:
  """A variable's shape, and its name (without TensorFlow's ``:0``) as its path."""

  def __init__(self, variable):
    self.shape = variable.shape
    self.path = variable.name.split(':')[0]


class Muon(keras.optimizers.Muon):
  """``keras.optimizers.Muon``; a variable without a Keras path is chosen for by its name."""

  def _should_use_adamw(self, variable):
    if not hasattr(variable, 'path'):
      variable = _Named(variable)
    return super()._should_use_adamw(variable)
