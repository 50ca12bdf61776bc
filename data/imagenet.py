"""ImageNet (ILSVRC-2012) from TFRecord shards of JPEG-encoded examples.

The shards are the usual ones (``train-00000-of-01024``, ``validation-00000-of-00128``)
whose ``tf.train.Example`` records hold ``image/encoded`` (JPEG bytes) and
``image/class/label`` (int64, 1-based in the standard conversion).

A TFRecord record is framed as ``uint64 length, uint32 masked_crc32c(length),
bytes data[length], uint32 masked_crc32c(data)``, all little-endian.

References:
  He, Zhang, Ren, Sun. "Deep Residual Learning for Image Recognition", 2016.
  Szegedy et al. "Going Deeper with Convolutions", 2015 (random-resized crop).
  TFRecord format: https://www.tensorflow.org/tutorials/load_data/tfrecord
"""

import concurrent.futures
import logging
import os
import struct
import sys

import tensorflow as tf

from data import schemas
from data.base import (AUGMENT_KEY, SHUFFLE_KEY, DataError, DataLayer, check_batch_size,
                       check_start_batch, epoch_key, fail_unless, sub_key)

log = logging.getLogger(__name__)

DEFAULT_PATTERN = {'train': 'train-*', 'eval': 'validation-*'}
DEFAULT_NUM_EXAMPLES = schemas.IMAGENET_NUM_EXAMPLES
# Per-channel statistics of the ImageNet training pixels, in [0, 1] units.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# Eval resizes the shorter side to image_size / 0.875 (256 for 224) before the centre crop.
CENTER_CROP_FRACTION = 0.875
# Random-resized-crop ranges (Szegedy et al. 2015): fraction of the image area
# and width/height ratio of the crop.
AREA_RANGE = (0.08, 1.0)
ASPECT_RANGE = (3.0 / 4.0, 4.0 / 3.0)
CROP_ATTEMPTS = 10
MAX_CYCLE_LENGTH = 16
READ_BUFFER_BYTES = 8 << 20
FEATURES = {
    'image/encoded': tf.io.FixedLenFeature([], tf.string),
    'image/class/label': tf.io.FixedLenFeature([], tf.int64),
}


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


_RECORD_COUNTS = {}


def verified_record_counts(paths):
  """Record counts of the files, framed in parallel and cached per unchanged file."""
  def count(path):
    stat = tf.io.gfile.stat(path)
    key = (path, stat.length, stat.mtime_nsec)
    if key not in _RECORD_COUNTS:
      _RECORD_COUNTS[key] = count_records(path)
    return _RECORD_COUNTS[key]

  with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
    return list(pool.map(count, paths))


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
  its parts move together.
  """
  def permute(index, *batch):
    order = tf.random.experimental.stateless_shuffle(tf.range(tf.shape(batch[0])[0]),
                                                     seed=sub_key(key, index))
    permuted = tuple(tf.gather(part, order) for part in batch)
    return permuted if len(permuted) > 1 else permuted[0]

  return records.batch(window).enumerate().map(
      lambda index, batch: permute(index, *(batch if isinstance(batch, tuple) else (batch,)))
  ).prefetch(1).unbatch()


def decoded_or_marked(decode, placeholder):
  """Wraps ``decode(encoded, *extra) -> image`` so a record that fails to decode is marked, not fatal.

  Returns ``f(encoded, *extra) -> Dataset`` of one ``(image, ok)`` element:
  the decoded image and True, or ``placeholder`` and False. Used with
  ``interleave``: TensorFlow has no try/except inside a graph, but a
  one-element dataset that ignores its errors ends empty, and the placeholder
  that follows it takes its place.
  """
  def one(encoded, *extra):
    good = tf.data.Dataset.from_tensors((encoded,) + extra).map(
        lambda e, *x: (decode(e, *x), tf.constant(True))).ignore_errors()
    bad = tf.data.Dataset.from_tensors((placeholder, tf.constant(False)))
    return good.concatenate(bad).take(1)

  return one


def normalize(image):
  """Scales ``[0, 255]`` RGB pixels to zero mean and unit variance per channel."""
  mean = tf.constant([255.0 * m for m in MEAN])
  std = tf.constant([255.0 * s for s in STD])
  return (tf.cast(image, tf.float32) - mean) / std


def train_crop_window(image_shape, seed):
  """Samples a random-resized-crop window ``[y, x, height, width]`` for one image.

  Args:
    image_shape: ``[height, width, channels]`` of the encoded image.
    seed: stateless key ``[2] int64``.
  """
  whole_image = tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4])
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      image_shape, bounding_boxes=whole_image, seed=seed,
      # 0 lets the area range alone bound the crop (the box is the whole image).
      min_object_covered=0.0, aspect_ratio_range=ASPECT_RANGE, area_range=AREA_RANGE,
      max_attempts=CROP_ATTEMPTS, use_image_if_no_bounding_boxes=True)
  return tf.stack([begin[0], begin[1], size[0], size[1]])


def train_image(encoded, seed, image_size):
  """Random-resized crop, resize to ``image_size`` and random mirror, decoding only the crop."""
  crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  window = train_crop_window(tf.image.extract_jpeg_shape(encoded), crop_seed)
  image = tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
  image = tf.image.resize(image, [image_size, image_size], method='bilinear')
  image = tf.image.stateless_random_flip_left_right(image, flip_seed)
  return normalize(image)


def eval_image(encoded, image_size):
  """Resizes the shorter side to ``image_size / 0.875`` and takes the central square."""
  image = tf.io.decode_jpeg(encoded, channels=3)
  shape = tf.cast(tf.shape(image)[:2], tf.float32)
  target = tf.round(image_size / CENTER_CROP_FRACTION)
  new_shape = tf.cast(tf.maximum(tf.round(shape * target / tf.reduce_min(shape)), target), tf.int32)
  image = tf.image.resize(image, new_shape, method='bilinear')
  top = (new_shape[0] - image_size) // 2
  left = (new_shape[1] - image_size) // 2
  image = image[top:top + image_size, left:left + image_size]
  image.set_shape([image_size, image_size, 3])
  return normalize(image)


class ImageNetDataLayer(DataLayer):
  """ImageNet from TFRecord shards, with the usual ResNet preprocessing.

  Train: files are dealt to workers (worker ``w`` reads files ``w, w + W, ...``
  of the sorted list), shuffled per epoch, read ``min(16, files)`` at a time,
  and consecutive windows of ``shuffle_buffer`` records are permuted with
  stateless keys (memory: about two windows of encoded images); each image
  gets a random-resized crop (8-100 % of the area, aspect 3/4-4/3), a random
  mirror and a resize to ``image_size``. Every worker reads exactly
  ``batches_per_epoch`` batches per epoch: a worker whose files hold fewer
  records than its share of ``num_examples`` wraps around them. Eval: one
  ordered pass over the worker's files (so workers get as many batches as
  their files hold), shorter side resized to ``image_size / 0.875``, centre
  crop.

  Resuming: the record order of an epoch is a pure function of ``(seed, epoch,
  worker)`` (fixed cycle length, deterministic interleave, stateless shuffle) and
  each image's augmentation is keyed by ``(seed, epoch, position)``, so
  ``start_batch`` is exact. Skipped records are still read from disk (and go
  through the window shuffle) but are not decoded.

  Corrupt files: with ``verify_files`` (the default) the constructor walks the
  record framing of every file (one 12-byte read per record, header CRCs
  checked, files framed in parallel and cached per process) and raises a
  ``DataError`` naming a truncated or corrupt file. A record whose framing is
  intact but whose JPEG cannot be decoded stops the run with an error naming
  its file and record index; with ``skip_corrupt`` it is dropped, counted
  (``corrupt_count``) and reported on stderr, and the run fails once more than
  ``max_corrupt_fraction`` of the records read (at least an epoch's worth) were
  dropped. A run resumed in an epoch that dropped records before the stop sees
  that epoch's remaining batches shifted by the number dropped. A label
  outside ``[0, num_classes)`` after ``label_offset`` stops the run, naming the
  record.
  """

  PARAMS = schemas.IMAGENET_PARAMS

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    data_dir = self.params['data_dir']
    if not tf.io.gfile.isdir(data_dir):
      raise DataError(f'imagenet: data directory {data_dir} does not exist')
    pattern = os.path.join(data_dir, self.params['file_pattern'] or DEFAULT_PATTERN[mode])
    self.files = sorted(tf.io.gfile.glob(pattern))
    if not self.files:
      raise DataError(f'imagenet: no files match {pattern}')
    if len(self.files) < num_workers:
      raise DataError(f'imagenet: {len(self.files)} file(s) match {pattern}, fewer than the '
                      f'{num_workers} workers; each worker needs at least one file')
    self.worker_files = self.files[worker_index::num_workers]
    self.num_examples = self.params['num_examples'] or DEFAULT_NUM_EXAMPLES[mode]
    self.image_shape = (self.params['image_size'], self.params['image_size'], 3)
    self.num_classes = self.params['num_classes']
    self.record_counts = None
    # Records skipped as corrupt by this worker's pipelines (skip_corrupt).
    self.corrupt_count = tf.Variable(0, dtype=tf.int64, trainable=False, name='corrupt_records')
    if self.params['verify_files']:
      self.record_counts = dict(zip(self.files, verified_record_counts(self.files)))
      total = sum(self.record_counts.values())
      if total != self.num_examples:
        log.warning('imagenet: %s holds %d records but num_examples is %d', pattern, total,
                    self.num_examples)
      if not sum(self.record_counts[f] for f in self.worker_files):
        raise DataError(f'imagenet: the files of worker {worker_index} ({self.worker_files[0]}, ...) '
                        'hold no records')

  def _parse(self, path, index, record):
    """``(encoded image, label)`` of a record; a label outside [0, num_classes) fails, naming the record."""
    example = tf.io.parse_single_example(record, FEATURES)
    raw = example['image/class/label']
    offset, classes = self.params['label_offset'], self.params['num_classes']
    label = raw - offset
    label = fail_unless(
        tf.logical_and(label >= 0, label < classes),
        [path, ': record ', tf.strings.as_string(index), ': image/class/label ',
         tf.strings.as_string(raw), f' - label_offset {offset} is outside [0, {classes}); check '
         'data_layer_params.label_offset and num_classes'], label)
    return example['image/encoded'], tf.cast(label, tf.int32)

  def _decode_checked(self, records, decode):
    """Decodes ``(path, index, record, *extra)`` elements to ``(image, label)``.

    A record whose image cannot be decoded ends the pipeline with an error
    naming its file and index, or, with ``skip_corrupt``, is dropped, counted
    in ``corrupt_count`` and reported on stderr.
    """
    image_size = self.params['image_size']
    placeholder = tf.zeros([image_size, image_size, 3], tf.float32)
    safe = decoded_or_marked(decode, placeholder)
    skip = self.params['skip_corrupt']
    counter = self.corrupt_count

    def parsed(path, index, record, *extra):
      encoded, label = self._parse(path, index, record)
      return (path, index, label, encoded) + extra

    def decoded(path, index, label, encoded, *extra):
      return safe(encoded, *extra).map(lambda image, ok: (path, index, image, label, ok))

    def note(path, index, image, label, ok):
      where = [path, ': record ', tf.strings.as_string(index)]
      if not skip:
        return fail_unless(ok, where + [': the JPEG image cannot be decoded; set '
                                        'data_layer_params.skip_corrupt: true to skip such records'],
                           ok)

      def count():
        total = counter.assign_add(1)
        with tf.control_dependencies([tf.print(
            'warning: skipped corrupt record:', tf.strings.join(where), '(JPEG cannot be decoded);',
            total, 'skipped so far', output_stream=sys.stderr)]):
          return tf.identity(ok)

      return tf.cond(ok, lambda: ok, count)

    ds = records.map(parsed, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.interleave(decoded, cycle_length=tf.data.AUTOTUNE, block_length=1,
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.filter(note)
    return ds.map(lambda path, index, image, label, ok: (image, label))

  def check_corrupt_fraction(self, examples_read):
    skipped = int(self.corrupt_count.numpy())
    if not skipped:
      return
    per_epoch = self.num_examples // self.num_workers
    limit = self.params['max_corrupt_fraction'] * max(examples_read + skipped, per_epoch)
    if skipped > limit:
      raise DataError(f'imagenet: {skipped} corrupt records skipped after {examples_read} read '
                      f'by this worker, more than data_layer_params.max_corrupt_fraction '
                      f'({self.params["max_corrupt_fraction"]}) allows; the lines above name them')

  def serving_input(self):
    """Serves JPEG-encoded images ``[B]`` (any size), decoded and cropped as in eval."""
    image_size = self.params['image_size']

    def preprocess(encoded):
      return tf.map_fn(lambda jpeg: eval_image(jpeg, image_size), encoded,
                       fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.float32))
    return tf.TensorSpec([None], tf.string, name='images'), preprocess

  def dataset(self, batch_size, seed=0, start_batch=0):
    check_batch_size(batch_size)
    check_start_batch(start_batch)
    image_size = self.params['image_size']
    if self.mode == 'eval':
      records = tf.data.Dataset.from_tensor_slices(self.worker_files).flat_map(located_records)
      records = records.skip(start_batch * batch_size)
      ds = self._decode_checked(records, lambda encoded: eval_image(encoded, image_size))
      return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)

    records = self._train_records(batch_size, seed, start_batch).map(
        lambda key, path, index, record: (path, index, record, key))
    ds = self._decode_checked(records,
                              lambda encoded, key: train_image(encoded, key, image_size))
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

  def _train_records(self, batch_size, seed, start_batch):
    """An infinite dataset of ``(augmentation key, serialized record)`` for this worker."""
    batches = self.train_batches_per_epoch(batch_size)
    records_per_epoch = batches * batch_size
    first_epoch, first_skip = divmod(start_batch, batches)
    files = tf.constant(self.worker_files)
    cycle_length = min(MAX_CYCLE_LENGTH, len(self.worker_files))
    shuffle_buffer = self.params['shuffle_buffer']
    workers, worker = self.num_workers, self.worker_index

    def epoch_records(epoch):
      key = sub_key(epoch_key(seed, epoch), worker)
      shuffle_key = sub_key(key, SHUFFLE_KEY)
      order = tf.random.experimental.stateless_shuffle(files, seed=sub_key(shuffle_key, 0))
      records = tf.data.Dataset.from_tensor_slices(order).interleave(
          located_records, cycle_length=cycle_length, block_length=1,
          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
      if shuffle_buffer > 1:
        records = window_shuffle(records, shuffle_buffer, sub_key(shuffle_key, 1))
      # Shuffled before repeating, so that an epoch is a permutation whenever
      # the worker's files hold enough records.
      records = records.repeat().take(records_per_epoch).enumerate()
      skip = tf.cast(tf.where(epoch == first_epoch, first_skip * batch_size, 0), tf.int64)
      aug_key = sub_key(epoch_key(seed, epoch), AUGMENT_KEY)

      def keyed(position, located):
        # Positions interleave across workers so no two images share a key.
        return (sub_key(aug_key, position * workers + worker),) + tuple(located)

      return records.skip(skip).map(keyed)

    return tf.data.Dataset.counter(first_epoch).flat_map(epoch_records)
