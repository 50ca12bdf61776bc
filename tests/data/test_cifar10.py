"""Tests of the CIFAR-10 data layer on small binary files written here."""

import numpy as np
import pytest

from data import DATA_LAYERS
from data.base import DataError
from core.params import ConfigError

# Published per-channel statistics of the CIFAR-10 training pixels in [0, 1].
MEAN = np.array([0.4914, 0.4822, 0.4465])
STD = np.array([0.2470, 0.2435, 0.2616])
PER_FILE = 4


def write_batch(path, images, labels):
  """Writes records of 1 label byte + the image as planes R, G, B (row-major 32x32 each)."""
  chw = np.asarray(images, np.uint8).transpose(0, 3, 1, 2).reshape(len(images), -1)
  records = np.concatenate([np.asarray(labels, np.uint8)[:, None], chw], axis=1)
  path.write_bytes(records.tobytes())


@pytest.fixture(scope='module')
def cifar(tmp_path_factory):
  directory = tmp_path_factory.mktemp('cifar')
  rng = np.random.default_rng(0)
  train = rng.integers(1, 256, (5 * PER_FILE, 32, 32, 3), dtype=np.uint8)
  train_labels = rng.integers(0, 10, 5 * PER_FILE)
  for i in range(5):
    part = slice(i * PER_FILE, (i + 1) * PER_FILE)
    write_batch(directory / f'data_batch_{i + 1}.bin', train[part], train_labels[part])
  test = rng.integers(1, 256, (6, 32, 32, 3), dtype=np.uint8)
  test_labels = np.arange(6)
  write_batch(directory / 'test_batch.bin', test, test_labels)
  return str(directory), train, train_labels, test, test_labels


def to_pixels(images):
  return np.rint((images * STD + MEAN) * 255)


def take(layer, batch_size, count, **kwargs):
  return [(x.numpy(), y.numpy()) for x, y in layer.dataset(batch_size, **kwargs).take(count)]


def test_eval_reads_chw_records_as_normalized_hwc_images(cifar):
  directory, _, _, test, test_labels = cifar
  layer = DATA_LAYERS['cifar10']({'data_dir': directory}, 'eval')
  assert (layer.num_examples, layer.image_shape, layer.num_classes) == (6, (32, 32, 3), 10)
  batches = take(layer, 4, 10)
  assert [len(y) for _, y in batches] == [4, 2]
  images = np.concatenate([x for x, _ in batches])
  np.testing.assert_allclose(images, (test / 255 - MEAN) / STD, atol=1e-5)
  np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), test_labels)


def source_index(train, pixels):
  """Finds the training image an unaugmented output came from."""
  matches = [i for i, image in enumerate(train) if np.array_equal(image, pixels)]
  assert len(matches) == 1
  return matches[0]


def test_train_epochs_are_permutations_of_all_files(cifar):
  directory, train, train_labels, _, _ = cifar
  layer = DATA_LAYERS['cifar10']({'data_dir': directory, 'augment': False}, 'train')
  assert layer.num_examples == 20 and layer.batches_per_epoch(4) == 5
  batches = take(layer, 4, 10, seed=7)
  order = [source_index(train, to_pixels(image)) for x, _ in batches for image in x]
  assert sorted(order[:20]) == list(range(20)) and sorted(order[20:]) == list(range(20))
  assert order[:20] != order[20:]
  np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), train_labels[order])


def test_default_augmentation_is_a_flip_and_four_pixel_translation(cifar):
  directory, train, _, _, _ = cifar
  plain = DATA_LAYERS['cifar10']({'data_dir': directory, 'augment': False}, 'train')
  augmented = DATA_LAYERS['cifar10']({'data_dir': directory}, 'train')
  sources = [source_index(train, to_pixels(image))
             for x, _ in take(plain, 4, 10, seed=1) for image in x]
  outputs = [to_pixels(image) for x, _ in take(augmented, 4, 10, seed=1) for image in x]
  used = set()
  for source, output in zip(sources, outputs):
    padded = np.pad(train[source], [(4, 4), (4, 4), (0, 0)])
    found = [(flip, dy, dx) for dy in range(9) for dx in range(9) for flip in (False, True)
             if np.array_equal(output, padded[dy:dy + 32, dx:dx + 32][:, ::-1] if flip
                               else padded[dy:dy + 32, dx:dx + 32])]
    assert len(found) == 1
    used.add(found[0])
  assert len(used) >= 25 and {flip for flip, _, _ in used} == {False, True}


def test_resume_and_sharding(cifar):
  directory, _, _, _, _ = cifar
  layer = DATA_LAYERS['cifar10']({'data_dir': directory}, 'train', 2, 1)
  assert layer.batches_per_epoch(3) == 3
  full = take(layer, 3, 8, seed=2)
  resumed = take(layer, 3, 4, seed=2, start_batch=4)
  for (x, y), (x_resumed, y_resumed) in zip(full[4:], resumed):
    np.testing.assert_array_equal(x, x_resumed)
    np.testing.assert_array_equal(y, y_resumed)


def test_errors_name_the_parameter_or_file(cifar, tmp_path):
  with pytest.raises(ConfigError, match=r'data_layer_params.data_dir: required key is missing'):
    DATA_LAYERS['cifar10']({}, 'train')
  with pytest.raises(DataError, match=f'{tmp_path}/data_batch_1.bin not found.*cifar-10-batches-bin'):
    DATA_LAYERS['cifar10']({'data_dir': str(tmp_path)}, 'train')
  with pytest.raises(DataError, match='nowhere does not exist'):
    DATA_LAYERS['cifar10']({'data_dir': str(tmp_path / 'nowhere')}, 'train')
  directory = cifar[0]
  record = open(f'{directory}/test_batch.bin', 'rb').read()[:3073]
  (tmp_path / 'test_batch.bin').write_bytes(record * 2 + record[:100])
  message = f'{tmp_path}/test_batch.bin: size 6246 bytes is not a positive multiple'
  with pytest.raises(DataError, match=message):
    DATA_LAYERS['cifar10']({'data_dir': str(tmp_path)}, 'eval')
  (tmp_path / 'test_batch.bin').write_bytes(record + bytes([12]) + record[1:])
  with pytest.raises(DataError, match='test_batch.bin: record 1 has label 12, expected 0-9'):
    DATA_LAYERS['cifar10']({'data_dir': str(tmp_path)}, 'eval')
