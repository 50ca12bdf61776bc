"""Fashion-MNIST from the IDX files of Debian's ``dataset-fashion-mnist`` package.

References:
  Xiao, Rasul, Vollgraf. "Fashion-MNIST: a Novel Image Dataset for
  Benchmarking Machine Learning Algorithms", 2017. arXiv:1708.07747.
  The IDX format: http://yann.lecun.com/exdb/mnist/ (bottom of the page).
"""

import gzip
import os
import zlib

import numpy as np

from data import fashion_mnist_facts
from data.base import DataError, InMemoryDataLayer

INSTALL_HINT = ("install Debian's package dataset-fashion-mnist "
                '(apt-get install dataset-fashion-mnist) or set data_layer_params.data_dir')
FILES = fashion_mnist_facts.FILES
NUM_CLASSES = 10
CLASS_NAMES = ('T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', 'Sneaker',
               'Bag', 'Ankle boot')
IMAGE_SHAPE = (28, 28)
IDX_UBYTE = 0x08


def read_idx(path, ndim):
  """Reads a gzipped IDX file of unsigned bytes.

  The header is two zero bytes, a type byte (0x08 for unsigned bytes), the
  number of dimensions, then one big-endian uint32 per dimension; the data
  follows in C order.

  Args:
    path: the ``.gz`` file.
    ndim: the number of dimensions the file must have.

  Returns:
    A read-only ``uint8`` array of the shape the header gives.

  Raises:
    DataError: naming the file, when it is not gzip, its magic number is not
      that of an ``ndim``-dimensional ubyte file, or its size does not match.
  """
  raw = _read_gzip(path)
  dims = _idx_dims(raw, path, ndim)
  header = 4 + 4 * ndim
  size = int(np.prod(dims))
  if len(raw) - header != size:
    raise DataError(f'{path}: size mismatch: the header gives shape {dims} ({size} bytes of data), '
                    f'the file holds {len(raw) - header}')
  return np.frombuffer(raw, np.uint8, offset=header).reshape(dims)


def _read_gzip(path, size=-1):
  try:
    with gzip.open(path, 'rb') as f:
      return f.read(size)
  except (OSError, EOFError, zlib.error) as e:
    raise DataError(f'{path}: corrupt or truncated gzip file ({e})') from None


def _idx_dims(raw, path, ndim):
  """The dimensions an IDX header (at the start of ``raw``) gives; DataError naming ``path`` if bad."""
  expected_magic = (IDX_UBYTE << 8) | ndim
  if len(raw) < 4:
    raise DataError(f'{path}: too short for an IDX header ({len(raw)} bytes)')
  magic = int.from_bytes(raw[:4], 'big')
  if magic != expected_magic:
    raise DataError(f'{path}: bad IDX magic number 0x{magic:08x}, expected 0x{expected_magic:08x} '
                    f'(unsigned bytes, {ndim} dimension(s))')
  header = 4 + 4 * ndim
  if len(raw) < header:
    raise DataError(f'{path}: truncated IDX header ({len(raw)} of {header} bytes)')
  return tuple(int(d) for d in np.frombuffer(raw, '>u4', count=ndim, offset=4))


def check_headers(data_dir):
  """Reads the IDX headers of every split (a few bytes each) and checks they agree.

  Every split's images must be 28x28 and as many as its labels, so a damaged
  file of the split a run does not read first (the test split, read at the
  first evaluation) fails at start-up.

  Raises:
    DataError: naming the file.
  """
  for image_name, label_name in FILES.values():
    image_path, label_path = (os.path.join(data_dir, n) for n in (image_name, label_name))
    if not (os.path.isfile(image_path) and os.path.isfile(label_path)):
      continue  # the split's loader names a missing file when it is read
    images = _idx_dims(_read_gzip(image_path, 16), image_path, 3)
    labels = _idx_dims(_read_gzip(label_path, 8), label_path, 1)
    if images[1:] != IMAGE_SHAPE:
      raise DataError(f'{image_path}: the IDX header gives {images[1]}x{images[2]} images, '
                      f'Fashion-MNIST images are {IMAGE_SHAPE[0]}x{IMAGE_SHAPE[1]}')
    if images[0] != labels[0]:
      raise DataError(f'{label_path}: holds {labels[0]} labels but {image_path} holds '
                      f'{images[0]} images (IDX headers)')


def load_split(paths):
  """Reads an (images, labels) pair of IDX files into ``uint8 [N, H, W, 1]`` and ``int32 [N]``."""
  image_path, label_path = paths
  images = read_idx(image_path, 3)
  labels = read_idx(label_path, 1)
  if images.shape[0] != labels.shape[0]:
    raise DataError(f'{label_path}: holds {labels.shape[0]} labels but {image_path} holds '
                    f'{images.shape[0]} images')
  if labels.size and labels.max() >= NUM_CLASSES:
    raise DataError(f'{label_path}: label {int(labels.max())} is out of range [0, {NUM_CLASSES})')
  return images[..., np.newaxis], labels.astype(np.int32)


class FashionMnistDataLayer(InMemoryDataLayer):
  """Fashion-MNIST: 60,000 train and 10,000 test 28x28 grey images, 10 classes.

  Pixels are scaled to zero mean and unit variance with the training set's
  statistics. With ``augment``, training images are mirrored left-right with
  probability 1/2 and translated by up to 2 pixels (zero padding).
  """

  # What it accepts and how big its training split is: data/fashion_mnist_facts.py (no TensorFlow).
  PARAMS = fashion_mnist_facts.PARAMS
  # Mean and standard deviation of the 47M training pixels, in [0, 1] units.
  MEAN = (0.2860,)
  STD = (0.3530,)
  PAD = 2

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    if os.path.isdir(self.params['data_dir']):
      check_headers(self.params['data_dir'])
    self.load('fashion_mnist', FILES[mode], load_split, INSTALL_HINT, NUM_CLASSES)
    self.class_names = CLASS_NAMES
    self.split = 'train' if mode == 'train' else 'test'
