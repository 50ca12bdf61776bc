"""Tests of the synthetic data layer."""

import numpy as np
import pytest

from data import DATA_LAYERS
from core.params import ConfigError


def test_defaults_are_imagenet_sized():
  layer = DATA_LAYERS['synthetic']({}, 'train')
  assert (layer.num_examples, layer.image_shape, layer.num_classes) == (1281167, (224, 224, 3), 1000)
  assert layer.batches_per_epoch(256) == 5004


def test_train_repeats_one_random_batch_forever():
  params = {'image_shape': [5, 7, 2], 'num_classes': 3, 'num_examples': 1000}
  layer = DATA_LAYERS['synthetic'](params, 'train')
  batches = [(x.numpy(), y.numpy()) for x, y in layer.dataset(64, seed=1).take(4)]
  images, labels = batches[0]
  assert images.shape == (64, 5, 7, 2) and images.dtype == np.float32 and labels.dtype == np.int32
  assert abs(images.mean()) < 0.1 and abs(images.std() - 1) < 0.1
  assert set(labels) == {0, 1, 2}
  for x, y in batches[1:]:
    np.testing.assert_array_equal(x, images)
    np.testing.assert_array_equal(y, labels)
  other, _ = next(iter(layer.dataset(64, seed=2)))
  assert not np.array_equal(other.numpy(), images)


def test_eval_yields_each_workers_share_once():
  params = {'image_shape': [2, 2, 1], 'num_examples': 10}
  sizes = [len(y) for _, y in DATA_LAYERS['synthetic'](params, 'eval').dataset(4)]
  assert sizes == [4, 4, 2]
  sizes = [len(y) for _, y in DATA_LAYERS['synthetic'](params, 'eval', 3, 1).dataset(2)]
  assert sizes == [2, 1]  # examples 1, 4, 7
  assert [len(y) for _, y in DATA_LAYERS['synthetic'](params, 'eval').dataset(4, start_batch=2)] == [2]


def test_bad_shape_is_rejected():
  with pytest.raises(ConfigError, match=r'data_layer_params.image_shape: must be a non-empty list'):
    DATA_LAYERS['synthetic']({'image_shape': [32, 0, 3]}, 'train')
  with pytest.raises(ConfigError, match='larger than the 10 examples'):
    DATA_LAYERS['synthetic']({'num_examples': 10}, 'train').dataset(11)
