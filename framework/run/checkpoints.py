"""Checkpoints a run can trust: verified before resuming, written without leftovers.

A run directory holds ``ckpt-<step>.index`` and ``ckpt-<step>.data-*`` files
and TensorFlow's ``checkpoint`` state file. Resuming looks for checkpoints by
their files, not only through the state file (which may be lost), verifies the
newest one by reading every tensor it lists (each tensor's stored checksum is
checked on read), and falls back to the newest intact one. Nothing is deleted
while doing so.

Saving (:func:`save`) removes what a failed write left and raises one line.
:class:`BestCheckpoint` keeps, in ``<logdir>/best``, the checkpoint with the
best eval metric (the task's: accuracy, highest, for images; WER, lowest, for
sequences) and its record ``best.json``.
"""

import errno
import glob
import json
import os
import re
import shutil

import tensorflow as tf

from core import files
from framework.run import summaries

CHECKPOINT_NAME = 'ckpt'
# The directory, inside the run directory, of the best checkpoint by the task's eval metric.
BEST_DIR = 'best'
BEST_NAME = 'best'
BEST_RECORD = 'best.json'
# The texts of the OS errors, longest first, to find the cause inside TensorFlow's messages.
_OS_REASONS = sorted({os.strerror(code) for code in errno.errorcode}, key=len, reverse=True)
_GLOBAL_STEP_KEY = 'global_step/.ATTRIBUTES/VARIABLE_VALUE'
# A growing-batch run's step (examples over its starting batch), when its checkpoint has one.
_RUN_STEP_KEY = 'batch_policy/step/.ATTRIBUTES/VARIABLE_VALUE'
# The variable of a run's checkpoint that records what its data position counts in:
# ``[workers, batch per worker]`` (a checkpoint may lack it: then nothing is compared).
DATA_LAYOUT = 'data_layout'
_DATA_LAYOUT_KEY = f'{DATA_LAYOUT}/.ATTRIBUTES/VARIABLE_VALUE'


class CheckpointError(RuntimeError):
  """No checkpoint can be resumed from, or one could not be written; one line for the user.

  Attributes:
    failure: for a write that failed, what failed and why (``could not write
      checkpoint PATH: REASON``), which a caller that resumes otherwise words
      anew; None otherwise.
    directory: the directory the write went to, or None.
  """

  def __init__(self, message, failure=None, directory=None):
    super().__init__(message)
    self.failure = failure
    self.directory = directory


class LogdirRemoved(CheckpointError):
  """The run directory was removed or replaced while the run trained; its checkpoint was saved anew.

  Attributes:
    step: the step of the checkpoint saved into the new directory.
  """

  def __init__(self, message, step):
    super().__init__(message)
    self.step = step


def directory_identity(path):
  """``(device, inode)`` of a directory, or None when it does not exist."""
  try:
    stat = os.stat(path)
  except FileNotFoundError:
    return None
  return stat.st_dev, stat.st_ino


def _short(exc):
  text = ' '.join(str(exc).split())
  return text if len(text) <= 200 else text[:197] + '...'


def _file_pattern(name):
  return re.compile(rf'^{re.escape(name)}-(\d+)(\.index|\.data-\d+-of-\d+|_temp)$')


def os_error(exc):
  """The OS error behind a failed write and the file it named: ``(reason, path or None)``.

  TensorFlow wraps the OS error of a failed write in a long message
  (``{{function_node __wrapped__SaveV2...}} <file>; No space left on device
  [Op:SaveV2]``); the reason is what the user acts on, so it is found there.
  """
  if isinstance(exc, OSError):
    return exc.strerror or _short(exc), exc.filename
  text = re.sub(r'\{\{[^}]*\}\}', ' ', str(exc))
  text = ' '.join(re.sub(r'\[Op:[^\]]*\]', ' ', text).split())
  for reason in _OS_REASONS:
    at = text.find(reason)
    if at >= 0:
      before = text[:at].rstrip(' ;:,').split()
      return reason, (before[-1] if before and os.sep in before[-1] else None)
  return _short(text), None


def describe_write_failure(exc, directory):
  """``reason (file)`` of a failed write, with the free space left when the disk is full."""
  reason, path = os_error(exc)
  text = reason + (f' (writing {path})' if path else '')
  if reason in (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT)):
    try:
      stat = os.statvfs(directory)
      text += f'; {stat.f_bavail * stat.f_frsize / 2**20:.1f} MB free there'
    except OSError:
      pass
  return text


def find(logdir, name=CHECKPOINT_NAME):
  """Every checkpoint the directory shows a trace of, newest first.

  Args:
    logdir: the directory.
    name: the checkpoints' name (``ckpt``, or ``best`` in ``<logdir>/best``).

  Returns:
    list of ``(step, prefix)``; a checkpoint appears when any of its files, or
    the state file, names it.
  """
  pattern = _file_pattern(name)
  steps = set()
  for path in glob.glob(os.path.join(glob.escape(logdir), f'{glob.escape(name)}-*')):
    match = pattern.match(os.path.basename(path))
    if match:
      steps.add(int(match.group(1)))
  try:
    state = tf.train.get_checkpoint_state(logdir)
  except Exception:  # pylint: disable=broad-except
    state = None  # a damaged state file: the files above are the evidence
  if state is not None:
    for path in list(state.all_model_checkpoint_paths) + [state.model_checkpoint_path]:
      match = pattern.match(os.path.basename(path) + '.index')
      if match:
        steps.add(int(match.group(1)))
  return [(step, os.path.join(logdir, f'{name}-{step}'))
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


def newest_intact(logdir, name=CHECKPOINT_NAME, advice=None):
  """The newest intact checkpoint and the damaged ones newer than it.

  Args:
    logdir: the directory of the checkpoints.
    name: their name (``ckpt``, or ``best``).
    advice: what the error says to do when none is intact (default: for a resume).

  Returns:
    ``(prefix or None, [(prefix, reason), ...])``; ``(None, [])`` when the
    directory holds no checkpoint at all.

  Raises:
    CheckpointError: when checkpoints are there but none is intact.
  """
  damaged = []
  for _, prefix in find(logdir, name):
    reason = verify(prefix)
    if reason is None:
      return prefix, damaged
    damaged.append((prefix, reason))
  if damaged:
    listed = '; '.join(f'{os.path.basename(p)}: {r}' for p, r in damaged)
    advice = advice or 'Restore the files from a backup, or start a new run in another logdir'
    raise CheckpointError(f'no intact checkpoint in {logdir} ({listed}); nothing was deleted. '
                          f'{advice}')
  return None, []


def describe_fallback(prefix, damaged, using='resuming from'):
  """The one line printed when the newest checkpoints are damaged."""
  listed = '; '.join(f'{os.path.basename(p)} ({r})' for p, r in damaged)
  return (f'warning: damaged checkpoint(s) left as they are: {listed}; {using} '
          f'{os.path.basename(prefix)}, the newest intact one')


def saved_model_of(prefix):
  """The SavedModel directory whose variables ``prefix`` is (``<export>/variables/variables``), or None."""
  variables = os.path.dirname(prefix)
  export = os.path.dirname(variables)
  if (os.path.basename(prefix) == 'variables' and os.path.basename(variables) == 'variables'
      and os.path.isfile(os.path.join(export, 'saved_model.pb'))):
    return export
  return None


def checkpoint_step(path):
  """The run step a checkpoint was saved at: a growing batch's run step, else its updates.

  A run whose batch grew (``batch_policy``) counts its steps in examples over
  its starting batch, and its updates (``global_step``) are fewer.
  """
  reader = tf.train.load_checkpoint(path)
  if reader.has_tensor(_RUN_STEP_KEY):
    return int(reader.get_tensor(_RUN_STEP_KEY))
  return int(reader.get_tensor(_GLOBAL_STEP_KEY))


def is_run_checkpoint(prefix):
  """Whether a readable checkpoint holds a run's state (its global step), not only weights."""
  try:
    return _GLOBAL_STEP_KEY in tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  except Exception:  # pylint: disable=broad-except
    return False


def data_layout(prefix):
  """What the data position of a checkpoint counts: ``(workers, batch per worker)``, or None.

  The data position is a count of one worker's micro-batches, and the data
  layers deal each epoch to the workers in whole batches, so it names the
  examples read only together with the workers and the batch it was counted in.

  Args:
    prefix: a checkpoint prefix.

  Returns:
    ``(workers, batch per worker)``, or None for a checkpoint that does not
    record them.

  Raises:
    tf.errors.OpError, ValueError: the checkpoint cannot be read.
  """
  reader = tf.train.load_checkpoint(prefix)
  if _DATA_LAYOUT_KEY not in reader.get_variable_to_shape_map():
    return None
  workers, batch = (int(n) for n in reader.get_tensor(_DATA_LAYOUT_KEY))
  return workers, batch


def newest_data_layout(logdir):
  """The newest readable checkpoint of a run directory and its :func:`data_layout`.

  A checkpoint that cannot be read is passed over (the restore names it and
  falls back to an older one).

  Returns:
    ``(prefix, layout or None)``, or ``(None, None)`` when no checkpoint can be read.
  """
  for _, prefix in find(logdir):
    try:
      return prefix, data_layout(prefix)
    except (tf.errors.OpError, ValueError):
      continue
  return None, None


def layout_change(prefix, layout, workers, batch_size):
  """The one-line refusal of a resume with other workers or batch than ``layout``, or None.

  Args:
    prefix: the checkpoint resumed from, as the line names it.
    layout: ``(workers or None when unknown, batch per worker)`` the checkpoint
      was trained with (:func:`data_layout`), or None when nothing is known.
    workers: the workers of this run.
    batch_size: this run's batch per worker.
  """
  if layout is None:
    return None
  saved_workers, saved_batch = layout
  if saved_workers in (None, workers) and saved_batch == batch_size:
    return None
  saved = f'{saved_workers} worker(s) and ' if saved_workers is not None else ''
  return (f'--continue_learning: {prefix} was trained with {saved}'
          f'batch_size_per_gpu={saved_batch}, and this run has {workers} worker(s) and '
          f'batch_size_per_gpu={batch_size}: its data position counts batches of one worker, '
          'and each epoch is dealt to the workers in whole batches, so this run would not read '
          'the examples a run straight through reads next; nothing was changed. Resume with '
          f'{saved}batch_size_per_gpu={saved_batch}, or start a new run in another --logdir '
          f'from its weights with --init_checkpoint {prefix}')


def resolve(path, label, log=print):
  """The intact checkpoint that a flag names: a checkpoint prefix, or a directory's newest.

  Every checkpoint a user names (``--checkpoint``, ``--init_checkpoint``) goes
  through here, as a resume goes through :func:`newest_intact`: the checkpoint
  is read in full before it is used, and a damaged one is named in one line.

  Args:
    path: a checkpoint prefix (``run/ckpt-20``, ``run/best/best-10``), or a
      directory: a run directory, its ``best`` directory, or any directory
      whose state file names a checkpoint.
    label: the flag as the message names it, e.g. ``--checkpoint=best``.
    log: ``f(line)`` for the warning when a directory's newest checkpoints are damaged.

  Returns:
    The checkpoint prefix, or None when ``path`` names no checkpoint at all.

  Raises:
    CheckpointError: the checkpoint named, or every checkpoint of the directory,
      is damaged; nothing is changed.
  """
  if os.path.isdir(path):
    advice = 'Name another checkpoint, or restore the files from a backup'
    for name in (CHECKPOINT_NAME, BEST_NAME):
      try:
        prefix, damaged = newest_intact(path, name, advice)
      except CheckpointError as exc:
        raise CheckpointError(f'{label}: {exc}') from None
      if prefix is not None:
        if damaged:
          log(describe_fallback(prefix, damaged, using='using'))
        return prefix
    try:
      prefix = tf.train.latest_checkpoint(path)
    except Exception:  # pylint: disable=broad-except
      prefix = None
    if prefix is None:
      return None
  else:
    prefix = path
    if not os.path.exists(prefix + '.index'):
      return None
  reason = verify(prefix)
  if reason is not None:
    raise CheckpointError(f'{label}: the checkpoint {prefix} is damaged ({reason}); nothing was '
                          'changed. Name another checkpoint, or restore its files from a backup')
  return prefix


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
  files.write_text_atomically(os.path.join(logdir, 'checkpoint'), '\n'.join(lines) + '\n')


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
    kept = latest_listed(directory) or 'no earlier checkpoint'
    if name == BEST_NAME:
      # The best checkpoints live beside the run's own, which resume from the logdir.
      kept = (f'{kept} of the best; the run\'s latest checkpoint: '
              f'{latest_listed(os.path.dirname(directory)) or "none"}')
    failure = f'could not write checkpoint {prefix}: {describe_write_failure(exc, directory)}'
    raise CheckpointError(
        f'{failure}; its partial files were removed; kept: {kept}. Free space or fix '
        f'the permissions of {directory}, then resume with --continue_learning',
        failure=failure, directory=directory) from None


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


def eval_metric(eval_dir, step, tag='accuracy'):
  """The eval metric ``tag`` the events in ``eval_dir`` give at ``step`` (the last one), or None."""
  found = None
  for path in sorted(glob.glob(os.path.join(glob.escape(eval_dir), 'events.out.tfevents.*'))):
    try:
      for event in tf.compat.v1.train.summary_iterator(path):
        if event.step != step:
          continue
        for value in event.summary.value:
          if value.tag == tag:
            found = float(tf.make_ndarray(value.tensor)) if value.HasField('tensor') else \
                float(value.simple_value)
    except Exception:  # pylint: disable=broad-except
      continue  # a damaged event file (cut off by a kill): the events read so far stand
  return found


def _read_record(path, metric):
  """``(record, problem)``: the best checkpoint's record, or None and why it cannot be used."""
  try:
    with open(path, encoding='utf-8') as f:
      record = json.load(f)
  except FileNotFoundError:
    return None, None
  except (OSError, ValueError) as exc:
    return None, f'{path} cannot be read ({type(exc).__name__}: {_short(exc)})'
  value = record.get(metric) if isinstance(record, dict) else None
  if (not isinstance(value, (int, float)) or isinstance(value, bool)
      or not isinstance(record.get('step'), int)):
    return None, f'{path} holds no step and {metric}'
  return record, None


class BestCheckpoint:
  """Keeps the checkpoint with the best eval metric in its own directory.

  The metric is the task's (``metric``, by default an image classifier's
  ``accuracy``, where higher is better; a sequence model's ``wer``, where
  lower is). The best value so far comes from the record ``best.json``
  (``{"step": ..., "<metric>": ..., "checkpoint": ...}``). When the record
  cannot be read, is missing or names another checkpoint than the one kept
  (a crash between the two writes), the kept checkpoint's value is read back
  from the run's eval events at its step, so that a worse checkpoint never
  replaces it; when no event gives it either, the kept checkpoint is not
  replaced at all by this run.

  Args:
    checkpoint: the ``tf.train.Checkpoint`` of the run.
    directory: where the best checkpoint (``best-<step>``) and ``best.json`` go.
    eval_dir: the run's eval events (default: ``eval`` beside ``directory``).
    log: ``f(line)`` for the one line saying a record was unreadable and what replaced it.
    metric: the eval metric that ranks checkpoints (its eval scalar's tag).
    higher_is_better: the metric's direction.
  """

  def __init__(self, checkpoint, directory, eval_dir=None, log=print, metric='accuracy',
               higher_is_better=True):
    self.manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1,
                                              checkpoint_name=BEST_NAME)
    self.record = os.path.join(directory, BEST_RECORD)
    self.metric = metric
    self.higher_is_better = higher_is_better
    if eval_dir is None:
      eval_dir = os.path.join(os.path.dirname(os.path.abspath(directory)), summaries.EVAL_DIR)
    self.best = self._best_so_far(directory, eval_dir, log)

  def _best_so_far(self, directory, eval_dir, log):
    metric = self.metric
    record, problem = _read_record(self.record, metric)
    kept = [(s, p) for s, p in find(directory, BEST_NAME) if os.path.exists(p + '.index')]
    if not kept:
      if problem:
        log(f'warning: {problem}; there is no best checkpoint beside it, so the next '
            'evaluation starts a new record')
      return None  # nothing kept to protect: the next evaluation is the best so far
    step, prefix = kept[0]
    if record is not None and record['step'] == step:
      return record[metric]
    if problem is None:
      problem = (f'{self.record} is missing' if record is None else
                 f'{self.record} names step {record["step"]}, not {os.path.basename(prefix)}')
    value = eval_metric(eval_dir, step, metric)
    if value is None:
      log(f'warning: {problem}, and no eval event in {eval_dir} gives the {metric} of {prefix}: '
          f'it is kept and this run will not replace it (move {directory} away to let it)')
      # A value nothing beats.
      return float('inf') if self.higher_is_better else float('-inf')
    log(f'warning: {problem}; the {metric} of {prefix}, {value:.4f}, was read back from the '
        f'eval events in {eval_dir}, and the record rewritten')
    self._write(step, value, prefix)
    return value

  def _write(self, step, value, path):
    files.write_text_atomically(
        self.record, json.dumps({'step': step, self.metric: value, 'checkpoint': path}))

  def offer(self, step, value):
    """Saves the checkpoint at ``step`` when the metric's ``value`` beats the best one so far."""
    if self.best is not None and (value <= self.best if self.higher_is_better
                                  else value >= self.best):
      return
    self.best = value
    self._write(step, value, save(self.manager, step, name=BEST_NAME))
