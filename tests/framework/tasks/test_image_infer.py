"""--mode=infer for an image classifier: which files it reads, its lines, bad files, stdin."""

import io
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from data.base import DataError
from framework.run import launch
from framework.tasks import base
from framework.tasks import image_classification
from framework.tasks.image_classification import ImageClassificationTask
from tests.tiny_classifier import tiny_model

NAMES = ('dark', 'grey', 'bright')


class StubLayer:
  """An eval layer of 4x4 grey images with named classes; files decode to pixels in [0, 1]."""

  image_shape = (4, 4, 1)
  num_classes = 3
  class_names = NAMES

  def encoded_image_input(self):
    def one(encoded):
      image = tf.io.decode_image(encoded, channels=1, expand_animations=False)
      return tf.image.resize(tf.cast(image, tf.float32) / 255.0, [4, 4])

    return lambda files: tf.map_fn(one, files, fn_output_signature=tf.TensorSpec([4, 4, 1]))


def expected_line(path, level):
  """The line of a uniform image of pixel ``level`` (0-255), from numpy's softmax."""
  m = level / 255.0
  logits = np.array([5 - 10 * m, 0.0, 10 * m - 5])
  p = np.exp(logits - logits.max())
  p /= p.sum()
  order = np.argsort(-p)
  return (f'{path}\t{NAMES[order[0]]}\t{p[order[0]]:.4f}\t'
          f'{NAMES[order[1]]}:{p[order[1]]:.4f}\t{NAMES[order[2]]}:{p[order[2]]:.4f}')


def write_image(path, level, size=6, kind='png'):
  pixels = tf.fill([size, size, 1], tf.constant(level, tf.uint8))
  data = tf.io.encode_png(pixels) if kind == 'png' else tf.io.encode_jpeg(pixels, quality=100)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(data.numpy())
  return str(path)


@pytest.fixture(name='task')
def fixture_task():
  return ImageClassificationTask({'label_smoothing': 0.0})


def test_a_folder_gives_its_images_recursively_sorted_and_a_line_each(tmp_path, task):
  folder = tmp_path / 'images'
  write_image(folder / 'b.png', 230)
  write_image(folder / 'a' / 'z.PNG', 20)  # the extension in any case
  write_image(folder / 'a' / 'mid.jpg', 10, kind='jpeg')
  (folder / 'notes.txt').write_text('not an image')
  paths = task.infer_inputs(str(folder))
  assert paths == [str(folder / 'a' / 'mid.jpg'), str(folder / 'a' / 'z.PNG'),
                   str(folder / 'b.png')]
  lines = task.infer(tiny_model(), StubLayer(), paths, batch_size=2)  # batches of 2 and 1
  assert lines[1:] == [expected_line(paths[1], 20), expected_line(paths[2], 230)]
  # A JPEG of one grey level decodes to about that level: the classes, not the 4th decimal.
  name, probability = lines[0].split('\t')[1:3]
  assert name == 'dark' and 0.98 < float(probability) < 1.0
  assert task.infer(tiny_model(), StubLayer(), paths, batch_size=64) == lines


def test_a_file_is_an_image_by_extension_or_content_else_a_list_of_paths(tmp_path, task):
  image = write_image(tmp_path / 'one.png', 0)
  assert task.infer_inputs(image) == [image]
  unnamed = tmp_path / 'photo'
  unnamed.write_bytes((tmp_path / 'one.png').read_bytes())  # a PNG without an extension
  assert task.infer_inputs(str(unnamed)) == [str(unnamed)]
  listing = tmp_path / 'list.txt'
  listing.write_text(f'{image}\n\n  {unnamed}  \n')
  assert task.infer_inputs(str(listing)) == [image, str(unnamed)]
  # A list whose first path starts "BM" is no bitmap: a BMP has four zero bytes after its size.
  bmw = tmp_path / 'bmw.txt'
  bmw.write_text('BMW/1.png\n')
  assert task.infer_inputs(str(bmw)) == ['BMW/1.png']
  assert image_classification.looks_like_image(b'BM\x36\x00\x00\x00\x00\x00\x00\x00')
  assert image_classification.looks_like_image(b'GIF89a\x01\x00\x01\x00')
  assert not image_classification.looks_like_image(b'hello worl')


def test_unreadable_and_undecodable_files_get_an_error_line_and_the_rest_are_classified(
    tmp_path, task, capsys):
  good = write_image(tmp_path / 'good.png', 250)
  truncated = tmp_path / 'truncated.png'
  truncated.write_bytes((tmp_path / 'good.png').read_bytes()[:40])
  text = tmp_path / 'text.png'
  text.write_text('hello')
  missing = str(tmp_path / 'missing.png')
  paths = [str(truncated), good, str(text), missing]
  lines = task.infer(tiny_model(), StubLayer(), paths, batch_size=8)
  assert lines[1] == expected_line(good, 250)
  assert lines[0].startswith(f'{truncated}\terror: cannot be decoded (')
  assert '\n' not in lines[0] and 'Traceback' not in lines[0]
  assert lines[2] == f'{text}\terror: not a JPEG, PNG, BMP or GIF image'
  assert lines[3] == f'{missing}\terror: cannot be read (No such file or directory)'
  assert capsys.readouterr().err.strip() == (
      'warning: 3 of 4 image(s) could not be read or decoded; their lines say why '
      '(path<TAB>error: ...)')


def test_empty_and_missing_inputs_are_one_line(tmp_path, task):
  (tmp_path / 'empty').mkdir()
  with pytest.raises(DataError, match=r'^--infer_input \S+/empty: the folder holds no image file'):
    task.infer_inputs(str(tmp_path / 'empty'))
  with pytest.raises(DataError, match=r'^--infer_input \S+/nope: no such file or folder$'):
    task.infer_inputs(str(tmp_path / 'nope'))
  (tmp_path / 'blank.txt').write_text('\n \n')
  with pytest.raises(DataError, match=r'blank.txt: the file names no image; give an image file'):
    task.infer_inputs(str(tmp_path / 'blank.txt'))


def run_infer(monkeypatch, task, stdin_bytes, output_file=None):
  """``launch.infer`` as run.py calls it, on ``stdin_bytes`` as stdin."""
  monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(stdin_bytes), encoding='ascii'))
  trainer = types.SimpleNamespace(task=task, model=tiny_model(), eval_data=StubLayer(),
                                  eval_config={'batch_size_per_gpu': 2})
  launch.infer(trainer, types.SimpleNamespace(infer_input='-', infer_output_file=output_file))


def test_stdin_gives_one_path_a_line_and_bytes_that_are_not_utf8_one_error_line(
    tmp_path, task, monkeypatch, capsys):
  dark = write_image(tmp_path / 'é dark.png', 5)  # UTF-8 paths, whatever the locale says
  bright = write_image(tmp_path / 'bright.png', 240)
  run_infer(monkeypatch, task, f'{dark}\n{bright}\n'.encode('utf-8'))
  assert capsys.readouterr().out == (
      f'{expected_line(dark, 5)}\n{expected_line(bright, 240)}\n')
  with pytest.raises(launch.LaunchError) as error:
    run_infer(monkeypatch, task, b'\x89PNG\r\n\x1a\n\x00\x00')  # an image piped in, not a path
  assert str(error.value) == ('--infer_input -: stdin is not UTF-8 text (byte 0x89 at offset 0); '
                              'give one image path a line, in UTF-8')
  output = tmp_path / 'out.tsv'
  run_infer(monkeypatch, task, f'{bright}\n'.encode(), output_file=str(output))
  assert output.read_text() == expected_line(bright, 240) + '\n'


def test_the_base_task_reads_lines_and_names_a_file_that_is_not_utf8(tmp_path):
  words = tmp_path / 'words.txt'
  words.write_bytes(b'tomato\r\nlamb\n')
  assert base.read_lines(str(words)) == ['tomato', 'lamb']
  words.write_bytes(b'caf\xe9\n')
  with pytest.raises(DataError) as error:
    base.read_lines(str(words))
  assert str(error.value) == (f'--infer_input {words}: {words} is not UTF-8 text (byte 0xe9 at '
                              'offset 3); give one input a line, in UTF-8')
  with pytest.raises(DataError, match=r'cannot be read \(Is a directory\)$'):
    base.read_lines(str(tmp_path))
