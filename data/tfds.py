"""Image classification from a TensorFlow Datasets data set, by name.

Any TFDS data set with an ``Image`` feature and a ``ClassLabel`` feature
(``mnist``, ``fashion_mnist``, ``cifar10``, ``oxford_flowers102``, a user's own
builder, ...) is read from its prepared files under ``data_dir`` with
``tfds.builder(name, data_dir=...)``, offline: ``download: true`` is needed for
TFDS to download and prepare it. Class names, the number of classes and the
size of each split come from the data set's info; the images are decoded and
preprocessed by ``data/images.py`` as the ``tfrecord`` layer does.

``tensorflow_datasets`` (pinned in requirements.txt) is imported by the
functions here only, since it takes seconds to import.

A download (``download: true`` and a data set not prepared) runs in a child
process (``download_in_child``), its output kept in a log file beside the
data: a stop signal ends it at once (nothing of the run had started), and a
failed download, the network unreachable above all, is one line after a few
seconds instead of TensorFlow Datasets' ten retries of each file over minutes.
"""

import os
import re
import subprocess
import sys

import tensorflow as tf

from core import signals
from core.params import ConfigError
from data import images, tfds_facts, train_set
from data.base import DataError
from data.encoded_images import EncodedImageLayer
from data.record_framing import first_unreadable_record


# A worker's share of a split whose encoded images fit in this many bytes is
# permuted whole each epoch (two windows are in memory at once); a larger one
# in windows of DEFAULT_SHUFFLE_BUFFER examples.
WHOLE_SPLIT_BYTES = 256 << 20
DEFAULT_SHUFFLE_BUFFER = 10000


def _tfds():
  import tensorflow_datasets  # pylint: disable=import-outside-toplevel (slow; only this layer needs it)
  return tensorflow_datasets


def _default_data_dir():
  return _tfds().core.constants.DATA_DIR


# What the child of download_in_child runs: argv[1:] = name, data_dir ('' for the default), the
# module that registers the builder (imported unless it is TFDS' own).
_DOWNLOAD_CODE = """
import importlib, socket, sys
name, data_dir, module = sys.argv[1:4]
# A read that waits this long for a byte is a network that is gone, not a slow one.
socket.setdefaulttimeout(60)
from tensorflow_datasets.core.download import downloader
downloader.MAX_RETRIES = DOWNLOAD_RETRIES
import tensorflow_datasets as tfds
if not module.startswith('tensorflow_datasets'):
  importlib.import_module(module)
tfds.builder(name, data_dir=data_dir or None).download_and_prepare()
"""
# Attempts of each file beyond the first: TFDS' own 10, with its growing back-off, keep a
# machine without a network waiting for about 3.5 minutes before it says so.
DOWNLOAD_RETRIES = 2


def download_in_child(name, data_dir, where, module):
  """Downloads and prepares a TFDS data set in a child process; see the module docstring.

  The child's output (TFDS' progress and warnings) goes to
  ``<where>/<name>.download.log``. A stop signal (SIGTERM, SIGINT) during the
  download ends the child and raises ``core.signals.StartupStopped`` (run.py:
  one line, 128 + the signal).

  Args:
    name: the data set (``mnist``, ``cifar10:3.0.2``).
    data_dir: where to prepare it, or None (TFDS' default).
    where: that directory in words (TFDS' default resolved).
    module: the module whose import registers the builder (``__main__``: the
      download runs in this process, which alone has it).

  Raises:
    DataError: the download or the preparation failed, naming the last line
      of the child's output and the log.
  """
  if module == '__main__':
    _tfds().builder(name, data_dir=data_dir).download_and_prepare()
    return
  os.makedirs(where, exist_ok=True)
  log_path = os.path.join(where, re.sub(r'[^\w.-]', '_', name) + '.download.log')
  code = _DOWNLOAD_CODE.replace('DOWNLOAD_RETRIES', str(DOWNLOAD_RETRIES))
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
             TF_CPP_MIN_LOG_LEVEL='2')
  child = None
  with open(log_path, 'w', encoding='utf-8') as log:
    try:
      with signals.stop_raises(f'while TensorFlow Datasets downloaded {name}'):
        # A session of its own: the stop signal is this process's to answer; it ends the child.
        child = subprocess.Popen([sys.executable, '-c', code, name, data_dir or '', module],
                                 stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
        print(f'tfds: downloading and preparing {name} under {where} (progress in {log_path})',
              file=sys.stderr, flush=True)
        status = child.wait()
    finally:
      if child is not None and child.poll() is None:
        child.kill()
        child.wait()
  if status != 0:
    with open(log_path, encoding='utf-8', errors='replace') as f:
      lines = [line.strip() for line in f if line.strip()]
    raise DataError(f'tfds: downloading {name} failed: {_reason(lines, status)}; check the '
                    'network (or a proxy: HTTPS_PROXY), or prepare it on a machine that has one '
                    f'and copy it under {where} (TFDS\' output: {log_path})')


def _reason(lines, status):
  """The failure in a few words, from the child's output (the last line of its traceback)."""
  # The traceback's last line; the downloads' threads may write after it.
  raised = [line for line in lines if re.match(r'^[\w.]+(?:Error|Exception): ', line)]
  if not raised and not lines:
    return f'exit status {status}'
  last = (raised or lines)[-1]
  kind = re.match(r'^([\w.]+(?:Error|Exception)):', last)
  # The operating system's reason, innermost in requests' and urllib3's nested messages.
  errors = re.findall(r'\[Errno -?\d+\] [^\'")\]]+', last)
  if kind and errors:
    return f'{kind.group(1).rsplit(".", 1)[-1]} ({errors[-1].strip()})'
  return last if len(last) <= 200 else last[:200] + '...'


class TfdsDataLayer(EncodedImageLayer):
  """A TensorFlow Datasets image-classification split, deterministic and exactly resumable.

  The split is read in its stored order (``shuffle_files=False``, no
  auto-caching, TFDS' ordering guard on), and each example is numbered by
  its position in it; worker ``w`` of ``W`` keeps the examples at positions
  ``w, w + W, ...`` (train and eval, so evaluation reads each example once
  over all workers). Train: every epoch permutes consecutive windows of
  ``shuffle_buffer`` of the worker's examples with a stateless key of
  ``(seed, epoch, worker)`` (by default the buffer holds the worker's whole
  share when its images take at most 256 MB, so each epoch is a full
  permutation) and wraps around to fill ``batches_per_epoch`` batches;
  each image is augmented with a key of ``(seed, epoch, position)``
  (``data.images.train_image``), so ``start_batch`` resumes exactly. Eval:
  one ordered pass (``data.images.eval_image``). Images are normalized with
  ``mean`` / ``std``, given or computed once from the first training images
  and kept in the run directory (:meth:`EncodedImageLayer.statistics`).
  """

  # What it accepts and how big its training split is: data/tfds_facts.py (no TensorFlow).
  PARAMS = tfds_facts.PARAMS
  kind = 'tfds'

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    params = self.params
    name, image_key, label_key = params['name'], params['image_key'], params['label_key']
    self.builder = self._prepared_builder()
    info = self.builder.info
    features = info.features
    have = ', '.join(sorted(features.keys()))
    for key, param, feature in ((image_key, 'image_key', 'Image'),
                                (label_key, 'label_key', 'ClassLabel')):
      if key not in features or not isinstance(features[key], getattr(_tfds().features, feature)):
        raise ConfigError(f'data_layer_params.{param}: {name} has no {feature} feature {key!r}; '
                          f'its features: {have}', f'data_layer_params.{param}', 'invalid')
    image_feature, label_feature = features[image_key], features[label_key]
    self.split = params['train_split'] if mode == 'train' else params['eval_split']
    self.train_split = params['train_split']
    self.num_examples = self._split_size(self.split,
                                         'train_split' if mode == 'train' else 'eval_split')
    if not self.num_examples:
      raise DataError(f'tfds: split {self.split!r} of {name} holds no examples')
    self.class_names = tuple(label_feature.names)
    self.num_classes = label_feature.num_classes
    shape = tuple(image_feature.shape)
    size = params['image_size']
    if size is None:
      if len(shape) != 3 or shape[0] is None or shape[1] is None:
        raise ConfigError(f'data_layer_params.image_size: required: the images of {name} have no '
                          f'fixed size (shape {shape})', 'data_layer_params.image_size', 'missing')
      size = [shape[0], shape[1]]
    channels = params['channels']
    if channels is None:
      channels = shape[-1] if len(shape) == 3 and shape[-1] in (1, 3) else 3
    height, width = images.image_size_pair(size)
    self.image_shape = (height, width, channels)
    augment = params['augment']
    crop = params['crop_fraction']
    if crop is None and augment == 'inception_crop':
      crop = 0.875
    self.settings = {
        'image_size': (height, width), 'channels': channels, 'augment': augment,
        'crop_fraction': crop, 'mean': params['mean'], 'std': params['std'],
        'shuffle_buffer': self._shuffle_buffer(), 'label_offset': 0,
        'label_name': label_key, 'label_hint': f'the {name} data set does not match its info',
        'skip_corrupt': None, 'max_corrupt_fraction': 0.0, 'image_word': 'image',
    }
    self._where = tf.constant(f'{name} {self.split}')
    self._sources = {}

  def _shuffle_buffer(self):
    """``shuffle_buffer``, or by default the whole worker share of a small split (else 10000)."""
    if self.params['shuffle_buffer'] is not None:
      return self.params['shuffle_buffer']
    share = -(-self.num_examples // self.num_workers)
    splits = list(self.builder.info.splits.values())
    stored = sum(int(split.num_examples) for split in splits)
    # Sliced splits ('train[:10%]') report no bytes: estimate from the whole data set's mean.
    bytes_per_example = sum(int(split.num_bytes) for split in splits) / max(stored, 1)
    return share if share * bytes_per_example <= WHOLE_SPLIT_BYTES else DEFAULT_SHUFFLE_BUFFER

  def _prepared_builder(self):
    """The data set's builder, prepared (downloaded when ``download`` says so).

    Raises:
      DataError: naming the data set, ``data_dir`` and ``download: true``
        when it is not prepared there.
    """
    tfds = _tfds()
    name, data_dir = self.params['name'], self.params['data_dir']
    where = data_dir or _default_data_dir()
    missing = (f'tfds: data set {name} is not prepared under {where}; set data_layer_params.'
               'download: true to download and prepare it there, or data_dir to where it is')
    try:
      builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
      raise DataError(f'tfds: data set {name} is not prepared under {where}, and TensorFlow '
                      f'Datasets has no builder named {name!r}, so download: true cannot prepare '
                      'it; check data_layer_params.name and data_dir') from None
    except (ValueError, TypeError) as e:
      raise ConfigError(f'data_layer_params.name: {name!r}: {str(e).splitlines()[0]}',
                        'data_layer_params.name', 'invalid') from None
    if not builder.is_prepared():
      if not self.params['download']:
        raise DataError(missing)
      download_in_child(name, data_dir, where, type(builder).__module__)
      builder = tfds.builder(name, data_dir=data_dir)
    return builder

  def _split_size(self, split, param):
    try:
      return self.builder.info.splits[split].num_examples
    except (KeyError, ValueError, AssertionError) as e:
      known = ', '.join(sorted(self.builder.info.splits.keys()))
      raise ConfigError(f'data_layer_params.{param}: {split!r} is not a split of '
                        f'{self.params["name"]} ({str(e).splitlines()[0]}); its splits: {known}',
                        f'data_layer_params.{param}', 'invalid') from None

  def _source(self, split):
    """``(where, index, encoded image, label)`` of the whole split, in its stored order."""
    if split not in self._sources:
      tfds = _tfds()
      image_key, label_key = self.params['image_key'], self.params['label_key']
      read_config = tfds.ReadConfig(try_autocache=False, enable_ordering_guard=True)
      examples = self.builder.as_dataset(
          split=split, shuffle_files=False, read_config=read_config,
          decoders={image_key: tfds.decode.SkipDecoding()})
      where = self._where if split == self.split else tf.constant(f'{self.params["name"]} {split}')
      self._sources[split] = examples.enumerate().map(
          lambda index, example: (where, index, example[image_key],
                                  self._checked_label(where, index, example[label_key])),
          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return self._sources[split]

  def use_run_dir(self, run_dir):
    """Keeps ``run_dir``; a train layer holds its split to the one the checkpoints were trained on."""
    super().use_run_dir(run_dir)
    if self.mode == 'train':
      train_set.keep(self, self._train_set())

  def _split_files(self):
    """The files the split reads (TFDS' file instructions: the file, and the examples it gives)."""
    return self.builder.info.splits[self.split].file_instructions

  def _train_set(self):
    """The split now (``data.train_set.TrainSet``): the data set's version, its files and sizes."""
    files = self._split_files()
    # Each file by its size and the examples the split takes of it.
    extents = [f'{tf.io.gfile.stat(f.filename).length}:{f.skip}:{f.take}' for f in files]
    return train_set.TrainSet(
        'tfds', f'split {self.split!r} of {self.params["name"]}', self.num_examples,
        train_set.fingerprint([self.builder.info.full_name,
                               *train_set.file_lines([f.filename for f in files], extents)]),
        parts='files (version, names or sizes)')

  def corrupt_file(self):
    if self.builder.info.file_format.name != 'TFRECORD':
      return None
    found = first_unreadable_record(sorted({f.filename for f in self._split_files()}))
    if found is None:
      return None
    path, index, reason = found
    return (f'tfds: {path}: record {index} cannot be read ({reason}): the prepared data set is '
            f'damaged; delete {self.builder.data_dir} and prepare it again (download: true)')

  def _before_reading(self):
    # Built here, outside the epochs' traced function, so TFDS' Python runs once.
    self._source(self.split)

  def _mine(self, examples):
    if self.num_workers == 1:
      return examples
    return examples.shard(self.num_workers, self.worker_index)

  def _eval_examples(self):
    return self._mine(self._source(self.split))

  def _epoch_examples(self, seed, epoch):
    # The stored order every epoch; the window shuffle permutes it.
    del seed, epoch
    return self._mine(self._source(self.split))

  def _statistics_source(self):
    return f'tfds {self.params["name"]} {self.train_split}'

  def _statistics_examples(self):
    return self._source(self.train_split)
