"""The data surfaces as a user meets them through run.py: links in an image folder, the
statistics and training set a run directory keeps, and what text pairs, TFRecords and TFDS
say of their input.

A refusal that comes before anything trains is answered by run.py's ``main()`` in this
process (``run_main``); a training runs in a child, once per module, and the cases that
need its run directory work on copies of it.
"""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

import numpy as np
import pytest
import tensorflow as tf
import yaml

from data import image_files
from tests.processes import Child

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_child(*args, cwd=None):
  """run.py in a child process, as a user runs it; returns the CompletedProcess."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  env.pop('PYTHONPATH', None)
  return subprocess.run([sys.executable, os.path.join(ROOT, 'run.py'), *map(str, args)],
                        cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=600)


def png(value, size=8):
  return tf.io.encode_png(np.full((size, size, 3), value, np.uint8)).numpy()


def write_images(folder, values):
  os.makedirs(folder, exist_ok=True)
  for name, value in values.items():
    with open(os.path.join(folder, name), 'wb') as f:
      f.write(png(value))


def error_lines(result):
  """The ``error:`` lines a run printed."""
  return [line for line in result.stderr.splitlines() if line.startswith('error:')]


# --- an image folder and the run directory it trained ------------------------------------------

@pytest.fixture(scope='module')
def folder_run(tmp_path_factory):
  """A two-class folder with a link back into the tree and a second link to one image,
  trained for 2 steps: ``(tree, config, logdir, the training's CompletedProcess)``."""
  base = tmp_path_factory.mktemp('folder')
  tree = base / 'train'
  write_images(tree / 'alpha', {f'a{i}.png': 20 + i for i in range(4)})
  write_images(tree / 'beta', {f'b{i}.png': 200 + i for i in range(4)})
  os.symlink('..', tree / 'alpha' / 'up')  # a loop: alpha/up/alpha/up/... and beta as alpha
  os.symlink(os.path.join('..', 'beta', 'b0.png'), tree / 'alpha' / 'twin.png')
  write_images(base / 'test' / 'alpha', {'t0.png': 25})
  write_images(base / 'test' / 'beta', {'t1.png': 205})
  config = base / 'folder.yaml'
  config.write_text(yaml.safe_dump({'base_params': {
      'model': 'resnet_cifar', 'model_params': {'depth': 8},
      'data_layer': 'image_folder',
      'data_layer_params': {'train_dir': str(tree), 'eval_dir': str(base / 'test'),
                            'image_size': 8, 'augment': 'none'},
      'batch_size_per_gpu': 4, 'max_steps': 2, 'optimizer': 'Momentum',
      'optimizer_params': {'momentum': 0.9}, 'lr_policy_params': {'learning_rate': 0.01},
      'dtype': 'float32'}}))
  logdir = base / 'run'
  trained = run_child(f'--config={config}', '--mode=train', f'--logdir={logdir}')
  assert trained.returncode == 0, trained.stderr
  return tree, config, logdir, trained


def copied_run(folder_run, tmp_path):
  """A copy of the trained run directory, its config.yaml's path, and the logdir."""
  logdir = tmp_path / 'run'
  shutil.copytree(folder_run[2], logdir)
  return f'--config={logdir}/config.yaml', f'--logdir={logdir}', logdir


@pytest.mark.slow
def test_links_that_loop_or_repeat_an_image_are_skipped_and_named(folder_run):
  tree, _, logdir, trained = folder_run
  told = [line for line in trained.stderr.splitlines() if 'skipped' in line]
  assert told == [
      f'image_folder: train_dir {tree}: skipped 2 link(s) that lead back into the tree or to a '
      f'file read already (alpha/up -> {tree}, alpha/twin.png -> {tree}/beta/b0.png); each '
      'image is read once, under its own class folder']
  # 4 + 4 images, each once: no beta image under alpha, nothing read twice.
  assert json.loads((logdir / 'image_statistics.json').read_text())['train_examples'] == 8


@pytest.mark.slow
def test_a_linked_class_folder_is_a_class_unless_it_leads_back_into_the_tree(tmp_path, run_main):
  tree = tmp_path / 'train'
  write_images(tree / 'alpha', {f'a{i}.png': 20 + i for i in range(3)})
  write_images(tmp_path / 'elsewhere' / 'gamma', {f'g{i}.png': 120 + i for i in range(2)})
  os.symlink(tmp_path / 'elsewhere' / 'gamma', tree / 'gamma')  # images kept elsewhere
  os.symlink('.', tree / 'loop')  # every class again, as 'loop'
  config = tmp_path / 'linked.yaml'
  config.write_text(yaml.safe_dump({'base_params': {
      'model': 'resnet_cifar', 'model_params': {'depth': 8}, 'data_layer': 'image_folder',
      'data_layer_params': {'train_dir': str(tree), 'image_size': 8, 'augment': 'none'},
      'batch_size_per_gpu': 2, 'max_steps': 1, 'optimizer': 'Momentum',
      'optimizer_params': {'momentum': 0.9}, 'lr_policy_params': {'learning_rate': 0.01},
      'dtype': 'float32'}}))
  refused = run_main(f'--config={config}', '--mode=train', f'--logdir={tmp_path}/refused')
  assert refused.returncode == 2 and 'Traceback' not in refused.stderr
  assert error_lines(refused) == [
      f'error: image_folder: train_dir {tree}: class folder loop is a link to {tree}, the tree '
      'itself or a folder above it (a loop): every image of the tree would be read again as class '
      'loop; make it a folder of its own images (or a link to one outside the tree), or remove it']
  os.remove(tree / 'loop')
  os.symlink('alpha', tree / 'beta')  # alpha's images again, as beta
  refused = run_main(f'--config={config}', '--mode=train', f'--logdir={tmp_path}/refused')
  assert error_lines(refused) == [
      f'error: image_folder: train_dir {tree}: class folder beta is a link to {tree}/alpha, a '
      'folder inside the tree: its images would be read again as class beta; make it a folder of '
      'its own images (or a link to one outside the tree), or remove it']
  os.remove(tree / 'beta')
  trained = run_main(f'--config={config}', '--mode=train', f'--logdir={tmp_path}/run')
  assert trained.returncode == 0, trained.stderr
  # The linked folder is the class of its link's name, its two images read once.
  assert json.loads((tmp_path / 'run' / 'image_statistics.json').read_text())[
      'train_examples'] == 5
  assert image_files.list_tree(str(tree)) == (
      ('alpha', 'gamma'), [('alpha/a0.png', 0), ('alpha/a1.png', 0), ('alpha/a2.png', 0),
                           ('gamma/g0.png', 1), ('gamma/g1.png', 1)])


@pytest.mark.slow
@pytest.mark.parametrize('mode', ['eval', 'export'])
def test_a_lost_statistics_file_is_not_computed_again_silently(folder_run, tmp_path, run_main, mode):
  config, logdir_flag, logdir = copied_run(folder_run, tmp_path)
  (logdir / 'image_statistics.json').unlink()
  extra = [f'--export_dir={tmp_path}/export'] if mode == 'export' else []
  refused = run_main(config, f'--mode={mode}', logdir_flag, *extra)
  assert refused.returncode == 2 and not (logdir / 'image_statistics.json').exists()
  assert error_lines(refused) == [
      f'error: image_folder: {logdir}/image_statistics.json is missing, and the checkpoints '
      "beside it were trained with the statistics it held; computed again from today's "
      f'{folder_run[0]} they may normalize differently: put the file back, or compute it again '
      'on purpose with --set data_layer_params.rebuild_statistics=true']
  if mode == 'export':
    return
  rebuilt = run_main(config, '--mode=eval', logdir_flag,
                     '--set', 'data_layer_params.rebuild_statistics=true')
  assert rebuilt.returncode == 0, rebuilt.stderr
  assert (f'image_folder: computed {logdir}/image_statistics.json again from 8 training images '
          "of today's train_dir (rebuild_statistics)") in rebuilt.stderr
  assert json.loads((logdir / 'image_statistics.json').read_text())['train_examples'] == 8


@pytest.mark.slow
def test_a_training_set_changed_since_the_checkpoints_is_one_line_at_resume(
    folder_run, tmp_path, run_main):
  config, logdir_flag, logdir = copied_run(folder_run, tmp_path)
  tree = tmp_path / 'train'
  shutil.copytree(folder_run[0], tree, symlinks=True)
  write_images(tree / 'beta', {'b4.png': 204, 'b5.png': 205})
  recorded = json.loads((logdir / 'image_statistics.json').read_text())
  resume = (config, '--mode=train', logdir_flag, '--continue_learning',
            '--set', f'data_layer_params.train_dir={tree}')
  refused = run_main(*resume)
  assert refused.returncode == 2
  assert error_lines(refused) == [
      f'error: image_folder: train_dir {tree} changed since this run directory was trained: 10 '
      f'training images now, 8 when the checkpoints beside {logdir}/image_statistics.json were '
      'trained; resuming would read another training set (and validation split) from the same '
      'data position. Put the files back, train in a new logdir, or go on with them: --set '
      'data_layer_params.accept_changed_train_dir=true']
  # The same count with other files is a change too (its fingerprint).
  os.remove(tree / 'beta' / 'b4.png')
  os.rename(tree / 'beta' / 'b5.png', tree / 'beta' / 'b9.png')
  os.remove(tree / 'beta' / 'b3.png')
  renamed = run_main(*resume)
  assert renamed.returncode == 2
  assert ': 8 training images then and now, but other file names; resuming would' in renamed.stderr
  accepted = run_main(*resume, '--set', 'data_layer_params.accept_changed_train_dir=true',
                      '--set', 'max_steps=3')
  assert accepted.returncode == 0, accepted.stderr
  assert (f'image_folder: train_dir {tree} changed: 8 training images then and now, but other '
          'file names; going on with it (accept_changed_train_dir), the statistics kept'
          in accepted.stderr)
  now = json.loads((logdir / 'image_statistics.json').read_text())
  assert now['mean'] == recorded['mean'] and now['fingerprint'] != recorded['fingerprint']


@pytest.mark.slow
def test_an_eval_dir_of_some_of_the_classes_is_evaluated_with_a_line(folder_run, tmp_path, run_main):
  config, logdir_flag, _ = copied_run(folder_run, tmp_path)
  write_images(tmp_path / 'beta-only' / 'beta', {'t1.png': 205, 't2.png': 210})
  evaluated = run_main(config, '--mode=eval', logdir_flag,
                       '--set', f'data_layer_params.eval_dir={tmp_path}/beta-only')
  assert evaluated.returncode == 0, evaluated.stderr
  assert (f'image_folder: eval_dir {tmp_path}/beta-only holds 1 of the 2 classes of train_dir '
          "(not alpha); its labels are those of train_dir's folders of the same names"
          in evaluated.stderr)
  assert '(2 examples) on the eval split' in evaluated.stdout


def large_png(path, side):
  """A black RGB PNG of ``side`` x ``side`` pixels, written row by row (never whole in memory)."""
  def chunk(kind, data):
    body = kind + data
    return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body))

  deflate = zlib.compressobj(1)
  row = b'\0' * (1 + 3 * side)  # filter byte 0, then the pixels
  idat = b''.join(deflate.compress(row) for _ in range(side)) + deflate.flush()
  header = struct.pack('>IIBBBBB', side, side, 8, 2, 0, 0, 0)
  with open(path, 'wb') as f:
    f.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', header) + chunk(b'IDAT', idat)
            + chunk(b'IEND', b''))


@pytest.mark.slow
def test_a_very_large_image_trains_with_a_note_of_its_decoded_size(tmp_path, run_main):
  tree = tmp_path / 'train'
  write_images(tree / 'alpha', {'a0.png': 10, 'a1.png': 20})
  write_images(tree / 'beta', {'b0.png': 200})
  large_png(tree / 'beta' / 'b1.png', 6000)  # 103 MB decoded
  config = tmp_path / 'large.yaml'
  config.write_text(yaml.safe_dump({'base_params': {
      'model': 'resnet_cifar', 'model_params': {'depth': 8}, 'data_layer': 'image_folder',
      'data_layer_params': {'train_dir': str(tree), 'image_size': 8, 'augment': 'none'},
      'batch_size_per_gpu': 2, 'max_steps': 1, 'optimizer': 'Momentum',
      'optimizer_params': {'momentum': 0.9}, 'lr_policy_params': {'learning_rate': 0.01},
      'dtype': 'float32'}}))
  trained = run_main(f'--config={config}', '--mode=train', f'--logdir={tmp_path}/run')
  assert trained.returncode == 0, trained.stderr
  assert [line for line in trained.stderr.splitlines() if 'decoded' in line] == [
      f'image_folder: train_dir holds images up to 6000x6000 ({tree}/beta/b1.png), 103 MB '
      'decoded: each is decoded whole, a few at once, before it is resized to 8x8; resize the '
      'files beforehand for less memory and faster steps']


# --- text pairs -----------------------------------------------------------------------------------

def text_pairs_config(path, train_file, **data):
  """A YAML config of a small Transformer on ``train_file`` (which is its eval file too)."""
  path.write_text(yaml.safe_dump({'base_params': {
      'model': 'transformer',
      'model_params': {'encoder_layers': 1, 'decoder_layers': 1, 'd_model': 16, 'num_heads': 2,
                       'ff_size': 32, 'dropout': 0.0, 'label_smoothing': 0.0},
      'data_layer': 'text_pairs',
      'data_layer_params': {'train_file': str(train_file), 'eval_file': str(train_file), **data},
      'batch_size_per_gpu': 4, 'max_steps': 1, 'optimizer': 'Adam',
      'lr_policy_params': {'learning_rate': 0.001}, 'dtype': 'float32'}}))
  return f'--config={path}'


def test_repeated_pairs_are_said_to_be_read_once(tmp_path, run_main):
  train = tmp_path / 'same.tsv'
  train.write_text('abc\tcba\n' * 50)
  config = text_pairs_config(tmp_path / 'same.yaml', train)
  refused = run_main(config, '--mode=train', f'--logdir={tmp_path}/run',
                     '--set', 'batch_size_per_gpu=32')
  assert refused.returncode == 2
  lines = refused.stderr.splitlines()
  # The count of examples the refusal gives is explained on the line before it.
  assert lines[-2:] == [
      f'text_pairs: {train}: 49 of its 50 pairs repeat an earlier pair and are read once: 1 '
      'training examples',
      'error: batch_size: 32 words per worker x 1 worker(s) makes no full batch of the 1 examples '
      'of the train split']


@pytest.mark.slow
def test_training_pairs_changed_since_the_checkpoints_are_one_line_at_resume(tmp_path, run_main):
  words = ('abc', 'bcd', 'cda', 'dab', 'acd', 'bda', 'cab', 'dbc')
  train = tmp_path / 'pairs.tsv'
  train.write_text(''.join(f'{w}\t{w[::-1]}\n' for w in words))
  logdir = tmp_path / 'run'
  trained = run_main(text_pairs_config(tmp_path / 'pairs.yaml', train), '--mode=train',
                     f'--logdir={logdir}')
  assert trained.returncode == 0, trained.stderr
  recorded = json.loads((logdir / 'train_set.json').read_text())
  resume = (f'--config={logdir}/config.yaml', '--mode=train', f'--logdir={logdir}',
            '--continue_learning', '--set', 'max_steps=2')
  with open(train, 'a', encoding='utf-8') as f:
    f.write('bca\tacb\n')
  refused = run_main(*resume)
  assert refused.returncode == 2 and error_lines(refused) == [
      f'error: text_pairs: train_file {train} changed since this run directory was trained: 9 '
      f'training pairs now, 8 when the checkpoints beside {logdir}/train_set.json were trained; '
      'resuming would read another training set from the same data position. Put the files back, '
      'train in a new logdir, or go on with them: --set '
      'data_layer_params.accept_changed_train_dir=true']
  # As many pairs, one of them another.
  train.write_text(''.join(f'{w}\t{w[::-1]}\n' for w in words[:-1] + ('bca',)))
  refused = run_main(*resume)
  assert ': 8 training pairs then and now, but other pairs; resuming would' in refused.stderr
  accepted = run_main(*resume, '--set', 'data_layer_params.accept_changed_train_dir=true')
  assert accepted.returncode == 0, accepted.stderr
  assert (f'text_pairs: train_file {train} changed: 8 training pairs then and now, but other '
          'pairs; going on with it (accept_changed_train_dir), the vocabularies kept'
          in accepted.stderr)
  now = json.loads((logdir / 'train_set.json').read_text())
  assert now['train_examples'] == 8 and now['fingerprint'] != recorded['fingerprint']


@pytest.mark.slow
def test_a_byte_order_mark_and_a_long_pair_do_not_reach_the_model(tmp_path, run_main):
  train = tmp_path / 'bom.tsv'
  long = 'ab' * 1500  # 3,000 characters: a step over it would hold 3,000^2 attention weights
  train.write_bytes(('\ufeffab\tba\ncd\tdc\nabc\tcba\n' + f'{long}\t{long}\n' + 'dcb\tbcd\n'
                     ).encode('utf-8'))
  config = text_pairs_config(tmp_path / 'bom.yaml', train)
  trained = run_main(config, '--mode=train', f'--logdir={tmp_path}/run')
  assert trained.returncode == 0, trained.stderr
  assert [line for line in trained.stderr.splitlines() if line.startswith('text_pairs:')] == [
      f'text_pairs: {train}: left out 1 of 5 pairs longer than max_length 256']
  saved = json.loads((tmp_path / 'run' / 'vocabulary.json').read_text())
  assert saved['source_vocabulary'] == saved['target_vocabulary'] == ['a', 'b', 'c', 'd']
  # The vocabularies are a fact of the run: lost, they are not built again silently.
  (tmp_path / 'run' / 'vocabulary.json').unlink()
  refused = run_main(config, '--mode=eval', f'--logdir={tmp_path}/run')
  assert refused.returncode == 2 and error_lines(refused) == [
      f'error: text_pairs: {tmp_path}/run/vocabulary.json is missing, and the checkpoints beside '
      "it were trained with the token ids it held; built again from today's files they may "
      'differ: put the file back, or build it again on purpose with --set '
      'data_layer_params.rebuild_vocabulary=true']
  rebuilt = run_main(config, '--mode=eval', f'--logdir={tmp_path}/run',
                     '--set', 'data_layer_params.rebuild_vocabulary=true')
  assert rebuilt.returncode == 0, rebuilt.stderr
  assert json.loads((tmp_path / 'run' / 'vocabulary.json').read_text()) == saved


# --- TensorFlow Datasets without a network ---------------------------------------------------------

def tfds_config(tmp_path):
  """A config that asks TFDS to download MNIST into a fresh data_dir."""
  path = tmp_path / 'mnist.yaml'
  path.write_text(yaml.safe_dump({'base_params': {
      'model': 'resnet_cifar', 'model_params': {'depth': 8}, 'data_layer': 'tfds',
      'data_layer_params': {'name': 'mnist', 'data_dir': str(tmp_path / 'data'), 'download': True},
      'batch_size_per_gpu': 4, 'max_steps': 2, 'optimizer': 'Momentum',
      'optimizer_params': {'momentum': 0.9}, 'lr_policy_params': {'learning_rate': 0.01}}}))
  return [sys.executable, os.path.join(ROOT, 'run.py'), f'--config={path}', '--mode=train',
          f'--logdir={tmp_path}/run']


def through_proxy(proxy):
  """The environment of a machine whose only way out is ``proxy`` (as HTTPS_PROXY)."""
  env = {k: v for k, v in os.environ.items() if k.lower() not in ('no_proxy', 'pythonpath')}
  env.update(HTTPS_PROXY=proxy, HTTP_PROXY=proxy, https_proxy=proxy, http_proxy=proxy,
             TF_CPP_MIN_LOG_LEVEL='3')
  return env


def closed_port():
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    return probe.getsockname()[1]


@pytest.mark.slow
def test_a_tfds_download_without_a_network_is_one_line_soon(tmp_path):
  # Every connection refused, as on a machine without a network: TFDS' own ten retries of each
  # file, with its back-off, took about 3.5 minutes and printed four tracebacks.
  result = subprocess.run(tfds_config(tmp_path), env=through_proxy(f'http://127.0.0.1:{closed_port()}'),
                          capture_output=True, text=True, timeout=150)
  assert result.returncode == 2, result.stdout + result.stderr
  log = tmp_path / 'data' / 'mnist.download.log'
  assert error_lines(result) == [
      'error: tfds: downloading mnist failed: ProxyError ([Errno 111] Connection refused); check '
      'the network (or a proxy: HTTPS_PROXY), or prepare it on a machine that has one and copy '
      f"it under {tmp_path}/data (TFDS' output: {log})"]
  assert 'Traceback' not in result.stdout + result.stderr and 'Traceback' in log.read_text()


@pytest.fixture
def silent_proxy():
  """A proxy that takes connections and never answers: a network that hangs."""
  server = socket.socket()
  server.bind(('127.0.0.1', 0))
  server.listen(16)
  taken = []

  def accept():
    while True:
      try:
        taken.append(server.accept()[0])
      except OSError:
        return

  threading.Thread(target=accept, daemon=True).start()
  yield f'http://127.0.0.1:{server.getsockname()[1]}'
  server.close()
  for connection in taken:
    connection.close()


@pytest.mark.slow
def test_a_stop_signal_ends_a_tfds_download_at_once(tmp_path, silent_proxy):
  with Child(tfds_config(tmp_path), env=through_proxy(silent_proxy),
             stderr=subprocess.STDOUT) as child:
    child.wait_for_line(lambda line: line.startswith('tfds: downloading and preparing mnist'),
                        timeout=240)
    sent = time.monotonic()
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    waited = time.monotonic() - sent
  assert child.returncode == 143, out
  assert ('stopped by SIGTERM while TensorFlow Datasets downloaded mnist: no step had run, nothing '
          'was lost') in out
  assert waited < 30 and 'Traceback' not in out


# --- TFRecords ----------------------------------------------------------------------------------------

def write_records(path, labels, compression=None):
  """TFRecords of 8x8 PNGs with TFDS' keys (``image``, ``label``)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type=compression)) as out:
    for i, label in enumerate(labels):
      out.write(tf.train.Example(features=tf.train.Features(feature={
          'image': tf.train.Feature(bytes_list=tf.train.BytesList(value=[png(10 * i)])),
          'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
      })).SerializeToString())


def records_config(tmp_path, pattern):
  path = tmp_path / 'records.yaml'
  path.write_text(yaml.safe_dump({'base_params': {
      'model': 'resnet_cifar', 'model_params': {'depth': 8}, 'data_layer': 'tfrecord',
      'data_layer_params': {'preset': 'tfds', 'train_files': str(pattern), 'num_classes': 3,
                            'image_size': 8, 'augment': 'none', 'mean': [0.5] * 3,
                            'std': [0.25] * 3},
      'batch_size_per_gpu': 4, 'max_steps': 2, 'optimizer': 'Momentum',
      'optimizer_params': {'momentum': 0.9}, 'lr_policy_params': {'learning_rate': 0.01},
      'dtype': 'float32'}}))
  return f'--config={path}'


@pytest.mark.slow
def test_gzip_records_are_read_and_a_wrong_compression_is_one_line(tmp_path, run_main):
  write_records(tmp_path / 'gz' / 'train-0', [0, 1, 2, 0, 1, 2, 0, 1], 'GZIP')
  config = records_config(tmp_path, tmp_path / 'gz' / 'train-*')
  trained = run_main(config, '--mode=train', f'--logdir={tmp_path}/run')
  assert trained.returncode == 0, trained.stderr
  counts = json.loads((tmp_path / 'gz' / 'tfrecord_counts.json').read_text())['files']
  assert counts['train-0']['records'] == 8  # counted through the decompressed bytes
  refused = run_main(config, '--mode=train', f'--logdir={tmp_path}/other',
                     '--set', 'data_layer_params.compression=none')
  assert refused.returncode == 2
  assert error_lines(refused) == [
      f'error: tfrecord: {tmp_path}/gz/train-0 is GZIP, not uncompressed: set '
      'data_layer_params.compression: GZIP (or auto)']


@pytest.mark.slow
def test_a_label_out_of_range_says_the_label_first_and_the_record_last(tmp_path, run_main):
  path = tmp_path / ('a-long-folder-name-' * 6) / 'train-0'
  write_records(path, [0, 1, 7, 0, 1, 2, 0, 1])
  failed = run_main(records_config(tmp_path, path), '--mode=train', f'--logdir={tmp_path}/run')
  assert failed.returncode == 2
  assert error_lines(failed) == [
      'error: tfrecord: label 7 - label_offset 0 is outside [0, 3): check '
      f'data_layer_params.label_offset and num_classes (record 2 of {path})']


@pytest.mark.slow
def test_a_record_that_fails_its_checksum_is_named_with_its_file(tmp_path, run_main):
  write_records(tmp_path / 'records' / 'train-0', [0, 1, 2, 0])
  damaged = tmp_path / 'records' / 'train-1'
  write_records(damaged, [1, 2, 0, 1])
  raw = bytearray(damaged.read_bytes())
  start = 0
  for _ in range(2):  # to record 2: each is a 12-byte header, its data and a 4-byte checksum
    start += 12 + struct.unpack('<Q', raw[start:start + 8])[0] + 4
  raw[start + 12 + 20] ^= 0xFF  # a byte of its data: its header and length checksum still hold
  damaged.write_bytes(bytes(raw))
  failed = run_main(records_config(tmp_path, tmp_path / 'records' / 'train-*'), '--mode=train',
                    f'--logdir={tmp_path}/run')
  assert failed.returncode == 2
  # TensorFlow's own line names a byte offset only: 'corrupted record at ...'.
  assert error_lines(failed) == [
      f'error: tfrecord: {damaged}: record 2 cannot be read (corrupted record at {start + 12}): '
      'the file is damaged; copy it again, or leave it out of the files '
      f'{tmp_path}/records/train-* matches']
  assert 'Traceback' not in failed.stdout + failed.stderr
