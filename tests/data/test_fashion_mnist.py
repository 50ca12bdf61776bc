"""Tests of the Fashion-MNIST data layer, on small IDX files and on the installed data set."""

import gzip
import os
import struct

import numpy as np
import pytest

from data import DATA_LAYERS
from data.base import DataError
from core.params import ConfigError

REAL_DIR = '/usr/share/datasets/fashion-mnist'
# Published statistics of the Fashion-MNIST training pixels in [0, 1].
MEAN, STD = 0.2860, 0.3530
TRAIN_N, EVAL_N = 60, 25


def write_idx(path, array, type_byte=0x08):
  array = np.asarray(array, np.uint8)
  header = bytes([0, 0, type_byte, array.ndim]) + struct.pack(f'>{array.ndim}I', *array.shape)
  with gzip.open(path, 'wb') as f:
    f.write(header + array.tobytes())


def write_split(directory, prefix, images, labels):
  write_idx(os.path.join(directory, f'{prefix}-images-idx3-ubyte.gz'), images)
  write_idx(os.path.join(directory, f'{prefix}-labels-idx1-ubyte.gz'), labels)


@pytest.fixture(scope='module')
def index_dir(tmp_path_factory):
  """Image i is the constant i + 1, so a pixel tells which example it is."""
  directory = tmp_path_factory.mktemp('fmnist_index')
  for prefix, n in (('train', TRAIN_N), ('t10k', EVAL_N)):
    images = np.repeat(np.arange(1, n + 1, dtype=np.uint8), 28 * 28).reshape(n, 28, 28)
    write_split(directory, prefix, images, np.arange(n) % 10)
  return str(directory)


@pytest.fixture(scope='module')
def random_dir(tmp_path_factory):
  directory = tmp_path_factory.mktemp('fmnist_random')
  rng = np.random.default_rng(0)
  for prefix, n in (('train', TRAIN_N), ('t10k', EVAL_N)):
    write_split(directory, prefix, rng.integers(1, 256, (n, 28, 28)), rng.integers(0, 10, n))
  return str(directory)


def example_ids(images):
  """Recovers the example index from the normalized centre pixel of index_dir images."""
  centre = images[:, 14, 14, 0] * STD + MEAN
  return np.rint(centre * 255).astype(int) - 1


def take(layer, batch_size, count, **kwargs):
  return [(x.numpy(), y.numpy()) for x, y in layer.dataset(batch_size, **kwargs).take(count)]


def test_installed_dataset_shapes_classes_and_normalization():
  train = DATA_LAYERS['fashion_mnist']({}, 'train')
  evaluation = DATA_LAYERS['fashion_mnist']({}, 'eval')
  assert (train.num_examples, evaluation.num_examples) == (60000, 10000)
  assert train.image_shape == (28, 28, 1) and train.num_classes == 10
  np.testing.assert_array_equal(np.bincount(train.labels), [6000] * 10)
  np.testing.assert_array_equal(np.bincount(evaluation.labels), [1000] * 10)
  # The first test image, read straight from the file (16-byte header).
  with gzip.open(os.path.join(REAL_DIR, 't10k-images-idx3-ubyte.gz')) as f:
    first = np.frombuffer(f.read(16 + 784)[16:], np.uint8).reshape(28, 28)
  (images, labels), = take(evaluation, 10000, 1)
  assert images.shape == (10000, 28, 28, 1) and images.dtype == np.float32
  np.testing.assert_allclose(images[0, :, :, 0], (first / 255 - MEAN) / STD, atol=1e-5)
  assert abs(images.mean()) < 0.02 and abs(images.std() - 1) < 0.02
  assert labels.dtype == np.int32 and labels[0] == 9  # the first test image is an ankle boot


def test_eval_is_one_ordered_pass_with_a_partial_last_batch(index_dir):
  layer = DATA_LAYERS['fashion_mnist']({'data_dir': index_dir}, 'eval')
  batches = take(layer, 10, 100)
  assert [len(y) for _, y in batches] == [10, 10, 5]
  ids = np.concatenate([example_ids(x) for x, _ in batches])
  np.testing.assert_array_equal(ids, np.arange(EVAL_N))
  np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), np.arange(EVAL_N) % 10)
  # Constant images stay constant: no augmentation in eval even when asked for.
  augmented = DATA_LAYERS['fashion_mnist']({'data_dir': index_dir, 'augment': True}, 'eval')
  images, _ = take(augmented, 25, 1)[0]
  assert (images == images[:, :1, :1, :]).all()
  np.testing.assert_allclose(images[3, 0, 0, 0], (4 / 255 - MEAN) / STD, rtol=1e-6)


def test_eval_shards_are_strided_and_cover_the_split(index_dir):
  ids = []
  for worker in range(3):
    layer = DATA_LAYERS['fashion_mnist']({'data_dir': index_dir}, 'eval', 3, worker)
    ids.append(np.concatenate([example_ids(x) for x, _ in take(layer, 4, 100)]))
    np.testing.assert_array_equal(ids[-1], np.arange(worker, EVAL_N, 3))
  assert sorted(np.concatenate(ids)) == list(range(EVAL_N))
  assert [len(x) for x, _ in take(layer, 4, 100, start_batch=1)] == [4]  # 8 examples, skip 1


def test_train_epochs_are_seeded_permutations(index_dir):
  layer = DATA_LAYERS['fashion_mnist']({'data_dir': index_dir}, 'train')
  assert layer.batches_per_epoch(8) == 7
  batches = take(layer, 8, 21, seed=5)
  assert all(x.shape == (8, 28, 28, 1) for x, _ in batches)
  ids = np.concatenate([example_ids(x) for x, _ in batches]).reshape(3, 56)
  labels = np.concatenate([y for _, y in batches]).reshape(3, 56)
  np.testing.assert_array_equal(labels, ids % 10)
  for epoch in ids:
    assert len(set(epoch)) == 56 and set(epoch) <= set(range(TRAIN_N))
  assert not np.array_equal(ids[0], ids[1]) and not np.array_equal(ids[1], ids[2])
  again = np.concatenate([example_ids(x) for x, _ in take(layer, 8, 21, seed=5)]).reshape(3, 56)
  np.testing.assert_array_equal(again, ids)
  other = np.concatenate([example_ids(x) for x, _ in take(layer, 8, 7, seed=6)])
  assert not np.array_equal(other, ids[0])


def test_train_shards_are_disjoint_and_cover_each_epoch(index_dir):
  per_worker = []
  for worker in range(2):
    layer = DATA_LAYERS['fashion_mnist']({'data_dir': index_dir}, 'train', 2, worker)
    assert layer.batches_per_epoch(6) == 5
    ids = np.concatenate([example_ids(x) for x, _ in take(layer, 6, 10, seed=1)])
    per_worker.append(ids.reshape(2, 30))
  for epoch in range(2):
    union = np.concatenate([per_worker[0][epoch], per_worker[1][epoch]])
    assert sorted(union) == list(range(TRAIN_N))
  single = DATA_LAYERS['fashion_mnist']({'data_dir': index_dir}, 'train')
  with pytest.raises(ConfigError, match='larger than the 60 examples'):
    single.dataset(61)


@pytest.mark.parametrize('augment', [False, True])
def test_resumed_stream_equals_uninterrupted_stream(random_dir, augment):
  layer = DATA_LAYERS['fashion_mnist']({'data_dir': random_dir, 'augment': augment}, 'train')
  full = take(layer, 8, 20, seed=3)
  resumed = take(layer, 8, 11, seed=3, start_batch=9)  # 7 batches per epoch: starts inside epoch 1
  for (x, y), (x_resumed, y_resumed) in zip(full[9:], resumed):
    np.testing.assert_array_equal(x, x_resumed)
    np.testing.assert_array_equal(y, y_resumed)


def candidates(image, pad=2):
  """Every zero-padded translation by up to `pad` pixels, mirrored or not, keyed by (flip, dy, dx)."""
  padded = np.pad(image, pad)
  size = image.shape[0]
  out = {}
  for dy in range(2 * pad + 1):
    for dx in range(2 * pad + 1):
      crop = padded[dy:dy + size, dx:dx + size]
      out[(False, dy, dx)] = crop
      out[(True, dy, dx)] = crop[:, ::-1]
  return out


def test_augmentation_is_a_random_flip_and_two_pixel_translation(random_dir):
  plain = DATA_LAYERS['fashion_mnist']({'data_dir': random_dir}, 'train')
  augmented = DATA_LAYERS['fashion_mnist']({'data_dir': random_dir, 'augment': True}, 'train')
  to_pixels = lambda x: np.rint((x[..., 0] * STD + MEAN) * 255)  # noqa: E731
  sources = np.concatenate([to_pixels(x) for x, _ in take(plain, 8, 14, seed=2)])
  outputs = np.concatenate([to_pixels(x) for x, _ in take(augmented, 8, 14, seed=2)])
  used = []
  for source, output in zip(sources, outputs):
    matches = [k for k, c in candidates(source).items() if np.array_equal(c, output)]
    assert len(matches) == 1, 'not a flipped/translated copy of the same example'
    used.append(matches[0])
  flips = np.mean([flip for flip, _, _ in used])
  assert 0.3 < flips < 0.7
  assert len({(dy, dx) for _, dy, dx in used}) >= 15  # of 25
  assert {dy for _, dy, _ in used} == {dx for _, _, dx in used} == set(range(5))
  # Epoch 1 redraws: the same example is not augmented identically in both epochs.
  assert used[:56] != used[56:]


def test_augmentation_depends_on_the_example_not_the_batch_size(random_dir):
  layer = DATA_LAYERS['fashion_mnist']({'data_dir': random_dir, 'augment': True}, 'train')
  by_8 = np.concatenate([x for x, _ in take(layer, 8, 7, seed=4)])
  by_4 = np.concatenate([x for x, _ in take(layer, 4, 14, seed=4)])
  np.testing.assert_array_equal(by_8, by_4[:56])


def test_loaded_once_per_path(index_dir):
  first = DATA_LAYERS['fashion_mnist']({'data_dir': index_dir}, 'train')
  second = DATA_LAYERS['fashion_mnist']({'data_dir': index_dir}, 'train', 2, 1)
  assert first.images is second.images


def test_missing_directory_names_it_and_the_debian_package(tmp_path):
  missing = str(tmp_path / 'nowhere')
  hint = 'apt-get install dataset-fashion-mnist'
  with pytest.raises(DataError, match=f'{missing} does not exist.*{hint}'):
    DATA_LAYERS['fashion_mnist']({'data_dir': missing}, 'train')
  write_split(tmp_path, 'train', np.zeros((2, 28, 28)), [0, 1])
  with pytest.raises(DataError, match=r't10k-images-idx3-ubyte.gz not found.*apt-get install'):
    DATA_LAYERS['fashion_mnist']({'data_dir': str(tmp_path)}, 'eval')


def _broken(tmp_path, images_bytes=None, labels=None):
  write_split(tmp_path, 'train', np.zeros((3, 28, 28)), [0, 1, 2] if labels is None else labels)
  path = tmp_path / 'train-images-idx3-ubyte.gz'
  if images_bytes is not None:
    path.write_bytes(images_bytes)
  return str(path)


def _gz(raw):
  return gzip.compress(raw)


IMAGES_HEADER = bytes([0, 0, 8, 3]) + struct.pack('>3I', 3, 28, 28)


@pytest.mark.parametrize('name, make, message', [
    ('bad magic', lambda: _gz(bytes([0, 0, 8, 1]) + struct.pack('>I', 2) + b'ab'),
     'bad IDX magic number 0x00000801'),
    ('not ubyte', lambda: _gz(bytes([0, 0, 0x0D, 3]) + b'\0' * 12), 'bad IDX magic number 0x00000d03'),
    ('size mismatch', lambda: _gz(IMAGES_HEADER + b'\0' * 2000),
     r'size mismatch: the header gives shape \(3, 28, 28\) \(2352 bytes'),
    ('truncated gzip', lambda: _gz(IMAGES_HEADER + b'\1' * 2352)[:-20],
     'corrupt or truncated gzip file'),
    ('not gzip', lambda: b'plain bytes, not gzip', 'corrupt or truncated gzip file'),
])
def test_corrupt_files_are_named(tmp_path, name, make, message):
  path = _broken(tmp_path, make())
  with pytest.raises(DataError, match=f'{path}: {message}'):
    DATA_LAYERS['fashion_mnist']({'data_dir': str(tmp_path)}, 'train')


def test_label_file_must_match_the_images(tmp_path):
  _broken(tmp_path, labels=[0, 1])
  message = 'train-labels-idx1-ubyte.gz: holds 2 labels but .* holds 3 images'
  with pytest.raises(DataError, match=message):
    DATA_LAYERS['fashion_mnist']({'data_dir': str(tmp_path)}, 'train')
  _broken(tmp_path, labels=[0, 10, 1])
  with pytest.raises(DataError, match=r'label 10 is out of range \[0, 10\)'):
    DATA_LAYERS['fashion_mnist']({'data_dir': str(tmp_path)}, 'train')
