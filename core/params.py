"""Declared parameters and their validation.

Every configurable object (a model, a data layer, the trainer itself) declares
the parameters it accepts as a dict ``name -> Param``. ``check_params`` checks a
user's dict against it and returns a new dict with defaults filled in: unknown
keys, wrong types, bad choices and missing required keys raise
:class:`ConfigError` with a one-line message naming the key path, what was
given and what is allowed. The caller's dict is never modified.
"""

import copy
import os

from core.registry import closest


class ConfigError(ValueError):
  """A configuration mistake; the message is one line meant for the user.

  Attributes:
    path: the key path the message starts with, when known.
    problem: what is wrong at ``path``, when known: ``'unknown'`` (a key not
      declared), ``'missing'`` (a required key) or ``'invalid'`` (a value).
      A library that raises its own wording for the same check reads these.
  """

  def __init__(self, message, path=None, problem=None):
    super().__init__(message)
    self.path = path
    self.problem = problem


class _Required:
  def __repr__(self):
    return 'REQUIRED'


REQUIRED = _Required()

_TYPE_NAMES = {bool: 'a boolean', int: 'an integer', float: 'a number', str: 'a string',
               list: 'a list', dict: 'a mapping', type(None): 'null'}


def type_name(types):
  """Describes a type or a tuple of types in words, for error messages."""
  if not isinstance(types, tuple):
    types = (types,)
  names = [_TYPE_NAMES.get(t, getattr(t, '__name__', str(t))) for t in types]
  return ' or '.join(dict.fromkeys(names))


def is_instance(value, types):
  """isinstance with the config conventions: an int is a valid float, a bool is not an int."""
  if not isinstance(types, tuple):
    types = (types,)
  if isinstance(value, bool):
    return bool in types or object in types
  if isinstance(value, int) and float in types:
    return True
  return isinstance(value, types)


class Param:
  """One declared parameter.

  Args:
    types: a type or tuple of accepted types (``object`` accepts anything,
      ``callable`` accepts any callable).
    default: the value when the key is absent, or ``REQUIRED``.
    choices: when given, the value must be one of them (strings compare
      case-insensitively when ``case_insensitive``).
    check: optional ``f(value) -> str or None``; a returned string is the
      reason the value is rejected ("must be positive").
    doc: one line shown in documentation.
  """

  def __init__(self, types, default=None, choices=None, check=None, doc='',
               case_insensitive=False):
    self.types = types
    self.default = default
    self.choices = choices
    self.check = check
    self.doc = doc
    self.case_insensitive = case_insensitive

  @property
  def required(self):
    return self.default is REQUIRED

  def validate(self, value, path):
    """Returns ``value`` when valid; raises ConfigError naming ``path`` otherwise."""
    if self.types is callable:
      if not callable(value):
        raise ConfigError(f'{path}: expected a callable, got {value!r}', path, 'invalid')
    elif not is_instance(value, self.types):
      if not (value is None and self.default is None):
        raise ConfigError(f'{path}: expected {type_name(self.types)}, got {value!r} '
                          f'({type(value).__name__})', path, 'invalid')
    if self.choices is not None and value is not None and isinstance(value, (str, int, float)):
      if self.case_insensitive and isinstance(value, str):
        ok = value.lower() in [str(c).lower() for c in self.choices]
      else:
        ok = value in self.choices
      if not ok:
        guess = closest(value, self.choices)
        hint = f' (did you mean {guess!r}?)' if guess is not None else ''
        allowed = ', '.join(repr(c) for c in self.choices)
        raise ConfigError(f'{path}: {value!r} is not allowed{hint}; allowed: {allowed}', path,
                          'invalid')
    if self.check is not None and value is not None:
      reason = self.check(value)
      if reason:
        raise ConfigError(f'{path}: {reason}, got {value!r}', path, 'invalid')
    return value


def positive(value):
  return None if value > 0 else 'must be > 0'


def non_negative(value):
  return None if value >= 0 else 'must be >= 0'


def fraction_below_one(value):
  """A share, a rate of dropout, a momentum or a decay: in [0, 1)."""
  return None if 0 <= value < 1 else 'must be in [0, 1)'


def reject_unknown_keys(params, allowed, path, error=ConfigError, what=None):
  """Raises ``error`` for the first key of ``params`` not in ``allowed``.

  The message names the key path, the closest allowed key and all of them:
  ``path.key: unknown key (did you mean path.other?); allowed keys: ...``
  (``key: ...`` when ``path`` is empty; ``unknown key for <what>`` when given).
  """
  prefix = f'{path}.' if path else ''
  for key in params:
    if key not in allowed:
      guess = closest(key, allowed)
      hint = f' (did you mean {prefix}{guess}?)' if guess is not None else ''
      owner = f' for {what}' if what else ''
      names = ', '.join(sorted(allowed)) or 'none'
      message = f'{prefix}{key}: unknown key{owner}{hint}; allowed keys: {names}'
      if issubclass(error, ConfigError):
        raise error(message, f'{prefix}{key}', 'unknown')
      raise error(message)


def check_params(params, schema, path):
  """Validates ``params`` against ``schema`` and fills in defaults.

  Args:
    params: the user's dict (None means empty).
    schema: dict ``name -> Param``.
    path: the key path of ``params`` in the config, e.g. ``model_params``.

  Returns:
    A new dict holding every declared key.

  Raises:
    ConfigError: for an unknown key (with the closest known key), a wrong type
      or value, or a missing required key.
  """
  if params is None:
    params = {}
  if not isinstance(params, dict):
    raise ConfigError(f'{path}: expected a mapping, got {params!r}', path, 'invalid')
  reject_unknown_keys(params, schema, path)
  result = {}
  for key, spec in schema.items():
    if key in params:
      result[key] = spec.validate(params[key], f'{path}.{key}')
    elif spec.required:
      raise ConfigError(f'{path}.{key}: required key is missing ({spec.doc or type_name(spec.types)})',
                        f'{path}.{key}', 'missing')
    else:
      result[key] = copy.deepcopy(spec.default)
  for key, spec in schema.items():
    if isinstance(spec, PathParam):
      result[key] = spec.absolute(result[key], result)
  return result


class PathParam(Param):
  """A file, directory or glob on this machine; a relative one is made absolute.

  A run directory's ``config.yaml`` then names the same data from any working
  directory. Relative paths are taken from the working directory, unless
  ``relative_to`` names another key of the same params that is given (a glob
  inside ``data_dir``): then the path stays relative to it. URLs
  (``gs://...``) and ``None`` are kept as they are.

  Args:
    relative_to: the key of a directory this path is relative to when given.
    Other arguments: as :class:`Param`, its type ``str``.
  """

  def __init__(self, default=None, relative_to=None, doc='', check=None):
    super().__init__(str, default, check=check, doc=doc)
    self.relative_to = relative_to

  def absolute(self, value, params):
    """``value`` made absolute (see the class docstring); ``params``: the checked params it is in."""
    if not isinstance(value, str) or not value or '://' in value:
      return value
    if self.relative_to is not None and params.get(self.relative_to) is not None:
      return value
    return os.path.abspath(os.path.expanduser(value))


class DictParam(Param):
  """A mapping checked against its own schema (None allowed when it is the default)."""

  def __init__(self, schema, default=None, doc=''):
    super().__init__(dict, default, doc=doc)
    self.schema = schema

  def validate(self, value, path):
    value = super().validate(value, path)
    return None if value is None else check_params(value, self.schema, path)


class ListParam(Param):
  """A list whose items each satisfy ``item`` (a Param)."""

  def __init__(self, item, default=None, doc=''):
    super().__init__((list, tuple), default, doc=doc)
    self.item = item

  def validate(self, value, path):
    value = super().validate(value, path)
    if value is None:
      return None
    return [self.item.validate(v, f'{path}.{i}') for i, v in enumerate(value)]
