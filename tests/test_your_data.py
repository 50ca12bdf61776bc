"""The worked examples of docs/your_data.md, run as a user runs them: files outside the checkout.

The example files (`my_models.py`, `flowers.yaml`, `records.yaml`,
`reverse.yaml`) are read from the page itself, so the page cannot drift from what works. Each run.py
starts in the project directory (or elsewhere, for the run directory's own
config) without PYTHONPATH, as a user who cloned the checkout would run it.
"""

import io
import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

from tests import in_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, 'docs', 'your_data.md')
CLASSES = ('daisy', 'rose', 'tulip')
# A colour per class, so that a few steps learn something (the test checks numbers agree, not that they are high).
COLOURS = np.array([[230, 220, 40], [200, 30, 40], [150, 60, 200]], np.float32)

pytestmark = pytest.mark.slow


def page_files():
  """``{name: text}`` of the blocks the page introduces with "File `name`:"."""
  text = open(PAGE, encoding='utf-8').read()
  return dict(re.findall(r'^File `([^`]+)`:\n\n```[a-z]*\n(.*?)^```', text, re.M | re.S))


def run(cwd, *args, check=True, stdin=None):
  """``run.py ARGS`` from the user's directory ``cwd``, in this process (tests/in_process.py)."""
  return in_process.run_py(*args, cwd=cwd, stdin=stdin, check=check)


def image(label, rng, size=24):
  """A noisy picture in the class's colour, as uint8 [size, size, 3]."""
  pixels = COLOURS[label] + rng.normal(0, 40, (size, size, 3))
  return np.clip(pixels, 0, 255).astype(np.uint8)


def write_folder(root, per_class, rng):
  for label, name in enumerate(CLASSES):
    os.makedirs(os.path.join(root, name))
    for i in range(per_class):
      png = tf.io.encode_png(image(label, rng)).numpy()
      with open(os.path.join(root, name, f'{i:03d}.png'), 'wb') as f:
        f.write(png)


def reversal_pairs(count, rng):
  """``source<TAB>target`` lines: random strings of 2-8 letters and their reversals."""
  lines = []
  for _ in range(count):
    word = ''.join(rng.choice(list('abcdefghij'), rng.integers(2, 9)))
    lines.append(f'{word}\t{word[::-1]}\n')
  return ''.join(lines)


@pytest.fixture(scope='module')
def project(tmp_path_factory):
  """The project directory of the examples: the page's files and the data they name."""
  directory = tmp_path_factory.mktemp('project')
  for name, text in page_files().items():
    (directory / name).write_text(text)
  rng = np.random.default_rng(0)
  write_folder(str(directory / 'flowers' / 'train'), 16, rng)
  write_folder(str(directory / 'flowers' / 'test'), 6, rng)
  os.makedirs(directory / 'records')
  for split, count, shards in (('train', 24, 2), ('test', 9, 1)):
    for shard in range(shards):
      with tf.io.TFRecordWriter(str(directory / 'records' / f'{split}-{shard}')) as writer:
        for i in range(shard, count, shards):
          label = i % len(CLASSES)
          encoded = tf.io.encode_jpeg(image(label, rng, 40)).numpy()
          example = tf.train.Example(features=tf.train.Features(feature={
              'image': tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
              'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}))
          writer.write(example.SerializeToString())
  os.makedirs(directory / 'reverse')
  rng = np.random.default_rng(0)
  for split, count in (('train', 2000), ('eval', 200), ('test', 200)):
    (directory / 'reverse' / f'{split}.tsv').write_text(reversal_pairs(count, rng))
  return directory


def test_the_page_holds_the_example_files():
  assert sorted(page_files()) == ['flowers.yaml', 'my_models.py', 'records.yaml', 'reverse.yaml']


def test_an_image_folder_and_your_own_model_from_yaml(project, tmp_path):
  train = run(project, '--config=flowers.yaml', '--mode=train_eval', '--logdir=runs/flowers')
  lines = train.stdout.splitlines()
  evals = [line for line in lines if line.startswith('eval at step')]
  assert len(evals) == 4 and all(line.endswith('on the validation split') for line in evals)
  # A quarter of each class of 16 held out: 4 x 3 validation images.
  assert all('(12 examples)' in line for line in evals)
  final = [line for line in lines if line.startswith('final ')]
  assert len(final) == 1 and final[0].startswith('final eval accuracy: ')
  assert 'best checkpoint by validation accuracy; the run ended at step 40' in final[0]

  logdir = project / 'runs' / 'flowers'
  recorded = yaml.safe_load((logdir / 'config.yaml').read_text())['base_params']
  assert recorded['model'] == 'my_models:small_cnn'
  assert recorded['import_paths'] == [str(project)]
  assert recorded['data_layer_params']['train_dir'] == str(project / 'flowers' / 'train')
  statistics = (logdir / 'image_statistics.json').read_text()

  # The run directory from anywhere: eval, export and infer with its config alone.
  config = f'--config={logdir}/config.yaml'
  evaluation = run(tmp_path, config, '--mode=eval', f'--logdir={logdir}', '--checkpoint=best',
                   '--set', 'data_layer_params.eval_split=eval')
  accuracy = float(re.search(r'top-1 ([0-9.]+)', evaluation.stdout).group(1))
  assert '(18 examples)' in evaluation.stdout
  assert f'accuracy: {accuracy:.4f}' in final[0]  # the same checkpoint on the same split
  exported = run(tmp_path, config, '--mode=export', f'--logdir={logdir}', '--checkpoint=best',
                 f'--export_dir={tmp_path}/export')
  assert exported.returncode == 0
  assert (tmp_path / 'export' / 'assets' / 'class_names.txt').read_text().split() == list(CLASSES)
  infer = run(tmp_path, config, '--mode=infer', f'--logdir={logdir}', '--checkpoint=best',
              f'--infer_input={project}/flowers/test')
  rows = [line.split('\t') for line in infer.stdout.splitlines()]
  assert len(rows) == 18 and all(row[1] in CLASSES for row in rows)
  # Infer classifies as the evaluation does: the same share of the test folder right.
  right = sum(row[1] == os.path.basename(os.path.dirname(row[0])) for row in rows)
  assert right / 18 == pytest.approx(accuracy, abs=1e-4)
  assert (logdir / 'image_statistics.json').read_text() == statistics

  # The served model gives the same classes from the files' bytes.
  serve = tf.saved_model.load(str(tmp_path / 'export')).signatures['serving_default']
  paths = [row[0] for row in rows[:4]]
  out = serve(images=tf.constant([open(p, 'rb').read() for p in paths]))
  assert [n.decode() for n in out['class_names'].numpy()] == [row[1] for row in rows[:4]]


def test_tfrecords_with_tfds_keys_and_a_keras_application(project, tmp_path):
  train = run(project, '--config=records.yaml', '--mode=train_eval', '--logdir=runs/records')
  assert 'final eval accuracy' in train.stdout and '(9 examples)' in train.stdout
  assert "matches none of the model's" not in train.stdout + train.stderr
  logdir = project / 'runs' / 'records'
  counts = yaml.safe_load((project / 'records' / 'tfrecord_counts.json').read_text())['files']
  assert {name: entry['records'] for name, entry in counts.items()} == {
      'test-0': 9, 'train-0': 12, 'train-1': 12}
  exported = run(tmp_path, f'--config={logdir}/config.yaml', '--mode=export', f'--logdir={logdir}',
                 f'--export_dir={tmp_path}/export')
  assert 'class_names' in exported.stdout
  (tmp_path / 'one.png').write_bytes(
      tf.io.encode_png(image(1, np.random.default_rng(1))).numpy())
  infer = run(tmp_path, f'--config={logdir}/config.yaml', '--mode=infer', f'--logdir={logdir}',
              f'--infer_input={tmp_path}/one.png')
  path, name, probability = infer.stdout.split('\t')[:3]
  assert path.endswith('one.png') and name in ('0', '1', '2') and 0 < float(probability) <= 1


def test_a_name_that_does_not_import_is_one_line(project):
  result = run(project, '--config=flowers.yaml', '--print_config',
               '--set', 'model=my_modls:small_cnn', check=False)
  assert result.returncode == 2
  assert result.stderr.strip() == (
      "error: model: model 'my_modls:small_cnn': cannot import module 'my_modls' "
      "(ModuleNotFoundError: No module named 'my_modls'); put its directory on the path: the "
      "config file's own directory is, and so are the directories of the import_paths key")


def test_text_pairs_train_infer_export_and_serve(project, tmp_path, run_main, monkeypatch):
  train = run(project, '--config=reverse.yaml', '--mode=train_eval', '--logdir=runs/reverse')
  lines = train.stdout.splitlines()
  evals = [line for line in lines if line.startswith('eval at step')]
  assert len(evals) == 2 and all(line.endswith('(194 sources) on the eval split') for line in evals)
  final = [line for line in lines if line.startswith('final ')]
  assert len(final) == 1 and final[0].startswith('final test ser: ')
  assert final[0].endswith('at step 300 (best checkpoint by eval ser)')
  # It learns: most reversals of unseen strings are right (a unigram guess gets none).
  assert float(re.search(r'ser: ([0-9.]+)', final[0]).group(1)) < 0.5
  assert float(re.search(r'ter ([0-9.]+)', final[0]).group(1)) < 0.2
  logdir = project / 'runs' / 'reverse'
  vocabulary = (logdir / 'vocabulary.json').read_text()
  assert json.loads(vocabulary)['source_vocabulary'] == list('abcdefghij')

  # From anywhere, with the run directory's config: infer on stdin, export, serve.
  config = f'--config={logdir}/config.yaml'
  infer = run(tmp_path, config, '--mode=infer', f'--logdir={logdir}', '--checkpoint=best',
              '--infer_input=-', stdin='abcdef\n\nhij\nxyz ab\n')
  rows = [line.split('\t') for line in infer.stdout.splitlines()]
  assert [row[0] for row in rows] == ['abcdef', 'hij', 'xyz ab']
  assert rows[0][1] == 'fedcba' or rows[1][1] == 'jih'  # a 6-letter or a 3-letter one right
  assert ('note: 4 of the 15 source tokens are outside the vocabulary of the training data and '
          'were read as <unk>') in infer.stderr
  # A source longer than max_length (256 by default) is refused before it is decoded, and
  # stdin without a source is one line, as for images (in this process: no training).
  arguments = (config, '--mode=infer', f'--logdir={logdir}', '--checkpoint=best', '--infer_input=-')
  for text, line in (('ab\n\n' + 'a' * 300 + '\n',
                      'error: --infer_input: line 3 is a source of 300 tokens, longer than '
                      'data_layer_params.max_length 256; cut it into shorter sources, or raise '
                      'the limit (--set data_layer_params.max_length=N)'),
                     ('\n  \n', 'error: --infer_input -: stdin holds no source; give one source a '
                                 'line')):
    monkeypatch.setattr('sys.stdin', io.TextIOWrapper(io.BytesIO(text.encode())))
    refused = run_main(*arguments)
    assert (refused.returncode, refused.stdout) == (2, '')
    assert refused.stderr.splitlines()[-1] == line
  # A byte-order mark (a file saved by some Windows editors) is no part of the first source.
  monkeypatch.setattr('sys.stdin', io.TextIOWrapper(io.BytesIO('\ufeffabc\n'.encode())))
  marked = run_main(*arguments)
  assert marked.stdout.split('\t')[0] == 'abc' and 'outside the vocabulary' not in marked.stderr
  exported = run(tmp_path, config, '--mode=export', f'--logdir={logdir}', '--checkpoint=best',
                 f'--export_dir={tmp_path}/export')
  assert "input 'sources'), returns the decoded targets as strings of characters" in exported.stdout
  assert (logdir / 'vocabulary.json').read_text() == vocabulary
  serve = tf.saved_model.load(str(tmp_path / 'export')).signatures['serving_default']
  out = serve(sources=tf.constant(['abcdef', 'hij', 'xyz ab']))['predictions'].numpy()
  assert [text.decode() for text in out] == [row[1] for row in rows]
