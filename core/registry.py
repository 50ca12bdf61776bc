"""Name registries for models, data layers, optimizers and learning-rate policies.

Configs name objects by string (``model: resnet_cifar``); a registry turns the
name into the object. A registry is a read-only mapping, raises on a duplicate
registration, and answers an unknown name with the list of known ones and the
closest spelling.

An entry may be registered lazily, by name and ``"module:attribute"``
(:meth:`Registry.register_lazy`): its module is imported on the first lookup
of the name. Names, ``in``, listing and the unknown-name message never import
anything, so a config's names are checked before TensorFlow is loaded; facts
given with a lazy entry (its parameter schema, whether it wraps an optimizer)
are read without loading it either.
"""

import collections.abc
import difflib
import importlib


class UnknownNameError(ValueError):
  """Raised when a registry is asked for a name it does not hold."""


def closest(name, choices):
  """Returns the choice spelled most like ``name``, or None when none is close."""
  matches = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
  if not matches:
    lowered = {str(c).lower(): c for c in choices}
    return lowered.get(str(name).lower())
  return matches[0]


def load_attribute(target):
  """Imports ``"package.module:attribute"`` and returns the attribute (dots allowed after ':')."""
  module_name, _, attribute = target.partition(':')
  if not module_name or not attribute:
    raise ValueError(f'expected "module:attribute", got {target!r}')
  value = importlib.import_module(module_name)
  for part in attribute.split('.'):
    value = getattr(value, part)
  return value


class _Lazy:
  """A registered entry not imported yet: where it lives."""

  def __init__(self, target):
    self.target = target

  def __repr__(self):
    return f'<lazy {self.target}>'


class Registry(collections.abc.Mapping):
  """A mapping from names to objects, filled with :meth:`register` or :meth:`register_lazy`.

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
    self._facts = {}

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
      self._add(name if name is not None else target.__name__, target, {})
      return target

    if obj is not None:
      return add(obj)
    return add

  def register_lazy(self, name, target, **facts):
    """Registers the object at ``target`` (``"module:attribute"``) under ``name`` without importing it.

    The module is imported on the first lookup of ``name``. ``facts`` are
    keyword values about the entry that are needed before it is loaded (a
    ``PARAMS`` schema, ``WRAPS_OPTIMIZER=True``); :meth:`facts` returns them.

    Raises:
      ValueError: when the name is already registered, or ``target`` has no ':'.
    """
    if ':' not in target:
      raise ValueError(f'{self.kind} {name!r}: expected "module:attribute", got {target!r}')
    self._add(name, _Lazy(target), facts)

  def _add(self, name, target, facts):
    key = self._key(name)
    if key in self._keys:
      raise ValueError(f'{self.kind} {name!r} is registered twice')
    self._keys[key] = name
    self._items[name] = target
    self._facts[name] = dict(facts)

  def facts(self, name):
    """The facts given with ``name``'s registration (``{}`` for none); loads nothing.

    Raises:
      UnknownNameError: for a name that is not registered.
    """
    return dict(self._facts[self._name(name)])

  def is_loaded(self, name):
    """Whether ``name``'s object has been imported (always True for an eager registration)."""
    return not isinstance(self._items[self._name(name)], _Lazy)

  def _name(self, name):
    """The registered spelling of ``name``; raises UnknownNameError."""
    if isinstance(name, str):
      key = self._key(name)
      if key in self._keys:
        return self._keys[key]
    raise UnknownNameError(self.unknown_message(name))

  def get(self, name, default=None):
    if name not in self:
      return default
    return self[name]

  def __getitem__(self, name):
    name = self._name(name)
    item = self._items[name]
    if isinstance(item, _Lazy):
      item = load_attribute(item.target)
      self._items[name] = item
    return item

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
