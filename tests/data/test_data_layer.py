"""Tests of the data-layer registry, the base class checks and the batched augmentation."""

import importlib
import sys

import numpy as np
import pytest
import tensorflow as tf

from data import DATA_LAYERS
from data.base import DataLayer, pad_crop_flip
from core.params import ConfigError, Param
from core.registry import UnknownNameError


class _Toy(DataLayer):
  PARAMS = {'size': Param(int, 10)}

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    self.num_examples = self.params['size']


def test_registry_holds_the_layers():
  assert sorted(DATA_LAYERS) == ['cifar10', 'cmudict', 'fashion_mnist', 'image_folder', 'imagenet',
                                 'synthetic', 'text_pairs', 'tfds', 'tfrecord']
  with pytest.raises(UnknownNameError, match=r"'fashion_mnst'.*did you mean 'fashion_mnist'"):
    DATA_LAYERS['fashion_mnst']


@pytest.mark.parametrize('name', sorted(DATA_LAYERS))
def test_each_layer_reads_its_facts_from_the_module_beside_it(name):
  # data/<layer>.py and data/<layer>_facts.py: the registration and the class share one PARAMS.
  cls = DATA_LAYERS[name]
  facts = importlib.import_module(cls.__module__ + '_facts')
  registered = DATA_LAYERS.facts(name)
  assert cls.PARAMS is facts.PARAMS is registered['PARAMS']
  assert registered['TASK'] == facts.TASK == getattr(cls, 'TASK', 'image_classification')
  assert registered.get('TRAIN_EXAMPLES') is getattr(facts, 'train_examples', None)
  assert registered.get('EVAL_SPLITS') is getattr(facts, 'eval_splits', None)


def test_a_users_layer_declares_its_size_as_its_built_in_layers_do(tmp_path, monkeypatch):
  # docs/your_data.md: an import path's facts are its class's attributes, TRAIN_EXAMPLES too.
  from framework.config import validation  # pylint: disable=import-outside-toplevel
  (tmp_path / 'sized_layers.py').write_text(
      'from data.synthetic import SyntheticDataLayer\n'
      'class Sized(SyntheticDataLayer):\n'
      '  TRAIN_EXAMPLES = staticmethod(lambda params: 100)\n')
  (tmp_path / 'c.yaml').write_text(
      'base_params:\n'
      '  model: resnet_cifar\n'
      '  data_layer: sized_layers:Sized\n'
      '  data_layer_params: {image_shape: [8, 8, 3], num_classes: 3}\n'
      '  batch_size_per_gpu: 64\n'
      '  num_epochs: 1\n'
      '  optimizer: Momentum\n'
      '  optimizer_params: {momentum: 0.9}\n'
      '  lr_policy: poly_decay\n'
      '  lr_policy_params: {learning_rate: 0.1, power: 2.0, warmup_epochs: 3}\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, 'sized_layers', raising=False)
  with pytest.raises(ConfigError, match=r'^lr_policy_params.warmup_epochs: the warm-up \(3 steps\) '
                     r'is longer than training \(1 steps\)'):
    validation.load_configs(str(tmp_path / 'c.yaml'), 'train', construct=False)


@pytest.mark.parametrize('kwargs, message', [
    (dict(mode='test'), r"mode: 'test' is not allowed; allowed: 'train', 'eval'"),
    (dict(mode='train', num_workers=0), r'num_workers: expected a positive integer, got 0'),
    (dict(mode='train', num_workers=2, worker_index=2),
     r'worker_index: expected an integer in \[0, 2\), got 2'),
    (dict(mode='train', params={'sise': 3}), r'data_layer_params.sise: unknown key .*did you mean'),
    (dict(mode='train', params={'size': 'big'}), r'data_layer_params.size: expected an integer'),
])
def test_constructor_rejects_bad_arguments(kwargs, message):
  kwargs = {'params': {}, **kwargs}
  with pytest.raises(ConfigError, match=message):
    _Toy(**kwargs)


def test_batches_per_epoch_counts_full_batches_of_one_worker():
  layer = _Toy({'size': 60000}, 'train', num_workers=2, worker_index=1)
  assert layer.batches_per_epoch(256) == 117  # 30000 // 256
  assert layer.batches_per_epoch(30000) == 1
  assert layer.batches_per_epoch(30001) == 0
  with pytest.raises(ConfigError, match='larger than the 60000 examples'):
    layer.train_batches_per_epoch(30001)
  with pytest.raises(ConfigError, match='batch_size: expected a positive integer'):
    layer.batches_per_epoch(0)


def _reference_pad_crop_flip(image, offset, flip, pad):
  padded = np.pad(image, [(pad, pad), (pad, pad), (0, 0)])
  h, w = image.shape[:2]
  crop = padded[offset[0]:offset[0] + h, offset[1]:offset[1] + w]
  return crop[:, ::-1] if flip else crop


@pytest.mark.parametrize('pad', [2, 4])
def test_pad_crop_flip_matches_per_image_reference(pad):
  rng = np.random.default_rng(pad)
  images = rng.integers(1, 256, size=(16, 9, 7, 3), dtype=np.uint8)
  offsets = rng.integers(0, 2 * pad + 1, size=(16, 2)).astype(np.int32)
  offsets[0] = [0, 0]
  offsets[1] = [2 * pad, 2 * pad]
  flips = rng.random(16) < 0.5
  flips[:2] = [True, False]
  out = pad_crop_flip(tf.constant(images), tf.constant(offsets), tf.constant(flips), pad).numpy()
  for i in range(16):
    expected = _reference_pad_crop_flip(images[i], offsets[i], flips[i], pad)
    np.testing.assert_array_equal(out[i], expected)
  # Extreme offsets bring in `pad` zero rows/columns on one side.
  assert (out[0, :pad] == 0).all() and (out[0, pad:, :-pad] != 0).all()
