"""What the data layers of encoded images share (:class:`EncodedImageLayer`).

The TFRecord layer (data.tfrecord) and the TensorFlow Datasets layer (data.tfds)
both read encoded images with labels; this base holds what they have in common:
the window shuffle, the stateless keys of each example, the check of decoding
and labels, the per-channel statistics kept in the run directory, and serving.
"""

import json
import logging
import os
import sys

import tensorflow as tf

from core.params import ConfigError
from data import images
from data.base import (AUGMENT_KEY, SHUFFLE_KEY, DataError, DataLayer, check_batch_size,
                       check_start_batch, epoch_key, fail_unless, holds_checkpoints, sub_key,
                       write_json_atomically)

log = logging.getLogger(__name__)

# The per-channel statistics computed for a run, kept in its directory so that
# a resumed run, its evaluation and its export normalize as training did.
STATISTICS_FILE = 'image_statistics.json'
# Images (the first of the training split, files read round-robin) the
# statistics are computed from: a fixed sample, so every worker gets the same numbers.
STATISTICS_SAMPLE = 1000
# Per process: statistics by what they were computed from.
_STATISTICS = {}


def window_shuffle(records, window, key):
  """Cuts the stream into windows of ``window`` elements and permutes each one.

  Unlike ``Dataset.shuffle``, whose seed is combined with TensorFlow's global
  seed when one is set, the order is a function of ``key`` alone. The next
  window is read while the current one is consumed. An element may be a tuple;
  its parts move together. A stream no longer than a window is permuted whole.
  """
  def permute(index, *batch):
    order = tf.random.experimental.stateless_shuffle(tf.range(tf.shape(batch[0])[0]),
                                                     seed=sub_key(key, index))
    permuted = tuple(tf.gather(part, order) for part in batch)
    return permuted if len(permuted) > 1 else permuted[0]

  return records.batch(window).enumerate().map(
      lambda index, batch: permute(index, *(batch if isinstance(batch, tuple) else (batch,)))
  ).prefetch(1).unbatch()


class EncodedImageLayer(DataLayer):
  """What the layers of encoded images share; see :class:`TFRecordDataLayer` for the contract.

  A subclass sets, in its constructor, ``kind`` (its name in messages),
  ``image_shape``, ``num_classes``, ``class_names``, ``split`` and
  ``settings``, a dict with ``image_size`` (``(h, w)``), ``channels``,
  ``augment``, ``crop_fraction``, ``mean``, ``std`` (None: computed),
  ``shuffle_buffer``, ``label_offset``, ``label_name`` (the label's name in
  messages), ``label_hint`` (what to check when a label is out of range),
  ``skip_corrupt`` (None: the layer has no such option),
  ``max_corrupt_fraction`` and ``image_word`` (what a record that cannot be
  decoded is called); and implements :meth:`_eval_examples`,
  :meth:`_epoch_examples` and :meth:`_statistics_examples`, streams of
  ``(where, index, encoded image, label)``: ``where`` and ``index`` name the
  record in messages, the label is int32, checked by :meth:`_checked_label`.
  """

  kind = 'images'

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    self.settings = None
    self._statistics = None
    # Records skipped as corrupt by this worker's pipelines (skip_corrupt).
    self.corrupt_count = tf.Variable(0, dtype=tf.int64, trainable=False, name='corrupt_records')

  # -- the streams a subclass provides -------------------------------------

  def _eval_examples(self):
    """This worker's share of the eval split, in order: ``(where, index, encoded, label)``."""
    raise NotImplementedError

  def _epoch_examples(self, seed, epoch):
    """This worker's records of one train epoch, before the window shuffle.

    The order may depend on ``(seed, epoch)`` only (and the worker).
    """
    raise NotImplementedError

  def _statistics_examples(self):
    """The training split's examples from which the statistics are computed, in a fixed order."""
    raise NotImplementedError

  def _before_reading(self):
    """Hook called by :meth:`dataset` before it builds a pipeline (a file check, say)."""

  def _statistics_source(self):
    """What the statistics are computed from, as kept beside them (for a reader of the file)."""
    return None

  # -- labels, decoding and corrupt records ---------------------------------

  def _checked_label(self, where, index, raw):
    """``raw - label_offset`` as int32; one outside [0, num_classes) fails, naming the record.

    The line says the label and what to check first, the record (a long path,
    often) last.
    """
    offset, classes = self.settings['label_offset'], self.num_classes
    label = raw - offset
    label = fail_unless(
        tf.logical_and(label >= 0, label < classes),
        [f'{self.kind}: {self.settings["label_name"]} ', tf.strings.as_string(raw),
         f' - label_offset {offset} is outside [0, {classes}): {self.settings["label_hint"]} '
         '(record ', tf.strings.as_string(index), ' of ', where, ')'], label)
    return tf.cast(label, tf.int32)

  def _decode_checked(self, examples, decode):
    """Decodes ``(where, index, encoded, label, *extra)`` elements to ``(image, label)``.

    A record whose image cannot be decoded ends the pipeline with an error
    naming its file and index, or, with ``skip_corrupt``, is dropped, counted
    in ``corrupt_count`` and reported on stderr.
    """
    height, width = self.settings['image_size']
    placeholder = tf.zeros([height, width, self.settings['channels']], tf.float32)
    safe = images.decoded_or_marked(decode, placeholder)
    skip = self.settings['skip_corrupt']
    word = self.settings['image_word']
    counter = self.corrupt_count

    def decoded(where, index, encoded, label, *extra):
      return safe(encoded, *extra).map(lambda image, ok: (where, index, image, label, ok))

    def note(where, index, image, label, ok):
      del image, label
      at = [where, ': record ', tf.strings.as_string(index)]
      if not skip:
        hint = ('; set data_layer_params.skip_corrupt: true to skip such records'
                if skip is not None else '')
        return fail_unless(ok, at + [f': the {word} cannot be decoded{hint}'], ok)

      def count():
        total = counter.assign_add(1)
        with tf.control_dependencies([tf.print(
            'warning: skipped corrupt record:', tf.strings.join(at), f'({word.split()[0]} cannot '
            'be decoded);', total, 'skipped so far', output_stream=sys.stderr)]):
          return tf.identity(ok)

      return tf.cond(ok, lambda: ok, count)

    ds = examples.interleave(decoded, cycle_length=tf.data.AUTOTUNE, block_length=1,
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.filter(note)
    return ds.map(lambda where, index, image, label, ok: (image, label))

  def check_corrupt_fraction(self, examples_read):
    skipped = int(self.corrupt_count.numpy())
    if not skipped:
      return
    per_epoch = self.num_examples // self.num_workers
    fraction = self.settings['max_corrupt_fraction']
    if skipped > fraction * max(examples_read + skipped, per_epoch):
      raise DataError(f'{self.kind}: {skipped} corrupt records skipped after {examples_read} read '
                      f'by this worker, more than data_layer_params.max_corrupt_fraction '
                      f'({fraction}) allows; the lines above name them')

  # -- normalization statistics --------------------------------------------

  def statistics(self):
    """Per-channel ``(mean, std)`` in [0, 1] units: given, kept in the run directory, or computed.

    Computed ones come from the first ``STATISTICS_SAMPLE`` training images
    with the eval preprocessing (before normalization), once per process, and
    are written to ``<run_dir>/image_statistics.json`` by worker 0; a run that
    finds the file there takes its numbers.
    """
    if self._statistics is not None:
      return self._statistics
    mean, std = self.settings['mean'], self.settings['std']
    if mean is None or std is None:
      computed = self._kept_or_computed_statistics()
      mean = computed[0] if mean is None else mean
      std = computed[1] if std is None else std
    channels = self.settings['channels']
    for name, values in (('mean', mean), ('std', std)):
      if len(values) != channels:
        raise ConfigError(f'data_layer_params.{name}: {len(values)} value(s) given for '
                          f'{channels} channel(s)', f'data_layer_params.{name}', 'invalid')
    self._statistics = (tuple(float(m) for m in mean), tuple(float(s) for s in std))
    return self._statistics

  def _kept_or_computed_statistics(self):
    path = os.path.join(self.run_dir, STATISTICS_FILE) if self.run_dir else None
    if path and tf.io.gfile.exists(path):
      with tf.io.gfile.GFile(path) as f:
        kept = json.loads(f.read())
      if kept.get('channels') == self.settings['channels']:
        return kept['mean'], kept['std']
      log.warning('%s: %s holds statistics of %s channel(s), not %d; computing them again',
                  self.kind, path, kept.get('channels'), self.settings['channels'])
    elif holds_checkpoints(self.run_dir) and not self.params.get('rebuild_statistics'):
      raise DataError(f'{self.kind}: {path} is missing, and the checkpoints beside it were '
                      'trained with the statistics it held; computed again from the training '
                      'records of today they may normalize differently: put the file back, or '
                      'compute it again on purpose with --set '
                      'data_layer_params.rebuild_statistics=true')
    key = (self.kind, self._statistics_source(), self.settings['channels'],
           self.settings['image_size'], self.settings['crop_fraction'])
    if key not in _STATISTICS:
      _STATISTICS[key] = self._compute_statistics()
    mean, std = _STATISTICS[key]
    if path and self.worker_index == 0:
      tf.io.gfile.makedirs(self.run_dir)
      write_json_atomically(path, {'mean': list(mean), 'std': list(std),
                                   'channels': self.settings['channels'],
                                   'max_images': STATISTICS_SAMPLE,
                                   'source': self._statistics_source()})
    return mean, std

  def _compute_statistics(self):
    size, channels = self.settings['image_size'], self.settings['channels']
    crop = self.settings['crop_fraction']
    pixels = self._statistics_examples().take(STATISTICS_SAMPLE).map(
        lambda where, index, encoded, label: images.eval_image(encoded, size, channels, crop),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).batch(100)
    log.info('%s: computing the per-channel mean and std of %d training images', self.kind,
             STATISTICS_SAMPLE)
    try:
      return images.image_statistics(pixels)
    except tf.errors.OpError as e:
      raise DataError(f'{self.kind}: the statistics of the training images cannot be computed: '
                      f'{e.message.splitlines()[0]}') from None
    except ValueError as e:
      raise DataError(f'{self.kind}: {e}; give data_layer_params.mean and std') from None

  def _normalized(self, image):
    mean, std = self.statistics()
    return images.normalize(image, mean, std)

  # -- the datasets ---------------------------------------------------------

  def serving_input(self):
    """Serves encoded images ``[B]`` (any size and format), decoded and cropped as in eval."""
    size, channels = self.settings['image_size'], self.settings['channels']
    crop = self.settings['crop_fraction']
    self.statistics()

    def preprocess(encoded):
      return tf.map_fn(
          lambda one: self._normalized(images.eval_image(one, size, channels, crop)), encoded,
          fn_output_signature=tf.TensorSpec([*size, channels], tf.float32))
    return tf.TensorSpec([None], tf.string, name='images'), preprocess

  def dataset(self, batch_size, seed=0, start_batch=0):
    check_batch_size(batch_size)
    check_start_batch(start_batch)
    size, channels = self.settings['image_size'], self.settings['channels']
    self._before_reading()
    self.statistics()
    if self.mode == 'eval':
      crop = self.settings['crop_fraction']
      examples = self._eval_examples().skip(start_batch * batch_size)
      ds = self._decode_checked(
          examples, lambda encoded: self._normalized(images.eval_image(encoded, size, channels,
                                                                       crop)))
      return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)

    augment = self.settings['augment']
    examples = self._train_examples(batch_size, seed, start_batch)
    ds = self._decode_checked(
        examples, lambda encoded, key: self._normalized(images.train_image(encoded, key, size,
                                                                           channels, augment)))
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

  def _train_examples(self, batch_size, seed, start_batch):
    """An infinite dataset of ``(where, index, encoded, label, augmentation key)`` for this worker.

    Each epoch takes this worker's records, permutes consecutive windows of
    ``shuffle_buffer`` with a key of ``(seed, epoch, worker)``, and wraps
    around them until it holds ``batches_per_epoch`` batches; the example at
    position ``p`` of an epoch is augmented with a key of ``(seed, epoch, p,
    worker)``.
    """
    batches = self.train_batches_per_epoch(batch_size)
    records_per_epoch = batches * batch_size
    first_epoch, first_skip = divmod(start_batch, batches)
    shuffle_buffer = self.settings['shuffle_buffer']
    workers, worker = self.num_workers, self.worker_index

    def epoch_examples(epoch):
      examples = self._epoch_examples(seed, epoch)
      if shuffle_buffer > 1:
        shuffle_key = sub_key(sub_key(epoch_key(seed, epoch), worker), SHUFFLE_KEY)
        examples = window_shuffle(examples, shuffle_buffer, sub_key(shuffle_key, 1))
      # Shuffled before repeating, so that an epoch is a permutation whenever
      # the worker's records are enough for it.
      examples = examples.repeat().take(records_per_epoch).enumerate()
      skip = tf.cast(tf.where(epoch == first_epoch, first_skip * batch_size, 0), tf.int64)
      aug_key = sub_key(epoch_key(seed, epoch), AUGMENT_KEY)

      def keyed(position, example):
        # Positions interleave across workers so no two images share a key.
        return tuple(example) + (sub_key(aug_key, position * workers + worker),)

      return examples.skip(skip).map(keyed)

    return tf.data.Dataset.counter(first_epoch).flat_map(epoch_examples)
