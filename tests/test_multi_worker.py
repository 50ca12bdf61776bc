"""The multi_worker_mirrored engine with real processes: two TF_CONFIG workers on this machine.

The same cases as tests/test_horovod.py (tests/multi_worker_cases.py), compared
with one process on the combined batch and with the Horovod engine; then run.py
end to end under ``--num_workers=2``, raw ``TF_CONFIG`` and Slurm variables:
one run written by the chief, its resume refused on another layout, and
one-line errors for a cluster that cannot start. Exact resume after a signal and
a dead worker ending the job: tests/test_multi_worker_signals.py (a file of its
own, for the second pytest-xdist worker). Every wait has a deadline, and every
process group is killed on the way out.
"""

import glob
import json
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
from framework.engines import local_cluster  # noqa: E402  pylint: disable=wrong-import-position
from tests.processes import Child  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.multiprocess

RUN = os.path.join(ROOT, 'run.py')
SGD_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py')
SHORT = ['--set', 'batch_size_per_gpu=32', '--set', 'num_epochs=null',
         '--set', 'lr_policy_params={learning_rate: 0.05, power: 1.0, decay_steps: 100}',
         '--set', 'print_loss_steps=1', '--set', 'eval_params.batch_size_per_gpu=2000',
         '--set', 'save_summaries_steps=null']


def base_env(**extra):
  env = {k: v for k, v in os.environ.items()
         if k not in ('TF_CONFIG', 'HOROVOD_CYCLE_TIME', 'LARGEBATCH_NUM_WORKERS')
         and not k.startswith('SLURM_')}
  return dict(env, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT, **extra)


class Job:
  """Processes started together (tests.processes.Child), every wait with a deadline."""

  def __init__(self, commands_and_envs):
    self.procs = [Child(command, env=env, cwd=ROOT, stderr=subprocess.STDOUT,
                        start_new_session=True) for command, env in commands_and_envs]
    self.texts = [''] * len(self.procs)

  def output(self, i=0):
    """What process ``i`` printed so far (all of it once :meth:`wait` returned)."""
    return self.texts[i]

  def wait_for(self, prefix, i=0, timeout=300):
    """Reads process ``i``'s output up to a line that starts with ``prefix``."""
    self.texts[i] += ''.join(self.procs[i].wait_for_line(lambda l: l.startswith(prefix), timeout))

  def wait(self, timeout=600):
    """The exit statuses; raises when a process outlives the deadline."""
    deadline = time.monotonic() + timeout
    for i, proc in enumerate(self.procs):
      try:
        rest, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        raise AssertionError(f'a process outlived {timeout} s:\n{self.output(i)[-3000:]}') from None
      self.texts[i] += rest
    return [p.returncode for p in self.procs]

  def close(self):
    for proc in self.procs:
      proc.__exit__(None, None, None)


@pytest.fixture
def jobs():
  """Starts Jobs; each is killed (if still running) when the test ends."""
  started = []

  def start(commands_and_envs):
    job = Job(commands_and_envs)
    started.append(job)
    return job

  yield start
  for job in started:
    job.close()


def tf_config_workers(args, count=2, **extra):
  """(command, env) pairs of ``count`` TF_CONFIG workers of ``python args...``."""
  envs = local_cluster.worker_environments(count, base_env(**extra))
  return [([sys.executable, *args], env) for env in envs]


def check(statuses, job, expected=0):
  assert statuses == [expected] * len(statuses), (statuses, job.output()[-4000:])


def load(directory, name, rank):
  return dict(np.load(os.path.join(directory, f'{name}.rank{rank}.npz')))


@pytest.mark.parametrize('name', multi_worker_cases.TRAINED)
def test_two_workers_equal_one_worker_on_the_combined_batch_under_both_engines(
    tf_config_cases, horovod_cases, name):
  mwms = [load(tf_config_cases, name, r) for r in (0, 1)]
  hvds = [load(horovod_cases, name, r) for r in (0, 1)]
  hvd = hvds[0]
  assert str(mwms[0]['engine']) == 'multi_worker_mirrored' and str(hvd['engine']) == 'horovod'
  single = multi_worker_cases.train_case(name)  # this process: one worker, whole batches
  weights = [k for k in single if k.startswith('w')]
  assert len(weights) == 4
  for key in weights:
    # Both workers applied the same averaged gradients: identical to the bit.
    np.testing.assert_array_equal(mwms[0][key], mwms[1][key])
    np.testing.assert_array_equal(hvds[0][key], hvds[1][key])
    # The mean of two half-batch means is the whole-batch mean, up to float32 rounding.
    np.testing.assert_allclose(mwms[0][key], single[key], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(hvd[key], single[key], rtol=2e-5, atol=2e-6)
    # Both engines average the same two float32 gradients.
    np.testing.assert_allclose(mwms[0][key], hvd[key], rtol=1e-6, atol=1e-7)
  for result in (mwms[0], hvd):
    assert int(result['global_step']) == int(single['global_step'])
    assert float(result['loss_scale']) == float(single['loss_scale'])


def test_both_engines_measure_the_noise_scale_of_one_worker_on_the_same_rows(
    tf_config_cases, horovod_cases):
  # Two workers' gradients of rows r::2, averaged by the all-reduce, are the same pair of
  # small-batch gradients as one worker's two micro-batches of those rows (iter_size 2).
  single = multi_worker_cases.noise_scale_case(workers=1)
  for cases in (tf_config_cases, horovod_cases):
    ranks = [load(cases, 'noise_scale', r) for r in (0, 1)]
    np.testing.assert_array_equal(ranks[0]['estimates'], ranks[1]['estimates'])
    np.testing.assert_allclose(ranks[0]['estimates'], single['estimates'], rtol=2e-4)
    assert ranks[0]['estimates'][-1, 3] == multi_worker_cases.STEPS  # updates measured
  assert np.all(np.isfinite(single['estimates'][:, 1:]))


def test_an_overflow_on_one_worker_skips_the_update_on_every_worker(tf_config_cases):
  a, b = (load(tf_config_cases, 'backoff_overflow', r) for r in (0, 1))
  # Six micro-batches, the third not finite (an infinity in rank 1's rows only):
  # five updates on both workers, and Backoff halved its scale once, from 1024.
  assert int(a['global_step']) == int(b['global_step']) == multi_worker_cases.STEPS - 1
  assert float(a['loss_scale']) == float(b['loss_scale']) == 512.0


def test_the_all_reduce_runs_once_per_applied_update(tf_config_cases):
  result = load(tf_config_cases, 'momentum_iter3', 0)
  # 18 micro-batches, iter_size 3: six updates, six all-reduces (not eighteen).
  assert int(result['global_step']) == 6
  assert int(result['allreduce_count']) == 6


def test_fp16_compression_sends_float16_on_both_engines(tf_config_cases, horovod_cases):
  mwms = load(tf_config_cases, 'momentum_fp16', 0)
  hvd = load(horovod_cases, 'momentum_fp16', 0)
  exact = multi_worker_cases.train_case('momentum')  # float32 all the way
  for key in (k for k in exact if k.startswith('w')):
    # float16 keeps about 3 significant digits of each gradient.
    np.testing.assert_allclose(mwms[key], exact[key], rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(mwms[key], hvd[key], rtol=1e-3, atol=1e-4)
  assert not all(np.array_equal(mwms[k], exact[k]) for k in exact if k.startswith('w'))


@pytest.mark.parametrize('cases', ['tf_config_cases', 'horovod_cases'])
def test_agn_two_workers_period_3_match_numpy(request, cases):
  from test_horovod import numpy_agn  # pylint: disable=import-outside-toplevel
  directory = request.getfixturevalue(cases)
  local, center, global_step = numpy_agn(3, 2)
  for r in (0, 1):
    result = load(directory, 'agn3', r)
    np.testing.assert_allclose(result['w'], local[r], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result['center'], center, rtol=1e-5, atol=1e-6)
    assert int(result['global_step']) == global_step == 2
  # After step 7 the two workers have each taken one local step from the same center.
  assert not np.allclose(load(directory, 'agn3', 0)['w'], load(directory, 'agn3', 1)['w'])


# --- run.py end to end ------------------------------------------------------------------------

def launcher(logdir, *extra, mode='train'):
  return [([sys.executable, RUN, '--config', SGD_CONFIG, '--mode', mode, '--logdir', str(logdir),
            '--num_workers', '2', *SHORT, *extra], base_env())]


def test_num_workers_trains_one_run_evaluates_everything_and_resumes(jobs, tmp_path, run_main):
  logdir = tmp_path / 'mw'
  job = jobs(launcher(logdir, '--set', 'max_steps=12', '--set', 'eval_steps=6',
                      '--set', 'save_summaries_steps=6', '--set', 'precise_bn={num_batches: 2}',
                      mode='train_eval'))
  check(job.wait(), job)
  out = job.output()
  assert 'engine: multi_worker_mirrored, 2 workers' in out
  assert 'global batch 64 = 32 per worker x 2 worker(s) x iter_size 1' in out
  # Only the chief reports and writes: one final line, one set of checkpoints and event files.
  assert out.count('final test accuracy') == 1 and out.count('eval at step 6') == 1
  assert '(10000 examples)' in out  # the eval covers the whole test split across both workers
  # Precise batch norm sums its statistics over both workers' batches.
  assert 'moving statistics averaged over 4 batches of 32' in out
  assert sorted(os.path.basename(p) for p in glob.glob(str(logdir / 'ckpt-*.index'))) == \
      ['ckpt-12.index']
  # One file of train events and one of the run's config (written anew at every start).
  events = glob.glob(str(logdir / 'events.out.tfevents.*'))
  assert len([e for e in events if not e.endswith('.run_config')]) == 1, events
  assert len([e for e in events if e.endswith('.run_config')]) == 1, events
  assert (logdir / 'config.yaml').exists() and not (logdir / 'run.lock').exists()
  refuse_other_workers_or_batch(logdir, 12, SHORT, 32, run_main, jobs, launcher)
  second = jobs(launcher(logdir, '--set', 'max_steps=16', '--continue_learning'))
  check(second.wait(), second)
  assert 'starting at step 12' in second.output()
  assert tf.train.latest_checkpoint(str(logdir)).endswith('ckpt-16')


def files_of(logdir):
  """``{name: bytes}`` of the files at the top of a run directory (checkpoints, configs)."""
  return {p.name: p.read_bytes() for p in logdir.iterdir() if p.is_file()}


def refuse_other_workers_or_batch(logdir, step, short, batch, run_main, jobs=None,
                                  launch_two=None):
  """Checks that a two-worker checkpoint at ``step`` resumes neither on one worker nor on another batch.

  Its data position counts batches of one worker: one worker, or another batch per
  worker, would read other examples than a run straight through. Each is refused in
  one line naming both layouts, with nothing written.

  Args:
    logdir: the run directory (a ``pathlib.Path``).
    step: its checkpoint's step.
    short: the ``--set`` flags the run was started with (``batch_size_per_gpu=batch``).
    batch: its batch per worker.
    run_main: the ``run_main`` fixture (tests/conftest.py): one worker's refusal comes before
      anything is built, and run.py's main() gives it in this process.
    jobs: the ``jobs`` fixture, to try the other batch on two workers with ``launch_two``.
    launch_two: ``f(logdir, *extra)``, the command and environment of the engine's
      two-worker launch; None tries one worker only.
  """
  prefix = f'{logdir}/ckpt-{step}'
  before = files_of(logdir)
  one = run_main('--config', SGD_CONFIG, '--mode', 'train', '--logdir', logdir, *short,
                 '--set', f'max_steps={step + 4}', '--continue_learning')
  errors = [l for l in one.stderr.splitlines() if l.startswith('error: ')]
  assert one.returncode == 2 and len(errors) == 1, (one.returncode, one.stdout, one.stderr)
  assert errors[0].startswith(
      f'error: --continue_learning: {prefix} was trained with 2 worker(s) and '
      f'batch_size_per_gpu={batch}, and this run has 1 worker(s) and batch_size_per_gpu={batch}: '
      'its data position counts batches of one worker'), errors[0]
  assert errors[0].endswith(f'Resume with 2 worker(s) and batch_size_per_gpu={batch}, or start a '
                            'new run in another --logdir from its weights with --init_checkpoint '
                            f'{prefix}'), errors[0]
  assert 'resuming with changed settings' not in one.stdout and 'Traceback' not in one.stderr
  if launch_two is not None:
    job = jobs(launch_two(logdir, '--set', f'batch_size_per_gpu={batch // 2}',
                          '--set', f'max_steps={step + 4}', '--continue_learning'))
    statuses = job.wait(timeout=300)
    assert statuses == [2], (statuses, job.output()[-3000:])
    assert (f'this run has 2 worker(s) and batch_size_per_gpu={batch // 2}: '
            in job.output()), job.output()[-3000:]
    assert 'Traceback' not in job.output()
  assert files_of(logdir) == before


def test_srun_with_two_tasks_selects_the_engine_through_the_slurm_resolver(jobs, tmp_path):
  logdir = tmp_path / 'slurm'
  port = local_cluster.free_ports(1)[0]
  args = [sys.executable, RUN, '--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(logdir),
          *SHORT, '--set', 'max_steps=4', '--set', f'distribution_params.port_base={port}']
  pairs = [(args, base_env(SLURM_PROCID=str(i), SLURM_STEP_NUM_TASKS='2', SLURM_NTASKS='2',
                           SLURM_STEP_NODELIST='localhost', SLURM_STEP_TASKS_PER_NODE='2'))
           for i in (0, 1)]
  job = jobs(pairs)
  check(job.wait(timeout=300), job)
  assert 'engine: multi_worker_mirrored, 2 workers' in job.output(0)
  assert 'global batch 64 = 32 per worker x 2 worker(s)' in job.output(0)
  assert job.output(1).strip() == ''  # the second task writes and prints nothing
  assert tf.train.latest_checkpoint(str(logdir)).endswith('ckpt-4')


def _one_line_error(run_main, monkeypatch, tf_config=None, *extra):
  """The one error line of a cluster run.py cannot start, with exit status 2.

  The engine refuses before TensorFlow starts a server and before anything is
  built: run.py's main() answers in this process (``run_main``), with
  ``tf_config`` as TF_CONFIG.
  """
  if tf_config is not None:
    monkeypatch.setenv('TF_CONFIG', json.dumps(tf_config))
  result = run_main('--config', SGD_CONFIG, '--mode', 'train', '--logdir', os.devnull + '-unused',
                    *SHORT, '--set', 'max_steps=2', *extra)
  lines = [l for l in result.stderr.splitlines() if l.startswith('error: ')]
  assert result.returncode == 2 and len(lines) == 1, (result.returncode, result.stderr[-2000:])
  assert 'Traceback' not in result.stderr
  return lines[0]


def test_a_tf_config_naming_one_address_twice_is_one_line(run_main, monkeypatch):
  config = {'cluster': {'worker': ['localhost:2222', 'localhost:2222']},
            'task': {'type': 'worker', 'index': 0}}
  line = _one_line_error(run_main, monkeypatch, config)
  assert 'TF_CONFIG: localhost:2222 is named twice' in line


def test_a_port_in_use_is_one_line(run_main, monkeypatch):
  import socket  # pylint: disable=import-outside-toplevel
  with socket.socket() as taken:
    taken.bind(('127.0.0.1', 0))
    taken.listen()
    port = taken.getsockname()[1]
    config = {'cluster': {'worker': [f'localhost:{port}', 'localhost:1']},
              'task': {'type': 'worker', 'index': 0}}
    line = _one_line_error(run_main, monkeypatch, config)
  assert f'localhost:{port}' in line and 'in use' in line


def test_a_forced_engine_the_environment_cannot_honour_is_one_line(run_main, monkeypatch):
  line = _one_line_error(run_main, monkeypatch, None, '--set', 'distribution=multi_worker_mirrored')
  assert 'distribution: multi_worker_mirrored needs a cluster' in line and '--num_workers' in line


# --- a cluster whose peer never comes ---------------------------------------------------------

def _alone(logdir, env, *extra):
  """Worker 0 of a two-task cluster (``env`` names it), started without its peer."""
  return Child([sys.executable, RUN, '--config', SGD_CONFIG, '--mode', 'train', '--logdir',
                str(logdir), *SHORT, '--set', 'max_steps=3', *extra], env=env, cwd=ROOT,
               start_new_session=True)


def _tf_config_of_two():
  ports = local_cluster.free_ports(2)
  config = {'cluster': {'worker': [f'localhost:{p}' for p in ports]},
            'task': {'type': 'worker', 'index': 0}}
  return base_env(TF_CONFIG=json.dumps(config)), ports


def _slurm_of_two():
  port = local_cluster.free_ports(1)[0]
  env = base_env(SLURM_PROCID='0', SLURM_STEP_NUM_TASKS='2', SLURM_NTASKS='2',
                 SLURM_STEP_NODELIST='localhost', SLURM_STEP_TASKS_PER_NODE='2')
  return env, [port, port + 1]


@pytest.mark.parametrize('launcher_kind', ['TF_CONFIG', 'Slurm'])
def test_a_worker_whose_peer_never_comes_ends_in_one_line_within_the_timeout(tmp_path,
                                                                             launcher_kind):
  # TensorFlow's own start-up would wait for worker 1 for ever, deaf to every signal.
  env, ports = _tf_config_of_two() if launcher_kind == 'TF_CONFIG' else _slurm_of_two()
  extra = ['--set', 'distribution_params.timeout_seconds=3']
  if launcher_kind == 'Slurm':
    extra += ['--set', f'distribution_params.port_base={ports[0]}']
  with _alone(tmp_path / 'run', env, *extra) as proc:
    out, err = proc.communicate(timeout=90)
  assert proc.returncode == 1, (out, err)
  assert 'Traceback' not in err and out.strip() == '', (out, err)
  assert [l for l in err.splitlines() if l.strip()] == [
      f'error: {launcher_kind}: worker 1 (localhost:{ports[1]}) did not answer within 3 s; start '
      'every task of the cluster, check their addresses, or raise '
      'distribution_params.timeout_seconds; no step had run, nothing was lost']
  assert not (tmp_path / 'run').exists()


def test_a_peer_that_answers_the_rendezvous_but_never_starts_tensorflow_ends_the_worker(tmp_path):
  # The peer's port accepts connections (as a worker that passed the rendezvous and died
  # would have, a second before) but no TensorFlow server answers on it: TensorFlow's
  # start-up waits for it in native code, deaf to signals. The watchdog ends it.
  import socket  # pylint: disable=import-outside-toplevel
  env, ports = _tf_config_of_two()
  with socket.create_server(('', ports[1])):
    started = time.monotonic()
    with _alone(tmp_path / 'run', env, '--set', 'distribution_params.timeout_seconds=3') as proc:
      out, err = proc.communicate(timeout=90)
  assert proc.returncode == -signal.SIGKILL, (out, err)
  assert out.strip() == '' and 'Traceback' not in err, (out, err)
  assert [l for l in err.splitlines() if l.strip()] == [
      "error: TF_CONFIG: TensorFlow's start-up of the cluster did not finish within 3 s after "
      'every worker had answered (a worker died during it, or the workers cannot reach each '
      "other's TensorFlow servers); this worker is ended with SIGKILL; no step had run, nothing "
      'was lost']
  assert time.monotonic() - started < 60
  assert not (tmp_path / 'run').exists()


def _listening(port):
  import socket  # pylint: disable=import-outside-toplevel
  try:
    with socket.create_connection(('localhost', port), timeout=1):
      return True
  except OSError:
    return False


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_while_waiting_for_the_peers_ends_in_one_line(tmp_path, signum):
  env, ports = _tf_config_of_two()
  # No timeout: only the signal can end the wait.
  with _alone(tmp_path / 'run', env, '--set', 'distribution_params.timeout_seconds=null') as proc:
    deadline = time.monotonic() + 120
    while not _listening(ports[0]):  # worker 0 listens on its port while it waits
      assert proc.poll() is None and time.monotonic() < deadline, proc.stderr_text()
      time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
  assert proc.returncode == 128 + signum, (out, err)
  assert 'Traceback' not in err and err.strip() == '', err
  assert out.strip() == (f'stopped by {signal.Signals(signum).name} while waiting for the workers '
                         'of TF_CONFIG: no step had run, nothing was lost')
  assert not (tmp_path / 'run').exists()
