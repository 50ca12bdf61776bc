"""What the ``fashion_mnist`` data layer (``data/fashion_mnist.py``) accepts and how big its
training split is, told without TensorFlow and without reading the images.

``data/__init__.py`` registers these with the layer, so that the config layer
checks ``data_layer_params`` and counts a run's updates per epoch before
TensorFlow is loaded; the layer reads the same ``PARAMS`` and ``FILES``.
"""

import gzip
import os
import zlib

from core.params import Param
from core.params import PathParam

TASK = 'image_classification'
# Where Debian's package dataset-fashion-mnist installs the files.
DEFAULT_DIR = '/usr/share/datasets/fashion-mnist'

PARAMS = {
    'data_dir': PathParam(DEFAULT_DIR, doc='directory holding the four IDX .gz files'),
    'augment': Param(bool, False, doc='random flip and 2-pixel translation in train mode'),
}

# The (images, labels) IDX files of each split.
FILES = {
    'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
    'eval': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz'),
}
# The magic number of an IDX file of unsigned bytes with one dimension (labels).
_IDX_LABELS_MAGIC = b'\x00\x00\x08\x01'


def train_examples(params):
  """The count in the header of the training labels' IDX file; None when it cannot be read."""
  path = os.path.join(params['data_dir'], FILES['train'][1])
  try:
    with gzip.open(path, 'rb') as f:
      header = f.read(8)
  except (OSError, EOFError, zlib.error):
    return None
  if len(header) < 8 or header[:4] != _IDX_LABELS_MAGIC:
    return None
  return int.from_bytes(header[4:], 'big')
