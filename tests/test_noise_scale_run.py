"""The gradient noise scale in a run.py run: its log lines, TensorBoard scalars, checkpoint and resume."""

import glob
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tests.test_run import SGD_CONFIG
from tests.test_run import checkpoint_values
from tests.test_run import run

pytestmark = pytest.mark.slow

COMMON = ['--config', SGD_CONFIG, '--mode', 'train', '--set', 'batch_size_per_gpu=64',
          '--set', 'num_epochs=null', '--set', 'deterministic=true',
          '--set', 'lr_policy_params={learning_rate: 0.05, power: 1.0, decay_steps: 100}',
          '--set', 'print_loss_steps=1', '--set', 'save_summaries_steps=2',
          '--set', 'save_checkpoint_steps=100']
FINAL = re.compile(r'^noise scale \(B_simple\): (\d+) images \(global batch (\d+);')


def noise_values(path):
  return {k: v for k, v in checkpoint_values(path).items() if k.startswith('noise_scale/')}


def scalars(logdir, prefix):
  """{tag: [(step, value)]} of the train event files' scalars whose tag starts with ``prefix``."""
  found = {}
  for path in glob.glob(os.path.join(logdir, 'events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag.startswith(prefix):
          found.setdefault(value.tag, []).append(
              (event.step, float(tf.make_ndarray(value.tensor))))
  return found


def test_iter_size_two_measures_it_logs_it_and_resumes_it_to_the_bit(tmp_path):
  straight = tmp_path / 'straight'
  result = run(*COMMON, '--set', 'iter_size=2', '--set', 'max_steps=12', '--logdir',
               str(straight))
  lines = result.stdout.splitlines()
  steps = [l for l in lines if l.startswith('step ')]
  assert steps and all(' noise_scale ' in l for l in steps), result.stdout
  final = [FINAL.match(l) for l in lines if FINAL.match(l)]
  assert len(final) == 1, result.stdout
  b_simple, batch = int(final[0].group(1)), int(final[0].group(2))
  assert batch == 128

  # TensorBoard: the three scalars; the last B_simple is the final line's.
  found = scalars(str(straight), 'noise_scale/')
  assert set(found) == {'noise_scale/b_simple', 'noise_scale/gradient_sq', 'noise_scale/trace'}
  last_step, last_value = max(found['noise_scale/b_simple'])
  assert last_step == 12 and round(last_value) == b_simple
  # tr(Σ)/|G|² of the logged estimates is the logged B_simple.
  trace, gradient_sq = max(found['noise_scale/trace'])[1], max(found['noise_scale/gradient_sq'])[1]
  assert trace / gradient_sq == pytest.approx(last_value, rel=1e-5)

  # Early in training the batch is far past the noise scale: the log says so once.
  advice = [l for l in lines if 'the measured gradient noise scale' in l]
  if batch > 2 * b_simple:
    assert len(advice) == 1 and 'docs/critical_batch.md' in advice[0]

  # Stopped at step 5 and resumed: the estimates end as the straight run's, to the bit.
  resumed = tmp_path / 'resumed'
  run(*COMMON, '--set', 'iter_size=2', '--set', 'max_steps=5', '--logdir', str(resumed))
  run(*COMMON, '--set', 'iter_size=2', '--set', 'max_steps=12', '--logdir', str(resumed),
      '--continue_learning')
  expected = noise_values(str(straight / 'ckpt-12'))
  assert set(expected) == {f'noise_scale/{name}/.ATTRIBUTES/VARIABLE_VALUE' for name in (
      'small_sum', 'small_count', 'gradient_sq_average', 'trace_average', 'updates')}
  got = noise_values(str(resumed / 'ckpt-12'))
  for key, value in expected.items():
    np.testing.assert_array_equal(got[key], value, err_msg=key)
  assert float(expected['noise_scale/updates/.ATTRIBUTES/VARIABLE_VALUE']) == 12


def test_true_measures_one_worker_from_half_batches_and_auto_measures_nothing_there(tmp_path):
  halves = run(*COMMON, '--set', 'noise_scale=true', '--set', 'max_steps=4', '--logdir',
               str(tmp_path / 'halves'))
  final = [l for l in halves.stdout.splitlines() if FINAL.match(l)]
  assert len(final) == 1 and '(global batch 64;' in final[0], halves.stdout
  assert noise_values(str(tmp_path / 'halves' / 'ckpt-4'))

  auto = run(*COMMON, '--set', 'max_steps=2', '--logdir', str(tmp_path / 'auto'))
  assert 'noise scale' not in auto.stdout and 'noise_scale' not in auto.stdout
  assert not noise_values(str(tmp_path / 'auto' / 'ckpt-2'))
  assert not scalars(str(tmp_path / 'auto'), 'noise_scale/')

  # A run that measures resumes a checkpoint of one that did not, with a line.
  grown = run(*COMMON, '--set', 'noise_scale=true', '--set', 'max_steps=4', '--logdir',
              str(tmp_path / 'auto'), '--continue_learning')
  assert 'holds no noise-scale estimates' in grown.stdout + grown.stderr
  assert float(noise_values(str(tmp_path / 'auto' / 'ckpt-4'))[
      'noise_scale/updates/.ATTRIBUTES/VARIABLE_VALUE']) == 2


def test_half_batches_of_one_example_are_refused_in_one_line(tmp_path, run_main):
  logdir = tmp_path / 'run'
  result = run_main(*COMMON, '--set', 'noise_scale=true', '--set', 'batch_size_per_gpu=1',
                    '--set', 'max_steps=2', '--logdir', logdir)
  assert result.returncode == 2
  error = result.stderr.strip().splitlines()[-1]
  assert error.startswith('error: noise_scale: true measures one worker with iter_size 1')
  assert 'batch_size_per_gpu 1 leaves a half empty' in error
  assert not logdir.exists() or not os.listdir(logdir)
