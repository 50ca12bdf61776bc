"""The data-layer interface, its errors and the in-memory pipeline it shares.

A data layer turns files into a ``tf.data.Dataset`` of ``(images, labels)``
batches for one worker. The trainer needs four things from it: the size of the
split (``num_examples``), the shape of one image, the number of classes, and
``dataset(batch_size, seed, start_batch)``.

Reproducibility contract (train mode): the stream is a pure function of
``(seed, num_workers, worker_index, batch_size)``. Epoch ``e`` is shuffled with a
stateless key made from ``(seed, e)``, and the random augmentation of an example
uses a key made from ``(seed, e, example)``, so a run resumed at micro-batch
``start_batch`` sees exactly the batches the uninterrupted run would have seen.
"""

import json
import os
import threading
import uuid

import numpy as np
import tensorflow as tf

from core.params import ConfigError, check_params
from data import images as images_lib

MODES = ('train', 'eval')

# Sub-key purposes, folded into the epoch key so that the shuffle and each kind
# of random draw use independent streams.
SHUFFLE_KEY = 0
AUGMENT_KEY = 1


class DataError(ValueError):
  """A data file is missing, truncated or malformed; the message names the file."""


# A data layer's check inside a tf.data pipeline fails with a TensorFlow error
# whose text holds the layer's message after this marker; data_error_in finds it.
DATA_ERROR_MARKER = 'data error: '


def data_error_in(exc):
  """The data layer's one-line message inside a TensorFlow error, or None."""
  text = str(exc)
  start = text.find(DATA_ERROR_MARKER)
  if start < 0:
    return None
  message = text[start + len(DATA_ERROR_MARKER):].split('\n', 1)[0]
  return message.split(']', 1)[0].strip() if ']' in message else message.strip()


def named_data_loss(exc, layers):
  """The one line of the DataError ``exc``, naming the file when a record could not be read.

  TensorFlow's ``DataLossError`` (``corrupted record at 8030``) names a byte
  offset but no file; the train loop raises a DataError for it, the
  ``DataLossError`` its context. Then each layer of ``layers`` (None ones
  skipped) is asked in turn for its first file whose records cannot be read
  (:meth:`DataLayer.corrupt_file`), and the first answer is the line.
  """
  if isinstance(exc.__context__, tf.errors.DataLossError):
    for layer in layers or ():
      line = layer.corrupt_file() if layer is not None else None
      if line is not None:
        return line
  return str(exc)


def fail_unless(ok, message_parts, value):
  """``value`` when ``ok``; else the pipeline fails with the joined message (a DataError for the trainer).

  The message is only built when the check fails.
  """
  def fail():
    message = tf.strings.join([DATA_ERROR_MARKER] + list(message_parts))
    with tf.control_dependencies([tf.debugging.Assert(False, [message])]):
      return tf.identity(value)

  return tf.cond(ok, lambda: tf.identity(value), fail)


def epoch_key(seed, epoch):
  """Returns the stateless RNG key ``[2] int64`` of one epoch of a run.

  Args:
    seed: the run's data seed (int or int64 scalar tensor).
    epoch: the epoch number (int or int64 scalar tensor).
  """
  return tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])


def sub_key(key, data):
  """Derives an independent stateless key from ``key`` and an integer ``data``."""
  return tf.random.experimental.stateless_fold_in(key, tf.cast(data, tf.int64))


def check_batch_size(batch_size):
  """Raises ConfigError unless ``batch_size`` is a positive integer."""
  if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
    raise ConfigError(f'batch_size: expected a positive integer, got {batch_size!r}')


def check_start_batch(start_batch):
  """Raises ConfigError unless ``start_batch`` is an integer >= 0."""
  if (isinstance(start_batch, bool) or not isinstance(start_batch, (int, np.integer))
      or start_batch < 0):
    raise ConfigError(f'start_batch: expected an integer >= 0, got {start_batch!r}')


class DataLayer:
  """Base class of the data layers.

  Subclasses declare ``PARAMS`` (``name -> Param``), call this constructor, then
  set ``num_examples``, ``image_shape``, ``num_classes``, ``split`` (and
  ``class_names`` when the classes have names) and implement :meth:`dataset`.

  Args:
    params: the ``data_layer_params`` dict; validated against ``PARAMS``.
    mode: ``'train'`` (infinite, shuffled, augmented, full batches) or
      ``'eval'`` (one ordered pass over every example).
    num_workers: number of data-parallel workers sharing the split.
    worker_index: this worker's index in ``[0, num_workers)``.

  Attributes:
    num_examples: examples in the split, over all workers.
    image_shape: ``(height, width, channels)`` of one image.
    num_classes: labels are in ``[0, num_classes)``.
    class_names: a tuple of ``num_classes`` strings, the name of each label,
      or None (consumers then name a class by its index).
    split: the name of the split the layer reads: ``'train'`` in train mode;
      in eval mode the layer's eval split (``'test'``, ``'validation'``, ...).
    run_dir: the run directory (:meth:`use_run_dir`), or None until it is given.

  Raises:
    ConfigError: for bad params, mode or worker numbers.
  """

  PARAMS = {}

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    if mode not in MODES:
      raise ConfigError(f'mode: {mode!r} is not allowed; allowed: {", ".join(map(repr, MODES))}')
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
      raise ConfigError(f'num_workers: expected a positive integer, got {num_workers!r}')
    if (isinstance(worker_index, bool) or not isinstance(worker_index, int)
        or not 0 <= worker_index < num_workers):
      raise ConfigError(
          f'worker_index: expected an integer in [0, {num_workers}), got {worker_index!r}')
    self.params = check_params(params, self.PARAMS, 'data_layer_params')
    self.mode = mode
    self.num_workers = num_workers
    self.worker_index = worker_index
    self.num_examples = None
    self.image_shape = None
    self.num_classes = None
    self.class_names = None
    self.split = None
    self.run_dir = None

  def use_run_dir(self, run_dir):
    """Tells the layer the run directory, where it keeps what it computes once per run.

    The trainer calls it right after building the layer. A layer that derives
    something from its data (normalization statistics, a vocabulary) writes it
    there on first use and reads it back in later runs of the directory
    (eval, export, a resumed run), so it never drifts. Without a run directory
    (None) such values are computed in memory.

    Args:
      run_dir: the run directory, or None.
    """
    self.run_dir = run_dir

  def check_corrupt_fraction(self, examples_read):
    """Raises DataError when more records were skipped as corrupt than allowed.

    Layers that skip no records (all but ``imagenet`` with ``skip_corrupt``) never raise.

    Args:
      examples_read: train examples this worker has taken so far.
    """
    del examples_read

  def corrupt_file(self):
    """One line naming the first of this worker's files whose records cannot be read, or None.

    Asked after TensorFlow failed on a record (``DataLossError``, which names
    a byte offset but no file); layers that read no record files (the base)
    answer None.
    """
    return None

  def batches_per_epoch(self, batch_size):
    """Returns the number of full train batches one worker reads per epoch."""
    check_batch_size(batch_size)
    return self.num_examples // self.num_workers // batch_size

  def train_batches_per_epoch(self, batch_size):
    """Like :meth:`batches_per_epoch`, but raises when an epoch holds no full batch."""
    batches = self.batches_per_epoch(batch_size)
    if batches == 0:
      raise ConfigError(
          f'batch_size: {batch_size} per worker x {self.num_workers} worker(s) is larger than '
          f'the {self.num_examples} examples of the {self.mode} split')
    return batches

  def serving_input(self):
    """What a served model takes, and how it becomes the model's input.

    The preprocessing is the eval path's, so a served model sees what it was
    evaluated on. The base class serves images as the model takes them.

    Returns:
      ``(tf.TensorSpec of a batch of inputs, function from such a batch to
      float32 [B, H, W, C] model inputs)``.
    """
    return (tf.TensorSpec([None, *self.image_shape], tf.float32, name='images'),
            lambda images: images)

  def encoded_image_input(self):
    """A function from encoded image files to the model's inputs, preprocessed as in eval.

    Serves ``--mode=infer`` on image files for every image layer. A layer
    that serves encoded images already (its :meth:`serving_input` takes
    strings) applies that preprocessing; any other decodes each file by
    content (JPEG, PNG, BMP or GIF) to the channels of ``image_shape``,
    resizes it (bilinear) to ``image_shape[:2]`` when its size differs, casts
    it to the served dtype (uint8: rounded) and applies the serving
    preprocessing.

    Returns:
      ``f(string [B]) -> float32 [B, H, W, C]``.
    """
    spec, preprocess = self.serving_input()
    if spec.dtype == tf.string:
      return preprocess
    height, width, channels = self.image_shape
    dtype = spec.dtype

    def one(encoded):
      image = images_lib.decode(encoded, channels)
      same = tf.reduce_all(tf.equal(tf.shape(image)[:2], [height, width]))

      def resized():
        pixels = tf.image.resize(image, [height, width], method='bilinear')
        if dtype.is_integer:
          return tf.saturate_cast(tf.round(pixels), dtype)
        return tf.cast(pixels, dtype)

      out = tf.cond(same, lambda: tf.cast(image, dtype), resized)
      out.set_shape([height, width, channels])
      return out

    def encoded_input(encoded):
      batch = tf.map_fn(one, encoded,
                        fn_output_signature=tf.TensorSpec([height, width, channels], dtype))
      return preprocess(batch)

    return encoded_input

  def dataset(self, batch_size, seed=0, start_batch=0):
    """Returns a ``tf.data.Dataset`` of ``(float32 [B, H, W, C], int32 [B])`` batches.

    Args:
      batch_size: examples per batch on this worker.
      seed: the data seed; the same seed gives the same stream.
      start_batch: train mode: the first micro-batch to produce, counted from
        the start of training (for resuming). Eval mode: batches of the single
        pass to skip.
    """
    raise NotImplementedError


def holds_checkpoints(run_dir):
  """Whether ``run_dir`` holds a checkpoint (the index file of one, whatever its state file says).

  What a data layer computed and kept there on the first run (statistics, a
  vocabulary) was then used by those checkpoints: it is a fact of the run, not
  something to compute again silently.
  """
  return bool(run_dir) and bool(tf.io.gfile.glob(os.path.join(run_dir, '*.index')))


def text_lines(path):
  """Yields ``(line number, line)`` of a UTF-8 text file, the line with its newline.

  A byte-order mark at the start of the file (what some editors on Windows
  write) is no part of the first line.

  Raises:
    DataError: naming the file, the line and the byte of the first bytes that
      are not UTF-8.
  """
  with open(path, 'rb') as f:
    for number, raw in enumerate(f, start=1):
      try:
        yield number, raw.decode('utf-8-sig' if number == 1 else 'utf-8')
      except UnicodeDecodeError as exc:
        raise DataError(f'{path}:{number}: not UTF-8 text ({exc.reason} at byte {exc.start})') from None


def write_json_atomically(path, content):
  """Writes ``content`` as JSON to ``path`` (local or remote) through a temporary file.

  A reader never sees half a file: the temporary one, named for this process
  and call, is renamed into place.
  """
  temporary = f'{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}'
  with tf.io.gfile.GFile(temporary, 'w') as f:
    f.write(json.dumps(content, indent=1, sort_keys=True) + '\n')
  tf.io.gfile.rename(temporary, path, overwrite=True)


_CACHE = {}
_CACHE_LOCK = threading.Lock()


def cached_load(paths, loader):
  """Returns ``loader(paths)``, computed once per process for unchanged files.

  The key includes each file's size and modification time, so a file rewritten
  in place is read again.

  Args:
    paths: list of file paths the loader reads.
    loader: ``f(paths) -> value``.
  """
  key = (loader.__module__, loader.__qualname__,
         tuple((os.path.realpath(p), os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths))
  with _CACHE_LOCK:
    if key not in _CACHE:
      _CACHE[key] = loader(paths)
    return _CACHE[key]


def pad_crop_flip(images, offsets, flips, pad):
  """Randomly translated and mirrored copies of a batch of images.

  Equivalent, image by image, to zero-padding by ``pad`` pixels on every side,
  cropping the original size at ``offsets`` and mirroring left-right where
  ``flips`` is true; done with two batched gathers instead of per-image ops.

  Args:
    images: ``[B, H, W, C]`` tensor.
    offsets: ``[B, 2] int32`` crop corner (row, column) in the padded image,
      each in ``[0, 2 * pad]`` (per axis when ``pad`` is a pair).
    flips: ``[B] bool``.
    pad: padding in pixels: one int for both axes, or ``(rows, columns)``.

  Returns:
    A ``[B, H, W, C]`` tensor of the dtype of ``images``.
  """
  height, width = images.shape[1], images.shape[2]
  pad_y, pad_x = (pad, pad) if isinstance(pad, int) else pad
  padded = tf.pad(images, [[0, 0], [pad_y, pad_y], [pad_x, pad_x], [0, 0]])
  rows = offsets[:, :1] + tf.range(height)[tf.newaxis, :]
  cols = tf.range(width)[tf.newaxis, :]
  # Mirroring after the crop reads the crop's columns right to left.
  cols = tf.where(flips[:, tf.newaxis], width - 1 - cols, cols) + offsets[:, 1:]
  out = tf.gather(padded, rows, axis=1, batch_dims=1)
  return tf.gather(out, cols, axis=2, batch_dims=1)


class InMemoryDataLayer(DataLayer):
  """A data layer whose split fits in memory as uint8 images.

  Subclasses declare a ``data_dir`` and an ``augment`` param, call :meth:`load`
  in their constructor (it sets ``self.images``, ``uint8 [N, H, W, C]``, and
  ``self.labels``, ``int32 [N]``) and set ``MEAN``/``STD`` (per channel, in
  [0, 1] pixel units) and ``PAD`` (the augmentation's translation range).
  Batches are gathered from the arrays by shuffled index, so the pipeline costs
  two gathers per batch.
  """

  MEAN = (0.5,)
  STD = (0.5,)
  PAD = 4

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    self.images = None
    self.labels = None

  @property
  def augment(self):
    """Whether batches are augmented: train mode with the ``augment`` param set."""
    return self.mode == 'train' and self.params['augment']

  def load(self, kind, file_names, loader, hint, num_classes):
    """Loads the split from ``data_dir`` (once per process) and sets the shape attributes.

    Args:
      kind: the data set's registered name, for error messages.
      file_names: the split's files inside the ``data_dir`` param.
      loader: ``f(paths) -> (uint8 images [N, H, W, C], int32 labels [N])``.
      hint: what to do when a file is missing.
      num_classes: the number of classes.

    Raises:
      DataError: naming the missing directory or file, or the loader's error.
    """
    data_dir = self.params['data_dir']
    if not os.path.isdir(data_dir):
      raise DataError(f'{kind}: data directory {data_dir} does not exist; {hint}')
    paths = [os.path.join(data_dir, name) for name in file_names]
    for path in paths:
      if not os.path.isfile(path):
        raise DataError(f'{kind}: {path} not found; {hint}')
    self.images, self.labels = cached_load(paths, loader)
    self.num_examples = int(self.images.shape[0])
    self.image_shape = tuple(int(d) for d in self.images.shape[1:])
    self.num_classes = num_classes

  def normalize(self, images):
    """uint8 pixels -> float32, zero mean and unit variance per channel (``MEAN``, ``STD``)."""
    scale = tf.constant([255.0 * s for s in self.STD], tf.float32)
    shift = tf.constant([255.0 * m for m in self.MEAN], tf.float32)
    return (tf.cast(images, tf.float32) - shift) / scale

  def serving_input(self):
    """Serves uint8 pixels ``[B, H, W, C]``, as the data set stores them; see the base class."""
    return (tf.TensorSpec([None, *self.image_shape], tf.uint8, name='images'), self.normalize)

  def dataset(self, batch_size, seed=0, start_batch=0):
    check_batch_size(batch_size)
    check_start_batch(start_batch)
    images = tf.convert_to_tensor(self.images)
    labels = tf.convert_to_tensor(self.labels, tf.int32)
    pad = self.PAD

    def make_batch(index, offsets=None, flips=None):
      batch = tf.gather(images, index)
      if offsets is not None:
        batch = pad_crop_flip(batch, offsets, flips, pad)
      return self.normalize(batch), tf.gather(labels, index)

    if self.mode == 'eval':
      index = tf.range(self.worker_index, self.num_examples, self.num_workers)
      ds = tf.data.Dataset.from_tensor_slices(index).batch(batch_size).skip(start_batch)
    else:
      ds = self._train_index_batches(batch_size, seed, start_batch)
    ds = ds.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)

  def _train_index_batches(self, batch_size, seed, start_batch):
    """An infinite dataset of index batches (and their augmentation draws)."""
    n = self.num_examples
    batches = self.train_batches_per_epoch(batch_size)
    first_epoch, first_skip = divmod(start_batch, batches)
    workers, worker = self.num_workers, self.worker_index
    augment, pad = self.augment, self.PAD

    def epoch_batches(epoch):
      key = epoch_key(seed, epoch)
      order = tf.random.experimental.stateless_shuffle(tf.range(n), seed=sub_key(key, SHUFFLE_KEY))
      # Every worker cuts the same permutation, so the shards are disjoint.
      mine = order[worker::workers][:batches * batch_size]
      index = tf.reshape(mine, [batches, batch_size])
      skip = tf.where(epoch == first_epoch, first_skip, 0)
      index = index[skip:]
      if not augment:
        return tf.data.Dataset.from_tensor_slices(index)
      # One draw per example of the split, looked up by example index: an
      # example's augmentation depends on (seed, epoch, example) only, not on
      # the batch size or the number of workers.
      aug_key = sub_key(key, AUGMENT_KEY)
      offsets = tf.random.stateless_uniform(
          [n, 2], seed=sub_key(aug_key, 0), minval=0, maxval=2 * pad + 1, dtype=tf.int32)
      flips = tf.random.stateless_uniform([n], seed=sub_key(aug_key, 1)) < 0.5
      return tf.data.Dataset.from_tensor_slices(
          (index, tf.gather(offsets, index), tf.gather(flips, index)))

    return tf.data.Dataset.counter(first_epoch).flat_map(epoch_batches)
