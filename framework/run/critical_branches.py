"""The branches of ``run.py --mode=critical_batch``: the mode's flags, and what one branch is.

A branch (``framework.run.critical_batch``) is the config's own run from one
of its checkpoints, at ``factor`` x its global batch from there on, as the
``batch_policy: steps`` run that switches to that batch at the checkpoint's
step has it: the batch grows by ``iter_size`` (the micro-batch, the memory
and the data stay the config's), and the learning rate is the config's
schedule at the examples read (counted in the config's steps), times the
``lr_scaling`` rule's factor for the batch. The 1x branch is the run itself,
going on. Here: the
flags that size the measurement and their defaults (docs/running.md says why
each is what it is), a branch's config and its start from the checkpoint.
"""

import math
import numbers

MODE = 'critical_batch'
# The mode's flags (run.py): given with another mode they are refused.
FLAGS = ('points', 'max_batch', 'branch_examples', 'branch_loss', 'heldout_examples')
# What a branch's curve is read from (--branch_loss): ``heldout``, the task's loss on the eval
# split's first --heldout_examples (batch normalization by each batch's statistics), the
# default; ``online``, the loss of each training micro-batch before the update it goes into,
# which costs no pass but, over several epochs, rises after each epoch's start (an example
# read early in an epoch was read more recently before) by more than a window's progress.
BRANCH_LOSSES = ('online', 'heldout')
DEFAULT_BRANCH_LOSS = 'heldout'
# Where along the config's run the branches start, as shares of its steps.
DEFAULT_POINTS = (0.25, 0.5, 0.75)
# The 1x branch's window, whose last loss is every branch's target, as shares of the
# config's run: it ends at the first look past the shortest where the loss has fallen by
# more than its noise explains (core.critical_batch.made_progress), at the longest without it.
WINDOW_FEWEST_SHARE = 1.0 / 16
WINDOW_MOST_SHARE = 1.0 / 4
# A branch that has not reached the target after this many windows of examples stops
# there, "not reached" (E(B) = 4 E(1x) is a batch about 3x its critical batch, past any
# batch worth using); the run's end stops it too.
CAP_WINDOWS = 4
# Looks at a branch's loss per run of the config (online they cost a sum, held-out an
# evaluation of --heldout_examples).
LOOKS_PER_RUN = 256
# The held-out examples each evaluation reads (the first ones of the eval split, so
# every evaluation reads the same), rounded up to whole eval batches.
DEFAULT_HELDOUT_EXAMPLES = 2048
# The largest branch's batch, in multiples of the config's global batch.
DEFAULT_MAX_BATCH_FACTOR = 16
# The fewest updates the largest branch may have within its cap.
MIN_UPDATES = 8
# A branch whose rule raises the rate faster than the square root of its batch (``linear``,
# or no ``lr_scaling``) ramps it up from the 1x rate over its first updates, Goyal et al.'s
# gradual warm-up (2017) for the linear rule: a rate jumped k-fold at once, far above the one
# the run's weights were trained at, throws the loss up by more than the branch can win back
# in its cap (momentum SGD at 8x and 16x). The square root keeps the update's noise as it was
# and jumps at once, as ``batch_policy`` does.
RAMP_UPDATES = MIN_UPDATES
# Pipeline state a branch starts afresh: its own update count, an accumulation of its
# own iter_size, and its own noise-scale averages.
BRANCH_OWN = ('global_step', 'micro_step', 'accumulators', 'noise_scale')


def parse_points(text):
  """``--points``: shares of the run, increasing, in (0, 1); a one-line problem or the tuple."""
  try:
    points = tuple(float(part) for part in text.split(','))
  except ValueError:
    return None, (f'--points: {text!r} is not a comma-separated list of numbers; allowed: '
                  f'shares of the run in (0, 1), increasing (default '
                  f'{",".join(f"{p:g}" for p in DEFAULT_POINTS)})')
  if not all(0 < p < 1 for p in points) or any(b <= a for a, b in zip(points, points[1:])):
    return None, (f'--points: {text} must be increasing shares of the run in (0, 1) (default '
                  f'{",".join(f"{p:g}" for p in DEFAULT_POINTS)})')
  return points, None


def flag_problem(args):
  """The one-line problem of the mode's flags (``run.py``'s parsed flags), or None."""
  if args.mode != MODE:
    for flag in FLAGS:
      if getattr(args, flag, None) is not None:
        return f'--{flag}: only used with --mode={MODE}, not --mode={args.mode}'
    return None
  if args.points is not None:
    _, problem = parse_points(args.points)
    if problem:
      return problem
    if args.checkpoint != 'latest':
      return (f'--points: not with --checkpoint={args.checkpoint}, which is the one point the '
              'branches start from')
  if args.heldout_examples is not None and (args.branch_loss or DEFAULT_BRANCH_LOSS) != 'heldout':
    return '--heldout_examples: only used with --branch_loss=heldout'
  for flag in ('max_batch', 'branch_examples', 'heldout_examples'):
    value = getattr(args, flag)
    if value is not None and value < 1:
      return f'--{flag}: must be >= 1, got {value}'
  return None


def restore_for_branch(trainer, path, step=None):
  """Loads a checkpoint's model, optimizer state and data position into ``trainer``.

  The branch's own counters, accumulators (of another ``iter_size``) and
  noise-scale averages start afresh (``BRANCH_OWN``); the rest must match the
  checkpoint exactly, as a resume's restore requires, or nothing is loaded.
  With ``step``, the global step is set to it (the run itself, going on from
  the checkpoint); a branch counts its own updates from 0.

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
  if step is not None:
    trainer.pipeline.global_step.assign(step)


def rate_ratio(cfg, factor, workers):
  """The ratio of the rates the config's ``lr_scaling`` rule gives ``factor`` x its batch and 1x.

  Without a rule the rate grows linearly with the batch.
  """
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  if cfg['lr_scaling'] is None:
    return float(factor)
  ours = config_lib.scaled_learning_rate(cfg, workers)[0]
  theirs = config_lib.scaled_learning_rate(dict(cfg, iter_size=cfg['iter_size'] * factor),
                                           workers)[0]
  return theirs / ours


def ramp_updates(factor, ratio):
  """The updates over which a branch's rate ratio ramps from 1 to ``ratio`` (0: none).

  Only a ratio above the square root of the batch's ``factor`` ramps
  (``RAMP_UPDATES``).
  """
  return RAMP_UPDATES if ratio > math.sqrt(factor) * (1 + 1e-9) else 0


def branch_rate_fn(schedule_fn, step, factor, ratio):
  """A branch's rate at its update ``u``: the run's schedule at ``step + factor·u``, times its ratio.

  The schedule is the config's at its own batch (``schedule_fn`` of its
  global step); a branch of ``factor`` x the batch has read, before its
  update ``u``, the examples of ``factor·u`` steps of the run, as a growing
  batch counts them (``batch_policy``). The ratio is ``ratio``, or with a
  ramp of R updates (``ramp_updates``) 1 + (ratio − 1)·min(1, (u + 1)/R).
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  ramp = ramp_updates(factor, ratio)

  def rate(updates):
    run_step = tf.cast(step, tf.int64) + factor * tf.cast(updates, tf.int64)
    scale = tf.constant(ratio, tf.float32)
    if ramp:
      share = tf.minimum(1.0, tf.cast(updates + 1, tf.float32) / ramp)
      scale = 1.0 + (scale - 1.0) * share
    return tf.cast(schedule_fn(run_step), tf.float32) * scale
  return rate


def branch_config(cfg, factor):
  """A branch's train view: ``factor`` x the config's batch, by ``iter_size``; no checkpoints on the way."""
  return dict(cfg, iter_size=cfg['iter_size'] * factor, save_checkpoint_steps=None)


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
