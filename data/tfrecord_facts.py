"""What the ``tfrecord`` data layer (``data/tfrecord.py``) accepts and how big its training
split is, told without TensorFlow and without reading the records.

``data/__init__.py`` registers these with the layer, so that the config layer
checks ``data_layer_params`` and counts a run's updates per epoch before
TensorFlow is loaded. The layer reads the same ``PARAMS``, resolves its
presets with :func:`resolve_params` and keeps the counts of its files in the
cache :func:`train_examples` reads (``tfrecord_counts.json``).
"""

import glob
import json
import os

from core.params import Param
from core.params import PathParam
from core.params import positive
from data import imagenet_facts
from data.shared_params import AUGMENTS
from data.shared_params import IMAGE_PARAMS
from data.shared_params import image_size_or_pair
from data.shared_params import unit_fraction

TASK = 'image_classification'

# A preset is a named bundle of defaults for the keys below; a key given
# explicitly wins over its preset, and the general defaults fill what neither gives.
PRESETS = {
    'imagenet': {'train_files': 'train-*', 'eval_files': 'validation-*',
                 'image_key': 'image/encoded', 'label_key': 'image/class/label',
                 'label_offset': 1, 'num_classes': 1000, 'image_size': 224,
                 'augment': 'inception_crop', 'crop_fraction': 0.875,
                 'mean': list(imagenet_facts.MEAN), 'std': list(imagenet_facts.STD)},
    # The records TensorFlow Datasets writes for an image-classification set.
    'tfds': {'image_key': 'image', 'label_key': 'label', 'label_offset': 0},
}
DEFAULTS = {'image_key': 'image/encoded', 'label_key': 'image/class/label',
            'label_offset': 0, 'image_size': 224, 'augment': 'inception_crop'}

PARAMS = {
    'data_dir': PathParam(None, doc='directory the file globs are relative to (None: the working '
                                    'directory)'),
    'train_files': PathParam(None, relative_to='data_dir',
                             doc="glob of the training TFRecord files (imagenet preset: 'train-*')"),
    'eval_files': PathParam(None, relative_to='data_dir',
                            doc="glob of the eval TFRecord files (imagenet preset: 'validation-*')"),
    'preset': Param(str, None, choices=tuple(PRESETS),
                    doc="named bundle of defaults that explicit keys override: 'imagenet' (its "
                        "keys, label_offset 1, 1000 classes, 224 px, its crops and statistics), "
                        "'tfds' (keys image / label)"),
    'image_key': Param(str, None, doc="feature of the encoded image (default 'image/encoded')"),
    'label_key': Param(str, None, doc="int64 feature of the label (default 'image/class/label')"),
    'label_offset': Param(int, None, doc='subtracted from the stored label (default 0)'),
    'num_classes': Param(int, None, check=positive, doc='required unless the preset gives it'),
    'num_examples': Param(int, None, check=positive,
                          doc='training examples, all workers; None: counted from the files '
                              '(cached beside them, or in the run directory)'),
    'image_size': Param((int, list), None, check=image_size_or_pair,
                        doc='side, or [height, width], of the model input (default 224)'),
    **IMAGE_PARAMS,
    'augment': Param(str, None, choices=AUGMENTS,
                     doc=IMAGE_PARAMS['augment'].doc + " (default 'inception_crop')"),
    'verify_files': Param(bool, True, doc='check the record framing of every file before reading'),
    'compression': Param(str, 'auto', choices=('auto', 'none', 'GZIP', 'ZLIB'),
                         case_insensitive=True,
                         doc="the files' compression; auto: told by their first bytes (one kind a "
                             'split); counting the records of a compressed file reads it whole'),
    'skip_corrupt': Param(bool, False,
                          doc='skip (and count) records whose image cannot be decoded, instead '
                              'of failing'),
    'max_corrupt_fraction': Param(float, 0.001, check=unit_fraction,
                                  doc='with skip_corrupt: fail once more than this fraction of '
                                  'the records read (at least one epoch\'s worth) was skipped'),
}


def resolve_params(params):
  """The layer's params with the preset's defaults, then the general ones, filled in.

  Keys given explicitly (not None) win over the preset; ``crop_fraction``
  left to the defaults is 0.875 for ``inception_crop`` and None (the whole
  image) otherwise.
  """
  resolved = dict(params)
  preset = PRESETS.get(params.get('preset'), {})
  for key, value in list(preset.items()) + list(DEFAULTS.items()):
    if resolved.get(key) is None:
      resolved[key] = value
  if resolved.get('crop_fraction') is None and resolved['augment'] == 'inception_crop':
    resolved['crop_fraction'] = 0.875
  return resolved


def file_pattern(resolved, mode):
  """The glob of ``mode``'s files (``data_dir`` joined), or None when none is given."""
  pattern = resolved['train_files' if mode == 'train' else 'eval_files']
  if pattern is None:
    return None
  return os.path.join(resolved['data_dir'], pattern) if resolved.get('data_dir') else pattern


# Record counts of TFRecord files, cached as a small JSON file in the files'
# directory (keyed by file name) or in the run directory (keyed by path); an
# entry holds only while the file keeps its size and modification time.
RECORD_COUNTS_FILE = 'tfrecord_counts.json'
RECORD_COUNTS_FORMAT = 1


def record_counts_in(content):
  """``{key: {'size', 'mtime_ns', 'records'}}`` of a count cache's JSON content; {} for another."""
  if not isinstance(content, dict) or content.get('format') != RECORD_COUNTS_FORMAT:
    return {}
  files = content.get('files')
  return files if isinstance(files, dict) else {}


def read_record_counts(cache_path):
  """The entries of a local count cache file; {} when it is missing or unreadable."""
  try:
    with open(cache_path, encoding='utf-8') as f:
      content = json.load(f)
  except (OSError, ValueError):
    return {}
  return record_counts_in(content)


def cached_count(entries, key, size, mtime_ns):
  """The records of ``entries[key]`` when it matches the file's size and mtime, else None."""
  entry = entries.get(key)
  if (isinstance(entry, dict) and entry.get('size') == size and entry.get('mtime_ns') == mtime_ns
      and isinstance(entry.get('records'), int)):
    return entry['records']
  return None


def train_examples(params):
  """``num_examples``, or the training files' counts cached beside them; None when any is missing."""
  resolved = resolve_params(params)
  if resolved['num_examples']:
    return resolved['num_examples']
  pattern = file_pattern(resolved, 'train')
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
