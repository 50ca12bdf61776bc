"""Checkpoints a run can trust: verified before resuming, written without leftovers.

A run directory holds ``ckpt-<step>.index`` and ``ckpt-<step>.data-*`` files
and TensorFlow's ``checkpoint`` state file. Resuming looks for checkpoints by
their files, not only through the state file (which may be lost), verifies the
newest one by reading every tensor it lists (each tensor's stored checksum is
checked on read), and falls back to the newest intact one. Nothing is deleted
while doing so.

Saving (:func:`save`) removes what a failed write left and raises one line.
:class:`BestCheckpoint` keeps, in ``<logdir>/best``, the checkpoint with the
best eval accuracy and its record ``best.json``.
"""

import glob
import json
import os
import re
import shutil

import tensorflow as tf

from framework import rundir

CHECKPOINT_NAME = 'ckpt'
# The directory, inside the run directory, of the best checkpoint by eval accuracy.
BEST_DIR = 'best'
_FILE = re.compile(rf'^{CHECKPOINT_NAME}-(\d+)(\.index|\.data-\d+-of-\d+|_temp)$')


class CheckpointError(RuntimeError):
  """No checkpoint can be resumed from, or one could not be written; one line for the user."""


def _short(exc):
  text = ' '.join(str(exc).split())
  return text if len(text) <= 200 else text[:197] + '...'


def find(logdir):
  """Every checkpoint the directory shows a trace of, newest first.

  Returns:
    list of ``(step, prefix)``; a checkpoint appears when any of its files, or
    the state file, names it.
  """
  steps = set()
  for path in glob.glob(os.path.join(glob.escape(logdir), f'{CHECKPOINT_NAME}-*')):
    match = _FILE.match(os.path.basename(path))
    if match:
      steps.add(int(match.group(1)))
  try:
    state = tf.train.get_checkpoint_state(logdir)
  except Exception:  # pylint: disable=broad-except
    state = None  # a damaged state file: the files above are the evidence
  if state is not None:
    for path in list(state.all_model_checkpoint_paths) + [state.model_checkpoint_path]:
      match = _FILE.match(os.path.basename(path) + '.index')
      if match:
        steps.add(int(match.group(1)))
  return [(step, os.path.join(logdir, f'{CHECKPOINT_NAME}-{step}'))
          for step in sorted(steps, reverse=True)]


def verify(prefix):
  """Reads every tensor of a checkpoint; returns None when intact, else the reason."""
  if not os.path.exists(prefix + '.index'):
    return 'its index file is missing'
  try:
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except Exception as exc:  # pylint: disable=broad-except
    return _short(exc)
  return None


def newest_intact(logdir):
  """The newest intact checkpoint and the damaged ones newer than it.

  Returns:
    ``(prefix or None, [(prefix, reason), ...])``; ``(None, [])`` when the
    directory holds no checkpoint at all.

  Raises:
    CheckpointError: when checkpoints are there but none is intact.
  """
  damaged = []
  for _, prefix in find(logdir):
    reason = verify(prefix)
    if reason is None:
      return prefix, damaged
    damaged.append((prefix, reason))
  if damaged:
    listed = '; '.join(f'{os.path.basename(p)}: {r}' for p, r in damaged)
    raise CheckpointError(f'no intact checkpoint in {logdir} ({listed}); nothing was deleted. '
                          'Restore the files from a backup, or start a new run in another logdir')
  return None, []


def describe_fallback(prefix, damaged):
  """The one line printed when the newest checkpoints are damaged."""
  listed = '; '.join(f'{os.path.basename(p)} ({r})' for p, r in damaged)
  return (f'warning: damaged checkpoint(s) left as they are: {listed}; resuming from '
          f'{os.path.basename(prefix)}, the newest intact one')


def keep_for_rotation(logdir, prefix, damaged):
  """Rewrites the state file so that ``prefix`` is the latest checkpoint.

  The checkpoint manager deletes the oldest checkpoints its state file lists.
  After a clean resume every checkpoint up to ``prefix`` stays in rotation;
  after a fallback only ``prefix`` is listed, so the older intact checkpoints
  are never deleted by this run.
  """
  if damaged:
    kept = [prefix]
  else:
    step = int(prefix.rsplit('-', 1)[1])
    kept = [p for s, p in reversed(find(logdir))
            if s <= step and os.path.exists(p + '.index')]
  # The state file's text format, with paths relative to the logdir as the manager writes them.
  lines = [f'model_checkpoint_path: "{os.path.basename(prefix)}"']
  lines += [f'all_model_checkpoint_paths: "{os.path.basename(p)}"' for p in kept]
  rundir.write_text_atomically(os.path.join(logdir, 'checkpoint'), '\n'.join(lines) + '\n')


def save(manager, step, name=CHECKPOINT_NAME):
  """``manager.save(step)``; on failure removes what it left and raises one line.

  Args:
    manager: a ``tf.train.CheckpointManager`` whose checkpoint name is ``name``.
    step: the checkpoint number.
    name: the manager's checkpoint name.

  Raises:
    CheckpointError: naming the path, the reason and the checkpoint kept.
  """
  try:
    return manager.save(checkpoint_number=step)
  except (OSError, tf.errors.OpError) as exc:
    directory = manager.directory
    prefix = os.path.join(directory, f'{name}-{step}')
    remove_partial(prefix)
    kept = latest_listed(directory)
    raise CheckpointError(
        f'could not write checkpoint {prefix} ({_short(exc)}); its partial files were removed; '
        f'kept: {kept or "no earlier checkpoint"}. Free space or fix the permissions of '
        f'{directory}, then resume with --continue_learning') from None


def remove_partial(prefix):
  """Removes the files a failed save of ``prefix`` may have left (and stray state temp files)."""
  directory = os.path.dirname(prefix)
  shutil.rmtree(prefix + '_temp', ignore_errors=True)
  for path in glob.glob(glob.escape(prefix) + '.*') + glob.glob(
      os.path.join(glob.escape(directory), 'checkpoint.tmp*')):
    try:
      os.remove(path)
    except OSError:
      pass


def latest_listed(logdir):
  """The latest checkpoint the state file names, when its index exists."""
  try:
    path = tf.train.latest_checkpoint(logdir)
  except Exception:  # pylint: disable=broad-except
    return None
  return path if path and os.path.exists(path + '.index') else None


class BestCheckpoint:
  """Keeps the checkpoint with the best eval accuracy in its own directory.

  Args:
    checkpoint: the ``tf.train.Checkpoint`` of the run.
    directory: where the best checkpoint (``best-<step>``) and ``best.json`` go.
  """

  def __init__(self, checkpoint, directory):
    self.manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1,
                                              checkpoint_name='best')
    self.record = os.path.join(directory, 'best.json')
    self.best = None
    try:
      with open(self.record, encoding='utf-8') as f:
        self.best = json.load(f)['accuracy']
    except (OSError, ValueError, KeyError, TypeError):
      pass  # no record yet (or an unreadable one): the next evaluation writes it

  def offer(self, step, accuracy):
    """Saves the checkpoint at ``step`` when ``accuracy`` beats the best one so far."""
    if self.best is not None and accuracy <= self.best:
      return
    self.best = accuracy
    path = save(self.manager, step, name='best')
    rundir.write_text_atomically(
        self.record, json.dumps({'step': step, 'accuracy': accuracy, 'checkpoint': path}))
