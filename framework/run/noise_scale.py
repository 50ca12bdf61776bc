"""The gradient noise scale in a run: what the config asks for, and the estimate read back.

``noise_scale: auto`` measures where an update averages two or more gradients
of a smaller batch anyway (``iter_size`` >= 2, or two or more workers);
``true`` also measures one worker with ``iter_size`` 1, by giving each
micro-step as its batch's two halves; ``false`` never. The pipeline does the
measuring (``optimizers.noise_scale``); docs/critical_batch.md says what the
number means.
"""

import tensorflow as tf

from core import batch_policy
from core.params import ConfigError
from optimizers import noise_scale as noise_scale_lib

# The train step's metrics of the noise scale, when it is measured (``NoiseScale.estimates``).
METRICS = ('noise_scale', 'noise_gradient_sq', 'noise_trace', 'noise_updates')


def pipeline_arguments(cfg, num_workers, trains=True):
  """``(noise_scale, noise_scale_params, parts)`` of the pipeline for the config's ``noise_scale``.

  Args:
    cfg: the validated train config.
    num_workers: the workers training together.
    trains: False for a run that only evaluates (nothing is measured).

  Returns:
    The pipeline's ``noise_scale`` and ``noise_scale_params``, and the parts
    each micro-step is given in (2: its batch's halves; 1: whole).

  Raises:
    ConfigError: ``true`` on one worker with ``iter_size`` 1 and one example per batch.
  """
  wanted = batch_policy.noise_scale_setting(cfg)
  if not trains or wanted is False:
    return False, None, 1
  # AGN's workers average their weights by themselves, not their gradients every update.
  workers = num_workers if cfg['agn_params'] is None else 1
  parts = 1
  if not noise_scale_lib.measures(cfg['iter_size'], workers):
    if wanted == 'auto':
      return False, None, 1
    if cfg['batch_size_per_gpu'] < 2:
      raise ConfigError('noise_scale: true measures one worker with iter_size 1 by taking '
                        "each step's batch as two halves; batch_size_per_gpu 1 leaves a half "
                        'empty (use batch_size_per_gpu >= 2, iter_size >= 2, or '
                        'noise_scale: auto)', 'noise_scale', 'invalid')
    parts = 2
  return True, {'micro_batch': cfg['batch_size_per_gpu'] / parts, 'parts': parts,
                'decay': cfg['noise_scale_params']['decay']}, parts


def loss_fn(loss, batch, parts):
  """The pipeline's ``loss_fn`` of ``loss(batch)``: the batch whole (``parts`` 1), or its two halves."""
  if parts == 1:
    return lambda: loss(batch)
  return [lambda part=part: loss(part) for part in halves(batch)]


def halves(batch):
  """The two halves of a batch (any nest of tensors batched on axis 0), first one the smaller."""
  first = tf.nest.flatten(batch)[0]
  middle = tf.shape(first)[0] // 2
  return (tf.nest.map_structure(lambda t: t[:middle], batch),
          tf.nest.map_structure(lambda t: t[middle:], batch))


def estimate(pipeline):
  """The pipeline's estimate so far, {'b_simple', 'gradient_sq', 'trace', 'updates'}, or None.

  None when the pipeline does not measure, or has measured no update yet.
  """
  if pipeline.noise is None:
    return None
  values = {k: float(v.numpy()) for k, v in pipeline.noise.estimates().items()}
  if not values['noise_updates']:
    return None
  return {'b_simple': values['noise_scale'], 'gradient_sq': values['noise_gradient_sq'],
          'trace': values['noise_trace'], 'updates': int(values['noise_updates'])}


def restorable(items, path, log):
  """``items`` (a checkpoint's by name) less the noise scale's state when ``path`` holds none.

  A checkpoint of a run that did not measure the noise scale (another
  ``iter_size``, fewer workers, or ``noise_scale: false``) still resumes or
  branches; the estimates start again from it, and ``log`` says so.
  """
  items = dict(items)
  if 'noise_scale' in items and not any(
      name.startswith('noise_scale/') for name, _ in tf.train.list_variables(path)):
    del items['noise_scale']
    log(f'{path} holds no noise-scale estimates (its run did not measure them): they start '
        'again from this step')
  return items
