"""Tests of the image_folder data layer on small trees of image files written here.

Every file of the main tree is one flat grey value, distinct per file, and the
layer is told mean 0 and std 1/255, so a batch's pixels name the files it read.
"""

import json
import os
import shutil
import struct

import numpy as np
import pytest
import tensorflow as tf

from core.params import ConfigError
from data import DATA_LAYERS, image_files, image_folder_facts, images
from data.base import AUGMENT_KEY, DataError, data_error_in, epoch_key, sub_key
from framework.tasks.image_classification import ImageClassificationTask

CLASSES = ('bird', 'cat', 'ant')  # written unsorted: labels follow the sorted names
PER_CLASS = 8
IDENTITY = {'mean': [0.0, 0.0, 0.0], 'std': [1 / 255] * 3}


def png(array):
  return tf.io.encode_png(tf.constant(array, tf.uint8)).numpy()


def flat(value, size=(8, 8), channels=3):
  return np.full((*size, channels), value, np.uint8)


def write(path, data):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(data)


def make_tree(root, order=1):
  """Writes 3 classes x 8 PNGs, a JPEG, a nested PNG and ignored files; value -> (path, label).

  ``order`` -1 creates the files in reverse order (the listing must not matter).
  """
  entries = []
  value = 4
  for name in CLASSES:
    for i in range(PER_CLASS):
      entries.append((os.path.join(name, f'img{i:02d}.png'), value))
      value += 8
  entries.append((os.path.join('cat', 'photo.JPG'), value))  # extension in any case
  entries.append((os.path.join('ant', 'deep', 'nested.png'), value + 8))
  values = {}
  for relative, v in entries[::order]:
    data = (tf.io.encode_jpeg(flat(v), quality=100).numpy() if relative.endswith('JPG')
            else png(flat(v)))
    write(os.path.join(root, relative), data)
    values[v] = (relative, sorted(CLASSES).index(relative.split(os.sep)[0]))
  # Ignored: other extensions, hidden files and folders, files outside class folders.
  write(os.path.join(root, 'cat', 'notes.txt'), b'not an image')
  write(os.path.join(root, 'cat', '.hidden.png'), b'not an image')
  write(os.path.join(root, 'bird', '.cache', 'x.png'), b'not an image')
  write(os.path.join(root, 'README.png'), b'not an image')
  os.makedirs(os.path.join(root, '.git'))
  return values


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
  root = tmp_path_factory.mktemp('folders')
  values = make_tree(str(root / 'train'))
  for i, name in enumerate(sorted(CLASSES)):
    for j in range(2):
      write(str(root / 'eval' / name / f'e{j}.png'), png(flat(250 - 10 * (2 * i + j))))
  return str(root), values


def layer(root, mode, workers=1, worker=0, **params):
  base = {'train_dir': os.path.join(root, 'train'), **IDENTITY}
  return DATA_LAYERS['image_folder']({**base, **params}, mode, workers, worker)


def values_of(batch):
  """The file value of each image of a batch (its mean pixel, rounded to the grid 4 + 8 k)."""
  means = batch.numpy().reshape(batch.shape[0], -1).mean(axis=1)
  return [int(round((m - 4) / 8)) * 8 + 4 for m in means]


def read(data, batch_size, count=None, **kwargs):
  ds = data.dataset(batch_size, **kwargs)
  if count is not None:
    ds = ds.take(count)
  return [(x.numpy(), y.numpy()) for x, y in ds]


def full_defaults(params):
  return {**{k: spec.default for k, spec in image_folder_facts.PARAMS.items()}, **params}


def test_classes_counts_and_shape(tree):
  root, values = tree
  data = layer(root, 'train')
  assert data.class_names == ('ant', 'bird', 'cat') and data.num_classes == 3
  assert data.num_examples == len(values) == 26 and data.split == 'train'
  assert data.image_shape == (8, 8, 3)  # from the headers
  assert sorted(os.path.relpath(p, os.path.join(root, 'train')) for p, _ in data.files) == sorted(
      rel for rel, _ in values.values())
  assert {label for _, label in data.files} == {0, 1, 2}
  assert image_folder_facts.train_examples(full_defaults({'train_dir': root + '/train'})) == 26
  assert image_folder_facts.train_examples(full_defaults({'train_dir': root + '/none'})) is None
  assert DATA_LAYERS.facts('image_folder')['TRAIN_EXAMPLES'] is image_folder_facts.train_examples


def test_eval_reads_eval_dir_in_order_and_labels_by_folder(tree):
  root, _ = tree
  data = layer(root, 'eval', eval_dir=os.path.join(root, 'eval'))
  assert data.split == 'eval' and data.num_examples == 6
  (x, y), = read(data, 8)
  assert x.shape == (6, 8, 8, 3) and x.dtype == np.float32
  assert list(y) == [0, 0, 1, 1, 2, 2]
  assert np.array_equal(x[:, 0, 0, 0], [250, 240, 230, 220, 210, 200])


def test_validation_split_is_disjoint_sized_and_independent_of_listing(tree, tmp_path):
  root, values = tree
  params = {'validation_fraction': 0.25, 'split_seed': 3}
  train = layer(root, 'train', **params)
  validation = layer(root, 'eval', **params)
  assert validation.split == 'validation'
  # round(0.25 n) per class: ant 9 -> 2, bird 8 -> 2, cat 9 -> 2.
  assert validation.num_examples == 6 and train.num_examples == 20
  train_files = {p for p, _ in train.files}
  held = {p for p, _ in validation.files}
  assert not train_files & held and len(train_files | held) == 26
  assert sorted(label for _, label in validation.files) == [0, 0, 1, 1, 2, 2]
  # The same files are held out again, in every mode and worker.
  assert {p for p, _ in layer(root, 'eval', 2, 1, **params).files} == held
  # A copy created in the reverse order, under another name, holds out the same relative paths.
  make_tree(str(tmp_path / 'elsewhere' / 'train'), order=-1)
  moved = layer(str(tmp_path / 'elsewhere'), 'eval', **params)
  relative = lambda files, base: {os.path.relpath(p, base) for p, _ in files}  # noqa: E731
  assert (relative(moved.files, str(tmp_path / 'elsewhere' / 'train'))
          == relative(validation.files, os.path.join(root, 'train')))
  other_seed = layer(root, 'eval', validation_fraction=0.25, split_seed=4)
  assert {p for p, _ in other_seed.files} != held
  # The declared size agrees with the layer.
  assert image_folder_facts.train_examples(
      full_defaults({'train_dir': root + '/train', **params})) == 20


def test_validation_batches_read_the_held_out_files(tree):
  root, values = tree
  data = layer(root, 'eval', validation_fraction=0.25)
  batches = read(data, 4)
  got = [v for x, _ in batches for v in values_of(tf.constant(x))]
  expected = {os.path.join(root, 'train', values[v][0]): values[v][1] for v in got}
  assert dict(data.files) == expected
  assert [y for _, labels in batches for y in labels] == [label for _, label in data.files]


def test_train_workers_take_disjoint_covering_shards_of_each_epoch(tree):
  root, values = tree
  shards = [read(layer(root, 'train', 2, w, augment='none'), 13, count=2) for w in range(2)]
  for epoch in range(2):
    seen = [values_of(tf.constant(shards[w][epoch][0])) for w in range(2)]
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == sorted(values)
    for w in range(2):  # labels travel with their files
      assert list(shards[w][epoch][1]) == [values[v][1] for v in seen[w]]
  # Each epoch is a new permutation.
  assert values_of(tf.constant(shards[0][0][0])) != values_of(tf.constant(shards[0][1][0]))


def test_eval_over_two_workers_counts_every_example_once(tree):
  root, _ = tree
  seen = []
  for w in range(2):
    data = layer(root, 'eval', 2, w, eval_dir=os.path.join(root, 'eval'))
    seen += [int(v) for x, _ in read(data, 2) for v in x[:, 0, 0, 0]]
  assert sorted(seen) == [200, 210, 220, 230, 240, 250]


def test_train_drops_partial_batches_and_refuses_too_large_a_batch(tree):
  root, _ = tree
  data = layer(root, 'train', augment='none')
  assert data.batches_per_epoch(8) == 3
  first = read(data, 8, count=4)
  assert all(x.shape[0] == 8 for x, _ in first)
  with pytest.raises(ConfigError, match='batch_size: 27 per worker'):
    data.dataset(27)


def test_resumed_stream_equals_uninterrupted_stream(tree):
  root, _ = tree
  data = layer(root, 'train', augment='crop_flip')
  whole = read(data, 5, count=12, seed=9)
  for k in (1, 5, 7):  # 5 batches an epoch: within, at and past the first epoch's end
    resumed = read(data, 5, count=12 - k, seed=9, start_batch=k)
    for (x, y), (rx, ry) in zip(whole[k:], resumed):
      assert np.array_equal(x, rx) and np.array_equal(y, ry)
  other_seed = read(data, 5, count=1, seed=10)
  assert not np.array_equal(other_seed[0][0], whole[0][0])


@pytest.mark.parametrize('augment', ['crop_flip', 'flip'])
def test_augmentation_depends_on_the_example_not_the_batch(tree, augment):
  root, _ = tree

  def by_file(batch_size, workers):
    out = {}
    for w in range(workers):
      data = layer(root, 'train', workers, w, augment=augment)
      for x, y in read(data, batch_size, count=data.batches_per_epoch(batch_size)):
        for image in x:
          out[int(image.max())] = image
    return out

  a, b = by_file(2, 1), by_file(6, 2)
  common = set(a) & set(b)
  assert len(common) > 10
  assert all(np.array_equal(a[v], b[v]) for v in common)
  if augment == 'crop_flip':  # a flat image's mirror is itself: only a crop shows
    assert any(not np.array_equal(a[v], a[v][:, ::-1]) for v in common)


def test_inception_crop_keys_each_file_by_seed_epoch_and_index(tmp_path):
  # One file per class, so the label names the file; random pixels, so the crop shows.
  for i in range(6):
    write(str(tmp_path / 'train' / f'c{i}' / 'x.png'),
          png(np.random.default_rng(i).integers(0, 256, (12, 10, 3))))
  params = {'train_dir': str(tmp_path / 'train'), 'image_size': 8,
            'augment': 'inception_crop', **IDENTITY}
  data = DATA_LAYERS['image_folder'](params, 'train')
  ds = data.dataset(3, seed=5)
  assert ds.element_spec[0].shape == (3, 8, 8, 3) and ds.element_spec[1].shape == (3,)
  for epoch, (x, y) in enumerate(read(data, 3, count=4, seed=5)):
    aug_key = sub_key(epoch_key(5, epoch // 2), AUGMENT_KEY)
    for image, label in zip(x, y):
      path, _ = data.files[label]
      expected = images.train_image(tf.io.read_file(path), sub_key(aug_key, label), 8, 3,
                                    'inception_crop')
      np.testing.assert_array_equal(image, expected.numpy())


def test_statistics_are_numpys_and_kept_in_the_run_directory(tmp_path):
  rng = np.random.default_rng(0)
  pixels = []
  for name in ('a', 'b'):
    for i in range(5):
      image = rng.integers(0, 256, (6, 7, 3)).astype(np.uint8)
      image[..., 2] //= 4  # channels differ
      pixels.append(image)
      write(str(tmp_path / 'train' / name / f'{i}.png'), png(image))
  params = {'train_dir': str(tmp_path / 'train')}
  data = DATA_LAYERS['image_folder'](params, 'train')
  run_dir = tmp_path / 'run'
  data.use_run_dir(str(run_dir))
  everything = np.stack(pixels).reshape(-1, 3).astype(np.float64) / 255
  mean, std = data.normalization()
  np.testing.assert_allclose(mean, everything.mean(axis=0), rtol=1e-9)
  np.testing.assert_allclose(std, everything.std(axis=0), rtol=1e-9)
  saved = json.loads((run_dir / 'image_statistics.json').read_text())
  assert saved['mean'] == list(mean) and saved['std'] == list(std) and saved['channels'] == 3
  assert not [f for f in os.listdir(run_dir) if f != 'image_statistics.json']  # no temporary left
  # Normalized pixels are (x - 255 m) / (255 s).
  (x, _), = read(_eval_layer_with(params, run_dir), 10)
  expected = (np.stack(pixels) - 255 * np.array(mean)) / (255 * np.array(std))
  np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-5)
  # A later run of the directory reads the file back instead of computing again.
  saved['mean'] = [0.5, 0.5, 0.5]
  (run_dir / 'image_statistics.json').write_text(json.dumps(saved))
  again = DATA_LAYERS['image_folder'](params, 'train')
  again.use_run_dir(str(run_dir))
  assert again.normalization()[0] == (0.5, 0.5, 0.5)
  # Without a run directory they are computed in memory.
  assert DATA_LAYERS['image_folder'](params, 'train').normalization()[0] == mean


def test_a_changed_train_dir_is_refused_at_resume_with_mean_and_std_given(tmp_path):
  for i in range(4):
    write(str(tmp_path / 'train' / 'ab'[i % 2] / f'{i}.png'), png(flat(i)))
  params = {'train_dir': str(tmp_path / 'train'), 'image_size': 8, **IDENTITY}
  run_dir = tmp_path / 'run'
  DATA_LAYERS['image_folder'](params, 'train').use_run_dir(str(run_dir))
  # No statistics to keep: the training files are recorded on their own.
  assert sorted(os.listdir(run_dir)) == ['train_set.json']
  (run_dir / 'ckpt-2.index').write_bytes(b'')
  DATA_LAYERS['image_folder'](params, 'train').use_run_dir(str(run_dir))  # the same files
  write(str(tmp_path / 'train' / 'a' / '9.png'), png(flat(9)))
  with pytest.raises(DataError, match=r'^image_folder: train_dir .*/train changed since this run '
                                      r'directory was trained: 5 training images now, 4 when the '
                                      r'checkpoints beside .*/run/train_set.json were trained; '):
    DATA_LAYERS['image_folder'](params, 'train').use_run_dir(str(run_dir))


def _eval_layer_with(params, run_dir):
  """The training files as an eval split (eval_dir = train_dir), using the run's statistics."""
  data = DATA_LAYERS['image_folder']({**params, 'eval_dir': params['train_dir']}, 'eval')
  data.use_run_dir(str(run_dir))
  return data


def test_image_size_inference_and_mixed_sizes(tmp_path):
  write(str(tmp_path / 'train' / 'a' / '0.png'), png(flat(1, (5, 9))))
  write(str(tmp_path / 'train' / 'a' / '1.png'), png(flat(2, (5, 9))))
  params = {'train_dir': str(tmp_path / 'train'), **IDENTITY}
  assert DATA_LAYERS['image_folder'](params, 'train').image_shape == (5, 9, 3)
  write(str(tmp_path / 'train' / 'b' / '2.png'), png(flat(3, (6, 9))))
  with pytest.raises(DataError, match=r'^image_folder: the images of .* differ in size \(5x9 .*'
                                      r'6x9 .*set data_layer_params.image_size') as info:
    DATA_LAYERS['image_folder'](params, 'train')
  assert '\n' not in str(info.value)
  data = DATA_LAYERS['image_folder']({**params, 'image_size': [4, 6]}, 'train')
  assert data.image_shape == (4, 6, 3)
  (x, _), = read(data, 3, count=1)
  assert x.shape == (3, 4, 6, 3)


def test_headers_of_every_format_give_the_size(tmp_path):
  from tests.data.test_images import bmp, gif  # pylint: disable=import-outside-toplevel
  files = {'a.png': png(flat(1, (5, 9))), 'b.jpg': tf.io.encode_jpeg(flat(1, (7, 3))).numpy(),
           'c.bmp': bmp(flat(1, (4, 6))), 'd.gif': gif([np.zeros((3, 8))], np.zeros((256, 3))),
           'e.png': b'garbage'}
  sizes = {}
  for name, data in files.items():
    write(str(tmp_path / name), data)
    sizes[name] = image_files.image_size_of(str(tmp_path / name))
  assert sizes == {'a.png': (5, 9), 'b.jpg': (7, 3), 'c.bmp': (4, 6), 'd.gif': (3, 8),
                   'e.png': None}


def test_the_large_image_note_says_when_its_headers_were_a_sample(tmp_path, capsys):
  # A PNG header only: the size in it is all the note reads (no file is decoded at the start).
  large = b'\x89PNG\r\n\x1a\n' + struct.pack('>I4sII5B', 13, b'IHDR', 6000, 6000, 8, 2, 0, 0, 0)
  small = png(flat(1, (8, 8)))

  def note(files):
    root = tmp_path / str(files)
    write(str(root / 'a' / '0000.png'), large)
    for i in range(1, files):
      write(str(root / ('a' if i % 2 else 'b') / f'{i:04d}.png'), small)
    DATA_LAYERS['image_folder']({'train_dir': str(root), 'image_size': 8, **IDENTITY}, 'train')
    return [line for line in capsys.readouterr().err.splitlines() if 'decoded whole' in line]

  tail = ('103 MB decoded: each is decoded whole, a few at once, before it is resized to 8x8; '
          'resize the files beforehand for less memory and faster steps')
  assert note(image_files.SIZE_SAMPLE) == [
      f'image_folder: train_dir holds images up to 6000x6000 ({tmp_path}/2000/a/0000.png), {tail}']
  assert note(image_files.SIZE_SAMPLE + 1) == [
      f'image_folder: train_dir holds images up to 6000x6000 ({tmp_path}/2001/a/0000.png; the '
      f'largest of 2,000 headers sampled from its 2,001 training files), {tail}']


def test_eval_dir_with_other_classes_is_refused_in_one_line(tree, tmp_path):
  root, _ = tree
  for name in ('ant', 'bee', 'cat'):
    write(str(tmp_path / 'eval' / name / '0.png'), png(flat(1)))
  with pytest.raises(DataError, match=r"^image_folder: eval_dir .*/eval holds class folders that "
                                      r"train_dir .*/train does not: \['bee'\]; the model "
                                      r"predicts train_dir's classes only$") as info:
    layer(root, 'eval', eval_dir=str(tmp_path / 'eval'))
  assert '\n' not in str(info.value)


def test_an_eval_dir_of_some_classes_keeps_their_labels_by_name(tree, tmp_path, capsys):
  root, _ = tree
  write(str(tmp_path / 'eval' / 'cat' / '0.png'), png(flat(30)))
  write(str(tmp_path / 'eval' / 'bird' / '0.png'), png(flat(20)))
  data = layer(root, 'eval', eval_dir=str(tmp_path / 'eval'))
  # ant 0, bird 1, cat 2 in train_dir: its labels, not the places in eval_dir (0, 1).
  assert [(os.path.basename(os.path.dirname(p)), label) for p, label in data.files] == [
      ('bird', 1), ('cat', 2)]
  assert data.num_classes == 3 and data.class_names == ('ant', 'bird', 'cat')
  assert capsys.readouterr().err.count("holds 2 of the 3 classes of train_dir (not ant)") == 1


def test_missing_and_empty_directories_are_named(tmp_path):
  def build(train_dir, mode='train', **params):
    return DATA_LAYERS['image_folder']({'train_dir': str(train_dir), **params}, mode)

  with pytest.raises(DataError, match=r'^image_folder: train_dir .*/nowhere does not exist'):
    build(tmp_path / 'nowhere')
  (tmp_path / 'empty').mkdir()
  with pytest.raises(DataError, match=r'^image_folder: train_dir .*/empty holds no class folder'):
    build(tmp_path / 'empty')
  write(str(tmp_path / 'some' / 'a' / '0.png'), png(flat(1)))
  (tmp_path / 'some' / 'b').mkdir()
  write(str(tmp_path / 'some' / 'b' / 'notes.txt'), b'x')
  with pytest.raises(DataError, match=r'^image_folder: class folder .*/some/b holds no JPEG'):
    build(tmp_path / 'some')
  write(str(tmp_path / 'ok' / 'a' / '0.png'), png(flat(1)))
  with pytest.raises(ConfigError, match=r'^data_layer_params: eval mode has no split to read'):
    build(tmp_path / 'ok', 'eval')
  with pytest.raises(ConfigError, match=r"^data_layer_params.eval_split: 'validation' needs"):
    build(tmp_path / 'ok', 'eval', eval_split='validation')
  with pytest.raises(DataError, match=r'^image_folder: eval_dir .*/gone does not exist'):
    build(tmp_path / 'ok', 'eval', eval_dir=str(tmp_path / 'gone'))
  with pytest.raises(ConfigError, match=r'^data_layer_params.mean: expected 3 value'):
    build(tmp_path / 'ok', mean=[0.5], std=[0.5])
  with pytest.raises(ConfigError, match=r'^data_layer_params.std: give mean and std together'):
    build(tmp_path / 'ok', std=[0.5, 0.5, 0.5])


def corrupt_tree(root):
  for i in range(4):
    write(os.path.join(root, 'a', f'{i}.png'), png(flat(10 * i + 10)))
  write(os.path.join(root, 'a', 'broken.png'), png(flat(99))[:30])  # truncated
  write(os.path.join(root, 'b', 'text.gif'), b'plain text, not a GIF')


def test_a_corrupt_file_stops_the_run_naming_it(tmp_path):
  corrupt_tree(str(tmp_path / 'train'))
  params = {'train_dir': str(tmp_path / 'train'), 'image_size': 8, **IDENTITY}
  data = DATA_LAYERS['image_folder']({**params, 'eval_dir': params['train_dir']}, 'eval')
  with pytest.raises(tf.errors.OpError) as info:
    read(data, 2)
  message = data_error_in(info.value)
  assert message.startswith(str(tmp_path / 'train' / 'a' / 'broken.png') + ': cannot be read or '
                            'decoded') and 'skip_corrupt' in message
  # Without mean and std, the statistics pass names it too.
  with pytest.raises(DataError, match='broken.png: cannot be read or decoded'):
    DATA_LAYERS['image_folder']({'train_dir': params['train_dir'], 'image_size': 8},
                                'train').normalization()


def test_skip_corrupt_skips_counts_and_names_the_files(tmp_path, capfd):
  corrupt_tree(str(tmp_path / 'train'))
  params = {'train_dir': str(tmp_path / 'train'), 'image_size': 8, 'skip_corrupt': True,
            'eval_dir': str(tmp_path / 'train'), **IDENTITY}
  data = DATA_LAYERS['image_folder'](params, 'eval')
  batches = read(data, 2)
  assert sorted(int(v) for x, _ in batches for v in x[:, 0, 0, 0]) == [10, 20, 30, 40]
  assert int(data.corrupt_count.numpy()) == 2
  err = capfd.readouterr().err
  assert 'broken.png' in err and 'text.gif' in err
  with pytest.raises(DataError, match=r'^image_folder: 2 corrupt files skipped after 4 read'):
    data.check_corrupt_fraction(4)
  data.params['max_corrupt_fraction'] = 0.5
  data.check_corrupt_fraction(4)


def test_a_corrupt_file_inside_a_batch_is_named_or_skipped_alone(tmp_path, capfd):
  # One batch of all 6 files: the batch is decoded again file by file.
  corrupt_tree(str(tmp_path / 'train'))
  params = {'train_dir': str(tmp_path / 'train'), 'eval_dir': str(tmp_path / 'train'),
            'image_size': 8, **IDENTITY}
  with pytest.raises(tf.errors.OpError) as info:
    read(DATA_LAYERS['image_folder'](params, 'eval'), 6)
  assert data_error_in(info.value).startswith(
      str(tmp_path / 'train' / 'a' / 'broken.png') + ': cannot be read or decoded')
  data = DATA_LAYERS['image_folder']({**params, 'skip_corrupt': True}, 'eval')
  (x, y), = read(data, 6)
  assert list(x[:, 0, 0, 0]) == [10, 20, 30, 40] and list(y) == [0, 0, 0, 0]
  assert int(data.corrupt_count.numpy()) == 2
  err = capfd.readouterr().err
  assert [line.split('file: ', 1)[1] for line in err.splitlines() if 'skipped corrupt' in line] == [
      f'{tmp_path / "train" / "a" / "broken.png"} (cannot be read or decoded); 1 skipped so far',
      f'{tmp_path / "train" / "b" / "text.gif"} (cannot be read or decoded); 2 skipped so far']


def test_skip_corrupt_in_training_moves_the_stream_up_by_the_skipped_file(tree, tmp_path):
  root, values = tree
  intact = str(tmp_path / 'intact')
  shutil.copytree(os.path.join(root, 'train'), intact)
  broken = str(tmp_path / 'broken')
  shutil.copytree(intact, broken)
  victim, _ = values[4 + 8 * 9]
  with open(os.path.join(broken, victim), 'wb') as f:
    f.write(b'not a PNG')

  def stream(train_dir, count):
    data = DATA_LAYERS['image_folder']({'train_dir': train_dir, 'skip_corrupt': True,
                                        'augment': 'none', **IDENTITY}, 'train')
    batches = read(data, 5, count=count, seed=2)
    assert all(x.shape == (5, 8, 8, 3) for x, _ in batches)
    return ([v for x, _ in batches for v in values_of(tf.constant(x))],
            [int(label) for _, y in batches for label in y], int(data.corrupt_count.numpy()))

  expected, expected_labels, none_skipped = stream(intact, 11)
  got, labels, skipped = stream(broken, 9)  # 45 examples, fewer than the intact 55 keep
  # The count includes the files decoded ahead of the batches read.
  assert none_skipped == 0 and skipped >= expected[:len(got)].count(4 + 8 * 9) >= 1
  kept = [i for i, v in enumerate(expected) if v != 4 + 8 * 9]
  assert len(kept) > len(got) and got == [expected[i] for i in kept][:len(got)]
  assert labels == [expected_labels[i] for i in kept][:len(got)]


def test_grey_files_become_rgb_and_rgb_becomes_grey(tmp_path):
  grey = np.random.default_rng(1).integers(0, 256, (5, 5, 1)).astype(np.uint8)
  colour = np.random.default_rng(2).integers(0, 256, (5, 5, 3)).astype(np.uint8)
  write(str(tmp_path / 'train' / 'a' / 'grey.png'), png(grey))
  write(str(tmp_path / 'train' / 'b' / 'colour.png'), png(colour))
  params = {'train_dir': str(tmp_path / 'train'), 'eval_dir': str(tmp_path / 'train'), **IDENTITY}
  (x, _), = read(DATA_LAYERS['image_folder'](params, 'eval'), 2)
  assert np.array_equal(x[0], np.repeat(grey, 3, axis=2)) and np.array_equal(x[1], colour)
  one = DATA_LAYERS['image_folder']({**params, 'channels': 1, 'mean': [0.0], 'std': [1 / 255]},
                                    'eval')
  assert one.image_shape == (5, 5, 1)
  (x, _), = read(one, 2)
  assert np.array_equal(x[0], grey)
  np.testing.assert_allclose(x[1, ..., 0], colour @ [0.2989, 0.5870, 0.1140], atol=1.0)


def test_serving_takes_encoded_files_and_preprocesses_them_as_eval(tree):
  root, _ = tree
  data = layer(root, 'eval', eval_dir=os.path.join(root, 'eval'), mean=[0.5, 0.4, 0.3],
               std=[0.2, 0.25, 0.3])
  spec, preprocess = data.serving_input()
  assert spec.dtype == tf.string and spec.name == 'images' and spec.shape.as_list() == [None]
  files = [os.path.join(root, 'eval', name, 'e0.png') for name in ('ant', 'bird')]
  encoded = tf.constant([open(f, 'rb').read() for f in files])
  (x, _), = read(data, 6)
  np.testing.assert_allclose(preprocess(encoded).numpy(), x[[0, 2]], rtol=1e-6)
  # A file of another size is resized; the base interface serves it too.
  big = np.random.default_rng(3).integers(0, 256, (16, 12, 3)).astype(np.uint8)
  out = data.encoded_image_input()(tf.constant([png(big)])).numpy()
  expected = (tf.image.resize(big, [8, 8]).numpy() - 255 * np.array([0.5, 0.4, 0.3])) / (
      255 * np.array([0.2, 0.25, 0.3]))
  np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-5)


def test_eval_splits_resolve_and_drive_the_final_evaluation(tree):
  root, _ = tree
  resolve = image_folder_facts.eval_splits
  assert resolve({'validation_fraction': 0.0}) == ('eval', 'eval')
  assert resolve({'validation_fraction': 0.2}) == ('validation', 'validation')
  assert resolve({'validation_fraction': 0.2, 'eval_dir': 'x'}) == ('validation', 'eval')
  assert resolve({'validation_fraction': 0.2, 'eval_dir': 'x', 'eval_split': 'eval'}) == (
      'eval', 'eval')
  assert resolve({'validation_fraction': 0.2, 'final_eval_split': 'eval'}) == ('validation', 'eval')
  task = ImageClassificationTask({'label_smoothing': 0.0})
  params = full_defaults({'train_dir': root + '/train', 'validation_fraction': 0.25,
                          'eval_dir': root + '/eval'})
  view = {'data_layer': 'image_folder', 'data_layer_params': params}
  final = task.final_eval_config(view)
  assert final['data_layer_params']['eval_split'] == 'eval'
  assert view['data_layer_params']['eval_split'] is None
  assert DATA_LAYERS['image_folder'](final['data_layer_params'], 'eval').split == 'eval'
  no_eval_dir = {'data_layer': 'image_folder',
                 'data_layer_params': dict(params, eval_dir=None)}
  assert task.final_eval_config(no_eval_dir) is None


def test_two_layers_of_one_run_share_the_statistics_file(tree, tmp_path):
  root, _ = tree
  params = {'train_dir': os.path.join(root, 'train'), 'validation_fraction': 0.25}
  train = DATA_LAYERS['image_folder'](params, 'train')
  train.use_run_dir(str(tmp_path))
  shutil.copy(tmp_path / 'image_statistics.json', tmp_path / 'kept.json')
  evaluation = DATA_LAYERS['image_folder'](params, 'eval')
  evaluation.use_run_dir(str(tmp_path))
  assert evaluation.normalization() == train.normalization()
  assert (tmp_path / 'kept.json').read_bytes() == (tmp_path / 'image_statistics.json').read_bytes()


def test_only_worker_zero_writes_the_statistics(tree, tmp_path):
  root, _ = tree
  params = {'train_dir': os.path.join(root, 'train')}
  second = DATA_LAYERS['image_folder'](params, 'train', 2, 1)
  second.use_run_dir(str(tmp_path))
  assert not os.listdir(tmp_path)
  first = DATA_LAYERS['image_folder'](params, 'train', 2, 0)
  first.use_run_dir(str(tmp_path))
  assert os.listdir(tmp_path) == ['image_statistics.json']
  assert first.normalization() == second.normalization()
