"""The size of each training split, told without TensorFlow and without reading the data.

Each registration's ``TRAIN_EXAMPLES`` fact (``data/__init__.py``) is one of the
``*_train_examples`` functions here: the config layer counts a run's updates per
epoch with it, so a warm-up longer than the run is refused (or fitted) before
anything is built. None: it cannot tell; the run counts once its data layer is
built. tests/data/test_train_examples.py holds each against the built layer's
``num_examples``. The data files' names and sizes they read (shared with the
layers) and the cache of TFRecord counts live here too.
"""

import glob
import gzip
import json
import os
import re
import zlib

from data import image_files
from data.schemas import resolve_tfrecord_params
from data.schemas import tfrecord_file_pattern


FASHION_MNIST_FILES = {
    'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
    'eval': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz'),
}
CIFAR10_FILES = {
    'train': tuple(f'data_batch_{i}.bin' for i in range(1, 6)),
    'eval': ('test_batch.bin',),
}
CIFAR10_RECORD_BYTES = 1 + 32 * 32 * 3
IMAGENET_NUM_EXAMPLES = {'train': 1281167, 'eval': 50000}
# The magic number of an IDX file of unsigned bytes with one dimension (labels).
_IDX_LABELS_MAGIC = b'\x00\x00\x08\x01'


def fashion_mnist_train_examples(params):
  """The count in the header of the training labels' IDX file; None when it cannot be read."""
  path = os.path.join(params['data_dir'], FASHION_MNIST_FILES['train'][1])
  try:
    with gzip.open(path, 'rb') as f:
      header = f.read(8)
  except (OSError, EOFError, zlib.error):
    return None
  if len(header) < 8 or header[:4] != _IDX_LABELS_MAGIC:
    return None
  return int.from_bytes(header[4:], 'big')


def cifar10_train_examples(params):
  """The records of the five training files, from their sizes; None when one is missing or cut."""
  total = 0
  for name in CIFAR10_FILES['train']:
    try:
      size = os.path.getsize(os.path.join(params['data_dir'], name))
    except OSError:
      return None
    if size == 0 or size % CIFAR10_RECORD_BYTES:
      return None
    total += size // CIFAR10_RECORD_BYTES
  return total


def imagenet_train_examples(params):
  """``num_examples``, or the ImageNet training set's 1,281,167 (what the layer takes too)."""
  return params['num_examples'] or IMAGENET_NUM_EXAMPLES['train']


def synthetic_train_examples(params):
  """``num_examples``: the length of a synthetic epoch."""
  return params['num_examples']


# Record counts of TFRecord files, cached as a small JSON file in the files'
# directory (keyed by file name) or in the run directory (keyed by path); an
# entry holds only while the file keeps its size and modification time.
RECORD_COUNTS_FILE = 'tfrecord_counts.json'
RECORD_COUNTS_FORMAT = 1


def read_record_counts(cache_path):
  """``{key: {'size', 'mtime_ns', 'records'}}`` of a count cache file; {} when missing or unreadable."""
  try:
    with open(cache_path, encoding='utf-8') as f:
      content = json.load(f)
  except (OSError, ValueError):
    return {}
  if not isinstance(content, dict) or content.get('format') != RECORD_COUNTS_FORMAT:
    return {}
  files = content.get('files')
  return files if isinstance(files, dict) else {}


def cached_count(entries, key, size, mtime_ns):
  """The records of ``entries[key]`` when it matches the file's size and mtime, else None."""
  entry = entries.get(key)
  if (isinstance(entry, dict) and entry.get('size') == size and entry.get('mtime_ns') == mtime_ns
      and isinstance(entry.get('records'), int)):
    return entry['records']
  return None


def tfrecord_train_examples(params):
  """``num_examples``, or the training files' counts cached beside them; None when any is missing."""
  resolved = resolve_tfrecord_params(params)
  if resolved['num_examples']:
    return resolved['num_examples']
  pattern = tfrecord_file_pattern(resolved, 'train')
  if pattern is None or '://' in pattern:
    return None
  paths = sorted(glob.glob(pattern))
  total = 0
  caches = {}
  for path in paths:
    directory = os.path.dirname(path)
    if directory not in caches:
      caches[directory] = read_record_counts(os.path.join(directory, RECORD_COUNTS_FILE))
    try:
      stat = os.stat(path)
    except OSError:
      return None
    count = cached_count(caches[directory], os.path.basename(path), stat.st_size,
                         stat.st_mtime_ns)
    if count is None:
      return None
    total += count
  return total or None


def tfds_dataset_dir(name, data_dir):
  """The directory of a prepared TFDS data set (``name[/config][:version]``), or None.

  Without a version the highest prepared one is taken, as TensorFlow Datasets does.
  """
  data_dir = data_dir or os.environ.get('TFDS_DATA_DIR') or os.path.join(
      os.path.expanduser('~'), 'tensorflow_datasets')
  name, _, version = name.partition(':')
  base = os.path.join(data_dir, *name.split('/'))
  if version:
    versions = [version]
  else:
    try:
      versions = [v for v in os.listdir(base) if re.fullmatch(r'\d+\.\d+\.\d+', v)]
    except OSError:
      return None
    versions.sort(key=lambda v: tuple(int(p) for p in v.split('.')), reverse=True)
  for v in versions:
    if os.path.isfile(os.path.join(base, v, 'dataset_info.json')):
      return os.path.join(base, v)
  return None


def tfds_train_examples(params):
  """The examples of ``train_split`` in the prepared data set's dataset_info.json; None when it
  is not prepared or the split is a slice (``train[:90%]``)."""
  directory = tfds_dataset_dir(params['name'], params['data_dir'])
  if directory is None:
    return None
  try:
    with open(os.path.join(directory, 'dataset_info.json'), encoding='utf-8') as f:
      info = json.load(f)
    for split in info.get('splits', []):
      if split.get('name') == params['train_split']:
        return sum(int(n) for n in split.get('shardLengths', [])) or None
  except (OSError, ValueError, TypeError, AttributeError):
    return None
  return None


def image_folder_train_examples(params):
  """The training files of ``train_dir`` (validation files removed); None when it cannot be listed."""
  try:
    return len(image_files.train_split(params)[1])
  except (image_files.FolderError, OSError):
    return None
