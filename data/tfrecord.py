"""Image classification from TFRecord files of ``tf.train.Example`` records.

Each record holds an encoded image (JPEG, PNG, BMP or GIF, told apart by
content) under ``image_key`` and an int64 label under ``label_key``. A
``preset`` names a bundle of defaults for a known layout (``imagenet``: the
ILSVRC-2012 shards, ``tfds``: the records TensorFlow Datasets writes); keys
given explicitly override it (``data.tfrecord_facts.PRESETS``).

A TFRecord record is framed as ``uint64 length, uint32 masked_crc32c(length),
bytes data[length], uint32 masked_crc32c(data)``, all little-endian.

What the layers of encoded images share (the window shuffle, the statistics
kept in the run directory, serving) is :class:`data.encoded_images.EncodedImageLayer`.

References:
  TFRecord format: https://www.tensorflow.org/tutorials/load_data/tfrecord
"""

import concurrent.futures
import json
import logging
import os

import tensorflow as tf

from core.params import ConfigError
from data import images, tfrecord_facts, train_set
from data.base import SHUFFLE_KEY, DataError, epoch_key, sub_key, write_json_atomically
from data.encoded_images import EncodedImageLayer
# The framing of the files, by the names the imagenet layer and the tests import from here.
from data.record_framing import COMPRESSIONS
from data.record_framing import count_records
from data.record_framing import crc32c  # pylint: disable=unused-import
from data.record_framing import file_compression
from data.record_framing import first_unreadable_record
from data.record_framing import masked_crc32c  # pylint: disable=unused-import

log = logging.getLogger(__name__)

MAX_CYCLE_LENGTH = 16
READ_BUFFER_BYTES = 8 << 20


def file_signature(path):
  """``(size, mtime in ns)`` of a file, the key under which its count is cached.

  Local files use ``os.stat`` (gfile's local mtime has whole seconds only).
  """
  if '://' in path:
    stat = tf.io.gfile.stat(path)
    return stat.length, stat.mtime_nsec
  stat = os.stat(path)
  return stat.st_size, stat.st_mtime_ns


# Per process: record counts by (path, size, mtime).
_RECORD_COUNTS = {}


def verified_record_counts(paths, compression=''):
  """Record counts of the files, framed in parallel and cached per unchanged file (in this process)."""
  def count(path):
    key = (path,) + file_signature(path)
    if key not in _RECORD_COUNTS:
      _RECORD_COUNTS[key] = count_records(path, compression) if compression else count_records(path)
    return _RECORD_COUNTS[key]

  with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
    return list(pool.map(count, paths))


def _read_counts(cache_path):
  """The entries of a count cache file, local or remote; {} when it is missing or unreadable."""
  if '://' not in cache_path:
    return tfrecord_facts.read_record_counts(cache_path)
  try:
    with tf.io.gfile.GFile(cache_path) as f:
      content = json.loads(f.read())
  except (tf.errors.OpError, ValueError):
    return {}
  return tfrecord_facts.record_counts_in(content)


def _merge_counts(cache_path, entries):
  """Adds ``entries`` (``key -> {'size', 'mtime_ns', 'records'}``) to a count cache file."""
  files = dict(_read_counts(cache_path))
  files.update(entries)
  write_json_atomically(cache_path, {'format': tfrecord_facts.RECORD_COUNTS_FORMAT, 'files': files})


def read_records(files, compression=''):
  """The serialized records of one file or a list of files, in order."""
  return tf.data.TFRecordDataset(files, compression_type=compression,
                                 buffer_size=READ_BUFFER_BYTES)


def located_records(path, compression=''):
  """``(file, record index, serialized record)`` of one file, in order, so errors can name them."""
  return read_records(path, compression).enumerate().map(
      lambda index, record: (path, index, record))




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
  naming its file and the features it has. A record TensorFlow cannot read
  (a checksum) is named by :meth:`corrupt_file` once the run failed on it;
  a resume on other training files is refused (``data.train_set``).
  """

  # What it accepts and how big its training split is: data/tfrecord_facts.py (no TensorFlow).
  PARAMS = tfrecord_facts.PARAMS
  kind = 'tfrecord'

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    settings = self._resolve()
    self.settings = settings
    data_dir = settings['data_dir']
    if data_dir and not tf.io.gfile.isdir(data_dir):
      raise DataError(f'{self.kind}: data directory {data_dir} does not exist')
    pattern = tfrecord_facts.file_pattern(settings, mode)
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
    self.compression = self._compression()
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
    resolved = tfrecord_facts.resolve_params(self.params)
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

  def _compression(self):
    """TensorFlow's name of the files' compression: ``compression``, or told by their first bytes.

    Raises:
      DataError: a file whose compression is not the one given, or files of
        several compressions (``auto``), naming the file and what to set.
    """
    wanted = (self.params.get('compression') or 'none').lower()
    if wanted == 'none' and 'compression' not in self.PARAMS:
      return ''  # a layer without the key (imagenet) reads uncompressed files, unchecked
    found = {}
    for path in self.files:
      found.setdefault(file_compression(path), path)
    named = {kind: path for kind, path in found.items() if kind is not None}
    def name(kind):
      return kind or 'uncompressed'
    if wanted == 'auto':
      if len(named) > 1:
        shown = ', '.join(f'{path} ({name(kind)})' for kind, path in sorted(named.items()))
        raise DataError(f'{self.kind}: the files of {self.pattern} are compressed differently '
                        f'({shown}); give one kind a split')
      return next(iter(named), '')
    expected = COMPRESSIONS[wanted]
    for kind, path in sorted(named.items()):
      if kind != expected:
        setting = 'none' if not kind else kind
        raise DataError(f'{self.kind}: {path} is {name(kind)}, not {name(expected)}: set '
                        f'data_layer_params.compression: {setting} (or auto)')
    return expected

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
    kept = (_read_counts(os.path.join(self.run_dir, tfrecord_facts.RECORD_COUNTS_FILE))
            if self.run_dir else {})
    for path in self.files:
      size, mtime = file_signature(path)
      directory = os.path.dirname(path)
      if directory not in beside:
        beside[directory] = _read_counts(os.path.join(directory, tfrecord_facts.RECORD_COUNTS_FILE))
      count = tfrecord_facts.cached_count(beside[directory], os.path.basename(path), size, mtime)
      if count is None:
        count = tfrecord_facts.cached_count(kept, path, size, mtime)
      if count is None:
        count = _RECORD_COUNTS.get((path, size, mtime))
      if count is None:
        missing.append(path)
      else:
        counts[path] = count
    if missing:
      log.info('%s: counting the records of %d file(s) of %s', self.kind, len(missing), self.pattern)
      counted = dict(zip(missing, verified_record_counts(missing, self.compression)))
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
        _merge_counts(os.path.join(directory, tfrecord_facts.RECORD_COUNTS_FILE), entries)
      except (OSError, tf.errors.OpError):
        for name, entry in entries.items():
          self._unsaved_counts[os.path.join(directory, name)] = entry
    self._save_counts_in_run_dir()

  def _save_counts_in_run_dir(self):
    if self._unsaved_counts and self.run_dir and self.worker_index == 0:
      tf.io.gfile.makedirs(self.run_dir)
      _merge_counts(os.path.join(self.run_dir, tfrecord_facts.RECORD_COUNTS_FILE), self._unsaved_counts)
      self._unsaved_counts = {}

  def use_run_dir(self, run_dir):
    """Keeps ``run_dir``; counts that could not be cached beside their files are cached there.

    Counting waits for this call when nothing asked for the size before, so a
    count cached in the run directory by an earlier start is found. A train
    layer then holds its files to those the run directory's checkpoints were
    trained on (``data.train_set.hold``).
    """
    super().use_run_dir(run_dir)
    if self.record_counts is None and (self._num_examples is None or self.params['verify_files']):
      self.counts()
    self._save_counts_in_run_dir()
    if self.mode == 'train':
      train_set.keep(self, self._train_set())

  def _train_set(self):
    """The training files now (``data.train_set.TrainSet``): their records, names and sizes."""
    sizes = [file_signature(path)[0] for path in self.files]
    return train_set.TrainSet(
        self.kind, f'the training files {self.pattern}', self.num_examples,
        train_set.fingerprint(train_set.file_lines(self.files, sizes)), unit='records',
        parts='files (names or sizes)')

  def corrupt_file(self):
    found = first_unreadable_record(self.worker_files, self.compression)
    if found is None:
      return None
    path, index, reason = found
    return (f'{self.kind}: {path}: record {index} cannot be read ({reason}): the file is damaged; '
            f'copy it again, or leave it out of the files {self.pattern} matches')

  # -- the first record ----------------------------------------------------

  def _check_first_record(self):
    """Reads the first record of the split and refuses it when it lacks the image or label key."""
    image_key, label_key = self.settings['image_key'], self.settings['label_key']
    for path in self.files:
      try:
        raw = next(iter(read_records(path, self.compression).take(1)), None)
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

  def _located(self, path):
    return located_records(path, self.compression)

  def _parsed(self, path, index, record):
    example = tf.io.parse_single_example(record, self._features)
    return (path, index, example[self.settings['image_key']],
            self._checked_label(path, index, example[self.settings['label_key']]))

  def _parse(self, records):
    return records.map(self._parsed, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

  def _eval_examples(self):
    records = tf.data.Dataset.from_tensor_slices(self.worker_files).flat_map(self._located)
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
        self._located, cycle_length=min(MAX_CYCLE_LENGTH, len(self.worker_files)),
        block_length=1, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if self.shard_records:
      records = records.shard(self.num_workers, self.worker_index)
    return self._parse(records)

  def _statistics_pattern(self):
    pattern = tfrecord_facts.file_pattern(self.settings, 'train')
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
        self._located, cycle_length=min(MAX_CYCLE_LENGTH, len(files)), block_length=1)
    return self._parse(records)
