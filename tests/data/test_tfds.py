"""Tests of the tfds data layer on a tiny TensorFlow Datasets builder prepared here, offline."""

import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from data import DATA_LAYERS
from data.base import DataError

TRAIN, TEST, SIDE = 12, 5, 6
NAMES = ('circle', 'square', 'triangle')


class LargebatchTinyShapes(tfds.core.GeneratorBasedBuilder):
  """Flat 6 x 6 RGB images whose grey level is 10 x their number (test: 10 + i); labels i % 3.

  Defining the class registers it with TensorFlow Datasets as ``largebatch_tiny_shapes``.
  """

  VERSION = tfds.core.Version('1.0.0')

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        'image': tfds.features.Image(shape=(SIDE, SIDE, 3)),
        'label': tfds.features.ClassLabel(names=NAMES),
    }))

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download: the examples are generated
    return {'train': self._generate_examples(0, TRAIN), 'test': self._generate_examples(10, TEST)}

  def _generate_examples(self, first, count):
    for i in range(count):
      level = (first + i) * 10
      yield i, {'image': np.full((SIDE, SIDE, 3), level, np.uint8), 'label': i % 3}


NAME = 'largebatch_tiny_shapes'
# Normalization that keeps the pixel levels: (x - 0) / (255 / 255).
IDENTITY = {'mean': [0.0] * 3, 'std': [1 / 255] * 3}


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  directory = tmp_path_factory.mktemp('tfds')
  LargebatchTinyShapes(data_dir=str(directory)).download_and_prepare()
  return str(directory)


def layer(data_dir, mode='train', workers=1, worker=0, **params):
  return DATA_LAYERS['tfds']({'name': NAME, 'data_dir': data_dir, **params}, mode, workers, worker)


def examples_of(batches, first=0):
  """The example numbers of flat images (levels kept by IDENTITY), batch by batch."""
  return [list(np.round(x[:, 0, 0, 0] / 10).astype(int) - first) for x, _ in batches]


def stored_order(data_dir, split, first=0):
  """The example numbers of a split in the order TFDS stored them (it shuffles while preparing)."""
  ds = tfds.builder(NAME, data_dir=data_dir).as_dataset(split=split, shuffle_files=False)
  return [int(round(e['image'][0, 0, 0] / 10)) - first for e in ds.as_numpy_iterator()]


def take(data_layer, batch_size, count, **kwargs):
  return [(x.numpy(), y.numpy()) for x, y in data_layer.dataset(batch_size, **kwargs).take(count)]


def test_names_counts_and_shape_come_from_the_info(data_dir):
  train = layer(data_dir)
  assert train.class_names == NAMES and train.num_classes == 3
  assert train.num_examples == TRAIN and train.image_shape == (SIDE, SIDE, 3)
  assert train.split == 'train'
  # A small split is permuted whole each epoch (by default the buffer holds a worker's share).
  assert train.settings['shuffle_buffer'] == TRAIN
  assert layer(data_dir, 'train', 5, 0).settings['shuffle_buffer'] == 3
  evaluation = layer(data_dir, 'eval')
  assert evaluation.num_examples == TEST and evaluation.split == 'test'
  assert layer(data_dir, train_split='train[:50%]').num_examples == TRAIN // 2
  assert layer(data_dir, image_size=[4, 5], channels=1).image_shape == (4, 5, 1)
  facts = DATA_LAYERS.facts('tfds')
  params = {key: spec.default for key, spec in facts['PARAMS'].items()}
  params.update(name=NAME, data_dir=data_dir)
  assert facts['TRAIN_EXAMPLES'](params) == TRAIN
  assert facts['TRAIN_EXAMPLES']({**params, 'train_split': 'train[:50%]'}) is None


def test_eval_is_one_ordered_pass_and_two_workers_share_it(data_dir):
  order = stored_order(data_dir, 'test', 10)
  assert sorted(order) == list(range(TEST))
  batches = take(layer(data_dir, 'eval', augment='none', **IDENTITY), 2, 10)
  assert examples_of(batches, 10) == [order[0:2], order[2:4], order[4:]]
  assert list(np.concatenate([y for _, y in batches])) == [i % 3 for i in order]
  shares = [sum(examples_of(take(layer(data_dir, 'eval', 2, w, **IDENTITY), 2, 10), 10), [])
            for w in range(2)]
  assert shares == [order[0::2], order[1::2]]


def test_train_is_deterministic_and_two_workers_split_each_epoch(data_dir):
  data = layer(data_dir, augment='none', **IDENTITY)
  first = examples_of(take(data, 4, 6, seed=1))
  assert examples_of(take(layer(data_dir, augment='none', **IDENTITY), 4, 6, seed=1)) == first
  epochs = np.reshape(first, (2, TRAIN))
  assert all(sorted(epoch) == list(range(TRAIN)) for epoch in epochs)
  order = stored_order(data_dir, 'train')
  assert list(epochs[0]) != list(epochs[1]) and list(epochs[0]) != order
  assert examples_of(take(data, 4, 3, seed=2)) != first[:3]
  shares = []
  for worker in range(2):
    data = layer(data_dir, 'train', 2, worker, augment='none', **IDENTITY)
    assert data.batches_per_epoch(3) == 2
    shares.append(np.reshape(examples_of(take(data, 3, 4, seed=1)), (2, 6)))
  for epoch in range(2):
    assert sorted(np.concatenate([shares[0][epoch], shares[1][epoch]])) == list(range(TRAIN))
    assert set(shares[0][epoch]) == set(order[0::2])


def test_resumed_stream_equals_uninterrupted_stream(data_dir):
  data = layer(data_dir, augment='crop_flip', shuffle_buffer=5, **IDENTITY)
  full = take(data, 4, 7, seed=3)
  resumed = take(data, 4, 3, seed=3, start_batch=4)  # epoch 1, batch 1
  for (x, y), (x_resumed, y_resumed) in zip(full[4:], resumed):
    np.testing.assert_array_equal(y, y_resumed)
    np.testing.assert_array_equal(x, x_resumed)


def test_statistics_are_computed_from_the_training_images(data_dir):
  mean, std = layer(data_dir).statistics()
  levels = np.arange(TRAIN) * 10 / 255
  np.testing.assert_allclose(mean, [levels.mean()] * 3, rtol=1e-6)
  np.testing.assert_allclose(std, [levels.std()] * 3, rtol=1e-6)
  spec, preprocess = layer(data_dir, 'eval').serving_input()
  assert spec.dtype == tf.string
  served = preprocess(tf.constant([tf.io.encode_png(tf.fill([9, 9, 3], tf.constant(30, tf.uint8)))
                                   .numpy()])).numpy()
  np.testing.assert_allclose(served, (30 / 255 - levels.mean()) / levels.std(), atol=1e-5)


def test_a_set_not_prepared_is_named_and_download_prepares_it(data_dir, tmp_path):
  with pytest.raises(DataError) as error:
    layer(str(tmp_path))
  assert str(error.value) == (
      f'tfds: data set {NAME} is not prepared under {tmp_path}; set data_layer_params.download: '
      'true to download and prepare it there, or data_dir to where it is')
  with pytest.raises(DataError, match="has no builder named 'no_such_set'"):
    DATA_LAYERS['tfds']({'name': 'no_such_set', 'data_dir': str(tmp_path)}, 'train')
  # A generator needs no network: download prepares it.
  assert layer(str(tmp_path), download=True).num_examples == TRAIN
  assert layer(str(tmp_path)).num_examples == TRAIN
  with pytest.raises(Exception, match="data_layer_params.eval_split: 'validation' is not a split"):
    layer(data_dir, 'eval', eval_split='validation')
  with pytest.raises(Exception, match="data_layer_params.label_key: .* no ClassLabel feature 'y'"):
    layer(data_dir, label_key='y')


def test_a_resume_on_another_split_is_one_line(data_dir, tmp_path, capsys):
  run_dir = tmp_path / 'run'
  layer(data_dir).use_run_dir(str(run_dir))
  (run_dir / 'ckpt-4.index').write_bytes(b'')  # the checkpoints trained on the whole split
  layer(data_dir).use_run_dir(str(run_dir))  # the same split: nothing said
  with pytest.raises(DataError) as refused:
    layer(data_dir, train_split='train[:50%]').use_run_dir(str(run_dir))
  assert str(refused.value) == (
      f"tfds: split 'train[:50%]' of {NAME} changed since this run directory was trained: "
      f'{TRAIN // 2} training examples now, {TRAIN} when the checkpoints beside {run_dir}/'
      'train_set.json were trained; resuming would read another training set from the same '
      'data position. Put the files back, train in a new logdir, or go on with them: --set '
      'data_layer_params.accept_changed_train_dir=true')
  capsys.readouterr()
  layer(data_dir, train_split='train[:50%]', accept_changed_train_dir=True).use_run_dir(
      str(run_dir))
  assert capsys.readouterr().err == (
      f"tfds: split 'train[:50%]' of {NAME} changed: {TRAIN // 2} training examples now, {TRAIN} "
      f'when the checkpoints beside {run_dir}/train_set.json were trained; going on with it '
      '(accept_changed_train_dir)\n')
  layer(data_dir, train_split='train[:50%]').use_run_dir(str(run_dir))  # recorded since


def test_a_damaged_record_file_is_named(data_dir, tmp_path):
  copy = tmp_path / 'copy'
  shutil.copytree(data_dir, copy)
  data = layer(str(copy))
  assert data.corrupt_file() is None
  shard, = (copy / NAME / '1.0.0').glob(f'{NAME}-train.tfrecord-*')
  raw = bytearray(shard.read_bytes())
  raw[12 + 20] ^= 0xFF  # a byte of the first record's data: only its checksum tells
  shard.write_bytes(bytes(raw))
  assert data.corrupt_file() == (
      f'tfds: {shard}: record 0 cannot be read (corrupted record at 12): the prepared data set is '
      f'damaged; delete {copy}/{NAME}/1.0.0 and prepare it again (download: true)')
