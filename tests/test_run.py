"""End-to-end tests of run.py, as a user runs it: its whole command line.

A run that goes to its end runs through ``run.main`` in this process
(tests/in_process.py), with TensorFlow already imported; what needs a process
of its own (a stop signal sent from outside, the allocator) starts a child.
"""

import os
import random
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

from framework.run import record
from tests import in_process
from tests.processes import Child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SGD_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py')
LARS_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')

# Each test runs run.py end to end, most of them training; the answers that come
# before anything is built are tested in this process (tests/test_run_main.py).
pytestmark = pytest.mark.slow

# A short run: small batches, a few steps, an lr schedule that fits them.
SHORT = ['--set', 'batch_size_per_gpu=128', '--set', 'num_epochs=null',
         '--set', 'lr_policy_params={learning_rate: 0.1, power: 1.0, decay_steps: 100}',
         '--set', 'print_loss_steps=10', '--set', 'save_summaries_steps=5',
         '--set', 'eval_params.batch_size_per_gpu=2000']


def run_env(**extra):
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT, **extra)


def run(*args, check=True):
  """run.py ARGS to its end, in this process (tests/in_process.py): a ``CompletedProcess``."""
  return in_process.run_py(*args, check=check)


def start(*args):
  """Starts run.py without waiting: a ``Child`` (tests/processes.py), stdout line-buffered."""
  return Child([sys.executable, '-u', os.path.join(ROOT, 'run.py'), *args], cwd=ROOT,
               env=run_env())


def wait_for_line(proc, prefix, timeout=300):
  """Reads proc's stdout up to the first line starting with ``prefix``; returns the lines read.

  The deadline holds when run.py prints nothing (a hung step).
  """
  return proc.wait_for_line(lambda line: line.startswith(prefix), timeout)


def checkpoint_values(path):
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if not name.startswith('_CHECKPOINTABLE') and 'OBJECT_GRAPH' not in name}


def test_short_run_learns_and_writes_checkpoints_and_events(tmp_path):
  logdir = tmp_path / 'run'
  result = run('--config', SGD_CONFIG, '--mode', 'train_eval', '--logdir', str(logdir),
               '--set', 'max_steps=100', '--set', 'eval_steps=50', *SHORT)
  line = [l for l in result.stdout.splitlines() if l.startswith('final test accuracy')][0]
  accuracy = float(line.split()[3])
  assert accuracy > 0.6, result.stdout  # chance is 0.1
  assert 'eval at step 50' in result.stdout and 'eval at step 100' in result.stdout

  # Checkpoints, the best checkpoint and the resolved config are all there and readable.
  latest = tf.train.latest_checkpoint(str(logdir))
  assert latest.endswith('ckpt-100')
  values = checkpoint_values(latest)
  assert any(k.startswith('model/') for k in values)
  assert int(values['global_step/.ATTRIBUTES/VARIABLE_VALUE']) == 100
  assert int(values['data_position/.ATTRIBUTES/VARIABLE_VALUE']) == 100
  assert tf.train.latest_checkpoint(str(logdir / 'best')) is not None
  saved = yaml.safe_load((logdir / 'config.yaml').read_text())
  # In the layout --config reads: what the train and eval views share is in base_params.
  assert saved['base_params']['max_steps'] == 100
  assert saved['base_params']['optimizer'] == 'KerasMomentum'

  # TensorBoard's own reader sees the train and eval scalars.
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=import-outside-toplevel
  train = event_accumulator.EventAccumulator(str(logdir), size_guidance={'tensors': 0})
  train.Reload()
  tags = set(train.Tags()['tensors'])
  assert {'loss', 'accuracy', 'learning_rate', 'images_per_sec', 'global_gradient_norm',
          'loss_scale'} <= tags
  steps = [e.step for e in train.Tensors('loss')]
  assert steps[:3] == [5, 10, 15]
  lr_at_50 = [e for e in train.Tensors('learning_rate') if e.step == 50][0]
  # poly decay, power 1, from 0.1 over 100 steps; logged with the step it was used at.
  assert float(tf.make_ndarray(lr_at_50.tensor_proto)) == pytest.approx(0.1 * (1 - 50 / 100), rel=1e-5)
  evals = event_accumulator.EventAccumulator(str(logdir / 'eval'), size_guidance={'tensors': 0})
  evals.Reload()
  acc = [float(tf.make_ndarray(e.tensor_proto)) for e in evals.Tensors('accuracy')]
  assert len(acc) == 2 and acc[-1] == pytest.approx(accuracy, abs=1e-4)

  # --mode=eval restores the latest checkpoint and measures the same accuracy.
  evaluated = run('--config', SGD_CONFIG, '--mode', 'eval', '--logdir', str(logdir), *SHORT,
                  '--set', 'max_steps=100')
  assert 'restored' in evaluated.stdout and 'ckpt-100' in evaluated.stdout
  assert f'top-1 {accuracy:.4f}' in evaluated.stdout


def write_imagenet_shards(directory, pattern, shards, per_shard, seed):
  """ImageNet-format TFRecords of random JPEGs, labels 1..10 as in the standard files."""
  rng = np.random.default_rng(seed)
  for shard in range(shards):
    path = os.path.join(directory, f'{pattern}-{shard:05d}-of-{shards:05d}')
    with tf.io.TFRecordWriter(path) as writer:
      for _ in range(per_shard):
        height, width = rng.integers(40, 64, size=2)
        pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
        feature = {
            'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[tf.io.encode_jpeg(pixels).numpy()])),
            'image/class/label': tf.train.Feature(int64_list=tf.train.Int64List(
                value=[int(rng.integers(1, 11))])),
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        writer.write(example.SerializeToString())


def test_imagenet_tfrecords_train_and_eval_through_run_py(tmp_path):
  data_dir = tmp_path / 'imagenet'
  data_dir.mkdir()
  write_imagenet_shards(str(data_dir), 'train', 2, 24, seed=0)
  write_imagenet_shards(str(data_dir), 'validation', 1, 10, seed=1)
  params = (f'{{data_dir: {data_dir}, image_size: 32, num_classes: 10, num_examples: 48, '
            'shuffle_buffer: 16}')
  eval_params = (f'{{data_dir: {data_dir}, image_size: 32, num_classes: 10, num_examples: 10}}')
  result = run('--config', SGD_CONFIG, '--mode', 'train_eval', '--logdir', str(tmp_path / 'r'),
               *SHORT, '--set', 'data_layer=imagenet', '--set', f'data_layer_params={params}',
               '--set', f'eval_params.data_layer_params={eval_params}',
               '--set', 'batch_size_per_gpu=8', '--set', 'max_steps=8', '--set', 'eval_steps=4',
               '--set', 'model_params={depth: 8}')
  assert '(6 steps/epoch)' in result.stdout
  assert result.stdout.count('(10 examples)') == 2
  # A corrupt shard is named in a one-line error, before any training.
  with open(data_dir / 'train-00001-of-00002', 'r+b') as f:
    f.truncate(os.path.getsize(data_dir / 'train-00001-of-00002') - 7)
  broken = run('--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(tmp_path / 'b'), *SHORT,
               '--set', 'data_layer=imagenet', '--set', f'data_layer_params={params}',
               '--set', 'max_steps=2', '--set', 'batch_size_per_gpu=8', check=False)
  assert broken.returncode == 2 and 'train-00001-of-00002' in broken.stderr.splitlines()[-1]
  assert 'Traceback' not in broken.stderr


def test_stop_and_resume_equals_straight_through(tmp_path, run_main):
  common = ['--config', SGD_CONFIG, '--mode', 'train', *SHORT, '--set', 'deterministic=true',
            '--set', 'save_checkpoint_steps=4', '--set', 'data_layer_params.augment=true',
            '--set', 'print_loss_steps=1']
  run(*common, '--logdir', str(tmp_path / 'straight'), '--set', 'max_steps=30')
  resumed = tmp_path / 'resumed'
  run(*common, '--logdir', str(resumed), '--set', 'max_steps=6')
  # Refused before anything is built: run.py's main() answers in this process.
  refused = run_main(*common, '--logdir', resumed, '--set', 'max_steps=30')
  assert refused.returncode == 2 and 'not empty' in refused.stderr

  # Preempted at a random step: SIGTERM finishes the step, saves and exits 143.
  at = random.Random().randint(8, 16)
  with start(*common, '--logdir', str(resumed), '--set', 'max_steps=30',
             '--continue_learning') as proc:
    wait_for_line(proc, f'step {at} ')
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
  assert proc.returncode == 143, (at, out, err)
  assert 'Traceback' not in err
  last = out.strip().splitlines()[-1]
  stopped = int(last.split(' at step ')[1].split()[0])
  assert last.startswith('stopped by SIGTERM at step ') and at <= stopped < 30, (at, last)
  assert f'ckpt-{stopped}' in last and last.endswith('--continue_learning'), last
  assert tf.train.latest_checkpoint(str(resumed)).endswith(f'ckpt-{stopped}')
  values = checkpoint_values(str(resumed / f'ckpt-{stopped}'))
  assert int(values['data_position/.ATTRIBUTES/VARIABLE_VALUE']) == stopped
  assert os.path.exists(resumed / 'config-6.yaml') and os.path.exists(resumed / 'config-0.yaml')
  stop = record.read(resumed)[-1]
  assert {k: v for k, v in stop.items() if k != 'time'} == {
      'kind': 'stop', 'step': stopped, 'signal': 'SIGTERM',
      'checkpoint': os.path.join(str(resumed), f'ckpt-{stopped}')}, stop

  result = run(*common, '--logdir', str(resumed), '--set', 'max_steps=30', '--continue_learning')
  assert f'starting at step {stopped}' in result.stdout, (at, result.stdout)
  # The record (metrics.jsonl) of the three attempts is the straight run's, but for the
  # time, the rates and one start per attempt: every step's loss to the bit, one end.
  events = {name: record.read(tmp_path / name) for name in ('straight', 'resumed')}
  assert [e['step'] for e in events['resumed'] if e['kind'] == 'start'] == [0, 6, stopped]
  kept = {name: [{k: v for k, v in e.items() if k not in ('time', 'examples_per_sec')}
                 for e in found if e['kind'] != 'start'] for name, found in events.items()}
  assert kept['resumed'] == kept['straight'], stopped
  assert [e['step'] for e in kept['straight']] == [*range(1, 31), 30]
  assert kept['straight'][-1] == {'kind': 'end', 'step': 30, 'updates': 30, 'global_batch': 128}
  straight = checkpoint_values(tf.train.latest_checkpoint(str(tmp_path / 'straight')))
  resumed = checkpoint_values(tf.train.latest_checkpoint(str(resumed)))
  assert straight.keys() == resumed.keys()
  model_keys = [k for k in straight if k.startswith('model/')]
  assert len(model_keys) > 20
  for key in straight:
    if key.startswith('save_counter'):
      continue  # how many saves the runs made, not training state
    # Deterministic ops, the same seed and the saved data position: identical to the bit.
    np.testing.assert_array_equal(straight[key], resumed[key], err_msg=f'{key}, stopped at {stopped}')


def test_jit_compile_trains_like_the_graph_step(tmp_path):
  # XLA has no kernel for the data iterator: the batch is taken outside the
  # compiled cluster. Same data and steps; only float rounding may differ (XLA
  # fuses differently; measured up to 5e-3 after 8 steps), so each tensor is
  # compared by its relative L2 error; a skipped step or a wrong rate is O(1).
  common = ['--config', SGD_CONFIG, '--mode', 'train', *SHORT, '--set', 'deterministic=true',
            '--set', 'max_steps=8']
  run(*common, '--logdir', str(tmp_path / 'graph'))
  run(*common, '--logdir', str(tmp_path / 'xla'), '--set', 'jit_compile=true')
  graph = checkpoint_values(tf.train.latest_checkpoint(str(tmp_path / 'graph')))
  xla = checkpoint_values(tf.train.latest_checkpoint(str(tmp_path / 'xla')))
  assert graph.keys() == xla.keys()
  assert int(xla['global_step/.ATTRIBUTES/VARIABLE_VALUE']) == 8
  assert int(xla['data_position/.ATTRIBUTES/VARIABLE_VALUE']) == 8
  for key in graph:
    error = np.linalg.norm(np.asarray(xla[key], np.float64) - graph[key])
    assert error <= 2e-2 * np.linalg.norm(np.asarray(graph[key], np.float64)) + 1e-6, key


def test_benchmark_mode_prints_a_rate():
  result = run('--config', os.path.join(ROOT, 'configs', 'resnet50_lars.py'), '--mode',
               'benchmark', '--bench_steps', '2', '--set', 'batch_size_per_gpu=2',
               '--set', 'bench_warmup_steps=1',
               '--set', 'data_layer_params.image_shape=[64, 64, 3]')
  line = [l for l in result.stdout.splitlines() if l.startswith('benchmark:')][0]
  rate = float(line.split()[1])
  assert rate > 0 and 'ms/step' in line


def test_a_config_that_exits_is_a_config_error(tmp_path):
  config = tmp_path / 'exits.py'
  config.write_text('import sys\n\nbase_params = {}\nsys.exit(0)\n')
  result = run('--config', str(config), check=False)
  assert result.returncode == 2 and 'Traceback' not in result.stderr
  assert result.stderr.strip() == (f'error: {config}:4: the config called sys.exit(0); a config '
                                   'defines base_params (and train_params/eval_params), it does '
                                   'not exit')


def test_missing_config_file_and_bad_data_dir(tmp_path):
  result = run('--config', str(tmp_path / 'nope.py'), check=False)
  assert result.returncode == 2 and 'nope.py' in result.stderr
  assert 'Traceback' not in result.stderr
  result = run('--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(tmp_path / 'r'),
               '--set', f'data_layer_params.data_dir={tmp_path}', check=False)
  assert result.returncode == 2 and 'dataset-fashion-mnist' in result.stderr
  assert 'Traceback' not in result.stderr


def test_non_finite_loss_stops_with_a_clear_message_and_keeps_the_checkpoint(tmp_path):
  logdir = tmp_path / 'diverge'
  result = run('--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(logdir), *SHORT,
               '--set', 'max_steps=40', '--set', 'save_checkpoint_steps=2',
               '--set', 'lr_policy_params={learning_rate: 1.0e+6, power: 1.0, decay_steps: 100}',
               check=False)
  assert result.returncode == 1, result.stdout + result.stderr
  last = [l for l in result.stderr.splitlines() if l.strip()][-1]
  assert last.startswith('error: non-finite ') and 'at step' in last
  assert 'Traceback' not in result.stderr
  latest = tf.train.latest_checkpoint(str(logdir))
  values = checkpoint_values(latest)
  assert all(np.all(np.isfinite(v)) for k, v in values.items() if k.startswith('model/'))


def test_precise_bn_recomputes_the_statistics_and_leaves_training_alone(tmp_path):
  common = ['--config', SGD_CONFIG, '--mode', 'train_eval', *SHORT, '--set', 'deterministic=true',
            '--set', 'max_steps=8', '--set', 'eval_steps=4',
            '--set', 'model_params.ghost_batch_size=32']
  run(*common, '--logdir', str(tmp_path / 'plain'))
  result = run(*common, '--logdir', str(tmp_path / 'precise'),
               '--set', 'precise_bn={num_batches: 3, batch_size: 64}')
  assert 'precise batch norm: moving statistics averaged over 3 batches of 64' in result.stdout
  path = tf.train.latest_checkpoint(str(tmp_path / 'precise'))
  plain = checkpoint_values(tf.train.latest_checkpoint(str(tmp_path / 'plain')))
  precise = checkpoint_values(path)
  moving = [k for k in plain if 'moving_' in k]
  assert len(moving) == 14  # ResNet-8: 7 batch-norm layers
  for key in plain:
    if key in moving:
      assert not np.array_equal(plain[key], precise[key]), key
    else:
      # The recomputation before the eval at step 4 put the training statistics back.
      np.testing.assert_array_equal(plain[key], precise[key], err_msg=key)

  # The saved statistics are the averages over the 3 batches the run documents:
  # batches of 64 drawn with seed random_seed + 1 + the final step.
  from data.fashion_mnist import FashionMnistDataLayer  # pylint: disable=import-outside-toplevel
  from models.batch_norm import precise_statistics  # pylint: disable=import-outside-toplevel
  from models.resnet import build_resnet_cifar  # pylint: disable=import-outside-toplevel
  model = build_resnet_cifar({'depth': 8, 'weight_decay': 5e-4, 'ghost_batch_size': 32},
                             (28, 28, 1), 10)
  tf.train.Checkpoint(model=model).restore(path).expect_partial()
  moving_variables = [v for v in model.non_trainable_variables if 'moving_' in v.path]
  assert len(moving_variables) == 14
  saved = [v.numpy() for v in moving_variables]
  data = FashionMnistDataLayer({'augment': False}, 'train')
  precise_statistics(model, data.dataset(64, seed=0 + 1 + 8).take(3))
  for variable, value in zip(moving_variables, saved):
    np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6, err_msg=variable.path)


def test_tcmalloc_and_glibc_train_to_the_same_bits(tmp_path):
  """run.py restarts under tcmalloc (core/allocator.py); where tensors live changes no number."""
  values = {}
  for allocator in ('tcmalloc', 'system'):
    logdir = tmp_path / allocator
    env = {k: v for k, v in run_env(LARGEBATCH_ALLOCATOR=allocator).items() if k != 'LD_PRELOAD'}
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'run.py'), '--config', LARS_CONFIG, '--mode', 'train',
         '--logdir', str(logdir), '--set', 'max_steps=6', '--set', 'deterministic=true', *SHORT],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    values[allocator] = checkpoint_values(tf.train.latest_checkpoint(str(logdir)))
  assert values['tcmalloc'].keys() == values['system'].keys()
  for name, value in values['tcmalloc'].items():
    np.testing.assert_array_equal(value, values['system'][name], err_msg=name)
