"""The TRAIN_EXAMPLES facts: each data layer's training-split size, told without TensorFlow,
held against the layer built on the same data."""

import gzip
import os
import struct

import numpy as np
import pytest

from data import DATA_LAYERS
from data import imagenet_facts

REAL_FASHION_MNIST = '/usr/share/datasets/fashion-mnist'


def declared(name, params):
  """The fact's count for ``params`` completed by the layer's declared defaults."""
  facts = DATA_LAYERS.facts(name)
  full = {key: spec.default for key, spec in facts['PARAMS'].items()}
  full.update(params)
  return facts['TRAIN_EXAMPLES'](full)


def built(name, params):
  return DATA_LAYERS[name](params, 'train').num_examples


def write_idx(path, array):
  array = np.asarray(array, np.uint8)
  header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f'>{array.ndim}I', *array.shape)
  with gzip.open(path, 'wb') as f:
    f.write(header + array.tobytes())


def test_the_image_layers_declare_their_size():
  assert {n for n in DATA_LAYERS if 'TRAIN_EXAMPLES' in DATA_LAYERS.facts(n)} >= {
      'cifar10', 'fashion_mnist', 'imagenet', 'synthetic'}


def test_fashion_mnist_reads_the_count_in_the_labels_header(tmp_path):
  assert declared('fashion_mnist', {}) == built('fashion_mnist', {}) == 60000  # the installed set
  for prefix, n in (('train', 37), ('t10k', 5)):
    write_idx(tmp_path / f'{prefix}-images-idx3-ubyte.gz', np.zeros((n, 28, 28)))
    write_idx(tmp_path / f'{prefix}-labels-idx1-ubyte.gz', np.arange(n) % 10)
  params = {'data_dir': str(tmp_path)}
  assert declared('fashion_mnist', params) == built('fashion_mnist', params) == 37
  assert declared('fashion_mnist', {'data_dir': str(tmp_path / 'missing')}) is None
  (tmp_path / 'train-labels-idx1-ubyte.gz').write_bytes(b'not gzip')
  assert declared('fashion_mnist', params) is None
  assert os.path.isdir(REAL_FASHION_MNIST)


def test_cifar10_counts_the_records_of_its_five_files(tmp_path):
  rng = np.random.default_rng(0)
  for i, n in enumerate((3, 4, 2, 5, 1)):
    records = np.concatenate([rng.integers(0, 10, (n, 1)),
                              rng.integers(0, 256, (n, 32 * 32 * 3))], axis=1)
    (tmp_path / f'data_batch_{i + 1}.bin').write_bytes(records.astype(np.uint8).tobytes())
  (tmp_path / 'test_batch.bin').write_bytes(records.astype(np.uint8).tobytes())
  params = {'data_dir': str(tmp_path)}
  assert declared('cifar10', params) == built('cifar10', params) == 15
  with open(tmp_path / 'data_batch_3.bin', 'ab') as f:
    f.write(b'\0')  # a cut record: the layer refuses the file, the fact cannot tell
  assert declared('cifar10', params) is None
  os.remove(tmp_path / 'data_batch_3.bin')
  assert declared('cifar10', params) is None


def test_synthetic_and_imagenet_take_num_examples():
  assert declared('synthetic', {'num_examples': 1000}) == built('synthetic',
                                                                {'num_examples': 1000}) == 1000
  assert declared('imagenet', {'data_dir': '/x'}) == 1281167
  assert declared('imagenet', {'data_dir': '/x', 'num_examples': 5000}) == 5000
  assert imagenet_facts.NUM_EXAMPLES['train'] == 1281167
