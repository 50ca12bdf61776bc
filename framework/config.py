"""From a config file to a validated plain dict.

A run is described by a config file (OpenSeq2Seq layout) holding
``base_params`` and optionally ``train_params`` and ``eval_params``::

  raw = load_config_file('configs/resnet50_lars.py')
  cfg = validate(resolve(raw, 'train', ['optimizer_params.momentum=0.95']), registries)
  eval_cfg = validate(resolve(raw, 'eval', ['optimizer_params.momentum=0.95']), registries, 'eval')
  write_run_config(cfg, eval_cfg, os.path.join(cfg['logdir'], 'config.yaml'))

``resolve`` overlays the mode's params on the base params and applies the
command-line overrides; ``validate`` checks every key before anything is built
and fills in defaults; it calls the optimizer's and loss scaler's constructors
once, so that their own type and range checks answer as config errors
(nothing else here builds a TensorFlow object). Every mistake
raises :class:`ConfigError` with a one-line message that starts with the key
path, and no function modifies the dict it is given.
"""

import copy
import inspect
import math
import os
import re
import runpy
import sys
import traceback

import yaml

from core import precision
from core.params import ConfigError
from core.params import Param
from core.params import REQUIRED
from core.params import check_params
from core.params import non_negative
from core.params import positive
from core.params import reject_unknown_keys
from core.registry import UnknownNameError
from core.registry import closest

MODES = ('train', 'eval', 'train_eval', 'benchmark')
TOP_LEVEL_KEYS = ('base_params', 'train_params', 'eval_params')
YAML_EXTENSIONS = ('.yaml', '.yml')
CONFIG_EXTENSIONS = ('.py',) + YAML_EXTENSIONS

DTYPES = precision.DTYPE_NAMES  # Keras' policy names, and OpenSeq2Seq's mixed
LOSS_SCALING_ALGOS = ('Backoff', 'LogMax', 'dynamic')

# optimize_loss owns the summary names; the literal copy serves when the
# optimizers package cannot be imported (no TensorFlow, or while it is built).
try:
  from optimizers.optimizers import OPTIMIZER_SUMMARIES as SUMMARY_NAMES
except ImportError:
  SUMMARY_NAMES = ['learning_rate', 'gradients', 'gradient_norm', 'global_gradient_norm',
                   'variables', 'variable_norm', 'larc_summaries', 'loss_scale']

# lr_policy_params may give a duration in epochs; the trainer turns it into the
# step-valued argument of the policy with epochs_to_steps once it knows the
# number of steps per epoch.
EPOCH_KEYS = {'warmup_epochs': 'warmup_steps', 'decay_epochs': 'decay_steps',
              'begin_decay_at_epochs': 'begin_decay_at', 'boundary_epochs': 'boundaries'}
# ... or as a fraction of the run's length in updates (warmup_fraction: 0.1 is
# the first tenth of training), converted once the trainer knows that length.
FRACTION_KEYS = {'warmup_fraction': 'warmup_steps', 'decay_fraction': 'decay_steps',
                 'begin_decay_at_fraction': 'begin_decay_at', 'boundary_fractions': 'boundaries'}
DURATION_KEYS = {**EPOCH_KEYS, **FRACTION_KEYS}

# Arguments the framework passes itself; a config giving them would fight it.
_OPTIMIZER_SUPPLIED = {
    'learning_rate': 'the learning rate comes from the lr policy; set lr_policy_params.learning_rate'}
_LR_POLICY_SUPPLIED = {'global_step': 'the trainer passes the global step'}


# ---------------------------------------------------------------------------
# YAML

class _Loader(yaml.SafeLoader):
  """``yaml.SafeLoader`` that reads ``1e-3`` and ``5e4`` as floats.

  YAML 1.1, which PyYAML implements, wants a dot and a signed exponent
  (``1.0e-3``), so ``lr: 1e-3`` would otherwise be the string '1e-3'.
  """


_Loader.add_implicit_resolver(
    'tag:yaml.org,2002:float',
    re.compile(r'^(?:[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+'
               r'|[-+]?\.[0-9_]+[eE][-+]?[0-9]+)$'),
    list('-+0123456789.'))


def _load_yaml(text):
  return yaml.load(text, Loader=_Loader)


def _yaml_problem(exc):
  """Returns (line or None, problem) of a YAML error."""
  mark = getattr(exc, 'problem_mark', None)
  problem = getattr(exc, 'problem', None) or _one_line(str(exc))
  return (mark.line + 1 if mark is not None else None), problem


def _one_line(text):
  return ' '.join(str(text).split())


# ---------------------------------------------------------------------------
# Loading

def load_config_file(path):
  """Reads a config file.

  A ``.py`` config is executed, so it may compute values and hold objects
  (classes, functions, ``tf.float32``); a ``.yaml``/``.yml`` config is read
  with a safe loader and holds plain data.

  Args:
    path: the config file.

  Returns:
    ``{'base_params': dict, 'train_params': dict, 'eval_params': dict}``; the
    last two are ``{}`` when the file does not define them.

  Raises:
    ConfigError: the file is missing, has another extension, cannot be parsed
      or executed (the message gives ``file:line``), defines no
      ``base_params`` dict, or (YAML) has other top-level keys.
  """
  path = os.fspath(path)
  extension = os.path.splitext(path)[1].lower()
  if extension not in CONFIG_EXTENSIONS:
    raise ConfigError(f'{path}: unsupported config file extension {extension or "(none)"!r}; '
                      f'allowed: {", ".join(CONFIG_EXTENSIONS)}')
  if not os.path.isfile(path):
    raise ConfigError(f'{path}: config file not found')
  if extension == '.py':
    namespace = _run_python_config(path)
  else:
    namespace = _read_yaml_config(path)
  raw = {}
  for key in TOP_LEVEL_KEYS:
    value = namespace.get(key)
    if key == 'base_params' and value is None:
      raise ConfigError(f'{path}: defines no base_params dict')
    if value is None:
      value = {}
    if not isinstance(value, dict):
      raise ConfigError(f'{path}: {key} must be a dict, got {type(value).__name__}')
    raw[key] = value
  return raw


def _run_python_config(path):
  target = os.path.realpath(path)
  try:
    return runpy.run_path(path, run_name=_module_name(path))
  except SystemExit as exc:
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if os.path.realpath(frame.filename) == target]
    line = f':{lines[-1]}' if lines else ''
    raise ConfigError(f'{path}{line}: the config called sys.exit({exc.code!r}); a config defines '
                      'base_params (and train_params/eval_params), it does not exit') from None
  except SyntaxError as exc:
    if exc.filename and os.path.realpath(exc.filename) == target:
      line = f':{exc.lineno}' if exc.lineno else ''
      raise ConfigError(f'{path}{line}: {type(exc).__name__}: {exc.msg}') from None
    raise ConfigError(f'{path}: {type(exc).__name__}: {_one_line(exc)}') from None
  except Exception as exc:  # pylint: disable=broad-except
    # Point at the config's own line, not at the library the config called.
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if os.path.realpath(frame.filename) == target]
    line = f':{lines[-1]}' if lines else ''
    message = _one_line(exc)
    detail = f'{type(exc).__name__}: {message}' if message else type(exc).__name__
    raise ConfigError(f'{path}{line}: {detail}') from None


def _module_name(path):
  """The name objects defined in a Python config get as ``__module__``.

  ``configs/x.py`` run from the checkout gives ``configs.x``, so a function the
  config defines is written to the resolved config as an importable
  ``configs.x.function``.
  """
  relative = os.path.splitext(os.path.relpath(path))[0]
  if relative.startswith(os.pardir):
    return os.path.basename(relative)
  return relative.replace(os.sep, '.')


def _read_yaml_config(path):
  with open(path, encoding='utf-8') as f:
    text = f.read()
  try:
    data = _load_yaml(text)
  except yaml.YAMLError as exc:
    line, problem = _yaml_problem(exc)
    raise ConfigError(f'{path}{f":{line}" if line else ""}: {problem}') from None
  if data is None:
    data = {}
  if not isinstance(data, dict):
    raise ConfigError(f'{path}: expected a mapping with base_params, got {type(data).__name__}')
  for key in data:
    if key not in TOP_LEVEL_KEYS:
      guess = closest(key, TOP_LEVEL_KEYS)
      hint = f' (did you mean {guess}?)' if guess is not None else ''
      raise ConfigError(f'{path}: unknown top-level key {key!r}{hint}; '
                        f'allowed: {", ".join(TOP_LEVEL_KEYS)}')
  return data


# ---------------------------------------------------------------------------
# Overlays and overrides

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
      ``train_params`` on ``base_params``; ``eval`` overlays ``eval_params``.
    overrides: strings ``key.path=value`` applied in order. The value is read
      as YAML (``0.95``, ``1e-3``, ``null``, ``[1, 2]``, ``'{a: 1}'``) and
      replaces what was at the path (to change one key of a dict, name the key).
      A segment indexes a list when the target is a list
      (``data_layer_params.image_shape.0=32``); a missing dict on the way is
      created, and validation later rejects keys that do not exist. A path
      that starts with ``base_params``, ``train_params`` or ``eval_params``
      edits that part of the file before the overlay (``--set
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
  overlay_key = 'eval_params' if mode == 'eval' else 'train_params'
  overlay = raw.get(overlay_key) or {}
  if not isinstance(overlay, dict):
    raise ConfigError(f'{overlay_key}: expected a dict, got {type(overlay).__name__}')
  config = merge(base, overlay)
  for text in overrides:
    _apply_override(config, text)
  return config


def resolve_modes(raw, mode, overrides=()):
  """Returns ``{'train': config or None, 'eval': config or None}`` for a run in ``mode``.

  ``train_eval`` gives both: the eval config is ``base_params`` with
  ``eval_params`` and the same overrides. ``benchmark`` gives a train config.
  """
  _check_mode(mode)
  train = resolve(raw, mode, overrides) if mode != 'eval' else None
  evaluation = resolve(raw, 'eval', overrides) if mode in ('eval', 'train_eval') else None
  return {'train': train, 'eval': evaluation}


def _check_mode(mode):
  if mode not in MODES:
    guess = closest(mode, MODES)
    hint = f' (did you mean {guess!r}?)' if guess is not None else ''
    raise ConfigError(f'mode: unknown mode {mode!r}{hint}; allowed: {", ".join(MODES)}')


def parse_override(text):
  """Splits ``key.path=value`` into (list of path segments, parsed value)."""
  if not isinstance(text, str) or '=' not in text:
    raise ConfigError(f'override {text!r}: expected key.path=value')
  path, value_text = text.split('=', 1)
  segments = path.strip().split('.')
  if not all(segments):
    raise ConfigError(f'override {text!r}: empty key in {path!r}')
  try:
    value = _load_yaml(value_text)
  except yaml.YAMLError as exc:
    raise ConfigError(f'override {text!r}: cannot read value {value_text!r}: '
                      f'{_yaml_problem(exc)[1]}') from None
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


# ---------------------------------------------------------------------------
# Schema

class _NameOrObject(Param):
  """A name looked up in a registry, or, from a Python config, the object itself."""

  def __init__(self, what, accepts, default=REQUIRED, doc=''):
    super().__init__(object, default, doc=doc)
    self.what = what
    self.accepts = accepts

  def validate(self, value, path):
    if isinstance(value, str) or self.accepts(value):
      return value
    raise ConfigError(f'{path}: expected a registered name or a {self.what}, got {value!r} '
                      f'({type(value).__name__})')


class _DictParam(Param):
  """A mapping checked against its own schema (None allowed when it is the default)."""

  def __init__(self, schema, default=None, doc=''):
    super().__init__(dict, default, doc=doc)
    self.schema = schema

  def validate(self, value, path):
    value = super().validate(value, path)
    return None if value is None else check_params(value, self.schema, path)


class _ListParam(Param):
  """A list whose items each satisfy ``item`` (a Param)."""

  def __init__(self, item, default=None, doc=''):
    super().__init__((list, tuple), default, doc=doc)
    self.item = item

  def validate(self, value, path):
    value = super().validate(value, path)
    if value is None:
      return None
    return [self.item.validate(v, f'{path}.{i}') for i, v in enumerate(value)]


class _LossScalingParam(Param):
  """A fixed positive scale, or the name of an automatic algorithm."""

  def validate(self, value, path):
    if isinstance(value, str):
      return Param(str, REQUIRED, choices=LOSS_SCALING_ALGOS, case_insensitive=True).validate(value, path)
    return Param((float, str), REQUIRED, check=positive).validate(value, path)


class _DTypeParam(Param):
  """A dtype name; a ``tf.DType`` from a Python config becomes its name."""

  def validate(self, value, path):
    return super().validate(_dtype_name(value), path)


def _dtype_name(value):
  # TensorFlow is only consulted when a config already imported it.
  tf = sys.modules.get('tensorflow')
  if tf is not None and isinstance(value, tf.dtypes.DType):
    return value.name
  return value


def _at_least_one(value):
  return None if value >= 1 else 'must be >= 1'


def _finite_positive(value):
  return None if math.isfinite(value) and value > 0 else 'must be a finite number > 0'


def _seed(value):
  return None if 0 <= value < 2 ** 32 else 'must be in [0, 2**32)'


def _probability(value):
  return None if 0 <= value < 1 else 'must be in [0, 1)'


LARC_SCHEMA = {
    'larc_eta': Param(float, REQUIRED, check=positive, doc='trust coefficient eta'),
    'larc_mode': Param(str, 'clip', choices=('clip', 'scale'), doc='clip the lr at the base lr, or scale it'),
    'min_update': Param(float, 1e-7, check=non_negative, doc='lower bound of the LARC factor'),
    'epsilon': Param(float, 1e-7, check=non_negative, doc='added to the gradient norm'),
    'skip_list': _ListParam(Param(str, REQUIRED), None,
                            doc='variables whose name or path contains one of these are not adapted'),
    'exclude_from_layer_adaptation': _ListParam(Param(str, REQUIRED), None,
                                                doc='the same as skip_list (the LARS/LAMB name)'),
}

REGULARIZER_SCHEMA = {
    'scale': Param(float, REQUIRED, check=non_negative, doc='L2 weight-decay coefficient'),
}

HOROVOD_SCHEMA = {
    'compression': Param(str, 'none', choices=('none', 'fp16'), doc='gradient compression for allreduce'),
}

PRECISE_BN_SCHEMA = {
    'num_batches': Param(int, 20, check=positive, doc='training batches averaged'),
    'batch_size': Param(int, None, check=positive,
                        doc='images per batch (default: batch_size_per_gpu)'),
    'before_each_eval': Param(bool, True, doc='also recompute before every evaluation'),
}

AGN_SCHEMA = {
    'optimizer': Param(str, REQUIRED, doc='the optimizer AGN wraps, e.g. Momentum'),
    'communication_period': Param(int, 10, check=positive, doc='local steps between center updates'),
}

_OPTIONAL_INT = (int, type(None))

SCHEMA = {
    'model': _NameOrObject('callable', callable, doc='registered model name, or the builder itself'),
    'model_params': Param(dict, {}, doc="checked against the model's PARAMS"),
    'data_layer': _NameOrObject('class', inspect.isclass, doc='registered data layer name, or the class'),
    'data_layer_params': Param(dict, {}, doc="checked against the data layer's PARAMS"),
    'batch_size_per_gpu': Param(int, REQUIRED, check=positive, doc='examples per replica per micro-batch'),
    'num_epochs': Param(float, None, check=_finite_positive,
                        doc='training length in epochs (or max_steps)'),
    'max_steps': Param(int, None, check=positive, doc='training length in updates (or num_epochs)'),
    'optimizer': _NameOrObject('class', inspect.isclass, doc='registered optimizer name, or the class'),
    'optimizer_params': Param(dict, {}, doc="keyword arguments of the optimizer, except learning_rate"),
    'lr_policy': _NameOrObject('callable', callable, 'fixed_lr', doc='registered lr policy, or the function'),
    'lr_policy_params': Param(dict, {}, doc='arguments of the lr policy; *_epochs keys allowed'),
    'larc_params': _DictParam(LARC_SCHEMA, None, doc='enables LARC when given'),
    'loss_scaling': _LossScalingParam((float, str), 1.0,
                                      doc="a fixed scale, or 'Backoff', 'LogMax', 'dynamic'"),
    'loss_scaling_params': Param(dict, None, doc='parameters of the automatic loss scaler'),
    'dtype': _DTypeParam(str, 'float32', choices=DTYPES, doc='compute precision'),
    'max_grad_norm': Param(float, None, check=positive, doc='clip gradients to this global norm'),
    'iter_size': Param(int, 1, check=_at_least_one, doc='micro-batches accumulated per update'),
    'regularizer': Param(str, None, choices=('l2',), doc='weight decay added to the loss'),
    'regularizer_params': _DictParam(REGULARIZER_SCHEMA, None, doc='scale of the regularizer'),
    'summaries': _ListParam(Param(str, REQUIRED, choices=SUMMARY_NAMES),
                            ['learning_rate', 'global_gradient_norm', 'loss_scale'],
                            doc='optimizer summaries to write'),
    'save_checkpoint_steps': Param(_OPTIONAL_INT, 1000, check=positive, doc='None: no checkpoints'),
    'num_checkpoints': Param(int, 5, check=positive, doc='checkpoints kept'),
    'eval_steps': Param(int, None, check=positive, doc='steps between evaluations in train_eval'),
    'print_loss_steps': Param(int, 100, check=positive, doc='steps between loss log lines'),
    'save_summaries_steps': Param(_OPTIONAL_INT, 100, check=positive, doc='None: no summaries'),
    'logdir': Param(str, None, doc='run directory; None: nothing written'),
    'random_seed': Param(int, 0, check=_seed, doc='seed of Python, NumPy and TensorFlow'),
    'use_horovod': Param(bool, False, doc='one process per device, gradients allreduced'),
    'horovod_params': _DictParam(HOROVOD_SCHEMA, {}, doc='allreduce options'),
    'agn_params': Param(dict, None, doc='with optimizer: AGN, the wrapped optimizer and period'),
    'label_smoothing': Param(float, 0.0, check=_probability, doc='for the classification loss'),
    'precise_bn': _DictParam(PRECISE_BN_SCHEMA, None,
                             doc='recompute batch-norm moving statistics as a plain average '
                                 'over training batches after training'),
    'deterministic': Param(bool, False, doc='enable TensorFlow op determinism'),
    'jit_compile': Param(bool, False, doc='XLA-compile the train step'),
    'bench_warmup_steps': Param(int, 5, check=non_negative, doc='steps not timed in benchmark mode'),
}


# ---------------------------------------------------------------------------
# Validation

def validate(config, registries, mode='train'):
  """Checks a resolved config before anything is built.

  Args:
    config: a dict from :func:`resolve`.
    registries: ``{'model': Registry, 'data_layer': Registry, 'optimizer':
      Registry, 'lr_policy': Registry}`` in which names are looked up.
    mode: 'train' or 'eval', the view ``config`` is; an eval view skips what
      only training batches must satisfy (ghost batch groups).

  Returns:
    A new dict holding every key of ``SCHEMA``, defaults filled in, including
    defaults of ``model_params``/``data_layer_params`` declared in the
    object's ``PARAMS``. Names stay names and ``tf.DType`` becomes its name.

  Raises:
    ConfigError: naming the key path of the first mistake.
  """
  if not isinstance(config, dict):
    raise ConfigError(f'config: expected a mapping, got {type(config).__name__}')
  config = copy.deepcopy(config)
  reject_unknown_keys(config, SCHEMA, '')
  result = {}
  for key, spec in SCHEMA.items():
    if key in config:
      value = config[key]
    elif spec.required:
      raise ConfigError(f'{key}: required key is missing ({spec.doc})')
    else:
      value = copy.deepcopy(spec.default)
    result[key] = spec.validate(value, key)

  given = [key for key in ('num_epochs', 'max_steps') if result[key] is not None]
  if len(given) != 1:
    raise ConfigError(f'num_epochs, max_steps: give exactly one of them, got '
                      f'{"both" if given else "neither"}')

  for kind in ('model', 'data_layer'):
    schema = getattr(_lookup(result, kind, registries), 'PARAMS', None)
    if schema is not None:
      result[f'{kind}_params'] = check_params(result[f'{kind}_params'], schema, f'{kind}_params')

  optimizer = _lookup(result, 'optimizer', registries)
  if getattr(optimizer, 'WRAPS_OPTIMIZER', False):
    # A wrapper (AGN) takes optimizer_params for the optimizer it wraps.
    result['agn_params'] = check_params(result['agn_params'], AGN_SCHEMA, 'agn_params')
    inner = {'optimizer': result['agn_params']['optimizer']}
    optimizer = _lookup(inner, 'optimizer', registries)
    if getattr(optimizer, 'WRAPS_OPTIMIZER', False):
      raise ConfigError('agn_params.optimizer: must be a plain optimizer, not another wrapper')
  elif result['agn_params'] is not None:
    raise ConfigError('agn_params: only used with optimizer: AGN')
  _check_arguments(result['optimizer_params'], optimizer, 'optimizer_params', _OPTIMIZER_SUPPLIED)
  if inspect.isclass(optimizer):
    check_by_constructing(optimizer, result['optimizer_params'], 'optimizer_params',
                          learning_rate=_TRIAL_LEARNING_RATE)
  _check_loss_scaling(result['loss_scaling'], result['loss_scaling_params'])

  policy = _lookup(result, 'lr_policy', registries)
  lr_params = result['lr_policy_params']
  if 'learning_rate' in lr_params:
    Param(float, REQUIRED, check=positive).validate(lr_params['learning_rate'],
                                                    'lr_policy_params.learning_rate')
  elif isinstance(result['lr_policy'], str):
    raise ConfigError('lr_policy_params.learning_rate: required key is missing (base learning rate)')
  for key in EPOCH_KEYS:
    if key in lr_params:
      _to_steps(lr_params[key], 1, f'lr_policy_params.{key}')
  for key in FRACTION_KEYS:
    if key in lr_params:
      _to_steps(lr_params[key], 1, f'lr_policy_params.{key}', fraction=True)
  _check_arguments(lr_params, policy, 'lr_policy_params', _LR_POLICY_SUPPLIED, epoch_keys=True)

  ghost = result['model_params'].get('ghost_batch_size')
  if ghost is not None and mode != 'eval':
    batches = {'batch_size_per_gpu': result['batch_size_per_gpu']}
    if result['precise_bn'] is not None and result['precise_bn']['batch_size'] is not None:
      batches['precise_bn.batch_size'] = result['precise_bn']['batch_size']
    for key, size in batches.items():
      if size % ghost:
        raise ConfigError(f'model_params.ghost_batch_size: {ghost} must divide {key} ({size})')
  if result['regularizer'] is not None and result['regularizer_params'] is None:
    raise ConfigError(f'regularizer_params: required when regularizer is {result["regularizer"]!r} '
                      f'(give regularizer_params.scale)')
  return result


# Only used to try the optimizer's constructor on the config's other arguments.
_TRIAL_LEARNING_RATE = 0.1


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
    message = _one_line(exc)
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


def _check_loss_scaling(loss_scaling, params):
  """Builds the loss scaler once, so unknown keys and bad ranges are config errors."""
  try:
    from optimizers.automatic_loss_scaler import make_loss_scaler  # pylint: disable=import-outside-toplevel
  except ImportError:
    return
  if params is None:
    return

  def loss_scaler(**kwargs):
    return make_loss_scaler(loss_scaling, kwargs)

  check_by_constructing(loss_scaler, params, 'loss_scaling_params',
                        who=f'loss_scaling {loss_scaling!r}')


def check_warmup(lr_policy_params, steps_per_epoch, total_steps):
  """Rejects a warm-up longer than training, for any ``warmup*`` duration in steps or epochs.

  (A ``warmup_fraction`` is at most the whole run by construction.)

  Args:
    lr_policy_params: the validated ``lr_policy_params``.
    steps_per_epoch: updates per epoch.
    total_steps: the run's length in updates.

  Raises:
    ConfigError: naming the key, its length in steps and the run's.
  """
  in_steps = epochs_to_steps(lr_policy_params, steps_per_epoch, total_steps)
  for key, value in in_steps.items():
    if not (key.startswith('warmup') and key.endswith('steps')) or isinstance(value, bool) \
        or not isinstance(value, (int, float)):
      continue
    if value > total_steps:
      given = next((k for k, v in DURATION_KEYS.items() if v == key and k in lr_policy_params),
                   key)
      raise ConfigError(f'lr_policy_params.{given}: the warm-up ({value} steps) is longer than '
                        f'training ({total_steps} steps); shorten it or train longer')


def _lookup(config, key, registries):
  """Returns the object ``config[key]`` names (or is)."""
  value = config[key]
  if not isinstance(value, str):
    return value
  registry = registries.get(key)
  if registry is None:
    raise ValueError(f'validate: no {key!r} registry given')
  try:
    return registry[value]
  except UnknownNameError as exc:
    raise ConfigError(f'{key}: {exc}') from None


def _check_arguments(params, target, path, supplied, epoch_keys=False):
  """Checks the keys of ``params`` against the arguments ``target`` accepts.

  Only checks: the params are passed as given (epoch keys converted by the
  trainer), nothing is added from the signature.
  """
  arguments = _keyword_arguments(target)
  if arguments is None:
    return
  names, required, accepts_any = arguments
  who = getattr(target, '__name__', type(target).__name__)
  allowed = [n for n in names if n not in supplied]
  if epoch_keys:
    allowed += [alias for alias, step in DURATION_KEYS.items() if step in allowed]
  given = {}
  for key in params:
    if key in supplied:
      raise ConfigError(f'{path}.{key}: not allowed, {supplied[key]}')
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


def epochs_to_steps(lr_policy_params, steps_per_epoch, total_steps=None):
  """Turns the epoch- and fraction-valued keys of ``DURATION_KEYS`` into their step-valued keys.

  ``{'warmup_epochs': 5, 'boundary_epochs': [30, 60]}`` with 100 steps per
  epoch gives ``{'warmup_steps': 500, 'boundaries': [3000, 6000]}``;
  ``{'warmup_fraction': 0.25}`` in a run of 1000 steps gives
  ``{'warmup_steps': 250}``. Steps are rounded to the nearest integer (halves
  up); other keys are copied as they are, in their place.

  Args:
    lr_policy_params: the validated ``lr_policy_params`` (not modified).
    steps_per_epoch: a positive number.
    total_steps: the run's length in updates; needed for ``*_fraction`` keys.

  Returns:
    A new dict.

  Raises:
    ConfigError: when two keys give the same duration, or a value is not a
      number (a fraction in [0, 1]) or a list of them.
    ValueError: for a steps_per_epoch that is not positive, or fraction keys
      without total_steps.
  """
  if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, (int, float)) \
      or steps_per_epoch <= 0:
    raise ValueError(f'steps_per_epoch must be a positive number, got {steps_per_epoch!r}')
  result = {}
  for key, value in (lr_policy_params or {}).items():
    step_key = DURATION_KEYS.get(key)
    if step_key is None:
      result[key] = copy.deepcopy(value)
      continue
    others = [k for k in lr_policy_params if k != key and DURATION_KEYS.get(k, k) == step_key]
    if others:
      raise ConfigError(f'lr_policy_params: give {key} or {others[0]}, not both')
    path = f'lr_policy_params.{key}'
    if key in FRACTION_KEYS:
      if total_steps is None:
        raise ValueError(f'{path}: a fraction of the run needs total_steps')
      result[step_key] = _to_steps(value, total_steps, path, fraction=True)
    else:
      result[step_key] = _to_steps(value, steps_per_epoch, path)
  return result


def _to_steps(value, unit, path, fraction=False):
  """``value`` (a number or list of numbers, in epochs or fractions of the run) × ``unit``, rounded."""
  upper = 1 if fraction else math.inf

  def convert(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= upper:
      what = 'a fraction in [0, 1]' if fraction else 'a number >= 0'
      raise ConfigError(f'{path}: expected {what} or a list of them, got {value!r}')
    return int(math.floor(x * unit + 0.5))

  if isinstance(value, (list, tuple)):
    return [convert(v) for v in value]
  return convert(value)


# ---------------------------------------------------------------------------
# Output

def to_yaml(config):
  """Returns ``config`` as YAML text with sorted keys.

  Objects from a Python config are written as their dotted name
  (``module.qualname``), a ``tf.DType`` as its name, tuples as lists, so a
  Python config and the YAML config that spells those names give the same text.

  Raises:
    ConfigError: for a value that has no such spelling (an instance of some
      class), naming its key path.
  """
  return yaml.safe_dump(_to_plain(config, ''), default_flow_style=False, sort_keys=True)


def write_config(config, path):
  """Writes :func:`to_yaml` of ``config`` to ``path`` (atomically), creating its directory."""
  write_text(to_yaml(config), path)


def run_config(train, evaluation=None):
  """The config file whose train and eval views are the resolved ``train`` and ``evaluation``.

  Keys equal in both views go to ``base_params``; a key that differs goes, with
  its whole value, to ``train_params`` and ``eval_params``. So
  ``resolve(run_config(t, e), 'train')`` is ``t`` and ``resolve(..., 'eval')``
  is ``e``: a run directory's ``config.yaml`` re-runs and re-evaluates the run.

  Args:
    train: the validated train config, or None for an eval-only run.
    evaluation: the validated eval config, or None (the eval view is then the
      train view).

  Returns:
    ``{'base_params': ..., 'train_params': ..., 'eval_params': ...}`` of plain
    values (as :func:`to_yaml` spells them).
  """
  views = [_to_plain(v, '') for v in (train, evaluation) if v is not None]
  if len(views) == 1:
    return {'base_params': views[0], 'train_params': {}, 'eval_params': {}}
  train, evaluation = views
  result = {'base_params': {}, 'train_params': {}, 'eval_params': {}}
  for key in sorted(set(train) | set(evaluation)):
    if key in train and key in evaluation and train[key] == evaluation[key]:
      result['base_params'][key] = train[key]
      continue
    if key in train:
      result['train_params'][key] = train[key]
    if key in evaluation:
      result['eval_params'][key] = evaluation[key]
  return result


def run_config_yaml(train, evaluation=None):
  """:func:`run_config` as YAML text (a file ``--config`` reads)."""
  return yaml.safe_dump(run_config(train, evaluation), default_flow_style=False, sort_keys=False)


def write_run_config(train, evaluation, path):
  """Writes :func:`run_config_yaml` to ``path``."""
  write_text(run_config_yaml(train, evaluation), path)


def write_text(text, path):
  """Writes ``text`` to ``path`` atomically (no partial file on failure), creating its directory."""
  from framework.rundir import write_text_atomically  # pylint: disable=import-outside-toplevel
  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  write_text_atomically(path, text)


def _to_plain(value, path):
  if isinstance(value, dict):
    return {k: _to_plain(v, f'{path}.{k}' if path else str(k)) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_to_plain(v, f'{path}.{i}') for i, v in enumerate(value)]
  if value is None or isinstance(value, (str, bool, int, float)):
    return value
  name = _dtype_name(value)
  if isinstance(name, str):
    return name
  if type(value).__module__ == 'numpy' and hasattr(value, 'item'):
    return value.item()
  if callable(value) and hasattr(value, '__module__') and hasattr(value, '__qualname__'):
    return f'{value.__module__}.{value.__qualname__}'
  raise ConfigError(f'{path or "config"}: cannot write {value!r} ({type(value).__name__}) as YAML; '
                    f'use a name, number, string, list or mapping')


def format_error(exc):
  """The one line the command line prints for ``exc``: ``error: ...``."""
  message = _one_line(exc)
  if not isinstance(exc, ConfigError):
    message = f'{type(exc).__name__}: {message}' if message else type(exc).__name__
  return f'error: {message}'
