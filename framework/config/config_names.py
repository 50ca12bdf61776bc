"""What a config's names stand for: the step of a config's loading that resolves its names.

A config names its model, data layer, optimizer, lr policy and batch policy
by a registered name or an import path (``"package.module:name"``).
:func:`resolve_names` looks every one of them up once, after the top-level
keys are checked and before the rest of the validation, and returns plain
dicts: for each name, whether its registry holds it (the one-line refusal to
raise where the validation checks that name, so that a config's first mistake
is still the one reported) and the facts it declares (``PARAMS``,
``TRAIN_EXAMPLES``, ``WRAPS_OPTIMIZER``, ``ARGUMENTS``, the weight decay it
keeps, whether a model takes the config's ``initializer``). The validation
reads those dicts and never calls back into the registries, and the
registries never call the validation: a config goes from its file to its
names to its checks in one direction.

A lazy entry answers from its registration without being imported where it
can (:func:`declared`); the object itself is imported only when asked for
(:func:`lookup`, by the checks that need TensorFlow). ``registries`` maps
each key to its :class:`core.registry.Registry`.
"""

import sys

from core import batch_policy
from core.params import ConfigError
from core.registry import is_import_path

# The facts each name of a config is asked for, before anything is imported.
OPTIMIZER_FACTS = ('WRAPS_OPTIMIZER', 'ARGUMENTS', 'OWN_WEIGHT_DECAY', 'OWN_DECAY_ARGUMENTS')
NAME_FACTS = {'model': ('PARAMS', 'TAKES_INITIALIZER'), 'data_layer': ('PARAMS', 'TRAIN_EXAMPLES'),
              'optimizer': OPTIMIZER_FACTS, 'lr_policy': ('ARGUMENTS',), 'batch_policy': ()}


def resolve_names(config, registries):
  """Every name of ``config`` looked up once: ``{key: resolved}``, plain dicts.

  Each ``resolved`` holds ``value`` (what the config gives), ``error`` (the
  exception its name check raises, or None) and, for a name that resolves,
  each fact of ``NAME_FACTS`` it declares (None where it declares none). Two
  keys more: ``agn_optimizer``, the optimizer AGN's ``agn_params`` names
  (None unless the optimizer wraps one and ``agn_params.optimizer`` is a
  name), and ``optimizer_entry``, the one of the two that takes
  ``optimizer_params`` (None where that is not known yet: the wrapper's
  ``agn_params`` are refused by the validation first).

  A name's check is made here, but its refusal is raised by the validation
  where it checks the name, so the order of a config's mistakes is kept; an
  import path is imported here (TensorFlow first), as its check imports it.

  Args:
    config: a config whose top-level keys are checked (``schema.check_keys``).
    registries: ``{'model': Registry, ...}``; ``batch_policy`` defaults to
      ``core.batch_policy.BATCH_POLICIES``.
  """
  registries = dict(registries)
  registries.setdefault('batch_policy', batch_policy.BATCH_POLICIES)
  names = {key: _resolved(config, key, registries, facts) for key, facts in NAME_FACTS.items()}
  names['agn_optimizer'] = names['optimizer_entry'] = None
  if not names['optimizer']['error'] and names['optimizer']['WRAPS_OPTIMIZER']:
    agn = config['agn_params']
    if isinstance(agn, dict) and isinstance(agn.get('optimizer'), str):
      names['agn_optimizer'] = names['optimizer_entry'] = _resolved(
          {'optimizer': agn['optimizer']}, 'optimizer', registries, OPTIMIZER_FACTS)
  elif not names['optimizer']['error']:
    names['optimizer_entry'] = names['optimizer']
  return names


def _resolved(config, key, registries, facts):
  """``config[key]`` resolved: its value, its name check's error (or None) and its facts."""
  try:
    check_name(config, key, registries)
  except (ConfigError, ValueError) as error:
    return {'value': config[key], 'error': error}
  return {'value': config[key], 'error': None,
          **{fact: declared(config, key, registries, fact) for fact in facts}}


def resolve_owners(config, registries):
  """The owners of a validated config's names, imported, for the checks only they can make.

  Imports TensorFlow first (its start-up banner held back), then each owner
  that the checks need, in their order: the model and the data layer where
  their registration declares no ``PARAMS`` (their ``PARAMS`` are then the
  object's), the optimizer that takes ``optimizer_params`` (AGN's inner one),
  and the lr policy where its registration declares no ``ARGUMENTS``.

  Returns:
    A plain dict: ``model_PARAMS`` and ``data_layer_PARAMS`` (a schema, None
    where the registration declared it or the object declares none, or the
    key absent where it was declared), ``optimizer`` (the object),
    ``optimizer_name`` (as the config gives it), ``optimizer_ARGUMENTS``
    (what it declares, read once it is imported), ``lr_policy`` (the
    object; the key absent where its registration declares its arguments)
    and ``batch_policy`` (a policy of the user's own; absent for a built-in one).
  """
  from framework.engines import tf_import  # pylint: disable=import-outside-toplevel
  tf_import.import_tensorflow()
  owners = {}
  for kind in ('model', 'data_layer'):
    if declared(config, kind, registries, 'PARAMS') is None:
      owners[f'{kind}_PARAMS'] = getattr(lookup(config, kind, registries), 'PARAMS', None)
  entry = optimizer_entry(config, registries)
  owners['optimizer'] = lookup(entry, 'optimizer', registries)
  owners['optimizer_name'] = entry['optimizer']
  owners['optimizer_ARGUMENTS'] = declared(entry, 'optimizer', registries, 'ARGUMENTS')
  if declared(config, 'lr_policy', registries, 'ARGUMENTS') is None:
    owners['lr_policy'] = lookup(config, 'lr_policy', registries)
  if batch_policy.built_in_name(config['batch_policy']) is None:
    registries = {'batch_policy': batch_policy.BATCH_POLICIES, **registries}
    owners['batch_policy'] = lookup(config, 'batch_policy', registries)
  return owners


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
