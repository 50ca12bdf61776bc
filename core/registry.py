"""Name registries for models, data layers, optimizers and learning-rate policies.

Configs name objects by string (``model: resnet_cifar``); a registry turns the
name into the object. A registry is a read-only mapping, raises on a duplicate
registration, and answers an unknown name with the list of known ones and the
closest spelling.
"""

import collections.abc
import difflib


class UnknownNameError(ValueError):
  """Raised when a registry is asked for a name it does not hold."""


def closest(name, choices):
  """Returns the choice spelled most like ``name``, or None when none is close."""
  matches = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
  if not matches:
    lowered = {str(c).lower(): c for c in choices}
    return lowered.get(str(name).lower())
  return matches[0]


class Registry(collections.abc.Mapping):
  """A mapping from names to objects, filled with :meth:`register`.

  Args:
    kind: what the registry holds, used in error messages ("model", "optimizer").
    case_insensitive: look names up regardless of case (registration keeps the
      spelling used for listing).
  """

  def __init__(self, kind, case_insensitive=False):
    self.kind = kind
    self._case_insensitive = case_insensitive
    self._items = {}
    self._keys = {}

  def _key(self, name):
    return name.lower() if self._case_insensitive else name

  def register(self, name=None, obj=None):
    """Registers ``obj`` under ``name``; usable as a decorator.

    ``@REGISTRY.register()`` uses the object's ``__name__``;
    ``@REGISTRY.register('name')`` or ``REGISTRY.register('name', obj)`` name it.

    Raises:
      ValueError: when the name is already registered.
    """
    def add(target):
      key_name = name if name is not None else target.__name__
      key = self._key(key_name)
      if key in self._keys:
        raise ValueError(f'{self.kind} {key_name!r} is registered twice')
      self._keys[key] = key_name
      self._items[key_name] = target
      return target

    if obj is not None:
      return add(obj)
    return add

  def get(self, name, default=None):
    key = self._key(name) if isinstance(name, str) else None
    if key in self._keys:
      return self._items[self._keys[key]]
    return default

  def __getitem__(self, name):
    if isinstance(name, str):
      key = self._key(name)
      if key in self._keys:
        return self._items[self._keys[key]]
    raise UnknownNameError(self.unknown_message(name))

  def unknown_message(self, name):
    known = ', '.join(sorted(self._items))
    guess = closest(name, self._items)
    hint = f' (did you mean {guess!r}?)' if guess is not None else ''
    return f'unknown {self.kind} {name!r}{hint}; known: {known}'

  def resolve(self, name_or_obj):
    """Returns the registered object for a name, or the argument itself when it is not a string."""
    if isinstance(name_or_obj, str):
      return self[name_or_obj]
    return name_or_obj

  def __contains__(self, name):
    return isinstance(name, str) and self._key(name) in self._keys

  def __iter__(self):
    return iter(self._items)

  def __len__(self):
    return len(self._items)

  def __repr__(self):
    return f'Registry({self.kind!r}, {sorted(self._items)})'
