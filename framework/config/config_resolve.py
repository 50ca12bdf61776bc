"""One mode's config from a config file's sections: the overlay and the command-line overrides.

``resolve`` overlays a mode's params (``train_params`` or ``eval_params``) on
``base_params`` (OpenSeq2Seq's nested update, :func:`merge`) and applies the
``--set key.path=value`` overrides, each value read as YAML. ``durations_given``
tells which of the run's lengths a config or its overrides state. Nothing here
imports TensorFlow; framework.config.config_file reads the files.
"""

import copy
import re

import yaml

from core.params import ConfigError
from core.registry import closest
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
