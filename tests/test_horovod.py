"""Multi-worker behaviour with real processes: ``horovodrun -np 2 --gloo`` on this machine."""

import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'tests'))

import multi_worker_cases  # noqa: E402  pylint: disable=wrong-import-position
from framework.engines import distributed  # noqa: E402  pylint: disable=wrong-import-position
from tests.processes import Child  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.multiprocess

HOROVODRUN = os.path.join(os.path.dirname(sys.executable), 'horovodrun')
SGD_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py')
SHORT = ['--set', 'batch_size_per_gpu=64', '--set', 'num_epochs=null',
         '--set', 'lr_policy_params={learning_rate: 0.05, power: 1.0, decay_steps: 100}',
         '--set', 'print_loss_steps=5', '--set', 'eval_params.batch_size_per_gpu=2000']


def env(**extra):
  """The workers' environment: this one's, without a HOROVOD_CYCLE_TIME unless ``extra`` has one."""
  base = {k: v for k, v in os.environ.items() if k != distributed.CYCLE_TIME_VARIABLE}
  return dict(base, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT, OMP_NUM_THREADS='1', **extra)


def horovodrun(*args, timeout=600, check=True, extra_env=None):
  cmd = [HOROVODRUN, '-np', '2', '--gloo', '-H', 'localhost:2', sys.executable, *args]
  result = subprocess.run(cmd, cwd=ROOT, env=env(**(extra_env or {})), capture_output=True,
                          text=True, timeout=timeout)
  if check and result.returncode != 0:
    raise AssertionError(f'{" ".join(cmd)} exited {result.returncode}:\n{result.stdout}\n'
                         f'{result.stderr}')
  return result


def load(out, name, rank):
  return dict(np.load(os.path.join(out, f'{name}.rank{rank}.npz')))


# Two half-batches against one whole batch, under this engine and the other:
# tests/test_multi_worker.py, from the same runs (the horovod_cases fixture).


def test_a_worker_inside_single_process_trains_like_a_one_process_job(horovod_cases):
  # scripts/bench_distributed.py times one worker this way inside the two-worker job.
  single = multi_worker_cases.train_case('momentum')  # this process: whole batches, no Horovod
  for rank in (0, 1):
    result = load(horovod_cases, 'single_momentum', rank)
    assert int(result['size_inside']) == 1 and int(result['size_after']) == 2
    assert int(result['allreduce_count']) == 0  # no collectives were traced
    for key in (k for k in single if k.startswith('w')):
      np.testing.assert_allclose(result[key], single[key], rtol=1e-6, atol=1e-7)


def test_horovod_wakes_on_enqueue_so_the_cycle_adds_no_latency(tmp_path):
  # With a 2 s cycle, Horovod as published needs a cycle or more for each of the
  # 10 allreduces (20 s or more); the build of scripts/build_horovod.sh wakes its
  # background thread on enqueue, so each ends soon after the late rank (50 ms).
  horovodrun(os.path.join(ROOT, 'tests', 'multi_worker_cases.py'), str(tmp_path), 'late_rank',
             extra_env={'HOROVOD_CYCLE_TIME': '2000'})
  for rank in (0, 1):
    result = load(tmp_path, 'late_rank', rank)
    assert bool(result['wakes_on_enqueue'])
    assert float(result['cycle_time']) == 2000.0  # the user's setting is kept
    np.testing.assert_array_equal(result['results'], [[1.5, 10.0]] * 10)
    assert float(result['seconds']) < 5.0, float(result['seconds'])


def test_the_framework_sets_a_long_idle_cycle_for_a_horovod_that_wakes_on_enqueue(horovod_cases):
  # horovod_cases ran without HOROVOD_CYCLE_TIME in the environment (tests/conftest.py).
  for rank in (0, 1):
    result = load(horovod_cases, 'late_rank', rank)
    assert float(result['cycle_time']) == distributed.IDLE_CYCLE_TIME_MS


def test_allreduce_runs_once_per_applied_update(horovod_cases):
  result = load(horovod_cases, 'momentum_iter3', 0)
  # 18 micro-batches, iter_size 3: six updates, six allreduces (not eighteen).
  assert int(result['global_step']) == 6
  assert int(result['allreduce_count']) == 6


def test_loss_scaling_state_is_identical_on_both_ranks(horovod_cases):
  a, b = (load(horovod_cases, 'lars_larc_scaling', r) for r in (0, 1))
  assert float(a['loss_scale']) == float(b['loss_scale']) == 256.0


def numpy_agn(period, workers, steps=7, lr=0.1, momentum=0.5):
  """docs/math.md's AGN with Keras-style momentum (v ← m·v − lr·g; w ← w + v) in float64."""
  rng = np.random.default_rng(5)
  a = rng.normal(size=(steps, 4, 3))
  b = rng.normal(size=(steps, 4))
  center = np.array([1.0, -1.0, 0.5])
  center_v = np.zeros(3)
  local = [center.copy() for _ in range(workers)]
  local_v = [np.zeros(3) for _ in range(workers)]
  acc = [np.zeros(3) for _ in range(workers)]
  global_step = 0
  for t in range(steps):
    for r in range(workers):
      ar, br = a[t][r::workers], b[t][r::workers]
      g = ar.T @ (ar @ local[r] - br) / len(br)
      local_v[r] = momentum * local_v[r] - lr * g
      local[r] = local[r] + local_v[r]
      acc[r] = acc[r] + g
    if (t + 1) % period == 0:
      mean = sum(x / period for x in acc) / workers
      center_v = momentum * center_v - lr * mean
      center = center + center_v
      global_step += 1
      local = [center.copy() for _ in range(workers)]
      acc = [np.zeros(3) for _ in range(workers)]
  return local, center, global_step


# AGN under two workers of either engine: tests/test_multi_worker.py.


def test_agn_one_worker_period_1_equals_the_wrapped_optimizer():
  agn = multi_worker_cases.agn_case(1)
  local, center, global_step = numpy_agn(1, 1)
  np.testing.assert_allclose(agn['w'], local[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(agn['center'], center, rtol=1e-5, atol=1e-6)
  # The plain optimizer on the same data: Keras momentum, no AGN at all.
  rng = np.random.default_rng(5)
  a, b = rng.normal(size=(7, 4, 3)), rng.normal(size=(7, 4))
  w, v = np.array([1.0, -1.0, 0.5]), np.zeros(3)
  for t in range(7):
    v = 0.5 * v - 0.1 * a[t].T @ (a[t] @ w - b[t]) / 4
    w = w + v
  np.testing.assert_allclose(agn['w'], w, rtol=1e-5, atol=1e-6)
  assert int(agn['global_step']) == 7


def test_run_py_train_eval_under_horovod_cases_writes_one_run_and_resumes(tmp_path, run_main):
  logdir = tmp_path / 'hvd'
  first = horovodrun(os.path.join(ROOT, 'run.py'), '--config', SGD_CONFIG, '--mode',
                     'train_eval', '--logdir', str(logdir), *SHORT, '--set', 'max_steps=20',
                     '--set', 'eval_steps=10')
  assert 'global batch 128 = 64 per worker x 2 worker(s) x iter_size 1' in first.stdout
  # Only rank 0 reports: one final line, one set of checkpoints and event files.
  assert first.stdout.count('final test accuracy') == 1
  assert first.stdout.count('eval at step 10') == 1
  assert sorted(os.path.basename(p) for p in glob.glob(str(logdir / 'ckpt-*.index'))) == \
      ['ckpt-20.index']
  # One file of train events and one of the run's config (written anew at every start).
  events = glob.glob(str(logdir / 'events.out.tfevents.*'))
  assert len([e for e in events if not e.endswith('.run_config')]) == 1, events
  assert len([e for e in events if e.endswith('.run_config')]) == 1, events
  assert (logdir / 'config.yaml').exists()
  # Eval covers the whole test split across the two workers.
  assert '(10000 examples)' in first.stdout
  # One worker cannot go on from the data position of two: refused in one line.
  from test_multi_worker import refuse_other_workers_or_batch  # pylint: disable=import-outside-toplevel
  refuse_other_workers_or_batch(logdir, 20, SHORT, 64, run_main)

  second = horovodrun(os.path.join(ROOT, 'run.py'), '--config', SGD_CONFIG, '--mode', 'train',
                      '--logdir', str(logdir), *SHORT, '--set', 'max_steps=30',
                      '--continue_learning')
  assert 'starting at step 20' in second.stdout
  assert tf.train.latest_checkpoint(str(logdir)).endswith('ckpt-30')


def test_a_killed_worker_ends_the_job_non_zero_and_keeps_the_checkpoint(tmp_path):
  logdir = tmp_path / 'killed'
  cmd = [HOROVODRUN, '-np', '2', '--gloo', '-H', 'localhost:2', sys.executable,
         os.path.join(ROOT, 'run.py'), '--config', SGD_CONFIG, '--mode', 'train', '--logdir',
         str(logdir), *SHORT, '--set', 'max_steps=100000', '--set', 'save_checkpoint_steps=5']
  # Child (tests/processes.py): leaving the block kills what is left of the job.
  with Child(cmd, cwd=ROOT, env=env(), stderr=subprocess.STDOUT,
             start_new_session=True) as proc:
    deadline = time.time() + 300
    while tf.train.latest_checkpoint(str(logdir)) is None:
      assert time.time() < deadline and proc.poll() is None, 'no checkpoint was written'
      time.sleep(1)
    workers = subprocess.run(['pgrep', '-f', f'run.py.*{logdir}'], capture_output=True,
                             text=True, timeout=60).stdout.split()
    workers = [int(p) for p in workers if int(p) != proc.pid]
    assert len(workers) >= 2, workers
    killed_at = time.time()
    os.kill(max(workers), signal.SIGKILL)
    status = proc.wait(timeout=180)
    waited = time.time() - killed_at
  assert status != 0
  assert waited < 120, f'the job took {waited:.0f} s to end after a worker died'
  latest = tf.train.latest_checkpoint(str(logdir))
  reader = tf.train.load_checkpoint(latest)
  assert int(reader.get_tensor('global_step/.ATTRIBUTES/VARIABLE_VALUE')) >= 5


def _rank_of(pid):
  with open(f'/proc/{pid}/environ', 'rb') as f:
    variables = dict(item.split(b'=', 1) for item in f.read().split(b'\0') if b'=' in item)
  return int(variables.get(b'HOROVOD_RANK', b'-1'))


def _stop_job(logdir, target, after_step):
  """Starts a two-worker run, sends SIGTERM to ``target`` after a step.

  ``target``: 'rank1', 'horovodrun', or 'all' (horovodrun and both workers, as Slurm's
  scancel or time limit signals every process of a job step).
  """
  cmd = [HOROVODRUN, '-np', '2', '--gloo', '-H', 'localhost:2', sys.executable, '-u',
         os.path.join(ROOT, 'run.py'), '--config', SGD_CONFIG, '--mode', 'train', '--logdir',
         str(logdir), *SHORT, '--set', 'max_steps=100000', '--set', 'save_checkpoint_steps=1000',
         '--set', 'print_loss_steps=1']
  if target == 'horovodrun':
    cmd.append('--continue_learning')
  with Child(cmd, cwd=ROOT, env=env(), stderr=subprocess.STDOUT,
             start_new_session=True) as proc:
    lines = proc.wait_for_line(lambda line: f':step {after_step} ' in line, timeout=300)
    # The signal must come long before the end.
    assert not any('step 100' in line for line in lines), ''.join(lines)
    workers = [int(p) for p in subprocess.run(['pgrep', '-f', f'run.py.*{logdir}'],
                                              capture_output=True, text=True,
                                              timeout=60).stdout.split()]
    workers = [p for p in workers if p != proc.pid and _rank_of(p) >= 0]
    assert len(workers) == 2, (workers, ''.join(lines))
    if target in ('horovodrun', 'all'):
      proc.send_signal(signal.SIGTERM)
    if target == 'all':
      for pid in workers:
        os.kill(pid, signal.SIGTERM)
    elif target == 'rank1':
      os.kill([p for p in workers if _rank_of(p) == 1][0], signal.SIGTERM)
    rest, _ = proc.communicate(timeout=180)
  return proc.returncode, ''.join(lines) + rest


def _stopped_at(out, phrase):
  """The step of the one line of ``out`` that has ``phrase`` ('stopped by ... at step ')."""
  stopped = [l for l in out.splitlines() if phrase in l]
  assert len(stopped) == 1, out
  return int(stopped[0].split(' at step ')[1].split()[0])


def test_a_signal_to_any_worker_or_to_horovodrun_saves_once_and_ends_every_worker(tmp_path):
  logdir = tmp_path / 'hvd'
  status, out = _stop_job(logdir, 'rank1', 3)
  assert status != 0, out
  # Rank 0 received no signal: the workers agreed on the step through an allreduce.
  step = _stopped_at(out, 'stopped by a signal to another worker at step ')
  assert step >= 3
  # horovodrun reports a non-zero worker with a traceback of its own; none comes from the workers.
  assert f'{ROOT}/run.py", line' not in out and os.path.join(ROOT, 'framework') not in out, out
  assert sorted(os.path.basename(p) for p in glob.glob(str(logdir / 'ckpt-*.index'))) == \
      [f'ckpt-{step}.index']
  reader = tf.train.load_checkpoint(str(logdir / f'ckpt-{step}'))
  assert int(reader.get_tensor('global_step/.ATTRIBUTES/VARIABLE_VALUE')) == step
  assert int(reader.get_tensor('data_position/.ATTRIBUTES/VARIABLE_VALUE')) == step
  assert not (logdir / 'run.lock').exists()

  # horovodrun forwards SIGTERM to every worker; they stop together, rank 0 saves, and the
  # job ends 143 (framework/engines/horovod_launcher.py: Horovod's launcher could report 0).
  status, out = _stop_job(logdir, 'horovodrun', step + 3)
  assert status == 143, out
  assert 'horovodrun: stopped by SIGTERM; every worker has ended (exit status 143)' in out
  assert f'starting at step {step}' in out
  second = _stopped_at(out, 'stopped by SIGTERM at step ')
  assert second > step and (logdir / f'ckpt-{second}.index').exists()
  assert f'{ROOT}/run.py", line' not in out and os.path.join(ROOT, 'framework') not in out, out
  reader = tf.train.load_checkpoint(str(logdir / f'ckpt-{second}'))
  assert int(reader.get_tensor('global_step/.ATTRIBUTES/VARIABLE_VALUE')) == second


def test_a_signal_to_every_process_of_the_job_is_one_stop_and_rank_0_saves(tmp_path):
  # Each worker gets SIGTERM twice, from the scheduler and from horovodrun: the same stop
  # (framework/run/stopping.py), not a second signal that exits without saving.
  logdir = tmp_path / 'hvd'
  status, out = _stop_job(logdir, 'all', 3)
  assert status == 143, out
  assert 'second SIGTERM' not in out, out
  step = _stopped_at(out, 'stopped by SIGTERM at step ')
  assert sorted(os.path.basename(p) for p in glob.glob(str(logdir / 'ckpt-*.index'))) == \
      [f'ckpt-{step}.index']
