"""What a config's names stand for: the object a key names and the facts it declares.

A config names its model, data layer, optimizer and lr policy by a registered
name or an import path (``"package.module:name"``). These helpers answer from a
lazy entry's registration without importing it where they can (:func:`declared`),
and import the object only when asked for it (:func:`lookup`). ``registries``
maps each key to its :class:`core.registry.Registry`.
"""

import sys

from core.params import ConfigError
from core.registry import is_import_path


def optimizer_entry(config, registries):
  """``{'optimizer': ...}`` naming the optimizer that takes ``optimizer_params`` (AGN's inner one)."""
  if declared(config, 'optimizer', registries, 'WRAPS_OPTIMIZER'):
    return {'optimizer': config['agn_params']['optimizer']}
  return config


def declared(config, key, registries, fact):
  """What the object ``config[key]`` names (or is) declares as ``fact`` (``PARAMS``, ``WRAPS_OPTIMIZER``).

  A lazily registered entry answers from its registration, without being
  imported; an object, or an entry already loaded, from its attribute.
  """
  value = config[key]
  if not isinstance(value, str):
    return getattr(value, fact, None)
  registry = registry_of(key, registries)
  facts = registry.facts(value)
  if fact in facts:
    return facts[fact]
  return getattr(registry[value], fact, None) if registry.is_loaded(value) else None


def lookup(config, key, registries):
  """Returns the object ``config[key]`` names (or is), importing it."""
  value = config[key]
  if not isinstance(value, str):
    return value
  check_name(config, key, registries)
  return registry_of(key, registries)[value]


def check_name(config, key, registries):
  """Refuses a name ``config[key]`` that its registry does not hold.

  A registered name imports nothing; an import path (``"package.module:name"``,
  the user's own code) is imported here, TensorFlow first and quietly, since
  such a module almost always imports it.
  """
  value = config[key]
  if isinstance(value, str):
    registry = registry_of(key, registries)
    if is_import_path(value) and 'tensorflow' not in sys.modules:
      from framework.engines import tf_import  # pylint: disable=import-outside-toplevel
      tf_import.import_tensorflow()
    if value not in registry:
      raise ConfigError(f'{key}: {registry.unknown_message(value)}')


def registry_of(key, registries):
  """The registry of ``key``; a ValueError (the caller's mistake, not the config's) if none."""
  registry = registries.get(key)
  if registry is None:
    raise ValueError(f'validate: no {key!r} registry given')
  return registry
