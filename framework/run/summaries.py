"""TensorBoard output of a run: writers that leave no empty event files, scalars, config, hparams.

The train scalars (:func:`write_train_scalars`) go to ``<logdir>``, the eval
scalars (:func:`write_eval_metrics`) to ``<logdir>/eval``; the train loop
decides when they are written.
The resolved config is written once as a text summary (``config``) and its
hyperparameters through TensorBoard's hparams plugin, so that the runs of a
sweep can be compared in the HParams tab against their final eval accuracy
and loss.
"""

import contextlib
import glob
import os

import tensorflow as tf

EVAL_DIR = 'eval'
# Always logged as hyperparameters (when set); keys given with --set are added.
HPARAM_KEYS = ('model', 'optimizer', 'lr_policy', 'lr_policy_params.learning_rate',
               'batch_size_per_gpu', 'iter_size', 'num_epochs', 'max_steps', 'dtype',
               'label_smoothing', 'max_grad_norm', 'loss_scaling', 'random_seed')
# The eval scalars the HParams tab shows beside the hyperparameters (an image
# classifier's; a run passes its task's EVAL_METRICS).
HPARAM_METRICS = ('accuracy', 'top5_accuracy', 'loss')


class LazyWriter:
  """A summary writer whose event file is created by the first summary written through it.

  Args:
    directory: where the event file goes.
    enabled: False on the workers that write nothing (a no-op writer).
  """

  def __init__(self, directory, enabled=True):
    self.directory = directory
    self.enabled = enabled
    self._writer = None

  @contextlib.contextmanager
  def as_default(self):
    if self._writer is None:
      self._writer = (tf.summary.create_file_writer(self.directory) if self.enabled
                      else tf.summary.create_noop_writer())
    with self._writer.as_default():
      yield

  def flush(self):
    if self._writer is not None:
      self._writer.flush()

  def close(self):
    if self._writer is not None:
      self._writer.close()


# Train scalars and the key of the train step's metrics each one is read from; the
# task's train metrics (``accuracy``, ``token_accuracy``) come after the loss.
_TRAIN_SCALARS_BEFORE = (('skipped_updates', 'skipped_updates'), ('loss', 'loss'))
# At step s, ``learning_rate`` and ``loss_scale`` are those of the update that starts at s
# (the lr policy's value at s): the step's ``next_learning_rate`` and ``next_loss_scale``.
_TRAIN_SCALARS_AFTER = (('learning_rate', 'next_learning_rate'),
                        ('global_gradient_norm', 'global_norm'),
                        ('loss_scale', 'next_loss_scale'))


# The gradient noise scale, when the run measures it (in ``unit``; docs/critical_batch.md).
_NOISE_SCALARS = (('noise_scale/b_simple', 'noise_scale'),
                  ('noise_scale/gradient_sq', 'noise_gradient_sq'),
                  ('noise_scale/trace', 'noise_trace'))


def write_train_scalars(step, values, images_per_sec, steps_per_epoch, global_batch,
                        metrics=('accuracy',), unit='images'):
  """Writes the train scalars of ``step`` to the default summary writer.

  Args:
    step: the global step.
    values: the train step's metrics (``loss``, the task's ``metrics``,
      ``next_learning_rate``, ``global_norm``, ``next_loss_scale``, ``skipped_updates``;
      the pipeline's names).
    images_per_sec: the measured rate over all workers, in ``unit`` per second.
    steps_per_epoch: updates per epoch, for the ``epoch`` scalar.
    global_batch: ``unit`` per update, for the ``<unit>`` scalar.
    metrics: the task's train metrics (``TRAIN_METRICS``).
    unit: what a batch counts (``images``, ``words``, ``tokens``): the rate is
      ``<unit>_per_sec``.
  """
  scalars = _TRAIN_SCALARS_BEFORE + tuple((m, m) for m in metrics) + _TRAIN_SCALARS_AFTER
  for tag, key in scalars:
    tf.summary.scalar(tag, values[key], step=step)
  tf.summary.scalar(f'{unit}_per_sec', images_per_sec * 1.0, step=step)
  for tag, key in _NOISE_SCALARS:
    if key in values:
      tf.summary.scalar(tag, values[key], step=step)
  # What plot_runs.py needs to put runs of different batch sizes on one axis.
  tf.summary.scalar('epoch', step / steps_per_epoch, step=step)
  tf.summary.scalar(unit, float(step * global_batch), step=step)


def write_eval_metrics(writer, step, metrics, names=HPARAM_METRICS):
  """Writes an evaluation's metrics ``names`` (the task's ``EVAL_METRICS``) at ``step``."""
  with writer.as_default():
    for key in names:
      tf.summary.scalar(key, metrics[key], step=step)
  writer.flush()


def override_keys(overrides):
  """The key paths of ``--set key.path=value`` overrides, overlay prefixes dropped."""
  keys = []
  for text in overrides:
    key = text.split('=', 1)[0].strip()
    for prefix in ('base_params.', 'train_params.'):
      if key.startswith(prefix):
        key = key[len(prefix):]
    if not key.startswith('eval_params.') and key not in keys:
      keys.append(key)
  return keys


def _lookup(config, path):
  value = config
  for part in path.split('.'):
    if isinstance(value, dict) and part in value:
      value = value[part]
    elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
      value = value[int(part)]
    else:
      return None
  return value


def _hparam_value(value):
  """A value the hparams plugin takes (bool, int, float, str); others as their text."""
  if isinstance(value, (bool, int, float, str)):
    return value
  return str(value)


def hparams(config, overrides=(), extra=None):
  """``{key path: value}`` of the run's hyperparameters (see ``HPARAM_KEYS``).

  Args:
    config: the resolved train config (names, not objects).
    overrides: the run's ``--set`` strings: every key they set is included.
    extra: more ``{name: value}`` (e.g. the global batch).
  """
  values = {}
  for key in list(HPARAM_KEYS) + override_keys(overrides):
    value = _lookup(config, key)
    if value is not None:
      values[key] = _hparam_value(value)
  values.update(extra or {})
  return values


# The event file of the config and hyperparameters (write_run_config), written anew at each start.
RUN_CONFIG_SUFFIX = '.run_config'


def write_run_config(directory, config_text, hparam_values, metrics=HPARAM_METRICS):
  """Writes the config as a text summary and the hyperparameters for the HParams tab (step 0).

  They go to an event file of their own, written anew at every start of the
  run: TensorBoard keeps the first hyperparameters a run's event files hold,
  so the file an earlier start wrote is removed first, and a resumed run
  whose ``max_steps`` (or another value) changed shows its new values.

  Args:
    directory: the run directory, whose name is the trial's id.
    config_text: the resolved config as YAML.
    hparam_values: ``{name: bool, int, float or str}`` from :func:`hparams`.
    metrics: the eval scalars shown beside them (the task's ``EVAL_METRICS``).
  """
  pattern = os.path.join(glob.escape(directory), f'events.out.tfevents.*{RUN_CONFIG_SUFFIX}')
  for earlier in glob.glob(pattern):
    os.remove(earlier)
  writer = tf.summary.create_file_writer(directory, filename_suffix=RUN_CONFIG_SUFFIX)
  with writer.as_default():
    _config_summaries(directory, config_text, hparam_values, metrics)
  writer.close()


def _config_summaries(directory, config_text, hparam_values, metrics):
  from tensorboard.plugins.hparams import api as hp  # pylint: disable=import-outside-toplevel
  # Markdown: indent by four spaces so the YAML shows as a code block.
  tf.summary.text('config', '\n'.join('    ' + line for line in config_text.splitlines()),
                  step=0)
  hp.hparams_config(hparams=[hp.HParam(name) for name in hparam_values],
                    metrics=[hp.Metric(tag, group=EVAL_DIR, display_name=f'eval {tag}')
                             for tag in metrics])
  hp.hparams(hparam_values, trial_id=os.path.basename(os.path.abspath(directory)))
