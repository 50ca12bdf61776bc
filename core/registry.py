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

A name that holds a ``':'`` and is not registered is an import path,
``"package.module:name"``: a user's own model, data layer, optimizer or lr
policy, imported on its first lookup (:func:`import_path_error` says in one
line why one cannot be). Its facts are the object's own attributes.
"""

import collections.abc
import difflib
import importlib
import os
import sys
import traceback


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


def is_import_path(name):
  """Whether ``name`` is spelled as ``"module:attribute"`` (a string with one ':' between two parts)."""
  if not isinstance(name, str):
    return False
  module_name, colon, attribute = name.partition(':')
  return bool(colon and module_name.strip() and attribute.strip() and ':' not in attribute)


def _shadowing_package(module_name):
  """The package of this checkout that a user's module of the same top-level name loses to, or None.

  Only when a module of that name is on the path too (the user's ``models.py``).
  """
  top = module_name.split('.', 1)[0]
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  if not os.path.isdir(os.path.join(here, top)):
    return None
  for entry in sys.path:
    entry = os.path.abspath(entry or os.curdir)
    if entry != here and (os.path.isfile(os.path.join(entry, top + '.py'))
                          or os.path.isdir(os.path.join(entry, top))):
      return top
  return None


def import_path_error(target):
  """Why ``"module:attribute"`` cannot be imported, in one line; None when it can.

  The import itself runs here: a module that imports is kept in
  ``sys.modules`` as usual.
  """
  module_name, _, attribute = target.partition(':')
  try:
    module = importlib.import_module(module_name)
  except Exception as exc:  # pylint: disable=broad-except
    detail = ' '.join(str(exc.msg if isinstance(exc, SyntaxError) else exc).split())
    if _not_found(exc, module_name):
      return (f'cannot import module {module_name!r} ({type(exc).__name__}: {detail}); put its '
              "directory on the path: the config file's own directory is, and so are the "
              'directories of the import_paths key')
    # The module was found and failed as it ran (a SyntaxError, a missing package it
    # imports, any error of its own): the path is not the problem, its line is.
    return (f'module {module_name!r} raised {type(exc).__name__} on import{where_raised(exc)}: '
            f'{detail}')
  value = module
  for part in attribute.split('.'):
    if not hasattr(value, part):
      where = getattr(module, '__file__', None) or module_name
      clash = _shadowing_package(module_name)
      hint = (f"; {clash!r} is also a package of the framework, which comes first on the path: "
              'rename your module' if clash is not None and value is module else '')
      return f'module {module_name!r} ({where}) has no attribute {attribute!r}{hint}'
    value = getattr(value, part)
  return None


def _not_found(exc, module_name):
  """Whether ``exc`` says that ``module_name`` itself (or a package above it) is not on the path."""
  if not isinstance(exc, ModuleNotFoundError) or exc.name is None:
    return False
  return module_name == exc.name or module_name.startswith(exc.name + '.')


def where_raised(exc):
  """`` (file.py line N)``: the line of the user's code that raised ``exc``.

  The deepest frame outside the Python installation (the standard library and
  site-packages): the user's own line even when a package it called raised;
  else the deepest frame outside the import system.
  """
  if isinstance(exc, SyntaxError) and exc.filename:
    return f' ({exc.filename} line {exc.lineno})'
  frames = [f for f in traceback.extract_tb(exc.__traceback__)
            if not f.filename.startswith('<frozen') and 'importlib' not in f.filename]
  installed = tuple(os.path.join(os.path.realpath(p), '') for p in {sys.prefix, sys.base_prefix})
  own = [f for f in frames if not os.path.realpath(f.filename).startswith(installed)]
  frames = own or frames
  return f' ({frames[-1].filename} line {frames[-1].lineno})' if frames else ''


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

    An import path has none: what it declares is read from the object.

    Raises:
      UnknownNameError: for a name that is not registered.
    """
    if self._is_own_import_path(name):
      return {}
    return dict(self._facts[self._name(name)])

  def is_loaded(self, name):
    """Whether ``name``'s object has been imported (always True for an eager registration).

    An import path is imported by this question (so that its facts can be read).
    """
    if self._is_own_import_path(name):
      self[name]  # pylint: disable=pointless-statement
      return True
    return not isinstance(self._items[self._name(name)], _Lazy)

  def is_own_code(self, name):
    """Whether ``name`` is an import path of the user's own code rather than a registered name."""
    return self._is_own_import_path(name)

  def _is_own_import_path(self, name):
    """Whether ``name`` is an import path rather than a registered name."""
    return is_import_path(name) and self._key(name) not in self._keys

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
    if self._is_own_import_path(name):
      problem = import_path_error(name)
      if problem is not None:
        raise UnknownNameError(f'{self.kind} {name!r}: {problem}')
      return load_attribute(name)
    name = self._name(name)
    item = self._items[name]
    if isinstance(item, _Lazy):
      item = load_attribute(item.target)
      self._items[name] = item
    return item

  def unknown_message(self, name):
    if self._is_own_import_path(name):
      return f'{self.kind} {name!r}: {import_path_error(name) or "cannot be imported"}'
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
    """Whether ``name`` is registered, or is an import path that imports (which this imports)."""
    if self._is_own_import_path(name):
      return import_path_error(name) is None
    return isinstance(name, str) and self._key(name) in self._keys

  def __iter__(self):
    return iter(self._items)

  def __len__(self):
    return len(self._items)

  def __repr__(self):
    return f'Registry({self.kind!r}, {sorted(self._items)})'
