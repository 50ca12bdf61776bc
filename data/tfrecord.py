"""Image classification from TFRecord files of ``tf.train.Example`` records.

Each record holds an encoded image (JPEG, PNG, BMP or GIF, told apart by
content) under ``image_key`` and an int64 label under ``label_key``. A
``preset`` names a bundle of defaults for a known layout (``imagenet``: the
ILSVRC-2012 shards, ``tfds``: the records TensorFlow Datasets writes); keys
given explicitly override it (``data.schemas.TFRECORD_PRESETS``).

A TFRecord record is framed as ``uint64 length, uint32 masked_crc32c(length),
bytes data[length], uint32 masked_crc32c(data)``, all little-endian.

This module also holds what the layers of encoded images share
(:class:`EncodedImageLayer`): the window shuffle, the stateless keys of each
example, the check of decoding and labels, the per-channel statistics kept in
the run directory, and serving.

References:
  TFRecord format: https://www.tensorflow.org/tutorials/load_data/tfrecord
"""

import concurrent.futures
import json
import logging
import os
import struct
import sys

import tensorflow as tf

from core.params import ConfigError
from data import images, schemas
from data.base import (AUGMENT_KEY, SHUFFLE_KEY, DataError, DataLayer, check_batch_size,
                       check_start_batch, epoch_key, fail_unless, sub_key,
                       write_json_atomically)

log = logging.getLogger(__name__)

MAX_CYCLE_LENGTH = 16
READ_BUFFER_BYTES = 8 << 20
# The per-channel statistics computed for a run, kept in its directory so that
# a resumed run, its evaluation and its export normalize as training did.
STATISTICS_FILE = 'image_statistics.json'
# Images (the first of the training split, files read round-robin) the
# statistics are computed from: a fixed sample, so every worker gets the same numbers.
STATISTICS_SAMPLE = 1000


def _crc32c_table():
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      # 0x82F63B78 is the Castagnoli polynomial in reflected bit order.
      crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    table.append(crc)
  return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data):
  """CRC-32C (Castagnoli) of ``data``; only used on 8-byte record headers."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
  """The rotated and offset CRC that TFRecord stores."""
  crc = crc32c(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def count_records(path):
  """Walks the record framing of a TFRecord file and returns its number of records.

  Reads only the 12-byte header of each record and checks its CRC, then seeks
  over the payload, so it costs one small read per record; payload CRCs are
  not checked.

  Raises:
    DataError: naming the file, when a header is cut off or corrupt, or the
      last record runs past the end of the file.
  """
  size = tf.io.gfile.stat(path).length
  opener = tf.io.gfile.GFile if '://' in path else open
  count = position = 0
  with opener(path, 'rb') as f:
    while position < size:
      header = f.read(12)
      if len(header) < 12:
        raise DataError(f'{path}: truncated TFRecord file: the header of record {count} '
                        f'at byte {position} is cut off')
      length, length_crc = struct.unpack('<QI', header)
      if masked_crc32c(header[:8]) != length_crc:
        raise DataError(f'{path}: corrupt TFRecord file: bad length checksum in record {count} '
                        f'at byte {position} (not a TFRecord file, or damaged)')
      position += 12 + length + 4
      if position > size:
        raise DataError(f'{path}: truncated TFRecord file: record {count} needs {position} bytes, '
                        f'the file has {size}')
      f.seek(position)
      count += 1
  return count


def file_signature(path):
  """``(size, mtime in ns)`` of a file, the key under which its count is cached.

  Local files use ``os.stat`` (gfile's local mtime has whole seconds only).
  """
  if '://' in path:
    stat = tf.io.gfile.stat(path)
    return stat.length, stat.mtime_nsec
  stat = os.stat(path)
  return stat.st_size, stat.st_mtime_ns


# Per process: record counts by (path, size, mtime), statistics by what they were computed from.
_RECORD_COUNTS = {}
_STATISTICS = {}


def verified_record_counts(paths):
  """Record counts of the files, framed in parallel and cached per unchanged file (in this process)."""
  def count(path):
    key = (path,) + file_signature(path)
    if key not in _RECORD_COUNTS:
      _RECORD_COUNTS[key] = count_records(path)
    return _RECORD_COUNTS[key]

  with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
    return list(pool.map(count, paths))


def _read_counts(cache_path):
  if '://' not in cache_path:
    return schemas.read_record_counts(cache_path)
  try:
    with tf.io.gfile.GFile(cache_path) as f:
      content = json.loads(f.read())
  except (tf.errors.OpError, ValueError):
    return {}
  files = content.get('files') if isinstance(content, dict) else None
  return files if content.get('format') == schemas.RECORD_COUNTS_FORMAT and isinstance(files, dict) \
      else {}


def _merge_counts(cache_path, entries):
  """Adds ``entries`` (``key -> {'size', 'mtime_ns', 'records'}``) to a count cache file."""
  files = dict(_read_counts(cache_path))
  files.update(entries)
  write_json_atomically(cache_path, {'format': schemas.RECORD_COUNTS_FORMAT, 'files': files})


def read_records(files):
  """The serialized records of one file or a list of files, in order."""
  return tf.data.TFRecordDataset(files, buffer_size=READ_BUFFER_BYTES)


def located_records(path):
  """``(file, record index, serialized record)`` of one file, in order, so errors can name them."""
  return read_records(path).enumerate().map(lambda index, record: (path, index, record))


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
    """``raw - label_offset`` as int32; one outside [0, num_classes) fails, naming the record."""
    offset, classes = self.settings['label_offset'], self.num_classes
    label = raw - offset
    label = fail_unless(
        tf.logical_and(label >= 0, label < classes),
        [where, ': record ', tf.strings.as_string(index), f': {self.settings["label_name"]} ',
         tf.strings.as_string(raw), f' - label_offset {offset} is outside [0, {classes}); '
         f'{self.settings["label_hint"]}'], label)
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



class TFRecordDataLayer(EncodedImageLayer):
  """Image classification from TFRecord files, any keys, JPEG/PNG/BMP/GIF images.

  Files: ``train_files`` / ``eval_files`` (globs, relative to ``data_dir``
  when it is given), sorted. With at least as many files as workers, files
  are dealt to workers (worker ``w`` reads files ``w, w + W, ...``); with
  fewer, every worker reads all files and keeps every ``W``-th record from
  ``w`` (train and eval), so that evaluation still reads each example once
  over all workers.

  Train: the worker's files are shuffled per epoch (with record sharding, the
  same order for all workers), read ``min(16, files)`` at a time, and
  consecutive windows of ``shuffle_buffer`` records are permuted with
  stateless keys; each image is augmented as ``augment`` says
  (``data.images.train_image``) and normalized with ``mean`` / ``std``. Every
  worker reads exactly ``batches_per_epoch`` batches per epoch, wrapping
  around its records when they are fewer than its share. Eval: one ordered
  pass over the worker's records (``data.images.eval_image`` with
  ``crop_fraction``).

  Sizes: ``num_examples`` (train) is given or counted from the record framing
  of the files, on first use; counts are cached in ``tfrecord_counts.json``
  beside the files (keyed by file name, size and mtime), or, where that
  directory cannot be written, in the run directory. ``mean`` / ``std`` are
  given or computed once (:meth:`statistics`).

  Resuming, corrupt records and labels: as :class:`data.imagenet.ImageNetDataLayer`
  (``start_batch`` is exact; ``verify_files``, ``skip_corrupt``,
  ``max_corrupt_fraction``; a label outside ``[0, num_classes)`` after
  ``label_offset`` stops the run naming its record). The first record is read
  at construction: one that lacks ``image_key`` or ``label_key`` is refused,
  naming its file and the features it has.
  """

  PARAMS = schemas.TFRECORD_PARAMS
  kind = 'tfrecord'

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    settings = self._resolve()
    self.settings = settings
    data_dir = settings['data_dir']
    if data_dir and not tf.io.gfile.isdir(data_dir):
      raise DataError(f'{self.kind}: data directory {data_dir} does not exist')
    pattern = schemas.tfrecord_file_pattern(settings, mode)
    if pattern is None:
      key = 'train_files' if mode == 'train' else 'eval_files'
      raise ConfigError(f'data_layer_params.{key}: required to read the {mode} split (a glob of '
                        'TFRecord files), or a preset that gives it', f'data_layer_params.{key}',
                        'missing')
    self.pattern = pattern
    self.files = sorted(tf.io.gfile.glob(pattern))
    if not self.files:
      raise DataError(f'{self.kind}: no files match {pattern}')
    # Dealing files keeps a worker's reads to its own files; with fewer files
    # than workers, records are dealt instead.
    self.shard_records = len(self.files) < num_workers
    self.worker_files = self.files if self.shard_records else self.files[worker_index::num_workers]
    height, width = settings['image_size']
    self.image_shape = (height, width, settings['channels'])
    self.num_classes = settings['num_classes']
    self.split = settings['split']
    self.record_counts = None
    self._num_examples = settings['num_examples']
    self._unsaved_counts = {}
    self._features = {settings['image_key']: tf.io.FixedLenFeature([], tf.string),
                      settings['label_key']: tf.io.FixedLenFeature([], tf.int64)}
    self._verify_at_construction()
    self._check_first_record()

  def _resolve(self):
    """The settings of the layer from its params (presets and derived defaults applied)."""
    resolved = schemas.resolve_tfrecord_params(self.params)
    if resolved['num_classes'] is None:
      raise ConfigError('data_layer_params.num_classes: required (the labels are in [0, '
                        'num_classes) after label_offset), unless the preset gives it',
                        'data_layer_params.num_classes', 'missing')
    return {**resolved,
            'image_size': images.image_size_pair(resolved['image_size']),
            'num_examples': resolved['num_examples'] if self.mode == 'train' else None,
            'split': 'train' if self.mode == 'train' else 'eval',
            'label_name': resolved['label_key'],
            'label_hint': 'check data_layer_params.label_offset and num_classes',
            'image_word': 'image'}

  def _verify_at_construction(self):
    """Hook: the imagenet layer frames its files here, as it always did."""

  def _before_reading(self):
    # verify_files: the framing of every file is checked (or found in a cache) before reading.
    if self.params['verify_files']:
      self.counts()

  # -- sizes ---------------------------------------------------------------

  @property
  def num_examples(self):
    """Examples in the split, over all workers: given (train) or counted on first use."""
    if self._num_examples is None and self.settings is not None:
      self._num_examples = sum(self.counts().values())
    return self._num_examples

  @num_examples.setter
  def num_examples(self, value):
    # The base constructor's None, or a subclass' fixed size.
    self._num_examples = value

  def counts(self):
    """``{file: records}`` of the split, from the caches or the framing of the files.

    Raises:
      DataError: naming a truncated or corrupt file, or a worker whose files
        hold no records.
    """
    if self.record_counts is not None:
      return self.record_counts
    counts, missing = {}, []
    beside = {}
    kept = (_read_counts(os.path.join(self.run_dir, schemas.RECORD_COUNTS_FILE))
            if self.run_dir else {})
    for path in self.files:
      size, mtime = file_signature(path)
      directory = os.path.dirname(path)
      if directory not in beside:
        beside[directory] = _read_counts(os.path.join(directory, schemas.RECORD_COUNTS_FILE))
      count = schemas.cached_count(beside[directory], os.path.basename(path), size, mtime)
      if count is None:
        count = schemas.cached_count(kept, path, size, mtime)
      if count is None:
        count = _RECORD_COUNTS.get((path, size, mtime))
      if count is None:
        missing.append(path)
      else:
        counts[path] = count
    if missing:
      log.info('%s: counting the records of %d file(s) of %s', self.kind, len(missing), self.pattern)
      counted = dict(zip(missing, verified_record_counts(missing)))
      counts.update(counted)
      if self.worker_index == 0:
        self._save_counts(counted)
    self.record_counts = {path: counts[path] for path in self.files}
    self._check_worker_records()
    return self.record_counts

  def _check_worker_records(self):
    if not sum(self.record_counts.values()):
      raise DataError(f'{self.kind}: the files matching {self.pattern} hold no records')
    if not self.shard_records and not sum(self.record_counts[f] for f in self.worker_files):
      raise DataError(f'{self.kind}: the files of worker {self.worker_index} '
                      f'({self.worker_files[0]}, ...) hold no records')

  def _save_counts(self, counted):
    """Caches new counts beside their files; where that fails, in the run directory."""
    by_directory = {}
    for path, count in counted.items():
      size, mtime = file_signature(path)
      by_directory.setdefault(os.path.dirname(path), {})[os.path.basename(path)] = {
          'size': size, 'mtime_ns': mtime, 'records': count}
    for directory, entries in by_directory.items():
      try:
        _merge_counts(os.path.join(directory, schemas.RECORD_COUNTS_FILE), entries)
      except (OSError, tf.errors.OpError):
        for name, entry in entries.items():
          self._unsaved_counts[os.path.join(directory, name)] = entry
    self._save_counts_in_run_dir()

  def _save_counts_in_run_dir(self):
    if self._unsaved_counts and self.run_dir and self.worker_index == 0:
      tf.io.gfile.makedirs(self.run_dir)
      _merge_counts(os.path.join(self.run_dir, schemas.RECORD_COUNTS_FILE), self._unsaved_counts)
      self._unsaved_counts = {}

  def use_run_dir(self, run_dir):
    """Keeps ``run_dir``; counts that could not be cached beside their files are cached there.

    Counting waits for this call when nothing asked for the size before, so a
    count cached in the run directory by an earlier start is found.
    """
    super().use_run_dir(run_dir)
    if self.record_counts is None and (self._num_examples is None or self.params['verify_files']):
      self.counts()
    self._save_counts_in_run_dir()

  # -- the first record ----------------------------------------------------

  def _check_first_record(self):
    """Reads the first record of the split and refuses it when it lacks the image or label key."""
    image_key, label_key = self.settings['image_key'], self.settings['label_key']
    for path in self.files:
      try:
        raw = next(iter(read_records(path).take(1)), None)
      except tf.errors.OpError as e:
        raise DataError(f'{self.kind}: {path}: cannot read its first record: '
                        f'{e.message.splitlines()[0]}') from None
      if raw is None:
        continue  # an empty file; the next one tells
      example = tf.train.Example()
      try:
        example.ParseFromString(raw.numpy())
      except Exception:  # pylint: disable=broad-except (protobuf's DecodeError has no stable home)
        raise DataError(f'{self.kind}: {path}: record 0 is not a tf.train.Example') from None
      feature = example.features.feature
      kinds = {key: feature[key].WhichOneof('kind') for key in feature}
      have = ', '.join(f'{key} ({kinds[key]})' for key in sorted(kinds)) or 'none'
      for key, param, wanted in ((image_key, 'image_key', 'bytes_list'),
                                 (label_key, 'label_key', 'int64_list')):
        if kinds.get(key) != wanted:
          problem = 'has no' if key not in kinds else f'has a {kinds[key]} in'
          raise DataError(f'{self.kind}: {path}: record 0 {problem} feature {key!r} '
                          f'(data_layer_params.{param}, a {wanted}); its features: {have}')
      return

  # -- streams -------------------------------------------------------------

  def _parsed(self, path, index, record):
    example = tf.io.parse_single_example(record, self._features)
    return (path, index, example[self.settings['image_key']],
            self._checked_label(path, index, example[self.settings['label_key']]))

  def _parse(self, records):
    return records.map(self._parsed, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

  def _eval_examples(self):
    records = tf.data.Dataset.from_tensor_slices(self.worker_files).flat_map(located_records)
    if self.shard_records:
      records = records.shard(self.num_workers, self.worker_index)
    return self._parse(records)

  def _epoch_examples(self, seed, epoch):
    if self.shard_records:
      # One file order for all workers, so that their shards of the stream are disjoint.
      order_key = sub_key(sub_key(epoch_key(seed, epoch), SHUFFLE_KEY), 0)
    else:
      order_key = sub_key(sub_key(sub_key(epoch_key(seed, epoch), self.worker_index), SHUFFLE_KEY), 0)
    files = tf.constant(self.worker_files)
    order = tf.random.experimental.stateless_shuffle(files, seed=order_key)
    records = tf.data.Dataset.from_tensor_slices(order).interleave(
        located_records, cycle_length=min(MAX_CYCLE_LENGTH, len(self.worker_files)),
        block_length=1, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if self.shard_records:
      records = records.shard(self.num_workers, self.worker_index)
    return self._parse(records)

  def _statistics_pattern(self):
    pattern = schemas.tfrecord_file_pattern(self.settings, 'train')
    if pattern is None:
      raise ConfigError('data_layer_params.mean: give mean and std, or train_files to compute '
                        'them from', 'data_layer_params.mean', 'missing')
    return pattern

  def _statistics_source(self):
    return self._statistics_pattern()

  def _statistics_examples(self):
    pattern = self._statistics_pattern()
    files = self.files if pattern == self.pattern else sorted(tf.io.gfile.glob(pattern))
    if not files:
      raise DataError(f'{self.kind}: no files match {pattern} (the training files the mean and '
                      'std are computed from)')
    records = tf.data.Dataset.from_tensor_slices(files).interleave(
        located_records, cycle_length=min(MAX_CYCLE_LENGTH, len(files)), block_length=1)
    return self._parse(records)
