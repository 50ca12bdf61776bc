"""What the ``cifar10`` data layer (``data/cifar10.py``) accepts and how big its training split
is, told without TensorFlow and without reading the images.

``data/__init__.py`` registers these with the layer, so that the config layer
checks ``data_layer_params`` and counts a run's updates per epoch before
TensorFlow is loaded; the layer reads the same ``PARAMS``, ``FILES`` and
``RECORD_BYTES``.
"""

import os

from core.params import REQUIRED
from core.params import Param
from core.params import PathParam

TASK = 'image_classification'

PARAMS = {
    'data_dir': PathParam(REQUIRED, doc='directory holding data_batch_*.bin and test_batch.bin'),
    'augment': Param(bool, True, doc='random 4-pixel translation and flip in train mode'),
}

# The binary files of each split.
FILES = {
    'train': tuple(f'data_batch_{i}.bin' for i in range(1, 6)),
    'eval': ('test_batch.bin',),
}
# One record: a label byte, then 32x32 pixels of 3 channels.
RECORD_BYTES = 1 + 32 * 32 * 3


def train_examples(params):
  """The records of the five training files, from their sizes; None when one is missing or cut."""
  total = 0
  for name in FILES['train']:
    try:
      size = os.path.getsize(os.path.join(params['data_dir'], name))
    except OSError:
      return None
    if size == 0 or size % RECORD_BYTES:
      return None
    total += size // RECORD_BYTES
  return total
