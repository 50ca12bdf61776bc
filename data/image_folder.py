"""Image classification from a folder tree ``train_dir/<class>/<image files>``.

The files are JPEG, PNG, BMP or GIF (told apart by content; listed by
extension, see ``data.image_files``), of any size: each is decoded, converted
to ``channels`` and resized to ``image_size``, as Keras'
``image_dataset_from_directory`` does, then normalized per channel with the
training images' statistics (computed once per run and kept in the run
directory) or the configured ``mean`` and ``std``.

Splits: ``'train'`` (the training files, less the validation ones),
``'validation'`` (``validation_fraction`` of each class's training files,
chosen by a hash of ``split_seed`` and the file's path, the same in every mode
and worker) and ``'eval'`` (every file of ``eval_dir``, whose class folders
are those of ``train_dir`` or some of them, labelled by name). Eval mode reads ``eval_split``; with both a
validation split and ``eval_dir``, training picks its best checkpoint on
``'validation'`` and evaluates it on ``'eval'`` at the end
(``data.image_folder_facts.eval_splits``).
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

from core.params import ConfigError
from data import image_files, image_folder_facts, images, train_set
from data.base import (AUGMENT_KEY, SHUFFLE_KEY, DataError, DataLayer, check_batch_size,
                       check_start_batch, data_error_in, epoch_key, fail_unless,
                       holds_checkpoints, pad_crop_flip, sub_key, write_json_atomically)

STATISTICS_FILE = 'image_statistics.json'
# Training files decoded to compute the normalization statistics (a fixed, seeded sample).
STATISTICS_SAMPLE = 2000
STATISTICS_BATCH = 64
# A training image larger than this decoded gets a note (each is decoded whole, then resized).
LARGE_IMAGE_BYTES = 100 << 20
# The one-line notes this process has given (the train and the eval layer list the same tree).
_TOLD = set()


class ImageFolderDataLayer(DataLayer):
  """Image classification from ``train_dir/<class>/<files>``; see the module docstring.

  Train: the whole list of training files is permuted each epoch with a
  stateless key of ``(seed, epoch)``; worker ``w`` of ``W`` takes positions
  ``w, w + W, ...`` of the permutation, in full batches; files stream from
  disk and decode a batch per call, batches in parallel, in order. An
  example's augmentation (its crop corner and mirror for ``'flip'`` and
  ``'crop_flip'``, applied to the whole batch; its key for
  ``'inception_crop'``) is a function of ``(seed, epoch, file index)``, so a
  run resumed at ``start_batch`` reads exactly the batches of the
  uninterrupted run. Eval: one ordered pass; worker ``w`` reads files ``w, w
  + W, ...`` of the split.

  Corrupt files: a file that cannot be read or decoded stops the run with an
  error naming it; with ``skip_corrupt`` it is dropped, counted
  (``corrupt_count``, which includes files decoded ahead of the batches
  consumed) and named on stderr, and the run fails once more than
  ``max_corrupt_fraction`` of the files read (at least an epoch's worth) were
  dropped. A dropped file shifts the rest of the stream by one example. The
  guard costs one small dataset per batch, not per file: a batch is decoded
  whole, and only a batch that fails is decoded again file by file
  (:func:`data.images.decoded_group_or_marked`).

  Attributes:
    files: ``(path, label)`` of the split, in order.
    class_names: the sorted class folder names (label ``i`` is folder ``i``).
    split: ``'train'``, ``'validation'`` or ``'eval'``.
    statistics: ``(mean, std)`` per channel in [0, 1] units, once known.
  """

  # What it accepts and how big its training split is: data/image_folder_facts.py (no TensorFlow).
  PARAMS = image_folder_facts.PARAMS

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    p = self.params
    train_dir = p['train_dir']
    eval_split, _ = image_folder_facts.eval_splits(p)
    self.split = 'train' if mode == 'train' else eval_split
    try:
      skipped = []
      classes, all_train = image_files.list_tree(train_dir, skipped=skipped)
      self._tell_skipped(skipped, train_dir, 'train_dir')
      if self.split == 'eval':
        eval_files = self._eval_files(classes)
    except image_files.FolderError as e:
      raise DataError(str(e)) from None
    train, validation = image_files.split_files(all_train, p['validation_fraction'],
                                                p['split_seed'])
    if self.split == 'validation' and not p['validation_fraction']:
      raise ConfigError(
          "data_layer_params.eval_split: 'validation' needs validation_fraction > 0; set it, "
          "or give eval_dir and eval_split: 'eval'")
    if self.split == 'validation' and not validation:
      raise DataError(f'image_folder: validation_fraction {p["validation_fraction"]} holds out no '
                      f'file of {train_dir} (each class keeps at least one training file and '
                      'holds out round(fraction x its files)); raise it')
    chosen = {'train': train, 'validation': validation}.get(self.split)
    root = train_dir
    if chosen is None:
      chosen, root = eval_files, p['eval_dir']
    self.files = [(os.path.join(root, path), label) for path, label in chosen]
    self._all_train = all_train
    self._train_paths = [os.path.join(train_dir, path) for path, _ in train]
    self.class_names = classes
    self.num_classes = len(classes)
    self.num_examples = len(self.files)
    self._header_sizes = None
    self.image_shape = (*self._image_size(), p['channels'])
    if mode == 'train':
      # Each file is decoded whole, a few at once, before it is resized: gigabytes for huge ones.
      self._tell(image_files.large_image_line(self._sizes()[1], p['channels'],
                                              self.image_shape[:2], LARGE_IMAGE_BYTES,
                                              len(self._header_paths())))
    self.statistics = self._configured_statistics()
    self.corrupt_count = tf.Variable(0, dtype=tf.int64, trainable=False, name='corrupt_files')

  # --- construction ---------------------------------------------------------------------------

  def _eval_files(self, classes):
    """The files of ``eval_dir``, whose class folders must be ``classes``."""
    eval_dir = self.params['eval_dir']
    if eval_dir is None:
      raise ConfigError(
          'data_layer_params: eval mode has no split to read: give eval_dir (a tree like '
          'train_dir) or validation_fraction > 0')
    eval_classes = image_files.class_folders(eval_dir, 'eval_dir')
    only_eval = sorted(set(eval_classes) - set(classes))
    if only_eval:
      raise DataError(f'image_folder: eval_dir {eval_dir} holds class folders that train_dir '
                      f'{self.params["train_dir"]} does not: {only_eval}; the model predicts '
                      "train_dir's classes only")
    only_train = sorted(set(classes) - set(eval_classes))
    if only_train:
      # A test set without some class is real: its images keep the labels of their names.
      shown = ', '.join(only_train[:5]) + (f' and {len(only_train) - 5} more'
                                           if len(only_train) > 5 else '')
      self._tell(f'image_folder: eval_dir {eval_dir} holds {len(eval_classes)} of the '
                 f'{len(classes)} classes of train_dir (not {shown}); its labels are those of '
                 "train_dir's folders of the same names")
    skipped = []
    files = image_files.list_tree(eval_dir, eval_classes, 'eval_dir', skipped)[1]
    self._tell_skipped(skipped, eval_dir, 'eval_dir')
    label_of = [classes.index(name) for name in eval_classes]
    return [(path, label_of[label]) for path, label in files]

  def _tell_skipped(self, skipped, root, what):
    """The line naming the links a listing skipped, once per process (worker 0)."""
    if skipped:
      self._tell(image_files.describe_skipped(skipped, root, what))

  def _tell(self, line):
    """Prints a one-line note (None: none) on stderr, once per process (worker 0)."""
    if line is not None and self.worker_index == 0 and line not in _TOLD:
      _TOLD.add(line)
      print(line, file=sys.stderr, flush=True)

  def _image_size(self):
    """``image_size`` as ``(height, width)``, or the size the training files' headers agree on."""
    if self.params['image_size'] is not None:
      return images.image_size_pair(self.params['image_size'])
    size, seen = self._sizes()
    if size is not None:
      return size
    train_dir = self.params['train_dir']
    if not seen:
      raise DataError(f'image_folder: no JPEG, PNG, BMP or GIF header could be read in '
                      f'{train_dir}; set data_layer_params.image_size')
    examples = ', '.join(f'{h}x{w} ({path})' for (h, w), path in list(seen.items())[:3])
    raise DataError(f'image_folder: the images of {train_dir} differ in size ({examples}); set '
                    'data_layer_params.image_size to the size to resize them to')

  def _header_paths(self):
    """The files whose headers tell the image size: the training files (else the split's)."""
    return self._train_paths or [f for f, _ in self.files]

  def _sizes(self):
    """``common_image_size`` of the training files' headers (a sample of 2,000), read once."""
    if self._header_sizes is None:
      self._header_sizes = image_files.common_image_size(self._header_paths())
    return self._header_sizes

  def _configured_statistics(self):
    """``(mean, std)`` from the params, or None when they are to be computed."""
    p, channels = self.params, self.params['channels']
    if p['mean'] is None and p['std'] is None:
      return None
    if (p['mean'] is None) != (p['std'] is None):
      given = 'mean' if p['std'] is None else 'std'
      raise ConfigError(f'data_layer_params.{given}: give mean and std together, or neither '
                        '(then both are computed from the training images)')
    for key in ('mean', 'std'):
      if len(p[key]) != channels:
        raise ConfigError(f'data_layer_params.{key}: expected {channels} value(s), one per '
                          f'channel, got {p[key]!r}')
    return tuple(float(v) for v in p['mean']), tuple(float(v) for v in p['std'])

  # --- normalization statistics ---------------------------------------------------------------

  def use_run_dir(self, run_dir):
    """Keeps the run directory and settles the statistics now (read there, or computed, written).

    The statistics file records the training files too; with ``mean`` and
    ``std`` given there is none, and ``train_set.json`` records them.
    """
    super().use_run_dir(run_dir)
    if self.params['mean'] is not None and self.mode == 'train':
      train_set.keep(self, self._train_set())
    self.normalization()

  def normalization(self):
    """``(mean, std)`` per channel in [0, 1] units; computed on first use when not configured.

    With a run directory, the first run computes them from a fixed sample of
    the training files (each resized to ``image_size``) and worker 0 writes
    ``image_statistics.json`` there; later runs of the directory (eval,
    export, resume) read it back.

    Raises:
      DataError: the statistics file is unreadable or has the wrong number
        of channels, or a sampled file cannot be decoded (without
        ``skip_corrupt``).
    """
    if self.statistics is not None:
      return self.statistics
    path = os.path.join(self.run_dir, STATISTICS_FILE) if self.run_dir else None
    if path is not None and os.path.exists(path):
      self.statistics = self._read_statistics(path)
      return self.statistics
    rebuilt = holds_checkpoints(self.run_dir)
    if rebuilt and not self.params['rebuild_statistics']:
      raise DataError(f'image_folder: {path} is missing, and the checkpoints beside it were '
                      'trained with the statistics it held; computed again from today\'s '
                      f'{self.params["train_dir"]} they may normalize differently: put the file '
                      'back, or compute it again on purpose with --set '
                      'data_layer_params.rebuild_statistics=true')
    # Out of any graph being traced (a serving function): the sample is read eagerly.
    with tf.init_scope():
      mean, std = self._compute_statistics()
    self.statistics = mean, std
    # Worker 0 alone writes (rank-0 I/O); the others computed the same numbers from the same sample.
    if path is not None and self.worker_index == 0:
      os.makedirs(self.run_dir, exist_ok=True)
      self._write_statistics(path, {'mean': list(mean), 'std': list(std),
                                    'channels': self.params['channels'],
                                    'train_dir': self.params['train_dir'],
                                    'sampled_files': min(STATISTICS_SAMPLE,
                                                         len(self._train_paths))})
      if rebuilt:
        print(f'image_folder: computed {path} again from {len(self._train_paths)} training '
              'images of today\'s train_dir (rebuild_statistics); the checkpoints were trained '
              'with the numbers it held before', file=sys.stderr, flush=True)
    return self.statistics

  def _train_set(self):
    """What train_dir holds now (``data.train_set.TrainSet``): its training files, by name."""
    return train_set.TrainSet(
        'image_folder', f'train_dir {self.params["train_dir"]}', len(self._train_paths),
        train_set.fingerprint(f'{label}:{path}' for path, label in self._all_train),
        unit='images', parts='file names')

  def _write_statistics(self, path, record):
    """Writes ``record`` with what the training files are now (``_train_set``)."""
    write_json_atomically(path, dict(record, **self._train_set().record(),
                                     train_dir_files=len(self._all_train)))

  def _check_train_dir(self, saved, path):
    """Refuses a training set other than the one the run directory's checkpoints were trained on.

    Where the split read comes from train_dir (training, validation), the
    statistics file ``saved`` (read from ``path``) is held to what train_dir
    holds now (``data.train_set``); ``accept_changed_train_dir`` goes on, and
    a training layer records the new files.

    Raises:
      DataError: train_dir changed and the change is not accepted.
    """
    if self.mode == 'eval' and self.split != 'validation':
      return
    note = self._train_set().check(saved, path, self.params['accept_changed_train_dir'],
                                   ' (and validation split)')
    if note is None or self.worker_index != 0:
      return
    if self.mode == 'train':
      self._write_statistics(path, {key: value for key, value in saved.items()
                                    if key not in ('train_examples', 'train_dir_files',
                                                   'fingerprint')})
    self._tell(note + ', the statistics kept')

  def _read_statistics(self, path):
    channels = self.params['channels']
    try:
      with open(path, encoding='utf-8') as f:
        saved = json.load(f)
      mean, std = tuple(float(v) for v in saved['mean']), tuple(float(v) for v in saved['std'])
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise DataError(f'{path}: unreadable image statistics ({e}); delete it to compute them '
                      'again') from None
    if len(mean) != channels or len(std) != channels or min(std) <= 0:
      raise DataError(f'{path}: holds statistics of {len(mean)} channel(s), the run reads '
                      f'{channels}; delete it to compute them again')
    self._check_train_dir(saved, path)
    return mean, std

  def _compute_statistics(self):
    """Mean and std of a seeded sample of at most ``STATISTICS_SAMPLE`` training files, resized."""
    paths = self._train_paths
    if not paths:
      raise DataError(f'image_folder: {self.params["train_dir"]} holds no training file to '
                      'compute the normalization statistics from; set mean and std')
    rng = np.random.default_rng(self.params['split_seed'])
    if len(paths) > STATISTICS_SAMPLE:
      paths = [paths[i] for i in sorted(rng.choice(len(paths), STATISTICS_SAMPLE, replace=False))]
    size, channels = self.image_shape[:2], self.params['channels']
    groups = tf.data.Dataset.from_tensor_slices(paths).batch(STATISTICS_BATCH).map(
        lambda group: (group, tf.zeros_like(group, tf.int32)))
    ds = self._decode_checked(groups, lambda encoded: images.eval_image(encoded, size, channels),
                              count=False)
    ds = ds.map(lambda pixels, labels: pixels)
    try:
      return images.image_statistics(ds)
    except tf.errors.OpError as e:
      message = data_error_in(e)
      if message is None:
        raise
      raise DataError(message) from None

  # --- the pipeline ---------------------------------------------------------------------------

  def normalize(self, pixels):
    """Float pixels in [0, 255] units -> zero mean and unit variance per channel."""
    mean, std = self.normalization()
    return images.normalize(pixels, mean, std)

  def _decode_checked(self, groups, decode, count=True):
    """Reads and decodes groups of files: ``(paths, labels, *extra) -> (images, labels, *extra)``.

    Each element is a group (a batch) of ``g`` files; ``decode(encoded,
    *extra) -> image`` is applied to each file of it, inside one guard per
    group (``images.decoded_group_or_marked``: a group that fails is decoded
    again file by file). A file that cannot be read or decoded ends the
    pipeline with an error naming it, or, with ``skip_corrupt``, is dropped
    from its group (which comes out shorter), counted in ``corrupt_count``
    (when ``count``) and named on stderr.
    """
    placeholder = tf.zeros(self.image_shape, tf.float32)
    # Read inside the guarded decode, so an unreadable file is named like an undecodable one.
    safe = images.decoded_group_or_marked(
        lambda path, *extra: decode(tf.io.read_file(path), *extra), placeholder)
    skip = self.params['skip_corrupt']
    counter = self.corrupt_count if count else None

    def decoded(paths, labels, *extra):
      return safe(paths, *extra).map(lambda pixels, ok: (paths, pixels, ok, labels) + extra)

    def warn(bad):
      """Names each skipped file on a line of its own; counts them."""
      lines = ['warning: skipped corrupt image file: ', bad, ' (cannot be read or decoded)']
      if counter is not None:
        dropped = tf.size(bad, out_type=tf.int64)
        total = counter.assign_add(dropped)
        running = total - dropped + 1 + tf.range(dropped)
        lines += ['; ', tf.strings.as_string(running), ' skipped so far']
      return tf.print(tf.strings.reduce_join(tf.strings.join(lines), separator='\n'),
                      output_stream=sys.stderr)

    def checked(paths, pixels, ok, labels, *extra):
      if not skip:
        # The first file of the group that failed (the message is only built when one did).
        first_bad = paths[tf.argmin(tf.cast(ok, tf.int32))]
        pixels = fail_unless(tf.reduce_all(ok), [
            first_bad, ': cannot be read or decoded as a JPEG, PNG, BMP or GIF image; set '
            'data_layer_params.skip_corrupt: true to skip such files'], pixels)
        return (pixels, labels) + extra

      def note():
        with tf.control_dependencies([warn(tf.boolean_mask(paths, tf.logical_not(ok)))]):
          return tf.identity(ok)

      ok = tf.cond(tf.reduce_all(ok), lambda: ok, note)
      return tuple(tf.boolean_mask(part, ok) for part in (pixels, labels) + extra)

    ds = groups.interleave(decoded, cycle_length=tf.data.AUTOTUNE, block_length=1,
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    # In order, one group at a time: the counter and the warnings follow the stream.
    return ds.map(checked)

  def check_corrupt_fraction(self, examples_read):
    skipped = int(self.corrupt_count.numpy())
    if not skipped:
      return
    per_epoch = self.num_examples // self.num_workers
    limit = self.params['max_corrupt_fraction'] * max(examples_read + skipped, per_epoch)
    if skipped > limit:
      raise DataError(f'image_folder: {skipped} corrupt files skipped after {examples_read} read '
                      f'by this worker, more than data_layer_params.max_corrupt_fraction '
                      f'({self.params["max_corrupt_fraction"]}) allows; the lines above name them')

  def serving_input(self):
    """Serves encoded image files ``[B]`` (JPEG, PNG, BMP, GIF; any size), preprocessed as eval."""
    size, channels = self.image_shape[:2], self.params['channels']
    mean, std = self.normalization()

    def preprocess(encoded):
      pixels = tf.map_fn(lambda e: images.eval_image(e, size, channels), encoded,
                         fn_output_signature=tf.TensorSpec(self.image_shape, tf.float32))
      return images.normalize(pixels, mean, std)
    return tf.TensorSpec([None], tf.string, name='images'), preprocess

  def dataset(self, batch_size, seed=0, start_batch=0):
    check_batch_size(batch_size)
    check_start_batch(start_batch)
    mean, std = self.normalization()
    size, channels = self.image_shape[:2], self.params['channels']
    paths = tf.constant([path for path, _ in self.files] or [''], tf.string)
    labels = tf.constant([label for _, label in self.files] or [0], tf.int32)
    train = self.mode == 'train'
    augment = self.params['augment'] if train else 'none'

    def files(index, *extra):
      return (tf.gather(paths, index), tf.gather(labels, index)) + extra

    # Files are read and decoded a batch at a time (one function call and one
    # guard per batch, not per file); the draws of 'flip' and 'crop_flip' ride
    # along and are applied to the whole batch at the end.
    if train:
      groups = self._train_batches(batch_size, seed, start_batch).map(files)
    else:
      index = tf.range(self.worker_index, self.num_examples, self.num_workers)
      groups = tf.data.Dataset.from_tensor_slices(index).skip(start_batch * batch_size).batch(
          batch_size).map(files)

    def decode(encoded, *extra):
      if augment == 'inception_crop':
        # The crop is chosen before the resize (a JPEG decodes only the crop): per file, by key.
        return images.train_image(encoded, extra[0], size, channels, augment)
      # Resized only: the draws of 'flip' and 'crop_flip' (extra) are applied per batch below.
      return images.eval_image(encoded, size, channels)

    ds = self._decode_checked(groups, decode)
    if self.params['skip_corrupt']:
      # A batch that lost a corrupt file is short: the stream after it moves up to fill the batches.
      ds = ds.unbatch().batch(batch_size, drop_remainder=train)

    def finish(pixels, labels, *extra):
      if augment in ('flip', 'crop_flip'):
        pixels = pad_crop_flip(pixels, *extra, images.batch_augment_pad(size, augment))
      pixels = images.normalize(pixels, mean, std)
      if train:
        pixels = tf.ensure_shape(pixels, [batch_size, *self.image_shape])
        labels = tf.ensure_shape(labels, [batch_size])
      return pixels, labels

    ds = ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)

  def _train_batches(self, batch_size, seed, start_batch):
    """An infinite dataset of this worker's train batches: ``(file indices [B], *augmentation)``.

    The augmentation part is, by ``augment``: nothing (``'none'``); the crop
    corners and mirrors of :func:`data.images.batch_augment_draws`
    (``'flip'``, ``'crop_flip'``); or a stateless key per file
    (``'inception_crop'``). Each is a function of ``(seed, epoch, file
    index)`` only.
    """
    n = self.num_examples
    batches = self.train_batches_per_epoch(batch_size)
    first_epoch, first_skip = divmod(start_batch, batches)
    workers, worker = self.num_workers, self.worker_index
    augment, size = self.params['augment'], self.image_shape[:2]

    def epoch_batches(epoch):
      key = epoch_key(seed, epoch)
      order = tf.random.experimental.stateless_shuffle(tf.range(n), seed=sub_key(key, SHUFFLE_KEY))
      # Every worker cuts the same permutation, so the shards are disjoint.
      mine = order[worker::workers][:batches * batch_size]
      index = tf.reshape(mine, [batches, batch_size])
      index = index[tf.where(epoch == first_epoch, first_skip, 0):]
      aug_key = sub_key(key, AUGMENT_KEY)
      # Keyed by the file, not its position: the augmentation depends on
      # (seed, epoch, example) only.
      if augment in ('flip', 'crop_flip'):
        offsets, flips = images.batch_augment_draws(aug_key, n, size, augment)
        return tf.data.Dataset.from_tensor_slices(
            (index, tf.gather(offsets, index), tf.gather(flips, index)))
      rows = tf.data.Dataset.from_tensor_slices((index,))
      if augment == 'inception_crop':
        # sub_key(aug_key, i) of each file of the batch, computed for the batch at once.
        return rows.map(lambda i: (i, tf.vectorized_map(lambda j: sub_key(aug_key, j), i)))
      return rows

    return tf.data.Dataset.counter(first_epoch).flat_map(epoch_batches)
