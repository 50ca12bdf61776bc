"""Tests of the ImageNet data layer on small JPEG TFRecord shards written here."""

import os

import numpy as np
import pytest
import tensorflow as tf

from data import DATA_LAYERS
from data.base import DataError
from data.imagenet import crc32c, train_crop_window

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])
TRAIN_FILES, EVAL_FILES, PER_FILE = 4, 2, 6
SIZE = 32


def example(image, label):
  encoded = tf.io.encode_jpeg(tf.constant(image, tf.uint8), quality=95).numpy()
  return tf.train.Example(features=tf.train.Features(feature={
      'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
      'image/class/label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
      'image/extra': tf.train.Feature(bytes_list=tf.train.BytesList(value=[b'ignored'])),
  })).SerializeToString()


def write_shard(path, records):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in records:
      writer.write(record)


def stripe_image():
  """64 x 128, white between 40 % and 60 % of the width, black elsewhere."""
  image = np.zeros((64, 128, 3), np.uint8)
  image[:, int(0.4 * 128):int(0.6 * 128)] = 255
  return image


@pytest.fixture(scope='module')
def shards(tmp_path_factory):
  """Train labels are 1..24, one per record, so a label names its record."""
  directory = tmp_path_factory.mktemp('imagenet')
  rng = np.random.default_rng(0)
  label = 1
  for f in range(TRAIN_FILES):
    records = []
    for _ in range(PER_FILE):
      h, w = rng.integers(24, 72, 2)
      records.append(example(rng.integers(0, 256, (h, w, 3)), label))
      label += 1
    write_shard(directory / f'train-{f:05d}-of-{TRAIN_FILES:05d}', records)
  colour = np.broadcast_to(np.array([200, 100, 50], np.uint8), (60, 40, 3))
  evals = [example(colour, 101), example(stripe_image(), 102)]
  evals += [example(rng.integers(0, 256, (40, 50, 3)), 103 + i) for i in range(2 * PER_FILE - 2)]
  for f in range(EVAL_FILES):
    write_shard(directory / f'validation-{f:05d}-of-{EVAL_FILES:05d}',
                evals[f * PER_FILE:(f + 1) * PER_FILE])
  return str(directory)


def layer(directory, mode, workers=1, worker=0, **params):
  defaults = {'data_dir': directory, 'image_size': SIZE, 'num_classes': 200,
              'num_examples': TRAIN_FILES * PER_FILE if mode == 'train' else EVAL_FILES * PER_FILE}
  return DATA_LAYERS['imagenet']({**defaults, **params}, mode, workers, worker)


def take(data_layer, batch_size, count, **kwargs):
  return [(x.numpy(), y.numpy()) for x, y in data_layer.dataset(batch_size, **kwargs).take(count)]


def test_crc32c_check_value():
  assert crc32c(b'123456789') == 0xE3069283


def test_eval_is_one_ordered_pass_with_offset_labels(shards):
  data = layer(shards, 'eval')
  assert data.image_shape == (SIZE, SIZE, 3) and data.num_classes == 200
  names = [os.path.join(shards, f'validation-{f:05d}-of-00002') for f in range(2)]
  assert data.record_counts == {name: 6 for name in names}
  batches = take(data, 5, 10)
  assert [x.shape for x, _ in batches] == [(5, SIZE, SIZE, 3)] * 2 + [(2, SIZE, SIZE, 3)]
  np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), np.arange(100, 112))
  unshifted = take(layer(shards, 'eval', label_offset=0), 12, 1)[0][1]
  np.testing.assert_array_equal(unshifted, np.arange(101, 113))


def test_eval_normalizes_and_centre_crops(shards):
  images, _ = take(layer(shards, 'eval'), 2, 1)[0]
  # A flat colour comes out as its normalized value (JPEG may move it by a level or two).
  expected = (np.array([200, 100, 50]) / 255 - MEAN) / STD
  np.testing.assert_allclose(images[0], np.broadcast_to(expected, images[0].shape), atol=0.05)
  # 64x128 -> shorter side round(32 / 0.875) = 37 -> 37x74 -> central columns 21..52.
  # Bilinear sampling at pixel centres: output column j reads source column
  # (j + 21 + 0.5) * 128 / 74 - 0.5 of the stripe.
  source = stripe_image()[0, :, 0].astype(float)
  x = (np.arange(SIZE) + 21 + 0.5) * 128 / 74 - 0.5
  left = np.floor(x).astype(int)
  expected = source[left] * (1 - (x - left)) + source[left + 1] * (x - left)
  columns = ((images[1] * STD + MEAN) * 255).mean(axis=(0, 2))
  np.testing.assert_allclose(columns, expected, atol=10)
  assert 100 < columns[8] < 170  # the partly covered edge column


def test_eval_shards_files_by_worker(shards):
  labels = [np.concatenate([y for _, y in take(layer(shards, 'eval', 2, w), 4, 10)]) for w in range(2)]
  np.testing.assert_array_equal(labels[0], np.arange(100, 106))
  np.testing.assert_array_equal(labels[1], np.arange(106, 112))
  skipped = np.concatenate([y for _, y in take(layer(shards, 'eval', 2, 1), 4, 10, start_batch=1)])
  np.testing.assert_array_equal(skipped, np.arange(110, 112))


def epoch_labels(batches, epochs, per_epoch):
  return np.concatenate([y for _, y in batches]).reshape(epochs, per_epoch)


def test_train_epochs_are_seeded_permutations(shards):
  data = layer(shards, 'train')
  assert data.batches_per_epoch(4) == 6
  batches = take(data, 4, 18, seed=1)
  assert all(x.shape == (4, SIZE, SIZE, 3) and x.dtype == np.float32 for x, _ in batches)
  assert all(np.isfinite(x).all() for x, _ in batches)
  labels = epoch_labels(batches, 3, 24)
  for epoch in labels:
    assert sorted(epoch) == list(range(24))
  assert len({tuple(epoch) for epoch in labels}) == 3
  np.testing.assert_array_equal(epoch_labels(take(data, 4, 18, seed=1), 3, 24), labels)
  assert not np.array_equal(epoch_labels(take(data, 4, 6, seed=2), 1, 24)[0], labels[0])


def test_train_order_ignores_tensorflows_global_seed_and_small_windows_shuffle(shards):
  data = layer(shards, 'train', shuffle_buffer=5)
  orders = []
  try:
    for global_seed in (1, 2):
      tf.random.set_seed(global_seed)
      orders.append(epoch_labels(take(data, 4, 12, seed=1), 2, 24))
  finally:
    tf.random.set_seed(None)
  np.testing.assert_array_equal(orders[0], orders[1])
  for epoch in orders[0]:
    assert sorted(epoch) == list(range(24))
    assert list(epoch) != sorted(epoch)
    # Round-robin over 4 files puts the r-th record of each file (label % 6 == r)
    # at positions 4r..4r+3, so a window of 5 positions spans at most 3 values of r.
    for start in range(0, 24, 5):
      ranks = epoch[start:start + 5] % 6
      assert ranks.max() - ranks.min() <= 2


def test_train_augmentation_redraws_each_epoch(shards):
  batches = take(layer(shards, 'train'), 24, 2, seed=1)
  (first, first_labels), (second, second_labels) = batches
  for label in (0, 7):
    a = first[list(first_labels).index(label)]
    b = second[list(second_labels).index(label)]
    assert np.abs(a - b).mean() > 0.05


def test_train_augmentation_differs_between_records(tmp_path):
  ramp = np.broadcast_to(np.linspace(0, 255, 64).astype(np.uint8)[None, :, None], (48, 64, 3))
  write_shard(tmp_path / 'train-0', [example(ramp, label) for label in range(1, 9)])
  images, labels = take(layer(str(tmp_path), 'train', num_examples=8), 8, 1, seed=0)[0]
  assert sorted(labels) == list(range(8))
  # One source image, eight different crops and flips.
  assert len({image.tobytes() for image in images}) == 8
  # A mirrored ramp decreases left to right.
  slopes = np.sign(images[:, :, -1].mean(axis=(1, 2)) - images[:, :, 0].mean(axis=(1, 2)))
  assert set(slopes) == {-1.0, 1.0}


def test_train_workers_read_disjoint_files(shards):
  per_worker = []
  for worker in range(2):
    data = layer(shards, 'train', 2, worker)
    assert data.batches_per_epoch(3) == 4
    per_worker.append(epoch_labels(take(data, 3, 8, seed=1), 2, 12))
  for epoch in range(2):
    assert sorted(np.concatenate([per_worker[0][epoch], per_worker[1][epoch]])) == list(range(24))
    # Worker 0 holds files 0 and 2 (labels 0-5, 12-17).
    assert set(per_worker[0][epoch]) == set(range(6)) | set(range(12, 18))


def test_resumed_stream_equals_uninterrupted_stream(shards):
  data = layer(shards, 'train')
  full = take(data, 4, 14, seed=3)
  resumed = take(data, 4, 6, seed=3, start_batch=8)  # inside epoch 1
  for (x, y), (x_resumed, y_resumed) in zip(full[8:], resumed):
    np.testing.assert_array_equal(y, y_resumed)
    np.testing.assert_array_equal(x, x_resumed)


def test_short_files_wrap_around_to_fill_the_epoch(shards):
  data = layer(shards, 'train', num_examples=36)
  labels = np.concatenate([y for _, y in take(data, 4, 9, seed=0)])
  assert sorted(labels[:24]) == list(range(24))
  assert len(labels) == 36 and set(labels[24:]) <= set(range(24))


def test_random_resized_crop_windows():
  shape = tf.constant([100, 150, 3])
  windows = np.array([train_crop_window(shape, tf.constant([5, s], tf.int64)).numpy()
                      for s in range(200)])
  y, x, h, w = windows.T
  assert (y >= 0).all() and (x >= 0).all() and (y + h <= 100).all() and (x + w <= 150).all()
  area = h * w / (100 * 150)
  # The kernel rounds height and width to pixels, hence the tolerances.
  assert area.min() >= 0.07 and area.max() <= 1
  aspect = w / h
  full = area == 1
  assert (aspect[~full] >= 0.75 * 0.9).all() and (aspect[~full] <= 4 / 3 * 1.1).all()
  assert area.min() < 0.2 and np.median(area) < 0.7 and len({tuple(v) for v in windows}) > 150


def test_missing_files_are_named(shards, tmp_path):
  with pytest.raises(DataError, match=f'{tmp_path}/nowhere does not exist'):
    layer(str(tmp_path / 'nowhere'), 'train')
  with pytest.raises(DataError, match=f'no files match {tmp_path}/validation-\\*'):
    layer(str(tmp_path), 'eval')
  with pytest.raises(DataError, match=f'no files match {shards}/val-\\*'):
    layer(shards, 'eval', file_pattern='val-*')



def test_fewer_files_than_workers_deal_records_and_evaluation_counts_each_once(shards):
  # Two validation files and three workers: the records, not the files, are dealt.
  labels = []
  for worker in range(3):
    for _, batch in take(layer(shards, 'eval', 3, worker), 4, 100):
      labels += batch.tolist()
  everything = [y for _, batch in take(layer(shards, 'eval'), 4, 100) for y in batch.tolist()]
  assert len(labels) == len(everything) == EVAL_FILES * PER_FILE
  assert sorted(labels) == sorted(everything)


@pytest.mark.parametrize('damage, message', [
    (lambda raw: raw[:-10], r'truncated TFRecord file: record 5 needs \d+ bytes, the file has \d+'),
    (lambda raw: raw + raw[:5], r'truncated TFRecord file: the header of record 6 at byte \d+ is cut'),
    (lambda raw: raw[:2] + bytes([raw[2] ^ 0xFF]) + raw[3:],
     r'corrupt TFRecord file: bad length checksum in record 0 at byte 0'),
    (lambda raw: b'JFIF not a record file at all', r'corrupt TFRecord file: bad length checksum'),
])
def test_damaged_files_are_named_at_construction(shards, tmp_path, damage, message):
  for f in range(2):
    raw = open(os.path.join(shards, f'validation-{f:05d}-of-00002'), 'rb').read()
    (tmp_path / f'validation-{f:05d}').write_bytes(damage(raw) if f == 1 else raw)
  with pytest.raises(DataError, match=f'{tmp_path}/validation-00001: {message}'):
    layer(str(tmp_path), 'eval')


def test_serving_takes_jpeg_bytes_and_preprocesses_them_as_eval_does(shards):
  data = layer(shards, 'eval')
  spec, preprocess = data.serving_input()
  assert spec.dtype == tf.string and spec.shape.as_list() == [None]
  colour = np.broadcast_to(np.array([200, 100, 50], np.uint8), (60, 40, 3))
  jpegs = tf.constant([tf.io.encode_jpeg(tf.constant(colour), quality=95).numpy(),
                       tf.io.encode_jpeg(tf.constant(stripe_image()), quality=95).numpy()])
  served = preprocess(jpegs).numpy()
  evaluated, _ = take(data, 2, 1)[0]  # the same two images, first in the eval files
  assert served.shape == (2, SIZE, SIZE, 3) and served.dtype == np.float32
  np.testing.assert_array_equal(served, evaluated)
