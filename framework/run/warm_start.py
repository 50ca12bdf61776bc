"""Choosing a run's checkpoint (latest, best, a path) and starting a new run from another's weights.

A run directory holds the periodic checkpoints (``ckpt-<step>``) and, in
``best/``, the checkpoint with the best eval accuracy (``best-<step>``). Eval
and export read either (``--checkpoint``); a new run can start from another
run's model weights, and optionally its optimizer state (``--init_checkpoint``,
``--init_optimizer_state``), as OpenSeq2Seq's ``load_model`` and Model Garden's
``init_checkpoint`` do.
"""

import os
import shutil
import tempfile

import tensorflow as tf

from core.params import ConfigError
from framework.engines import distributed
from framework.run import checkpoints
from framework.run.checkpoints import BEST_DIR

CHECKPOINT_CHOICES = ('latest', 'best')
# Pipeline state that belongs to a run, not to the weights: a warm start begins at step 0.
_RUN_COUNTERS = ('global_step', 'micro_step')
_VALUE_SUFFIX = '/.ATTRIBUTES/VARIABLE_VALUE'
# Names listed in a mismatch message before "..."
_LISTED = 3


def find_checkpoint(path, label):
  """The intact checkpoint ``path`` names, read in full first (``checkpoints.resolve``).

  Args:
    path: a checkpoint prefix, or a directory (its newest intact checkpoint).
    label: the flag as messages name it.

  Returns:
    The checkpoint prefix, or None when there is none.

  Raises:
    CheckpointError: the checkpoint is damaged (or every one of the directory is).
  """
  return checkpoints.resolve(path, label, log=distributed.log)


def choose(logdir, choice, metric='the eval metric'):
  """The checkpoint to evaluate or export for ``--checkpoint=choice``.

  Args:
    logdir: the run directory.
    choice: 'latest', 'best' (the best by the task's eval metric, in
      ``<logdir>/best``), or the path of a checkpoint or of a directory
      holding checkpoints.
    metric: the name of the metric that picks the best checkpoint, for messages.

  Returns:
    The checkpoint prefix, verified; None for 'latest', which the trainer
    finds (and verifies) itself.

  Raises:
    ConfigError: when there is no such checkpoint, saying where it looked, or
      when it holds no run's state (a SavedModel's variables).
    CheckpointError: when the checkpoint is damaged.
  """
  if choice == 'latest':
    return None
  label = f'--checkpoint={choice}'
  if choice == 'best':
    best = os.path.join(logdir, BEST_DIR)
    path = find_checkpoint(best, label) if os.path.isdir(best) else None
    if path is None:
      where = (f'{best} is a link to {os.readlink(best)}, which does not exist'
               if os.path.islink(best) and not os.path.exists(best)
               else f'no best checkpoint in {best}')
      raise ConfigError(f'--checkpoint=best: {where} (--mode=train_eval keeps there the '
                        f'checkpoint with the best eval {metric}); use --checkpoint=latest')
    return path
  path = find_checkpoint(choice, label)
  if path is None:
    raise ConfigError(f'--checkpoint={choice}: not a checkpoint nor a directory holding one; '
                      f'allowed: {", ".join(CHECKPOINT_CHOICES)} or a checkpoint path')
  if not checkpoints.is_run_checkpoint(path):
    export = checkpoints.saved_model_of(path)
    what = (f'the variables of the SavedModel {export} (an export, weights only)' if export
            else 'a checkpoint without a run\'s state (no global_step)')
    raise ConfigError(f'--checkpoint={choice}: {what}, not a checkpoint of a run; eval and '
                      'export read a run\'s checkpoints: latest, best, or a path such as '
                      '<logdir>/ckpt-<step> (to start training from its weights, use '
                      '--init_checkpoint)')
  return path


def _shapes(names_and_objects):
  """``{checkpoint key: shape}`` of the variables ``tf.train.Checkpoint(**objects)`` would save."""
  directory = tempfile.mkdtemp(prefix='warm-start-')
  try:
    prefix = tf.train.Checkpoint(**names_and_objects).write(os.path.join(directory, 'probe'))
    return _value_shapes(prefix, names_and_objects)
  finally:
    shutil.rmtree(directory, ignore_errors=True)


def _value_shapes(prefix, names):
  """``{key: shape}`` of the variables under the top-level ``names`` of a checkpoint."""
  shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  return {key[:-len(_VALUE_SUFFIX)]: list(shape) for key, shape in shapes.items()
          if key.endswith(_VALUE_SUFFIX) and key.split('/', 1)[0] in names}


def _listed(keys, describe=str):
  shown = ', '.join(describe(k) for k in keys[:_LISTED])
  return shown + (f', ... ({len(keys)} in all)' if len(keys) > _LISTED else '')


def readable(key, objects, ours=True):
  """A checkpoint key as a reader knows the variable: ``model/stem_conv/kernel``.

  A Keras model's variables are keyed by the position of their layer
  (``model/_operations/30/_kernel``); ``ours`` keys (this config's) are given
  the name of the layer at that position instead, and a key only the
  checkpoint holds says which of its layers it is (``model/(layer 30 of the
  checkpoint)/kernel``). Other keys are left as they are.

  Args:
    key: a checkpoint key without its ``/.ATTRIBUTES/VARIABLE_VALUE``.
    objects: ``{name: trackable}`` as given to ``tf.train.Checkpoint``.
    ours: whether this config's objects hold ``key``.
  """
  parts = key.split('/')
  if len(parts) < 4 or parts[1] != '_operations' or not parts[2].isdigit():
    return key
  operations = getattr(objects.get(parts[0]), 'operations', None) or []
  index, attribute = int(parts[2]), '/'.join(p.lstrip('_') for p in parts[3:])
  if ours and index < len(operations):
    return f'{parts[0]}/{operations[index].name}/{attribute}'
  return f'{parts[0]}/(layer {index} of the checkpoint)/{attribute}'


def mismatches(expected, found, objects=None):
  """One line naming what differs between two ``{key: shape}`` maps, or '' when they agree.

  Args:
    expected: this config's ``{key: shape}``.
    found: the checkpoint's.
    objects: this config's ``{name: trackable}``, to name the layers (:func:`readable`).
  """
  objects = objects or {}
  missing = sorted(set(expected) - set(found))
  extra = sorted(set(found) - set(expected))
  reshaped = sorted(k for k in set(expected) & set(found) if expected[k] != found[k])
  parts = []
  if missing:
    parts.append('missing from the checkpoint: '
                 + _listed(missing, lambda k: readable(k, objects)))
  if reshaped:
    parts.append('other shape: ' + _listed(
        reshaped,
        lambda k: f'{readable(k, objects)} (checkpoint {found[k]}, this config {expected[k]})'))
  if extra:
    parts.append('not in this config: '
                 + _listed(extra, lambda k: readable(k, objects, ours=False)))
  return '; '.join(parts)


def describe_misfit(path, objects):
  """One line naming what differs between a checkpoint and ``objects``, or '' when they agree.

  Args:
    path: a checkpoint prefix.
    objects: ``{name: trackable}`` as given to ``tf.train.Checkpoint``.
  """
  return mismatches(_shapes(objects), _value_shapes(path, objects), objects)


def warm_start(source, model, pipeline_items=None):
  """Loads another run's model weights (and optionally optimizer state) into a new run.

  The step counters and the data position are not loaded: the new run starts
  at step 0 with its own schedule. Everything loaded must match exactly (same
  variables, same shapes); otherwise nothing is loaded.

  Args:
    source: a run directory (its newest intact checkpoint), a checkpoint
      prefix, or a SavedModel's ``variables/variables`` (weights only).
    model: the new run's model.
    pipeline_items: the trainer pipeline's ``checkpoint_items()`` to load the
      optimizer slots, loss scale and accumulators too; None for weights only.

  Returns:
    The checkpoint loaded.

  Raises:
    ConfigError: naming the checkpoint and, in one line, what does not match.
    CheckpointError: the checkpoint is damaged.
  """
  path = find_checkpoint(source, f'--init_checkpoint {source}')
  if path is None:
    raise ConfigError(f'--init_checkpoint {source}: not a checkpoint nor a directory holding one')
  objects = {'model': model}
  if pipeline_items is not None:
    objects.update({k: v for k, v in pipeline_items.items() if k not in _RUN_COUNTERS})
  found = _value_shapes(path, objects)
  if not found:
    raise ConfigError(f'--init_checkpoint {path}: holds no model weights of this framework')
  export = checkpoints.saved_model_of(path)
  if export is not None and pipeline_items is not None:
    raise ConfigError(f'--init_checkpoint {path}: the variables of the SavedModel {export} hold '
                      'the model weights only, no optimizer state; drop --init_optimizer_state, '
                      'or name a checkpoint of the run it was exported from')
  problem = mismatches(_shapes(objects), found, objects)
  if problem:
    raise ConfigError(f'--init_checkpoint {path}: does not fit this config ({problem})')
  # read(), not restore(): it binds no save counter, which a SavedModel's variables lack.
  tf.train.Checkpoint(**objects).read(path).expect_partial().assert_existing_objects_matched()
  return path
