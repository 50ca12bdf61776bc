"""CIFAR-10 from its binary distribution (``cifar-10-batches-bin``).

Each file is a sequence of 3073-byte records: one label byte (0-9) then the
32x32 image as 1024 red, 1024 green and 1024 blue bytes, rows in order.

References:
  Krizhevsky. "Learning Multiple Layers of Features from Tiny Images", 2009.
  https://www.cs.toronto.edu/~kriz/cifar.html
"""

import numpy as np

from data import cifar10_facts
from data.base import DataError, InMemoryDataLayer

FILES = cifar10_facts.FILES
HEIGHT = WIDTH = 32
CHANNELS = 3
RECORD_BYTES = cifar10_facts.RECORD_BYTES
NUM_CLASSES = 10
CLASS_NAMES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship',
               'truck')
LAYOUT_HINT = ('expected the CIFAR-10 binary version (cifar-10-batches-bin: '
               'data_batch_1.bin .. data_batch_5.bin, test_batch.bin)')


def read_records(path):
  """Reads one binary file into ``uint8 [N, 32, 32, 3]`` images and ``int32 [N]`` labels.

  Raises:
    DataError: naming the file, when it is empty, not a whole number of
      records, or holds a label outside 0-9.
  """
  with open(path, 'rb') as f:
    raw = f.read()
  if not raw or len(raw) % RECORD_BYTES:
    raise DataError(f'{path}: size {len(raw)} bytes is not a positive multiple of the '
                    f'{RECORD_BYTES}-byte record (truncated or not a CIFAR-10 binary file)')
  records = np.frombuffer(raw, np.uint8).reshape(-1, RECORD_BYTES)
  labels = records[:, 0].astype(np.int32)
  bad = np.flatnonzero(labels >= NUM_CLASSES)
  if bad.size:
    raise DataError(f'{path}: record {bad[0]} has label {labels[bad[0]]}, expected 0-9 '
                    '(corrupt file, or CIFAR-100 data?)')
  images = records[:, 1:].reshape(-1, CHANNELS, HEIGHT, WIDTH).transpose(0, 2, 3, 1)
  return np.ascontiguousarray(images), labels


def load_split(paths):
  parts = [read_records(path) for path in paths]
  return (np.concatenate([images for images, _ in parts]),
          np.concatenate([labels for _, labels in parts]))


class Cifar10DataLayer(InMemoryDataLayer):
  """CIFAR-10: 50,000 train and 10,000 test 32x32 colour images, 10 classes.

  Pixels are scaled per channel to zero mean and unit variance with the
  training set's statistics. With ``augment`` (the default), training images
  are translated by up to 4 pixels (zero padding) and mirrored left-right with
  probability 1/2, as in He et al. 2016.
  """

  # What it accepts and how big its training split is: data/cifar10_facts.py (no TensorFlow).
  PARAMS = cifar10_facts.PARAMS
  # Per-channel mean and standard deviation of the training pixels, in [0, 1] units.
  MEAN = (0.4914, 0.4822, 0.4465)
  STD = (0.2470, 0.2435, 0.2616)
  PAD = 4

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    self.load('cifar10', FILES[mode], load_split, LAYOUT_HINT, NUM_CLASSES)
    self.class_names = CLASS_NAMES
    self.split = 'train' if mode == 'train' else 'test'
