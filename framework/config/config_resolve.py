"""One mode's config from a config file's sections, and what its names stand for.

``resolve`` overlays a mode's params (``train_params`` or ``eval_params``) on
``base_params`` (OpenSeq2Seq's nested update, :func:`merge`) and applies the
``--set key.path=value`` overrides, each value read as YAML. ``durations_given``
tells which of the run's lengths a config or its overrides state. Nothing here
imports TensorFlow; framework.config.config_file reads the files.

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

import copy
import re
import sys

import yaml

from core import batch_policy
from core.params import ConfigError
from core.registry import closest
from core.registry import is_import_path
from framework.config.config_file import INFER_KEY
from framework.config.config_file import MODE_TABLE
from framework.config.config_file import MODES
from framework.config.config_file import READING_MODES
from framework.config.config_file import TOP_LEVEL_KEYS
from framework.config.config_file import load_yaml
from framework.config.config_file import yaml_problem


def merge(base, overlay):
  """Returns ``base`` updated by ``overlay``: dicts merge key by key, other values replace.

  This is OpenSeq2Seq's nested update. Neither argument is modified.
  """
  result = copy.deepcopy(base)
  for key, value in overlay.items():
    if isinstance(value, dict) and isinstance(result.get(key), dict):
      result[key] = merge(result[key], value)
    else:
      result[key] = copy.deepcopy(value)
  return result


def resolve(raw, mode, overrides=()):
  """Builds the config of one mode.

  Args:
    raw: what :func:`load_config_file` returns.
    mode: one of ``MODES``. ``train``, ``train_eval`` and ``benchmark`` overlay
      ``train_params`` on ``base_params``; ``eval`` and ``export`` overlay
      ``eval_params``; ``infer`` ``eval_params`` and then ``infer_params``.
    overrides: strings ``key.path=value`` applied in order. The value is read
      as YAML (``0.95``, ``1e-3``, ``null``, ``[1, 2]``, ``'{a: 1}'``) and
      replaces what was at the path (to change one key of a dict, name the key).
      A segment indexes a list when the target is a list
      (``data_layer_params.image_shape.0=32``); a missing dict on the way is
      created, and validation later rejects keys that do not exist. A path
      that starts with ``base_params``, ``train_params``, ``eval_params`` or
      ``infer_params`` edits that part of the file before the overlay (``--set
      eval_params.batch_size_per_gpu=1000`` changes evaluation only).

  Returns:
    A new dict; ``raw`` is not modified.

  Raises:
    ConfigError: for an unknown mode, a ``raw`` without a ``base_params`` dict,
      or a malformed override (named in the message).
  """
  _check_mode(mode)
  if isinstance(overrides, str):
    overrides = [overrides]
  overrides = list(overrides or ())
  durations = durations_given(overrides)
  sections = [t for t in overrides if isinstance(t, str) and t.split('.', 1)[0] in TOP_LEVEL_KEYS]
  if sections:
    raw = copy.deepcopy(raw)
    for key in TOP_LEVEL_KEYS:
      if raw.get(key) is None:
        raw[key] = {}
    for text in sections:
      _apply_override(raw, text)
    overrides = [t for t in overrides if t not in sections]
  base = raw.get('base_params')
  if not isinstance(base, dict):
    raise ConfigError(f'base_params: expected a dict, got {type(base).__name__}')
  config = base
  for overlay_key in overlay_keys(mode):
    overlay = raw.get(overlay_key) or {}
    if not isinstance(overlay, dict):
      raise ConfigError(f'{overlay_key}: expected a dict, got {type(overlay).__name__}')
    config = merge(config, overlay)
  for text in overrides:
    _apply_override(config, text)
  if (config.get('lr_scaling') is not None and _sets_learning_rate(overrides)
      and not any(t.startswith('lr_scaling') for t in overrides)):
    # A rate given on the command line replaces the config's rule of the global batch.
    config['lr_scaling'] = None
  if len(durations) == 1 and config.get(durations[0]) is not None:
    # A run length given on the command line replaces the config's other one.
    config[DURATIONS[1 - DURATIONS.index(durations[0])]] = None
  return config


def overlay_keys(mode):
  """The sections overlaid on ``base_params`` in ``mode``, in order.

  Training modes take ``train_params``; eval and export ``eval_params``;
  infer ``eval_params`` and then ``infer_params`` (OpenSeq2Seq's section of
  infer, here read over the eval view, whose data layer infer reads).
  """
  if mode == 'infer':
    return ('eval_params', INFER_KEY)
  return ('eval_params',) if mode in READING_MODES else ('train_params',)


def infer_section(raw, overrides=()):
  """The config file's ``infer_params`` with the overrides that reach it, as a run directory records it.

  ``--set infer_params.key=value`` edits it; an override of the whole view
  (``--set batch_size_per_gpu=8``) applies to it where it holds that key, as
  :func:`resolve` applies the override after the overlay. So the eval view
  of the run with this section over it is the infer view of the file.

  Returns:
    A new dict, or None when the file has none and no override gives one.
  """
  holder = {INFER_KEY: copy.deepcopy(raw.get(INFER_KEY))}
  for text in overrides:
    head = str(text).split('=', 1)[0].split('.', 1)[0].strip()
    if head == INFER_KEY:
      if holder[INFER_KEY] is None:
        holder[INFER_KEY] = {}
      _apply_override(holder, text)
    elif (head not in TOP_LEVEL_KEYS and isinstance(holder[INFER_KEY], dict)
          and head in holder[INFER_KEY]):
      _apply_override(holder[INFER_KEY], text)
  return holder[INFER_KEY]


# The two ways to give a run's length; a config gives one of them.
DURATIONS = ('num_epochs', 'max_steps')


def durations_given(overrides):
  """The run lengths of ``DURATIONS`` that ``overrides`` give a value other than null.

  ``max_steps=30``, ``train_params.max_steps=30`` and ``base_params.max_steps=30``
  all give ``max_steps`` (an ``eval_params`` one does not: evaluation has no length).

  Returns:
    A tuple of the keys, in the order of ``DURATIONS``.
  """
  given = set()
  for text in overrides:
    path, _, value = str(text).partition('=')
    head, _, rest = path.strip().partition('.')
    key = rest if head in TOP_LEVEL_KEYS else path.strip()
    if key not in DURATIONS or head in ('eval_params', INFER_KEY):
      continue
    try:
      null = load_yaml(value) is None
    except yaml.YAMLError:
      null = False  # the override itself reports its value
    if null:
      given.discard(key)
    else:
      given.add(key)
  return tuple(key for key in DURATIONS if key in given)


def _sets_learning_rate(overrides):
  """Whether an override gives ``lr_policy_params.learning_rate`` (alone or in the whole dict)."""
  for text in overrides:
    path, _, value = text.partition('=')
    path = path.strip()
    if path == 'lr_policy_params.learning_rate':
      return True
    if path == 'lr_policy_params':
      try:
        parsed = yaml.safe_load(value)
      except yaml.YAMLError:
        continue
      if isinstance(parsed, dict) and 'learning_rate' in parsed:
        return True
  return False


def resolve_modes(raw, mode, overrides=()):
  """Returns ``{'train': config or None, 'eval': config or None}`` for a run in ``mode``.

  ``train_eval`` and ``critical_batch`` give both: the eval config is
  ``base_params`` with ``eval_params`` and the same overrides. ``benchmark``
  gives a train config, ``eval`` and ``export`` an eval config.
  """
  _check_mode(mode)
  views = MODE_TABLE[mode].views
  train = resolve(raw, mode, overrides) if 'train' in views else None
  evaluation = resolve(raw, 'eval', overrides) if 'eval' in views else None
  if 'infer' in views:  # the eval view with OpenSeq2Seq's infer_params over it
    evaluation = resolve(raw, mode, overrides)
  return {'train': train, 'eval': evaluation}


def _check_mode(mode):
  if mode not in MODES:
    guess = closest(mode, MODES)
    hint = f' (did you mean {guess!r}?)' if guess is not None else ''
    raise ConfigError(f'mode: unknown mode {mode!r}{hint}; allowed: {", ".join(MODES)}')


# Values of punctuation alone that YAML reads as what a user means by them: an empty
# list or mapping, null, an empty string.
_YAML_PUNCTUATION = ('[]', '{}', '~', "''", '""')


def override_value(text):
  """The value of ``--set key=text``: YAML, but a value of punctuation alone is that string.

  ``,`` ``;`` ``|`` ``-`` ``#`` ``:`` or a space are what a user gives as a
  delimiter, and mean something else to YAML (a parse error, a block scalar,
  a list, a comment): they are read as the string given. ``[]``, ``{}``,
  ``~`` and a quoted empty string stay YAML's; an empty value is null.

  Raises:
    yaml.YAMLError: for other text that is not YAML.
  """
  if text and not any(c.isalnum() for c in text) and text.strip() not in _YAML_PUNCTUATION:
    return text
  return load_yaml(text)


def parse_override(text):
  """Splits ``key.path=value`` into (list of path segments, parsed value; see :func:`override_value`)."""
  if not isinstance(text, str) or '=' not in text:
    raise ConfigError(f'override {text!r}: expected key.path=value')
  path, value_text = text.split('=', 1)
  segments = path.strip().split('.')
  if not all(segments):
    raise ConfigError(f'override {text!r}: empty key in {path!r}')
  try:
    value = override_value(value_text)
  except yaml.YAMLError as exc:
    raise ConfigError(f'override {text!r}: cannot read value {value_text!r}: '
                      f'{yaml_problem(exc)[1]}') from None
  return segments, value


def _apply_override(config, text):
  segments, value = parse_override(text)
  node = config
  for depth, segment in enumerate(segments):
    where = '.'.join(segments[:depth])
    if isinstance(node, list):
      if not re.fullmatch('[0-9]+', segment):
        raise ConfigError(f'override {text!r}: {where} is a list, {segment!r} is not an index')
      key = int(segment)
      if key >= len(node):
        raise ConfigError(f'override {text!r}: index {key} out of range for {where} '
                          f'(length {len(node)})')
    elif isinstance(node, dict):
      key = segment
    else:
      raise ConfigError(f'override {text!r}: {where} is {node!r} ({type(node).__name__}), '
                        f'it has no key {segment!r}')
    if depth == len(segments) - 1:
      node[key] = value
    else:
      if isinstance(node, dict) and node.get(key) is None:
        # An absent or null mapping on the way (larc_params: null) is created.
        node[key] = {}
      node = node[key]


# --- the config's names ------------------------------------------------------------------



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
