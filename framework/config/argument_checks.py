"""Checking a config's arguments against the class or function that takes them.

``optimizer_params`` are keyword arguments of the optimizer class and
``lr_policy_params`` of the lr policy: their names are checked against the
signature, and the optimizer is constructed once so that its own type and
range checks answer as one-line config errors. Reading a signature or
constructing means importing the owner, so these checks run once TensorFlow
may be loaded; every other config check comes first and needs no TensorFlow,
the names included where the registry declares them (``ARGUMENTS``).
``loss_scaling_params`` are checked the same way, by the loss scalers' own
check, which needs no TensorFlow and so runs with the first checks.
"""

import inspect
import re

from core.params import ConfigError
from core.registry import closest
from framework.config.config_file import one_line
from framework.config.schema import DURATION_KEYS
from optimizers import registry
from optimizers import validation


def reject_supplied(params, path, supplied):
  """Refuses a key of ``params`` that the framework passes itself (``supplied``: key -> why)."""
  for key in params:
    if key in supplied:
      raise ConfigError(f'{path}.{key}: not allowed, {supplied[key]}')


def check_by_constructing(factory, params, path, who=None, **supplied):
  """Calls ``factory(**supplied, **params)`` once so its own checks speak as config errors.

  Types and ranges are the constructor's to define (an optimizer checks its
  momentum, a loss scaler its bounds); its TypeError or ValueError becomes one
  line that starts with the key path (``optimizer_params.momentum: ...`` when
  the message names a key, else ``optimizer_params: ...``).

  Raises:
    ConfigError: when the constructor rejects the arguments.
  """
  try:
    factory(**supplied, **(params or {}))
  except (TypeError, ValueError) as exc:
    message = one_line(exc)
    params = params or {}
    named = [key for key in params if re.search(rf'\b{re.escape(str(key))}\b', message)]
    if not named:  # "could not convert string to float: 'abc'" names the value
      named = [key for key, value in params.items()
               if isinstance(value, str) and repr(value) in message]
    if not named:  # the key that fails on its own
      named = [key for key in params if _rejects(factory, supplied, {key: params[key]})]
    where = f'{path}.{named[0]}' if len(named) == 1 else path
    who = who or getattr(factory, '__name__', type(factory).__name__)
    raise ConfigError(f'{where}: rejected by {who}: {message}') from None


def _rejects(factory, supplied, params):
  try:
    factory(**supplied, **params)
  except (TypeError, ValueError):
    return True
  return False


def check_loss_scaling(loss_scaling, params):
  """Checks ``loss_scaling_params`` with the loss scalers' own check, which needs no TensorFlow.

  ``optimizers.validation.check_loss_scaling`` is the check every scaler runs
  when it is built (unknown keys, types, ranges, ``scale_min`` <=
  ``scale_max``); its ValueError becomes one line that starts with the key
  path, as a constructor's would.

  Raises:
    ConfigError: naming the key path of the first mistake.
  """
  if params is None:
    return

  def loss_scaler(**kwargs):
    return validation.check_loss_scaling(loss_scaling, kwargs)

  check_by_constructing(loss_scaler, params, 'loss_scaling_params',
                        who=f'loss_scaling {loss_scaling!r}')


def check_arguments(params, target, path, supplied, epoch_keys=False):
  """Checks the keys of ``params`` against the arguments ``target`` accepts.

  ``target`` is the class or function itself, whose signature is read, or
  the :class:`optimizers.registry.Arguments` its registration declares
  (which needs nothing imported). Only checks: the params are passed as given
  (epoch keys converted by the trainer), nothing is added from the signature.
  """
  if isinstance(target, registry.Arguments):
    names, required, accepts_any, who = target.names, target.required, False, target.who
  else:
    arguments = _keyword_arguments(target)
    if arguments is None:
      return
    names, required, accepts_any = arguments
    who = getattr(target, '__name__', type(target).__name__)
  allowed = [n for n in names if n not in supplied]
  if epoch_keys:
    allowed += [alias for alias, step in DURATION_KEYS.items() if step in allowed]
  given = {}
  reject_supplied(params, path, supplied)
  for key in params:
    argument = DURATION_KEYS.get(key, key) if epoch_keys else key
    if argument in given:
      raise ConfigError(f'{path}: give {given[argument]} or {key}, not both')
    if argument not in names and not accepts_any:
      guess = closest(key, allowed)
      hint = f' (did you mean {path}.{guess}?)' if guess is not None else ''
      raise ConfigError(f'{path}.{key}: unknown argument of {who}{hint}; '
                        f'accepted: {", ".join(sorted(allowed)) or "none"}')
    given[argument] = key
  for name in required:
    if name not in given and name not in supplied:
      alias = [a for a, s in DURATION_KEYS.items() if s == name] if epoch_keys else []
      alternative = f' (or give {path}.{alias[0]})' if alias else ''
      raise ConfigError(f'{path}.{name}: required argument of {who} is missing{alternative}')


_KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _keyword_arguments(target):
  """Returns (names, required names, accepts any name) of ``target``'s keyword arguments.

  A class that takes ``**kwargs`` is taken to pass them on to its base classes
  (Keras optimizers do, and the base raises on unknown ones), so the names its
  bases' ``__init__`` accept are accepted too; a class with no base ``__init__``
  and a function with ``**kwargs`` accept any name. Returns None when the
  signature cannot be read.
  """
  try:
    signature = inspect.signature(target)
  except (TypeError, ValueError):
    return None
  parameters = list(signature.parameters.values())
  names = [p.name for p in parameters if p.kind in _KEYWORD_KINDS]
  required = [p.name for p in parameters if p.kind in _KEYWORD_KINDS and p.default is p.empty]
  accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
  if accepts_any and inspect.isclass(target):
    inherited = _base_init_names(target)
    if inherited is not None:
      names = list(dict.fromkeys(names + inherited))
      accepts_any = False
  return names, required, accepts_any


def _base_init_names(cls):
  """Keyword names of the base classes' ``__init__`` reached through ``**kwargs``, or None."""
  names = None
  for base in cls.__mro__[1:]:
    if base is object:
      break
    init = vars(base).get('__init__')
    if init is None:
      continue
    try:
      parameters = list(inspect.signature(init).parameters.values())[1:]  # drops self
    except (TypeError, ValueError):
      continue
    names = (names or []) + [p.name for p in parameters if p.kind in _KEYWORD_KINDS]
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
      break
  return names
