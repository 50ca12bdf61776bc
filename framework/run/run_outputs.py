"""What a training run writes: its checkpoints, the best checkpoint and its summary writers.

:class:`RunOutputs` opens them all before the first step, so that a logdir that
cannot be written fails before any training, and saves a checkpoint only while
the model's variables are finite and the logdir is the one the run started in.
The chief alone writes; on the other workers the outputs are no-ops.
"""

import os

import numpy as np
import tensorflow as tf
import yaml

from framework.config import config_file
from framework.engines import distributed
from framework.run import checkpoints
from framework.run import record
from framework.run import summaries
from framework.run.checkpoints import CheckpointError
from framework.run.divergence import TrainingError


def write_run_config(parts):
  """The resolved config and the hyperparameters, for TensorBoard's Text and HParams tabs."""
  text = config_file.to_yaml(parts.config)
  values = summaries.hparams(yaml.safe_load(text), parts.overrides,
                             {'global_batch': parts.sizes.global_batch,
                              'num_workers': parts.sizes.num_workers})
  summaries.write_run_config(parts.logdir, text, values, parts.task.EVAL_METRICS)


class RunOutputs:
  """What a training run writes, opened before its first step.

  Attributes:
    manager: the ``tf.train.CheckpointManager`` of the periodic checkpoints
      (None on the workers that write nothing).
    best: the ``checkpoints.BestCheckpoint`` by ``task``'s metric (None on those workers).
    writes: whether train summaries are written (chief, summaries on, steps to train).
    writer: the train summary writer (a no-op writer when nothing is written).
    eval_writer: the eval summary writer; its file appears with the first evaluation.
    record: the run's ``record.Record`` (``metrics.jsonl``; written by the chief
      of a run with steps to train).

  Args:
    checkpoint: the ``tf.train.Checkpoint`` of the run's state.
    model: the model in it, whose variables are checked before each save.
    logdir: the run directory.
    config: the train config (``num_checkpoints``, ``save_summaries_steps``).
    trains: whether the run has steps to train.
    start_step: the step training starts at (the record drops what came after it).
    task: the run's ``framework.tasks`` task, whose ``BEST_METRIC`` picks the
      best checkpoint (default: an image classifier's accuracy).

  Raises:
    CheckpointError: the logdir cannot be written; nothing of the run was written.
  """

  def __init__(self, checkpoint, model, logdir, config, trains, task=None, start_step=0):
    self.model = model
    self.logdir = logdir
    chief = distributed.is_chief()
    # A run that trains nothing or writes no summaries leaves no empty event file.
    self.writes = bool(chief and config['save_summaries_steps'] and trains)
    try:
      self.manager = tf.train.CheckpointManager(
          checkpoint, logdir, max_to_keep=config['num_checkpoints'],
          checkpoint_name=checkpoints.CHECKPOINT_NAME) if chief else None
      metric, higher = ((task.BEST_METRIC, task.HIGHER_IS_BETTER) if task is not None
                        else ('accuracy', True))
      self.best = checkpoints.BestCheckpoint(
          checkpoint, os.path.join(logdir, checkpoints.BEST_DIR),
          log=distributed.log, metric=metric, higher_is_better=higher) if chief else None
      self.writer = (tf.summary.create_file_writer(logdir) if self.writes
                     else tf.summary.create_noop_writer())
      self.eval_writer = summaries.LazyWriter(os.path.join(logdir, summaries.EVAL_DIR), chief)
      self.record = record.Record(logdir, chief and trains, start_step)
    except (OSError, tf.errors.OpError) as exc:
      raise CheckpointError(f'cannot write to logdir {logdir} ({exc}); nothing of this '
                            'run was written') from None
    # The directory each save checks it still writes into (see save()).
    self._logdir_identity = checkpoints.directory_identity(logdir)

  def latest(self):
    """The newest periodic checkpoint (None when there is none, or on other workers)."""
    return self.manager.latest_checkpoint if self.manager is not None else None

  def save(self, step):
    """Saves a checkpoint (chief only), never one holding non-finite model variables.

    A diverging run can overflow the batch-norm statistics while its loss is
    still finite; such a state is not saved and the run stops, keeping the
    last good checkpoint.

    Returns:
      The saved path (None on other workers).

    Raises:
      TrainingError: when a model variable holds NaN or infinity.
      CheckpointError: when the checkpoint cannot be written (its partial files are removed).
    """
    if self.manager is None:
      return None
    bad = [v.path for v in self.model.variables if not np.all(np.isfinite(v.numpy()))]
    if bad:
      raise TrainingError(
          f'non-finite model variables at step {step} ({len(bad)}, e.g. {bad[0]}), not saved; '
          f'last checkpoint kept: {self.latest() or "none yet"}. Lower the learning '
          'rate, enable clipping (max_grad_norm) or LARC.')
    replaced = checkpoints.directory_identity(self.logdir) != self._logdir_identity
    path = checkpoints.save(self.manager, step)
    if replaced:
      # The files the run wrote before are gone (or belong to another directory now):
      # the state is kept, and the run ends rather than train on unseen.
      raise checkpoints.LogdirRemoved(
          f'the logdir {self.logdir} was removed or replaced while the run trained; the '
          f'checkpoint of step {step} was saved into the directory now there ({path}), with '
          'the run\'s config.yaml; the checkpoints and summaries written before are gone. '
          'Resume with --continue_learning, or delete the directory to drop the run', step)
    return path

  def close(self):
    self.writer.close()
    self.eval_writer.close()
