"""How long a run is and which learning rate it uses, from a validated config.

One place for the arithmetic the config layer, the trainer and the tools
(scripts/plot_lr.py) share: updates per epoch, the run's length in updates,
durations in epochs or in fractions of the run converted to steps, the
warm-up held against the run's length, and the lr policy with its durations
in steps. Nothing here imports TensorFlow but :func:`learning_rate_fn`, which
loads the lr policy itself, so the config layer makes these checks before
anything is built.
"""

import copy
import functools
import inspect
import math

from core.params import ConfigError
from framework.config.schema import DURATION_KEYS
from framework.config.schema import FRACTION_KEYS
from optimizers.registry import LR_POLICIES


def updates_per_epoch(batches, iter_size):
  """Applied updates per epoch, from one worker's full micro-batches per epoch.

  A fraction where ``iter_size`` does not divide an epoch's micro-batches
  (Fashion-MNIST at batch 8192 has 7; with ``iter_size: 2``, 3.5 updates):
  the data is one stream of micro-batches across epochs, so ``num_epochs``
  epochs are ``ceil(num_epochs × 3.5)`` updates and read the micro-batches of
  that many epochs, as at ``iter_size: 1``, rather than dropping one an epoch.
  An int where it divides them.
  """
  return batches // iter_size if batches % iter_size == 0 else batches / iter_size


def steps_per_epoch(train_data, batch_size, iter_size):
  """Applied updates per epoch of a built data layer (see :func:`updates_per_epoch`)."""
  return updates_per_epoch(train_data.train_batches_per_epoch(batch_size), iter_size)


def declared_steps_per_epoch(config, examples, workers=1):
  """Applied updates per epoch from the size of the training split, as a data layer counts them.

  Args:
    config: the validated train config.
    examples: the examples of the training split, over all workers.
    workers: the workers the split is shared by.

  Raises:
    ConfigError: when an epoch holds no full batch.
  """
  batch = config['batch_size_per_gpu']
  batches = examples // workers // batch
  if batches == 0:
    raise ConfigError(f'batch_size_per_gpu: {batch} per worker x {workers} worker(s) is larger '
                      f'than the {examples} examples of the train split')
  return updates_per_epoch(batches, config['iter_size'])


def total_steps(cfg, per_epoch):
  """The run's length in updates: ``max_steps``, or ``num_epochs`` × updates per epoch."""
  if cfg['max_steps'] is not None:
    return cfg['max_steps']
  return int(math.ceil(cfg['num_epochs'] * per_epoch))


def fit_warmup(config, per_epoch, run_length_given=False, default_decay=True):
  """Holds the warm-up (any ``warmup*`` duration, in steps or epochs) against the run's length.

  A warm-up longer than the run is a mistake in a config file. When the
  command line gave the run's length (``--set max_steps=30`` for a quick try
  of a config that warms up for an epoch), the warm-up is shortened to the
  whole run instead, as ``warmup_steps``, and a note says so. (A
  ``warmup_fraction`` is at most the whole run by construction.)
  ``decay_steps``, where the policy takes it and the config gives none, is
  filled in as OpenSeq2Seq fills it (:func:`default_decay_steps`), so the
  run's ``config.yaml`` records the number.

  Args:
    config: the validated train config (not modified).
    per_epoch: updates per epoch.
    run_length_given: whether ``num_epochs`` or ``max_steps`` came from the
      command line.
    default_decay: fill in ``decay_steps``; False only checks that its
      default is a length (the config layer, which counts one worker's
      epochs, leaves it to the run, which knows its workers).

  Returns:
    ``(config, note)``: the config as given and None, or a new config with
    the warm-up shortened or ``decay_steps`` filled in, and the one-line
    notes that say so (one line each).

  Raises:
    ConfigError: naming the key, its length in steps and the run's, for a
      warm-up longer than a run whose length the config file gave; a default
      ``decay_steps`` that is no length.
  """
  decayed, decay_note = default_decay_steps(config, per_epoch)
  if default_decay:
    config = decayed
  else:
    decay_note = None
  config, note = _fit_warmup(config, per_epoch, run_length_given)
  notes = [n for n in (note, decay_note) if n is not None]
  return config, '\n'.join(notes) if notes else None


def _fit_warmup(config, per_epoch, run_length_given):
  """:func:`fit_warmup` without ``decay_steps``."""
  total = total_steps(config, per_epoch)
  lr_params = config['lr_policy_params']
  for key, value in epochs_to_steps(lr_params, per_epoch, total).items():
    if not (key.startswith('warmup') and key.endswith('steps')) or isinstance(value, bool) \
        or not isinstance(value, (int, float)) or value <= total:
      continue
    given = next((k for k, v in DURATION_KEYS.items() if v == key and k in lr_params), key)
    if not run_length_given:
      raise ConfigError(f'lr_policy_params.{given}: the warm-up ({value} steps) is longer than '
                        f'training ({total} steps); shorten it or train longer')
    fitted = {k: v for k, v in lr_params.items() if k != given}
    fitted[key] = total
    begins = ''
    policy = config['lr_policy']
    if given != key and key == 'warmup_steps' and takes_argument(policy, 'begin_decay_at'):
      # Given in epochs or as a fraction, the warm-up ends before the decay begins
      # (warmup_then_decay); given in raw steps now, the config says so itself.
      begin = epochs_to_steps(lr_params, per_epoch, total).get('begin_decay_at', 0)
      fitted = {k: v for k, v in fitted.items() if DURATION_KEYS.get(k, k) != 'begin_decay_at'}
      fitted['begin_decay_at'] = max(begin, total)
      begins = f', begin_decay_at: {fitted["begin_decay_at"]}'
    length = 'max_steps' if config['max_steps'] is not None else 'num_epochs'
    note = (f'note: lr_policy_params.{given}: the warm-up ({value} steps) is longer than this run '
            f'({total} steps, {length} from the command line); it is shortened to the whole run '
            f'(lr_policy_params.{key}: {total}{begins})')
    return dict(config, lr_policy_params=fitted), note
  return config, None


# The keys that give an lr policy's decay_steps (in steps, epochs or a fraction of the run).
DECAY_KEYS = tuple(key for key, step in DURATION_KEYS.items() if step == 'decay_steps') + (
    'decay_steps',)


def takes_argument(policy, argument):
  """Whether the lr policy (a registered name, an import path, or the function) takes ``argument``.

  A registered policy answers from its declared arguments, without being
  imported; an import path is imported (the config layer did so already).
  """
  if isinstance(policy, str):
    if policy not in LR_POLICIES:
      return False  # the name's own check says what it is
    arguments = LR_POLICIES.facts(policy).get('ARGUMENTS')
    if arguments is not None:
      return argument in arguments.names
    policy = LR_POLICIES[policy]
  try:
    return argument in inspect.signature(policy).parameters
  except (TypeError, ValueError):
    return False


def takes_decay_steps(policy):
  """Whether the lr policy takes ``decay_steps`` (:func:`takes_argument`)."""
  return takes_argument(policy, 'decay_steps')


# The keys that give the warm-up in the project's own units (epochs, a fraction of the run).
WARMUP_DURATION_KEYS = tuple(key for key, step in DURATION_KEYS.items() if step == 'warmup_steps')


def warmup_then_decay(policy, lr_policy_params, params):
  """``params`` (in steps) with ``begin_decay_at`` raised to the warm-up's end, where the config means that.

  The lr policies' own ``warmup_steps`` and ``begin_decay_at`` are
  OpenSeq2Seq's: the decay counts from ``begin_decay_at`` and the warm-up
  multiplies it, overlapping when it is the longer (docs/math.md). A warm-up
  given in the project's own units (``warmup_epochs``, ``warmup_fraction``)
  means "warm up, then decay": for a policy that takes both arguments,
  ``begin_decay_at`` becomes max(begin_decay_at, warmup_steps).

  Args:
    policy: the config's ``lr_policy``.
    lr_policy_params: the params as the config gives them.
    params: the same in steps (:func:`epochs_to_steps`), not modified.

  Returns:
    ``params``, or a new dict with ``begin_decay_at`` set.
  """
  if not any(key in (lr_policy_params or {}) for key in WARMUP_DURATION_KEYS):
    return params
  if not (takes_argument(policy, 'begin_decay_at') and takes_argument(policy, 'warmup_steps')):
    return params
  begin = max(params.get('begin_decay_at', 0), params['warmup_steps'])
  return dict(params, begin_decay_at=begin)


def decay_defaulted(config):
  """Whether the run fills in ``decay_steps`` (:func:`default_decay_steps`): its policy takes it, none is given."""
  params = config['lr_policy_params'] or {}
  return not any(key in params for key in DECAY_KEYS) and takes_decay_steps(config['lr_policy'])


def default_decay_steps(config, per_epoch):
  """``decay_steps`` as OpenSeq2Seq fills it, where the policy takes it and the config gives none.

  OpenSeq2Seq gives a policy that takes ``decay_steps`` and is not given it
  the run's last step; here that step less ``begin_decay_at`` (0 unless
  given), so that the decay ends with the run wherever it begins.

  Args:
    config: the validated train config (not modified).
    per_epoch: updates per epoch.

  Returns:
    ``(config, note)``: the config and None when nothing is filled in, or a
    new config with ``lr_policy_params.decay_steps`` and the one-line note
    that says so.

  Raises:
    ConfigError: when ``begin_decay_at`` is at or past the run's last step.
  """
  if not decay_defaulted(config):
    return config, None
  params = config['lr_policy_params']
  total = total_steps(config, per_epoch)
  begin = epochs_to_steps(params, per_epoch, total).get('begin_decay_at', 0)
  steps = total - begin
  if isinstance(steps, float) and steps.is_integer():
    steps = int(steps)
  given = next((k for k in params if DURATION_KEYS.get(k, k) == 'begin_decay_at'),
               'begin_decay_at')
  if not isinstance(steps, (int, float)) or steps <= 0:
    raise ConfigError(f'lr_policy_params.decay_steps: not given, and {given} ({begin} steps) '
                      f'leaves no step of the run ({total} steps) to decay in; give decay_steps, '
                      'or begin the decay earlier')
  less = f' less {given} ({begin})' if begin else ''
  note = (f'note: lr_policy_params.decay_steps: not given; {steps} steps, the run\'s last step '
          f'({total}){less}, as OpenSeq2Seq fills it (config.yaml records it)')
  return dict(config, lr_policy_params=dict(params, decay_steps=steps)), note


def learning_rate_fn(cfg, per_epoch):
  """``f(global_step) -> lr`` for the config's policy, durations in epochs or fractions of the
  run converted to steps (a warm-up so given ends before the decay begins,
  :func:`warmup_then_decay`), ``decay_steps`` filled in where the config gives
  none (:func:`default_decay_steps`); the policy is tried once at step 0 (and
  imported, with TensorFlow).

  Raises:
    ConfigError: when the policy rejects its parameters.
  """
  cfg, _ = default_decay_steps(cfg, per_epoch)
  policy = LR_POLICIES.resolve(cfg['lr_policy'])
  params = epochs_to_steps(cfg['lr_policy_params'], per_epoch, total_steps(cfg, per_epoch))
  params = warmup_then_decay(cfg['lr_policy'], cfg['lr_policy_params'], params)
  try:
    policy(0, **params)
  except (TypeError, ValueError) as exc:
    raise ConfigError(f'lr_policy_params: {exc}') from None
  return functools.partial(policy, **params)


def epochs_to_steps(lr_policy_params, steps_per_epoch, total_steps=None):  # pylint: disable=redefined-outer-name
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
      result[step_key] = to_steps(value, total_steps, path, fraction=True)
    else:
      result[step_key] = to_steps(value, steps_per_epoch, path)
  return result


def to_steps(value, unit, path, fraction=False):
  """``value`` (a number or list of numbers, in epochs or fractions of the run) × ``unit``, rounded.

  Raises:
    ConfigError: naming ``path``, for a value that is not a number >= 0 (a
      fraction in [0, 1]) or a list of them.
  """
  upper = 1 if fraction else math.inf

  def convert(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= upper:
      what = 'a fraction in [0, 1]' if fraction else 'a number >= 0'
      raise ConfigError(f'{path}: expected {what} or a list of them, got {value!r}')
    return int(math.floor(x * unit + 0.5))

  if isinstance(value, (list, tuple)):
    return [convert(v) for v in value]
  return convert(value)


def base_rate_fn(cfg):
  """``f(global_step) -> lr`` for a run that applies no update (eval, export): the base rate.

  Such a run builds its optimizer only to hold the state a checkpoint
  restores, and knows no epoch of the training split to convert the
  schedule's durations with, so it leaves the schedule out.
  """
  rate = float(cfg['lr_policy_params'].get('learning_rate', 0.0))
  return lambda global_step: rate
