"""Tests of the tfrecord data layer (and of imagenet, its preset) on tiny TFRecord files written here."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from core.params import ConfigError
from data import DATA_LAYERS, encoded_images, shared_params, tfrecord, tfrecord_facts
from data.base import DataError, data_error_in

SIZE = 8
COLOUR = (200, 100, 50)


def encode(image, png):
  image = tf.constant(image, tf.uint8)
  return (tf.io.encode_png(image) if png else tf.io.encode_jpeg(image, quality=95)).numpy()


def example(encoded, label, image_key='image', label_key='label'):
  return tf.train.Example(features=tf.train.Features(feature={
      image_key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
      label_key: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
  })).SerializeToString()


def write(path, records):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in records:
      writer.write(record)


def flat(height=10, width=12):
  return np.broadcast_to(np.array(COLOUR, np.uint8), (height, width, 3))


@pytest.fixture
def tfds_keys(tmp_path):
  """One train file of 6 records with TFDS' keys, PNG (even labels) and JPEG (odd), labels 0..5."""
  rng = np.random.default_rng(0)
  records = [example(encode(rng.integers(0, 256, (10, 12, 3)), png=label % 2 == 0), label)
             for label in range(6)]
  write(tmp_path / 'data-train-0', records)
  write(tmp_path / 'data-test-0', records[:5])
  return tmp_path


def layer(directory, mode='train', workers=1, worker=0, **params):
  defaults = {'data_dir': str(directory), 'train_files': 'data-train-*',
              'eval_files': 'data-test-*', 'preset': 'tfds', 'num_classes': 6,
              'image_size': SIZE}
  return DATA_LAYERS['tfrecord']({**defaults, **params}, mode, workers, worker)


def take(data_layer, batch_size, count, **kwargs):
  return [(x.numpy(), y.numpy()) for x, y in data_layer.dataset(batch_size, **kwargs).take(count)]


def forget_counts(monkeypatch):
  """Empties the process' count cache and makes any framing walk fail, so only caches answer."""
  monkeypatch.setattr(tfrecord, '_RECORD_COUNTS', {})

  def refuse(path):
    raise AssertionError(f'{path} was counted again')
  monkeypatch.setattr(tfrecord, 'count_records', refuse)


def test_presets_are_defaults_that_explicit_keys_override():
  resolved = tfrecord_facts.resolve_params(
      {'preset': 'imagenet', 'label_offset': 0, 'augment': None, 'crop_fraction': None})
  assert (resolved['label_offset'], resolved['num_classes'], resolved['image_key']) == (
      0, 1000, 'image/encoded')
  assert resolved['crop_fraction'] == 0.875 and resolved['mean'] == [0.485, 0.456, 0.406]
  general = tfrecord_facts.resolve_params({'augment': 'crop_flip', 'crop_fraction': None})
  assert (general['label_offset'], general['label_key'], general['crop_fraction']) == (
      0, 'image/class/label', None)
  tfds = tfrecord_facts.resolve_params({'preset': 'tfds', 'augment': None, 'crop_fraction': None})
  assert (tfds['image_key'], tfds['label_key'], tfds['crop_fraction']) == ('image', 'label', 0.875)
  from data import images  # pylint: disable=import-outside-toplevel
  assert shared_params.AUGMENTS == images.AUGMENTS


def test_counts_are_cached_beside_the_files_and_reused(tfds_keys, monkeypatch):
  monkeypatch.setattr(tfrecord, '_RECORD_COUNTS', {})
  # The TF-free fact the config layer sizes a run with reads the same cache.
  facts = DATA_LAYERS.facts('tfrecord')
  params = {key: spec.default for key, spec in facts['PARAMS'].items()}
  params.update(data_dir=str(tfds_keys), train_files='data-train-*', preset='tfds', num_classes=6)
  assert facts['TRAIN_EXAMPLES'](params) is None  # nothing counted yet
  assert facts['TRAIN_EXAMPLES']({**params, 'num_examples': 4}) == 4
  data = layer(tfds_keys)
  assert data.num_examples == 6 and data.split == 'train' and data.class_names is None
  assert data.record_counts == {str(tfds_keys / 'data-train-0'): 6}
  assert layer(tfds_keys, 'eval').num_examples == 5
  cache = json.loads((tfds_keys / tfrecord_facts.RECORD_COUNTS_FILE).read_text())
  assert cache['files']['data-train-0'] == {
      'records': 6, 'size': os.path.getsize(tfds_keys / 'data-train-0'),
      'mtime_ns': os.stat(tfds_keys / 'data-train-0').st_mtime_ns}
  assert cache['files']['data-test-0']['records'] == 5
  assert facts['TRAIN_EXAMPLES'](params) == 6
  with monkeypatch.context() as patch:
    forget_counts(patch)
    assert layer(tfds_keys).num_examples == 6  # read from the cache, not counted
  # A file that changes is counted again.
  write(tfds_keys / 'data-train-0', [example(encode(flat(), True), 1)] * 3)
  assert facts['TRAIN_EXAMPLES'](params) is None
  assert layer(tfds_keys).num_examples == 3
  assert facts['TRAIN_EXAMPLES'](params) == 3


def test_counts_go_to_the_run_directory_when_the_files_directory_is_read_only(
    tfds_keys, tmp_path_factory, monkeypatch):
  monkeypatch.setattr(tfrecord, '_RECORD_COUNTS', {})
  real_merge = tfrecord._merge_counts  # pylint: disable=protected-access

  def read_only(path, entries):
    if path.startswith(str(tfds_keys)):
      raise PermissionError(13, 'Permission denied', path)
    real_merge(path, entries)
  monkeypatch.setattr(tfrecord, '_merge_counts', read_only)
  run_dir = tmp_path_factory.mktemp('run')
  data = layer(tfds_keys)
  data.use_run_dir(str(run_dir))
  assert data.num_examples == 6 and not (tfds_keys / tfrecord_facts.RECORD_COUNTS_FILE).exists()
  kept = json.loads((run_dir / tfrecord_facts.RECORD_COUNTS_FILE).read_text())
  assert kept['files'][str(tfds_keys / 'data-train-0')]['records'] == 6
  forget_counts(monkeypatch)
  again = layer(tfds_keys)
  again.use_run_dir(str(run_dir))
  assert again.num_examples == 6


def test_a_record_without_the_keys_is_named_in_one_line(tfds_keys):
  with pytest.raises(DataError) as error:
    layer(tfds_keys, preset=None)
  message = str(error.value)
  assert '\n' not in message
  assert message == (f"tfrecord: {tfds_keys}/data-train-0: record 0 has no feature "
                     "'image/encoded' (data_layer_params.image_key, a bytes_list); its features: "
                     'image (bytes_list), label (int64_list)')
  with pytest.raises(DataError, match=r"record 0 has no feature 'lbl' \(data_layer_params.label_key"):
    layer(tfds_keys, label_key='lbl')


@pytest.mark.parametrize('params, message', [
    ({'num_classes': None}, 'data_layer_params.num_classes: required'),
    ({'train_files': None}, 'data_layer_params.train_files: required to read the train split'),
    ({'preset': 'tfd'}, "data_layer_params.preset: 'tfd' is not allowed \\(did you mean 'tfds'"),
    ({'mean': [0.5]}, r'data_layer_params.mean: 1 value\(s\) given for 3 channel\(s\)'),
])
def test_config_mistakes_are_named(tfds_keys, params, message):
  with pytest.raises(ConfigError, match=message):
    data = layer(tfds_keys, std=[0.5, 0.5, 0.5], **params)
    data.dataset(2)


def test_png_and_jpeg_decode_in_training_and_eval(tmp_path):
  write(tmp_path / 'data-train-0', [example(encode(flat(), png), label)
                                    for label, png in enumerate([True, False, True, False])])
  mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
  expected = (np.array(COLOUR) / 255 - mean) / std
  # 'none' and 'flip' decode as crop_flip does; inception_crop crops before decoding a JPEG.
  for augment in ('crop_flip', 'inception_crop'):
    data = layer(tmp_path, augment=augment, mean=mean, std=std, num_classes=4, shuffle_buffer=0)
    images, labels = take(data, 4, 1, seed=0)[0]
    assert images.shape == (4, SIZE, SIZE, 3) and list(labels) == [0, 1, 2, 3]
    # Resizing and cropping a flat colour keeps it (crop_flip pads with zeros: the centre).
    for image, png in zip(images, [True, False, True, False]):
      centre = image[3:5, 3:5]
      np.testing.assert_allclose(centre, np.broadcast_to(expected, centre.shape),
                                 atol=1e-5 if png else 0.05)
  evaluated, _ = take(layer(tmp_path, 'eval', eval_files='data-train-*', mean=mean, std=std,
                            num_classes=4), 4, 1)[0]
  np.testing.assert_allclose(evaluated[0], np.broadcast_to(expected, evaluated[0].shape), atol=1e-5)


def test_one_file_and_two_workers_shard_records(tfds_keys):
  labels = []
  for worker in range(2):
    data = layer(tfds_keys, 'eval', 2, worker, mean=[0.5] * 3, std=[0.5] * 3)
    assert data.shard_records and data.num_examples == 5
    labels.append(np.concatenate([y for _, y in take(data, 2, 10)]))
  # Each example once over both workers: positions 0, 2, 4 and 1, 3.
  np.testing.assert_array_equal(labels[0], [0, 2, 4])
  np.testing.assert_array_equal(labels[1], [1, 3])
  epochs = []
  for worker in range(2):
    data = layer(tfds_keys, 'train', 2, worker, mean=[0.5] * 3, std=[0.5] * 3)
    assert data.batches_per_epoch(3) == 1
    epochs.append(np.concatenate([y for _, y in take(data, 3, 2, seed=1)]).reshape(2, 3))
  for epoch in range(2):
    assert sorted(np.concatenate([epochs[0][epoch], epochs[1][epoch]])) == list(range(6))
    assert set(epochs[0][epoch]) == {0, 2, 4}


def test_fewer_files_than_workers_keep_dealing_files_when_there_are_enough(tfds_keys):
  write(tfds_keys / 'data-train-1', [example(encode(flat(), True), 5)] * 2)
  data = layer(tfds_keys, 'train', 2, 1, mean=[0.5] * 3, std=[0.5] * 3)
  assert not data.shard_records and data.worker_files == [str(tfds_keys / 'data-train-1')]


def test_resumed_stream_equals_uninterrupted_stream(tfds_keys):
  data = layer(tfds_keys, augment='crop_flip', shuffle_buffer=4, mean=[0.5] * 3, std=[0.5] * 3)
  full = take(data, 2, 9, seed=3)
  resumed = take(data, 2, 5, seed=3, start_batch=4)  # epoch 1, batch 1
  for (x, y), (x_resumed, y_resumed) in zip(full[4:], resumed):
    np.testing.assert_array_equal(y, y_resumed)
    np.testing.assert_array_equal(x, x_resumed)
  epochs = np.concatenate([y for _, y in full]).reshape(-1, 6)
  assert all(sorted(epoch) == list(range(6)) for epoch in epochs)
  assert len({tuple(epoch) for epoch in epochs}) > 1


def test_statistics_are_computed_once_and_kept_in_the_run_directory(tfds_keys, tmp_path_factory):
  pixels = []
  for record in tf.data.TFRecordDataset(str(tfds_keys / 'data-train-0')):
    encoded = tf.io.parse_single_example(record, {'image': tf.io.FixedLenFeature([], tf.string)})
    pixels.append(tf.io.decode_image(encoded['image'], channels=3).numpy().reshape(-1, 3) / 255)
  pixels = np.concatenate(pixels)
  run_dir = tmp_path_factory.mktemp('run')
  # image_size = the stored size and no crop: the eval images are the pixels themselves.
  data = layer(tfds_keys, image_size=[10, 12], augment='flip')
  data.use_run_dir(str(run_dir))
  mean, std = data.statistics()
  np.testing.assert_allclose(mean, pixels.mean(axis=0), rtol=1e-6)
  np.testing.assert_allclose(std, pixels.std(axis=0), rtol=1e-5)
  kept = json.loads((run_dir / encoded_images.STATISTICS_FILE).read_text())
  assert kept['mean'] == list(mean) and kept['std'] == list(std) and kept['channels'] == 3
  # Another layer of the run (eval, export) takes the kept numbers, whatever its files hold.
  kept.update(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
  (run_dir / encoded_images.STATISTICS_FILE).write_text(json.dumps(kept))
  evaluated = layer(tfds_keys, 'eval', image_size=[10, 12], augment='flip')
  evaluated.use_run_dir(str(run_dir))
  assert evaluated.statistics() == ((0.5,) * 3, (0.25,) * 3)
  spec, preprocess = evaluated.serving_input()
  assert spec.dtype == tf.string and spec.shape.as_list() == [None]
  served = preprocess(tf.constant([encode(flat(10, 12), True)])).numpy()
  expected = (np.array(COLOUR) / 255 - 0.5) / 0.25
  np.testing.assert_allclose(served[0], np.broadcast_to(expected, served[0].shape), atol=1e-5)


# --- imagenet: the tfrecord layer with its preset -------------------------------------------------

def imagenet_shards(directory):
  """3 train files of 5 JPEGs (labels 1..15) and 2 validation files of 4 (16..23), 20-60 px."""
  rng = np.random.default_rng(7)
  label = 1
  for kind, files, per in (('train', 3, 5), ('validation', 2, 4)):
    for f in range(files):
      records = []
      for _ in range(per):
        height, width = rng.integers(20, 60, 2)
        encoded = tf.io.encode_jpeg(tf.constant(rng.integers(0, 256, (height, width, 3)), tf.uint8),
                                    quality=90).numpy()
        records.append(example(encoded, label, 'image/encoded', 'image/class/label'))
        label += 1
      write(directory / f'{kind}-{f:05d}-of-{files:05d}', records)


# The imagenet layer's batches (3 images) on imagenet_shards with image_size 24, num_classes 40,
# shuffle_buffer 4 and seed 5 (eval: in order), computed with data/imagenet.py before it became
# the tfrecord layer: the labels and the float64 sum of each batch's pixels.
ORIGINAL_TRAIN = [
    ([10, 0, 11], 1330.9871004373126), ([5, 6, 12], 1307.9336431377797),
    ([2, 1, 13], 1204.4276505167218), ([8, 7, 3], 1262.4362783487886),
    ([9, 4, 14], 1065.0131699235062)]
ORIGINAL_EVAL = [([15, 16, 17], 999.3002434686338), ([18, 19, 20], 1179.756653960736),
                 ([21, 22], 567.4845375505156)]


def imagenet_params(directory, mode, **extra):
  return {'data_dir': str(directory), 'image_size': 24, 'num_classes': 40, 'shuffle_buffer': 4,
          'num_examples': 15 if mode == 'train' else 8, **extra}


@pytest.fixture
def imagenet_dir(tmp_path):
  imagenet_shards(tmp_path)
  return tmp_path


def test_imagenet_keeps_its_original_batches(imagenet_dir):
  data = DATA_LAYERS['imagenet'](imagenet_params(imagenet_dir, 'train'), 'train')
  assert data.split == 'train' and data.num_examples == 15
  batches = take(data, 3, 5, seed=5)
  assert [list(y) for _, y in batches] == [labels for labels, _ in ORIGINAL_TRAIN]
  np.testing.assert_allclose([x.astype(np.float64).sum() for x, _ in batches],
                             [total for _, total in ORIGINAL_TRAIN], rtol=1e-6)
  data = DATA_LAYERS['imagenet'](imagenet_params(imagenet_dir, 'eval'), 'eval')
  assert data.split == 'validation'
  batches = take(data, 3, 5)
  assert [list(y) for _, y in batches] == [labels for labels, _ in ORIGINAL_EVAL]
  np.testing.assert_allclose([x.astype(np.float64).sum() for x, _ in batches],
                             [total for _, total in ORIGINAL_EVAL], rtol=1e-6)


@pytest.mark.parametrize('mode, workers', [('train', 1), ('train', 2), ('eval', 2)])
def test_imagenet_preset_equals_the_imagenet_layer(imagenet_dir, mode, workers):
  for worker in range(workers):
    old = DATA_LAYERS['imagenet'](imagenet_params(imagenet_dir, mode), mode, workers, worker)
    new = DATA_LAYERS['tfrecord'](imagenet_params(imagenet_dir, mode, preset='imagenet'), mode,
                                  workers, worker)
    assert old.image_shape == new.image_shape == (24, 24, 3)
    kwargs = {'seed': 5} if mode == 'train' else {}
    for (x_old, y_old), (x_new, y_new) in zip(take(old, 3, 4, **kwargs), take(new, 3, 4, **kwargs)):
      np.testing.assert_array_equal(y_old, y_new)
      np.testing.assert_array_equal(x_old, x_new)
    spec, preprocess = new.serving_input()
    assert spec.dtype == tf.string


def test_the_general_layer_counts_imagenet_files(imagenet_dir):
  data = DATA_LAYERS['tfrecord']({'data_dir': str(imagenet_dir), 'preset': 'imagenet'}, 'train')
  assert data.num_examples == 15 and data.num_classes == 1000
  assert DATA_LAYERS['imagenet']({'data_dir': str(imagenet_dir)}, 'train').num_examples == 1281167


def test_an_image_that_cannot_be_decoded_is_named_or_skipped(tmp_path):
  good = encode(flat(), True)
  write(tmp_path / 'data-train-0', [example(good, 0), example(b'not an image', 1),
                                    example(good, 2), example(good, 3)])
  params = dict(num_classes=4, mean=[0.5] * 3, std=[0.5] * 3, shuffle_buffer=0)
  with pytest.raises(tf.errors.OpError) as error:
    take(layer(tmp_path, 'eval', eval_files='data-train-*', **params), 4, 1)
  assert data_error_in(error.value) == (
      f'{tmp_path}/data-train-0: record 1: the image cannot be decoded; set '
      'data_layer_params.skip_corrupt: true to skip such records')
  data = layer(tmp_path, 'eval', eval_files='data-train-*', skip_corrupt=True, **params)
  (_, labels), = take(data, 4, 1)
  assert list(labels) == [0, 2, 3] and int(data.corrupt_count.numpy()) == 1


def test_compressed_files_are_told_apart_counted_and_read(tmp_path):
  records = [example(encode(flat(), png=True), label) for label in range(6)]
  for kind in ('GZIP', 'ZLIB', ''):
    folder = tmp_path / (kind or 'none')
    folder.mkdir()
    with tf.io.TFRecordWriter(str(folder / 'data-train-0'), kind or None) as writer:
      for record in records:
        writer.write(record)
    assert tfrecord.file_compression(str(folder / 'data-train-0')) == kind
    # Counted through the decompressed bytes, read by TensorFlow with the compression told.
    assert tfrecord.count_records(str(folder / 'data-train-0'), kind) == 6
    data = layer(folder)
    assert data.compression == kind and data.num_examples == 6
    assert len(list(data.dataset(3).take(4))) == 4
  assert tfrecord.file_compression(str(tmp_path / 'none' / 'tfrecord_counts.json')) is None
  mixed = tmp_path / 'mixed'
  mixed.mkdir()
  os.link(tmp_path / 'GZIP' / 'data-train-0', mixed / 'data-train-0')
  os.link(tmp_path / 'ZLIB' / 'data-train-0', mixed / 'data-train-1')
  with pytest.raises(DataError, match=r'^tfrecord: the files of .*data-train-\* are compressed '
                                      r'differently \(.*data-train-0 \(GZIP\), .*data-train-1 '
                                      r'\(ZLIB\)\); give one kind a split$'):
    layer(mixed)
  with pytest.raises(DataError, match=r'^tfrecord: .*none/data-train-0 is uncompressed, not ZLIB: '
                                      r'set data_layer_params.compression: none \(or auto\)$'):
    layer(tmp_path / 'none', compression='zlib')
  cut = tmp_path / 'cut.gz'
  cut.write_bytes((tmp_path / 'GZIP' / 'data-train-0').read_bytes()[:-30])
  with pytest.raises(DataError, match=r'cut.gz: (truncated TFRecord file \(GZIP\)|cannot be read '
                                      r'as GZIP-compressed)'):
    tfrecord.count_records(str(cut), 'GZIP')


def damage(path, record, byte=20):
  """Flips a byte of the data of ``record`` in an uncompressed file; returns the data's offset.

  The record's header and length checksum still hold: only TensorFlow's reader, which checks the
  data's checksum too, finds it.
  """
  raw = bytearray(path.read_bytes())
  start = 0
  for _ in range(record):  # a 12-byte header, the data, a 4-byte checksum
    start += 12 + int.from_bytes(raw[start:start + 8], 'little') + 4
  raw[start + 12 + byte] ^= 0xFF
  path.write_bytes(bytes(raw))
  return start + 12


def test_the_first_file_whose_records_cannot_be_read_is_found(tmp_path):
  records = [example(encode(flat(), png=True), label) for label in range(4)]
  paths = [tmp_path / f'data-train-{i}' for i in range(4)]
  for path in paths:
    write(path, records)
  assert tfrecord.first_unreadable_record([str(p) for p in paths]) is None
  offset = damage(paths[1], 2)
  damage(paths[3], 0)
  assert tfrecord.count_records(str(paths[1])) == 4  # the framing of the headers holds
  assert tfrecord.first_unreadable_record([str(p) for p in paths]) == (
      str(paths[1]), 2, f'corrupted record at {offset}')
  assert layer(tmp_path).corrupt_file() == (
      f'tfrecord: {paths[1]}: record 2 cannot be read (corrupted record at {offset}): the file is '
      f'damaged; copy it again, or leave it out of the files {tmp_path}/data-train-* matches')
  # Each worker looks among the files it reads: worker 0 of 2 files 0 and 2, worker 1 1 and 3.
  assert layer(tmp_path, workers=2, worker=0).corrupt_file() is None
  assert layer(tmp_path, workers=2, worker=1).corrupt_file().startswith(
      f'tfrecord: {paths[1]}: record 2 cannot be read')


def test_a_resume_on_changed_training_files_is_one_line(tfds_keys, tmp_path_factory, capsys):
  run_dir = tmp_path_factory.mktemp('run')
  layer(tfds_keys).use_run_dir(str(run_dir))
  recorded = json.loads((run_dir / 'train_set.json').read_text())
  assert recorded['train_examples'] == 6
  (run_dir / 'ckpt-4.index').write_bytes(b'')  # the checkpoints trained on those files
  layer(tfds_keys).use_run_dir(str(run_dir))  # the same files: nothing said
  layer(tfds_keys, 'eval').use_run_dir(str(run_dir))  # an evaluation reads other files
  write(tfds_keys / 'data-train-1', [example(encode(flat(), png=True), 1)])
  with pytest.raises(DataError) as refused:
    layer(tfds_keys).use_run_dir(str(run_dir))
  assert str(refused.value) == (
      f'tfrecord: the training files {tfds_keys}/data-train-* changed since this run directory '
      f'was trained: 7 training records now, 6 when the checkpoints beside {run_dir}/'
      'train_set.json were trained; resuming would read another training set from the same '
      'data position. Put the files back, train in a new logdir, or go on with them: --set '
      'data_layer_params.accept_changed_train_dir=true')
  # As many records, one file of other bytes.
  os.remove(tfds_keys / 'data-train-1')
  write(tfds_keys / 'data-train-0', [example(encode(flat(), png=False), label)
                                     for label in range(6)])
  with pytest.raises(DataError, match=r': 6 training records then and now, but other files '
                                      r'\(names or sizes\); resuming would'):
    layer(tfds_keys).use_run_dir(str(run_dir))
  capsys.readouterr()
  layer(tfds_keys, accept_changed_train_dir=True).use_run_dir(str(run_dir))
  assert capsys.readouterr().err.endswith(
      f'tfrecord: the training files {tfds_keys}/data-train-* changed: 6 training records then and '
      'now, but other files (names or sizes); going on with it (accept_changed_train_dir)\n')
  now = json.loads((run_dir / 'train_set.json').read_text())
  assert now['train_examples'] == 6 and now['fingerprint'] != recorded['fingerprint']
  layer(tfds_keys).use_run_dir(str(run_dir))  # recorded: the next resume goes on
