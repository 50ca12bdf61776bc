"""The branches of ``run.py --mode=critical_batch``: the mode's flags, and what one branch is.

A branch (``framework.run.critical_batch``) is the config's run at ``factor``
x its global batch, grown by ``iter_size``, started from a checkpoint's model,
optimizer state and data position, for a given number of updates at a rate
the config's ``lr_scaling`` rule gives its batch, cooled to 0 at its end. Here:
the flags that size the branches and their defaults (docs/running.md says why
each is what it is), a branch's config and rate, and its start from the
checkpoint.
"""

import math
import numbers

MODE = 'critical_batch'
# The mode's flags (run.py): given with another mode they are refused.
FLAGS = ('warmup_fraction', 'max_batch', 'branch_examples', 'tolerance', 'cooldown_fraction')
# The share of the config's run trained before branching when the logdir holds no checkpoint.
DEFAULT_WARMUP_FRACTION = 0.25
# The largest branch's batch, in multiples of the config's global batch.
DEFAULT_MAX_BATCH_FACTOR = 16
# A branch is within the critical batch while its held-out loss is at most this much
# (relative) above the 1x branch's (docs/running.md says why this value).
DEFAULT_TOLERANCE = 0.05
# The share of a branch's updates at its end over which its rate falls to 0: the
# held-out loss of an iterate at a high constant rate swings by several per cent
# from one update to the next, more than the branches differ (docs/running.md).
DEFAULT_COOLDOWN_FRACTION = 0.25
# Pipeline state a branch starts afresh: its own update count and schedule position, an
# accumulation of its own iter_size, and its own noise-scale averages.
BRANCH_OWN = ('global_step', 'micro_step', 'accumulators', 'noise_scale')
GLOBAL_STEP_KEY = 'global_step/.ATTRIBUTES/VARIABLE_VALUE'


def flag_problem(args):
  """The one-line problem of the mode's flags (``run.py``'s parsed flags), or None."""
  if args.mode != MODE:
    for flag in FLAGS:
      if getattr(args, flag, None) is not None:
        return f'--{flag}: only used with --mode={MODE}, not --mode={args.mode}'
    return None
  if args.tolerance is not None and not 0 < args.tolerance < 1:
    return (f'--tolerance: {args.tolerance:g} is outside (0, 1); it is the held-out loss a '
            f'branch may lose relative to the 1x branch (default {DEFAULT_TOLERANCE:g}, '
            f'{100 * DEFAULT_TOLERANCE:g}%)')
  if args.warmup_fraction is not None and not 0 < args.warmup_fraction < 1:
    return (f'--warmup_fraction: {args.warmup_fraction:g} is outside (0, 1); it is the share of '
            f'the config\'s run trained before branching (default {DEFAULT_WARMUP_FRACTION:g})')
  if args.cooldown_fraction is not None and not 0 <= args.cooldown_fraction < 1:
    return (f'--cooldown_fraction: {args.cooldown_fraction:g} is outside [0, 1); it is the share '
            'of a branch\'s updates over which its rate falls to 0 (0: held to the end; default '
            f'{DEFAULT_COOLDOWN_FRACTION:g})')
  for flag in ('max_batch', 'branch_examples'):
    value = getattr(args, flag)
    if value is not None and value < 1:
      return f'--{flag}: must be >= 1, got {value}'
  return None


def checkpoint_step(path):
  """The global step a run's checkpoint was saved at."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return int(tf.train.load_checkpoint(path).get_tensor(GLOBAL_STEP_KEY))


def restore_for_branch(trainer, path):
  """Loads a checkpoint's model, optimizer state and data position into ``trainer``.

  The branch's own counters, accumulators (of another ``iter_size``) and
  noise-scale averages start afresh (``BRANCH_OWN``); the rest must match the
  checkpoint exactly, as a resume's restore requires, or nothing is loaded.

  Raises:
    ConfigError: the checkpoint does not fit the config's model and optimizer.
  """
  # pylint: disable=import-outside-toplevel
  import tensorflow as tf
  from core.params import ConfigError
  from framework.run import warm_start
  objects = {'model': trainer.model, 'data_position': trainer.data_position,
             **{k: v for k, v in trainer.pipeline.checkpoint_items().items()
                if k not in BRANCH_OWN}}
  problem = warm_start.describe_misfit(path, objects)
  if problem:
    raise ConfigError(f'{path}: does not fit the model and optimizer of this config ({problem}); '
                      'use the config it was written with (config.yaml in its run directory)')
  tf.train.Checkpoint(**objects).read(path).expect_partial().assert_existing_objects_matched()


def branch_learning_rate(cfg, rate, factor, workers):
  """The rate of a branch at ``factor`` x the config's batch, from the checkpoint's ``rate``.

  The config's ``lr_scaling`` rule gives the ratio of the rates at the two
  global batches; without a rule the rate grows linearly with the batch.
  """
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  if cfg['lr_scaling'] is None:
    return rate * factor
  ours = config_lib.scaled_learning_rate(cfg, workers)[0]
  theirs = config_lib.scaled_learning_rate(dict(cfg, iter_size=cfg['iter_size'] * factor),
                                           workers)[0]
  return rate * theirs / ours


def branch_config(cfg, factor, updates, rate, cooldown=0.0):
  """A branch's train view: ``factor`` x the batch (``iter_size``), ``updates`` at ``rate``.

  With ``cooldown`` > 0 the rate falls linearly to 0 over that share of the
  updates at the end.
  """
  steps = int(round(cooldown * updates))
  if steps:
    policy = ('poly_decay', {'learning_rate': rate, 'power': 1.0, 'decay_steps': steps,
                             'begin_decay_at': updates - steps, 'min_lr': 0.0})
  else:
    policy = ('fixed_lr', {'learning_rate': rate})
  return dict(cfg, iter_size=cfg['iter_size'] * factor, lr_policy=policy[0],
              lr_policy_params=policy[1], lr_scaling=None, max_steps=updates, num_epochs=None,
              save_checkpoint_steps=None)


def plain_numbers(values):
  """A dict of numbers as JSON takes them: Python floats and ints, non-finite ones None."""
  if values is None:
    return None
  plain = {}
  for key, value in values.items():
    if isinstance(value, (bool, str)) or value is None:
      plain[key] = value
      continue
    if isinstance(value, numbers.Integral):
      plain[key] = int(value)
      continue
    number = float(value)
    plain[key] = number if math.isfinite(number) else None
  return plain
