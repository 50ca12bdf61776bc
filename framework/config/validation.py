"""From a config file to a validated plain dict.

A run is described by a config file (OpenSeq2Seq layout) holding
``base_params`` and optionally ``train_params`` and ``eval_params``::

  raw = config_file.load_config_file('configs/resnet50_lars.py')
  names = default_registries()
  cfg = validate(config_resolve.resolve(raw, 'train', ['optimizer_params.momentum=0.95']), names)
  eval_cfg = validate(config_resolve.resolve(raw, 'eval', ['optimizer_params.momentum=0.95']),
                      names, 'eval')
  config_file.write_run_config(cfg, eval_cfg, os.path.join(cfg['logdir'], 'config.yaml'))

or, for a run.py mode, ``load_configs(path, mode, overrides)``. ``resolve``
overlays the mode's params on the base params and applies the command-line
overrides (``framework.config.config_resolve``); ``validate`` checks every key
against ``framework.config.schema`` (and each task's own keys) before anything
is built and fills in defaults. Its checks run in two steps: first everything a
config states by itself (keys, types, names, durations, the settings other
packages own, the loss scaler's params and the params of the model and data
layer), with no TensorFlow imported, so a mistake there answers at once; then,
unless ``construct=False``, the checks only the owners can make
(``framework.config.argument_checks``): the optimizer's and lr policy's
arguments against their signatures, the optimizer constructed once, and the lr
policy tried with its durations in steps. Where the data layer declares the
size of its training split (its ``TRAIN_EXAMPLES`` fact), the run's length is
checked too, in steps, as the trainer checks it: an epoch holds a full batch
and the warm-up ends within the run (``framework.config.schedule``), so
``--print_config`` and a sweep's check of its points refuse what a run would
refuse. The run's one source of weight decay is chosen here too
(:func:`one_weight_decay`, :func:`no_regularizer_beside_decay`).

The load goes one way: the file is read (``config_file``), the mode's view
resolved (``config_resolve``), the top-level keys checked
(``schema.check_keys``), every name the config gives resolved once
(``config_resolve.resolve_names``: whether its registry holds it and the facts
it declares), and only then are the rest checked, from those resolved names;
the checks call helpers that call nothing back (``scripts/trace_config.py``
measures it). Every mistake raises
:class:`ConfigError` with a one-line message that starts with the key path, and
no function modifies the dict it is given.
"""

import inspect
import math
import os

from core import batch_policy
from core.params import ConfigError
from core.params import Param
from core.params import REQUIRED
from core.params import check_params
from core.params import positive
from framework import tasks
from framework.config import argument_checks
from framework.config import config_resolve
from framework.config import extension_points
from framework.config import openseq2seq
from framework.config import schedule
from framework.config import schema
from framework.config.config_file import IMPORT_PATHS_KEY
from framework.config.config_file import absolute_import_paths
from framework.config.config_file import load_config_file
from framework.config.config_resolve import durations_given
from framework.config.config_resolve import resolve_modes
from framework.config.schema import EPOCH_KEYS
from framework.config.schema import FRACTION_KEYS
from models import initializer_names
from optimizers import validation

SUMMARY_NAMES = validation.SUMMARY_NAMES

# The summaries the trainer writes itself, every save_summaries_steps; the others are
# written inside the train step (optimize_loss's own).
TRAINER_SUMMARIES = ('learning_rate', 'global_gradient_norm', 'loss_scale')

# Arguments the framework passes itself; a config giving them would fight it.
_OPTIMIZER_SUPPLIED = {
    'learning_rate': 'the learning rate comes from the lr policy; set lr_policy_params.learning_rate'}
_LR_POLICY_SUPPLIED = {'global_step': 'the trainer passes the global step'}
# Only used to try the optimizer's constructor on the config's other arguments.
_TRIAL_LEARNING_RATE = 0.1


# ---------------------------------------------------------------------------
# Loading a run's configs

def default_registries():
  """The registries a config's names are looked up in; importing them loads no TensorFlow."""
  from data import DATA_LAYERS  # pylint: disable=import-outside-toplevel
  from models import MODELS  # pylint: disable=import-outside-toplevel
  from optimizers.registry import LR_POLICIES  # pylint: disable=import-outside-toplevel
  from optimizers.registry import OPTIMIZER_CLS_NAMES  # pylint: disable=import-outside-toplevel
  return {'model': MODELS, 'data_layer': DATA_LAYERS, 'optimizer': OPTIMIZER_CLS_NAMES,
          'lr_policy': LR_POLICIES}


def load_configs(path, mode, overrides=(), registries=None, construct=True, notes=None):
  """Reads, overlays, overrides and validates the config(s) of a run in ``mode``.

  Args:
    path: the config file.
    mode: a run.py mode (``config_file.MODES``).
    overrides: ``key.path=value`` strings. A run length among them
      (``max_steps``, ``num_epochs``) replaces the config's other one and
      may shorten its warm-up (see :func:`validate`).
    registries: the registries (default: :func:`default_registries`).
    construct: also make the checks that import the owners (TensorFlow);
      False checks everything else, e.g. to print a config at once.
    notes: a list the one-line notes of the validation are appended to
      (a warm-up shortened to fit the run), or None.

  Returns:
    ``{'train': config or None, 'eval': config or None}``, validated.

  Raises:
    ConfigError: naming the file or key path of the first mistake.
  """
  registries = default_registries() if registries is None else registries
  views = resolve_modes(load_config_file(path), mode, overrides)
  for cfg in views.values():
    # Given on the command line: relative to the working directory (the file's are absolute).
    if cfg is not None and cfg.get(IMPORT_PATHS_KEY):
      cfg[IMPORT_PATHS_KEY] = absolute_import_paths(cfg[IMPORT_PATHS_KEY], os.getcwd())
  given = bool(durations_given(overrides))
  return {view: (validate(cfg, registries, view, construct, given, notes)
                 if cfg is not None else None)
          for view, cfg in views.items()}


# ---------------------------------------------------------------------------
# Validation

def validate(config, registries, mode='train', construct=True, run_length_given=False,
             notes=None):
  """Checks a resolved config before anything is built.

  Args:
    config: a dict from :func:`resolve`.
    registries: ``{'model': Registry, 'data_layer': Registry, 'optimizer':
      Registry, 'lr_policy': Registry}`` in which names are looked up.
    mode: 'train' or 'eval', the view ``config`` is; an eval view skips what
      only training batches must satisfy (ghost batch groups).
    construct: also make the checks only the owners can make (the
      optimizer's and lr policy's arguments), which import them and so
      TensorFlow; without it no TensorFlow is imported.
    run_length_given: whether the command line gave ``max_steps`` or
      ``num_epochs``: a warm-up longer than such a run is shortened to it
      (``schedule.fit_warmup``) instead of refused.
    notes: a list the one-line note of a shortened warm-up is appended to.

  Returns:
    A new dict holding every key of ``SCHEMA`` and of the tasks, defaults filled in, including
    defaults of ``model_params``/``data_layer_params`` declared in the
    object's ``PARAMS``. Names stay names, ``tf.DType`` becomes its name, and a built-in batch
    policy given by import path or as the function becomes its name.

  Raises:
    ConfigError: naming the key path of the first mistake.
  """
  config, loss_params = openseq2seq.read_keys(config, notes)
  result = _one_noise_scale_setting(_one_compression(config, schema.check_keys(config)))
  # Every name looked up once; from here on the checks read what the names declare.
  names = config_resolve.resolve_names(result, registries)
  given_model_params = result['model_params']  # before the declared defaults fill it
  for kind in ('model', 'data_layer'):
    _raise_name_error(names[kind])
    _check_declared_params(result, kind, names[kind]['PARAMS'])
  _check_initializer(result, names['model'], notes)
  task = _task(result, registries)
  extension_points.check_shapes(result, registries, task)
  result = openseq2seq.apply_loss_params(result, loss_params, task, config)
  _check_optimizer(result, names)
  entry = names['optimizer_entry']
  result = one_weight_decay(result, given_model_params, entry)
  _check_lr_policy(result, names)
  _check_batch_policy(result, names)
  _check_declared_arguments(result, names)
  _check_batches(result, mode)
  if result['regularizer'] is not None and result['regularizer_params'] is None:
    raise ConfigError(f'regularizer_params: required when regularizer is {result["regularizer"]!r} '
                      f'(give regularizer_params.scale)')
  no_regularizer_beside_decay(result, entry)
  argument_checks.check_loss_scaling(result['loss_scaling'], result['loss_scaling_params'])
  if mode == 'train':
    check_jit_compile(result)
  per_epoch = (_steps_per_epoch(result, names['data_layer']['TRAIN_EXAMPLES'])
               if mode == 'train' else None)
  if per_epoch is not None:
    # decay_steps is filled in by the run, which counts the epochs of its workers.
    result, note = schedule.fit_warmup(result, per_epoch, run_length_given, default_decay=False)
    if note is not None and notes is not None:
      notes.append(note)
  if construct:
    _check_with_owners(result, registries, per_epoch)
  return result


def _one_compression(config, result):
  """``distribution_params.compression``, taken from OpenSeq2Seq's ``horovod_params`` where set there.

  The old key at its default, ``none``, says nothing (a run directory's
  config.yaml records it so beside the new key). Set to another value, it is
  taken, and the new key given differently is refused in one line.
  """
  old = result['horovod_params']['compression']
  if old == 'none':
    return result
  if 'compression' in (config.get('distribution_params') or {}):
    new = result['distribution_params']['compression']
    if new != old:
      raise ConfigError(f'distribution_params.compression: {new!r}, but horovod_params.compression '
                        f'(its old place) says {old!r}; give it once, in distribution_params')
  result['distribution_params']['compression'] = old
  return result


def _one_noise_scale_setting(result):
  """``noise_scale`` as one of ``'auto'``, True and False, however it was spelled (``AUTO``, ``'False'``)."""
  setting = result['noise_scale']
  if isinstance(setting, str):
    result['noise_scale'] = {'auto': 'auto', 'true': True, 'false': False}[setting.lower()]
  return result


def check_jit_compile(config, num_workers=1):
  """Refuses what XLA cannot compile into the train step, naming the config key.

  Args:
    config: the train config.
    num_workers: the run's workers (a config alone is checked for one).

  Raises:
    ConfigError: a multi-worker run, or summaries written inside the step, with
      ``jit_compile``.
  """
  if not config['jit_compile']:
    return
  if num_workers > 1:
    raise ConfigError('jit_compile: XLA cannot compile the multi-worker all-reduce into the '
                      'train step; set jit_compile: false for multi-worker runs')
  in_step = [s for s in config['summaries'] if s not in TRAINER_SUMMARIES]
  if in_step:
    raise ConfigError(f'jit_compile: summaries {in_step} are written inside the train step, '
                      'which XLA cannot compile; keep only learning_rate, global_gradient_norm '
                      'and loss_scale (written by the trainer), or set jit_compile: false')


def _raise_name_error(resolved):
  """Raises the refusal of a name ``config_resolve.resolve_names`` found its registry does not hold."""
  if resolved['error'] is not None:
    raise resolved['error']


def _task(result, registries):
  """The config's task (what its model and data layer declare), with no other task's keys set."""
  task = tasks.task_of(result, registries)
  tasks.check_task_keys(result, task)
  return task


def _declared_steps_per_epoch(result, registries):
  """Updates per epoch of one worker, where the data layer declares its training split's size.

  The ``TRAIN_EXAMPLES`` fact of a data layer's registration counts the
  examples without TensorFlow and without reading the data (None when it
  cannot tell); a run of several workers is checked again once they are known.

  Raises:
    ConfigError: when an epoch holds no full batch.
  """
  count = config_resolve.declared(result, 'data_layer', registries, 'TRAIN_EXAMPLES')
  return _steps_per_epoch(result, count)


def _steps_per_epoch(result, count):
  """Updates per epoch of one worker, given the data layer's ``TRAIN_EXAMPLES`` fact (or None)."""
  examples = count(result['data_layer_params']) if count is not None else None
  if examples is None:
    return None
  return schedule.declared_steps_per_epoch(result, examples)


def _check_declared_params(result, kind, schema):
  """``result[kind + '_params']`` checked against the ``PARAMS`` the model or data layer declares."""
  if schema is not None:
    result[f'{kind}_params'] = check_params(result[f'{kind}_params'], schema, f'{kind}_params')


def _check_initializer(result, model, notes):
  """``initializer`` and ``initializer_params`` as config.yaml records them, for a model that takes them.

  A builder takes the config's initializer when it declares
  ``TAKES_INITIALIZER`` (the built-in ones do); a builder of your own sets
  its layers' initializers itself, so the key is refused there in one line.

  Raises:
    ConfigError: ``initializer_params`` without ``initializer``, a model that
      takes none, or what ``models.initializer_names.check`` refuses.
  """
  initializer, params = result['initializer'], result['initializer_params']
  if initializer is None:
    if params is not None:
      raise ConfigError('initializer_params: given without initializer; give the initializer '
                        'they are the arguments of, or drop them', 'initializer_params',
                        'invalid')
    return
  if not model['TAKES_INITIALIZER']:
    who = model['value'] if isinstance(model['value'], str) else getattr(
        model['value'], '__qualname__', repr(model['value']))
    raise ConfigError(
        f'initializer: model {who} is a builder of your own, which sets its layers\' '
        'initializers itself (a Keras layer has no default to take from the config): set '
        'kernel_initializer in its layers and drop the key, or declare TAKES_INITIALIZER = True '
        'on it and take kernel_initializer= (models/initializers.py)', 'initializer', 'invalid')
  name, params = initializer_names.check(initializer, params)
  result['initializer'], result['initializer_params'] = name, params
  note = (f'note: initializer: {initializer_names.describe(name, params)}, on every kernel of '
          "the model's convolutions and dense and attention projections; biases, "
          'normalization and embeddings keep theirs')
  if notes is not None and note not in notes:
    notes.append(note)


def _check_optimizer(result, names):
  """The optimizer's name, and AGN's ``agn_params`` when the optimizer wraps another one."""
  _raise_name_error(names['optimizer'])
  if names['optimizer']['WRAPS_OPTIMIZER']:
    # A wrapper (AGN) takes optimizer_params for the optimizer it wraps.
    result['agn_params'] = check_params(result['agn_params'], validation.AGN_SCHEMA, 'agn_params')
    _raise_name_error(names['agn_optimizer'])
    if names['agn_optimizer']['WRAPS_OPTIMIZER']:
      raise ConfigError('agn_params.optimizer: must be a plain optimizer, not another wrapper')
  elif result['agn_params'] is not None:
    raise ConfigError('agn_params: only used with optimizer: AGN')
  argument_checks.reject_supplied(result['optimizer_params'], 'optimizer_params',
                                  _OPTIMIZER_SUPPLIED)


def _check_lr_policy(result, names):
  """The lr policy's name, its base learning rate and the durations in epochs or fractions."""
  _raise_name_error(names['lr_policy'])
  lr_params = result['lr_policy_params']
  if result['lr_scaling'] is not None:
    if 'learning_rate' in lr_params:
      raise ConfigError('lr_policy_params.learning_rate: lr_scaling gives the rate as a rule of '
                        'the global batch; give one of them (set lr_scaling: null to use this '
                        'number)')
    # Resolved for one worker here; the run resolves it again once its workers are known.
    result['lr_policy_params'] = lr_params = dict(
        lr_params, learning_rate=scaled_learning_rate(result, 1)[0])
  if 'learning_rate' in lr_params:
    Param(float, REQUIRED, check=positive).validate(lr_params['learning_rate'],
                                                    'lr_policy_params.learning_rate')
  elif isinstance(result['lr_policy'], str):
    raise ConfigError('lr_policy_params.learning_rate: required key is missing (base learning rate)')
  for key in EPOCH_KEYS:
    if key in lr_params:
      schedule.to_steps(lr_params[key], 1, f'lr_policy_params.{key}')
  for key in FRACTION_KEYS:
    if key in lr_params:
      schedule.to_steps(lr_params[key], 1, f'lr_policy_params.{key}', fraction=True)
  argument_checks.reject_supplied(lr_params, 'lr_policy_params', _LR_POLICY_SUPPLIED)


def _check_batch_policy(result, names):
  """The batch policy's name and its parameters, as far as they are known before the workers are.

  A built-in policy given by its import path or as the function is the
  built-in one, and becomes its name here, so that the run measures the noise
  scale for it and config.yaml names it. A growing batch needs the noise scale
  it grows by, and an optimizer that averages the gradients every update (AGN
  averages the workers' weights on a period of its own updates, which a batch
  that grows would stretch).
  """
  _raise_name_error(names['batch_policy'])
  result['batch_policy'] = (batch_policy.built_in_name(result['batch_policy'])
                            or result['batch_policy'])
  name, params = result['batch_policy'], result['batch_policy_params']
  if batch_policy.is_fixed(result):
    batch_policy.check(name, params)
    return
  if result['agn_params'] is not None:
    raise ConfigError('batch_policy: a growing batch cannot run beside optimizer AGN, which '
                      'averages the workers on a period of its own updates; use batch_policy: '
                      'fixed, or another optimizer')
  if name == 'noise_scale' and result['noise_scale'] is False:
    raise ConfigError("batch_policy: 'noise_scale' grows the batch by the measured noise scale, "
                      "but noise_scale is false; set noise_scale: auto (or true)")
  batch_policy.check(name, params)


def scaled_learning_rate(config, workers):
  """The base learning rate ``lr_scaling`` gives for ``workers`` workers, and how, in words.

  B = batch_size_per_gpu x workers x iter_size; linear: base x B/reference_batch,
  sqrt: base x sqrt(B/reference_batch).
  """
  rule = config['lr_scaling']
  batch = config['batch_size_per_gpu'] * workers * config['iter_size']
  ratio = batch / rule['reference_batch']
  factor = ratio if rule['rule'] == 'linear' else math.sqrt(ratio)
  rate = rule['base_learning_rate'] * factor
  how = (f'{rule["base_learning_rate"]:g} x {"" if rule["rule"] == "linear" else "sqrt "}'
         f'({batch}/{rule["reference_batch"]}) = {rate:.6g}, the {rule["rule"]} rule at global '
         f'batch {batch} = {config["batch_size_per_gpu"]} x {workers} worker(s) x iter_size '
         f'{config["iter_size"]}')
  return rate, how


def scale_learning_rates(configs, workers):
  """``configs`` with each ``lr_scaling`` rule resolved for ``workers`` workers.

  Returns:
    (configs, description): new configs, and how the train view's rate was
    resolved in words (None without a rule).
  """
  result, how = {}, None
  for view, cfg in configs.items():
    if cfg is not None and cfg['lr_scaling'] is not None:
      rate, text = scaled_learning_rate(cfg, workers)
      cfg = dict(cfg, lr_policy_params=dict(cfg['lr_policy_params'], learning_rate=rate))
      if view == 'train' or how is None:
        how = text
    result[view] = cfg
  return result, how


def _check_batches(result, mode):
  """Ghost batch groups must divide every training batch."""
  ghost = result['model_params'].get('ghost_batch_size')
  if ghost is None or mode == 'eval':
    return
  batches = {'batch_size_per_gpu': result['batch_size_per_gpu']}
  if result['precise_bn'] is not None and result['precise_bn']['batch_size'] is not None:
    batches['precise_bn.batch_size'] = result['precise_bn']['batch_size']
  for key, size in batches.items():
    if size % ghost:
      raise ConfigError(f'model_params.ghost_batch_size: {ghost} must divide {key} ({size})')


def check_with_owners(configs, registries=None):
  """The checks ``load_configs(construct=False)`` left out, on each of its configs.

  A run loads its configs without them, starts its multi-worker engine (which
  must come before any other TensorFlow op), then makes them.

  Raises:
    ConfigError: naming the key path of the first mistake.
  """
  registries = default_registries() if registries is None else registries
  for view, cfg in configs.items():
    if cfg is not None:
      per_epoch = _declared_steps_per_epoch(cfg, registries) if view == 'train' else None
      _check_with_owners(cfg, registries, per_epoch)


def _check_with_owners(config, registries, per_epoch=None):
  """The checks only the owners can make, on a config checked by the rest of :func:`validate`.

  ``optimizer_params`` against the optimizer class's constructor (and its
  arguments' names, unless the registration declared them and
  :func:`_check_declared_arguments` checked them), and ``lr_policy_params``
  against the lr policy's arguments, likewise, and, given the run's updates
  per epoch (``per_epoch``), the policy tried with its durations in steps;
  and the params of a model or data layer registered lazily without a
  ``PARAMS`` fact. Imports those owners, and with them TensorFlow, in one
  step (``config_resolve.resolve_owners``), and then reads what it found.

  Raises:
    ConfigError: naming the key path of the first mistake.
  """
  owners = config_resolve.resolve_owners(config, registries)
  for kind in ('model', 'data_layer'):
    if f'{kind}_PARAMS' in owners:
      _check_declared_params(config, kind, owners[f'{kind}_PARAMS'])
  optimizer = owners['optimizer']
  # Where the registration declares the arguments, they were checked already.
  if owners['optimizer_ARGUMENTS'] is None:
    argument_checks.check_arguments(config['optimizer_params'], optimizer, 'optimizer_params',
                                    _OPTIMIZER_SUPPLIED)
  if inspect.isclass(optimizer):
    argument_checks.check_by_constructing(optimizer, config['optimizer_params'], 'optimizer_params',
                                          learning_rate=_TRIAL_LEARNING_RATE)
  extension_points.check_optimizer_result(optimizer, owners['optimizer_name'],
                                          config['optimizer_params'], _TRIAL_LEARNING_RATE)
  if 'lr_policy' in owners:
    argument_checks.check_arguments(_lr_arguments(config), owners['lr_policy'], 'lr_policy_params',
                                    _LR_POLICY_SUPPLIED, epoch_keys=True)
  if 'batch_policy' in owners:
    _check_own_batch_policy(config, owners['batch_policy'])
  if per_epoch is not None:
    schedule.learning_rate_fn(config, per_epoch)


_POSITIONAL_KINDS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                     inspect.Parameter.VAR_POSITIONAL)


def _check_own_batch_policy(config, policy):
  """A policy of the user's own against its signature: ``policy(state, **batch_policy_params)``.

  What it does with them is seen only as it runs (``core.batch_policy.next_batch``).

  Raises:
    ConfigError: it takes no argument for the run's state, or an unknown or
      missing ``batch_policy_params`` key.
  """
  name = config['batch_policy']
  who = name if isinstance(name, str) else getattr(policy, '__qualname__', repr(policy))
  try:
    parameters = list(inspect.signature(policy).parameters.values())
  except (TypeError, ValueError):
    return  # a callable whose signature cannot be read is checked as it runs
  if not parameters or parameters[0].kind not in _POSITIONAL_KINDS:
    raise ConfigError(f'batch_policy: {who} takes no positional argument for the run\'s state; '
                      'allowed: a function policy(state, **batch_policy_params) returning the '
                      'global batch (core/batch_policy.py)')
  state = parameters[0].name
  argument_checks.check_arguments(config['batch_policy_params'], policy, 'batch_policy_params',
                                  {state: 'the run passes its BatchState there'})


def _check_declared_arguments(result, names):
  """The names of ``optimizer_params`` and ``lr_policy_params``, where the registries declare them.

  Needs no TensorFlow: the ``ARGUMENTS`` of a registration. An entry without
  them is checked against its signature by :func:`_check_with_owners`.

  Raises:
    ConfigError: for an unknown or missing argument, as the signature check says it.
  """
  declared = names['optimizer_entry']['ARGUMENTS']
  if declared is not None:
    argument_checks.check_arguments(result['optimizer_params'], declared, 'optimizer_params',
                                    _OPTIMIZER_SUPPLIED)
  declared = names['lr_policy']['ARGUMENTS']
  if declared is not None:
    argument_checks.check_arguments(_lr_arguments(result), declared, 'lr_policy_params',
                                    _LR_POLICY_SUPPLIED, epoch_keys=True)


def _lr_arguments(config):
  """``lr_policy_params`` as the policy will be given them: with ``decay_steps`` where the run fills it in."""
  params = config['lr_policy_params']
  if schedule.decay_defaulted(config):
    return dict(params, decay_steps=None)  # its value is the run's (schedule.default_decay_steps)
  return params


# --- the run's one source of weight decay ------------------------------------------------
# Two sources would stack: ``model_params.weight_decay`` (L2 on the kernels, in the loss),
# ``regularizer: l2`` and the decay of an optimizer that has one (LARS, LAMB, AdamW, Muon:
# ``OWN_WEIGHT_DECAY`` in ``optimizers/registry.py``). :func:`validate` applies both checks to
# every config, giving them what the optimizer declares as ``config_resolve.resolve_names``
# read it: they look nothing up.

def one_weight_decay(result, given_model_params, entry):
  """The run's one source of weight decay: the model's L2 loss or the optimizer's own decay.

  ``model_params.weight_decay`` (L2 on the kernels, in the loss; 1e-4 unless
  given) would stack on the decay of an optimizer that has one (LARS, LAMB,
  AdamW, Muon: ``OWN_WEIGHT_DECAY`` in ``optimizers/registry.py``) or that is given
  Keras' ``weight_decay``. So the optimizer's is the run's where it has one
  or one is given, and the model's default is turned off; a model decay the
  config gives turns an optimizer's own default off instead. Given both
  (other than 0) is a mistake. ``regularizer: l2`` (a scale other than 0)
  turns the model's default off too: it is the run's L2 loss (an OpenSeq2Seq
  config gives its decay so).
  An optimizer that keeps its decay in more arguments than ``weight_decay``
  (``OWN_DECAY_ARGUMENTS``: Muon's ``adam_weight_decay`` as well) has them
  all turned off, or refused, together.

  Args:
    result: the config being validated.
    given_model_params: its ``model_params`` as given, before the model's
      declared defaults filled them in.
    entry: the optimizer that takes ``optimizer_params`` (AGN's inner one),
      resolved (``config_resolve.resolve_names``): its ``value`` and the facts
      ``OWN_WEIGHT_DECAY`` and ``OWN_DECAY_ARGUMENTS``.

  Returns:
    ``result``, or a new dict with the source not taken at 0.

  Raises:
    ConfigError: naming both keys, when both are given.
  """
  model_params = result['model_params']
  if not isinstance(model_params, dict) or 'weight_decay' not in model_params:
    return result  # the model has no such parameter, or declares none
  model_given = (given_model_params or {}).get('weight_decay')
  if (result['regularizer'] is not None and (result['regularizer_params'] or {}).get('scale')
      and 'weight_decay' not in (given_model_params or {})):
    # The regularizer is the run's L2 loss; the model's default L2 would be a second one.
    result = dict(result, model_params=dict(model_params, weight_decay=0.0))
  own = entry['OWN_WEIGHT_DECAY']
  # Muon holds its own decay in two arguments (its AdamW fallback's is adam_weight_decay).
  names = entry['OWN_DECAY_ARGUMENTS'] or ('weight_decay',)
  given = {name: result['optimizer_params'].get(name) for name in names}
  optimizer_given = given['weight_decay']
  for name, value in given.items():
    if model_given and value:
      raise ConfigError(f'model_params.weight_decay: {model_given} given together with '
                        f'optimizer_params.{name}: {value}; a run takes one source '
                        'of weight decay (the L2 loss of the model, or the optimizer\'s own): set '
                        'the other to 0')
  if model_given:
    if own and optimizer_given is None:  # the optimizer's defaults would stack on it
      return dict(result, optimizer_params=dict(
          result['optimizer_params'], **{name: 0.0 for name, value in given.items()
                                         if value is None}))
    return result
  if optimizer_given or own is not None:
    return dict(result, model_params=dict(model_params, weight_decay=0.0))
  return result


def no_regularizer_beside_decay(result, entry):
  """Refuses ``regularizer: l2`` beside an optimizer's own weight decay, as two sources of decay.

  The optimizer's decay is what it trains with after :func:`one_weight_decay`:
  the value given, else its own default (LARS 1e-4, AdamW and Muon 0.004;
  LAMB's is 0). Unlike the model's default L2, which gives way to the
  optimizer's, the regularizer is always given, so neither is turned off
  silently: the config says which one to keep.

  ``entry`` is the optimizer that takes ``optimizer_params``, resolved, as
  :func:`one_weight_decay` takes it.

  Raises:
    ConfigError: naming the regularizer and the optimizer's decay, when both are other than 0.
  """
  scale = (result['regularizer_params'] or {}).get('scale')
  if result['regularizer'] is None or not scale:
    return
  own = entry['OWN_WEIGHT_DECAY']
  names = entry['OWN_DECAY_ARGUMENTS'] or ('weight_decay',)
  optimizer = entry['value']
  optimizer = optimizer if isinstance(optimizer, str) else getattr(optimizer, '__name__',
                                                                    'the optimizer')
  values = {name: result['optimizer_params'].get(name) for name in names}
  defaults = [f'optimizer_params.{name}' for name, value in values.items()
              if value is None and own]
  decays = [f'optimizer_params.{name}: {value}' for name, value in values.items() if value]
  if defaults:
    decays.insert(0, f"{optimizer}'s own weight decay ({' and '.join(defaults)}, {own} by "
                     'default)')
  taken = [f'optimizer_params.{name}' for name, value in values.items()
           if value or (value is None and own)]
  if decays:
    raise ConfigError(f'regularizer: {result["regularizer"]} (regularizer_params.scale: {scale}) '
                      f'given together with {" and ".join(decays)}; a run takes one source of '
                      'weight decay (the L2 loss of the regularizer, or the optimizer\'s own): set '
                      f'{" and ".join(taken)} to 0, or drop the regularizer')
