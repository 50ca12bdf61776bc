"""Two TF_CONFIG workers (the multi_worker_mirrored engine) stopped by signals and killed outright.

run.py under ``--num_workers=2`` and under raw ``TF_CONFIG``: a stop signal to the
launcher or to one worker stops every worker at one step and the resumed run is
exact; a killed worker ends the job, a killed launcher's workers save and unlock.
Apart from tests/test_multi_worker.py (whose helpers these tests use), so that
pytest-xdist can run them on one worker while that file runs on the other
(tests/conftest.py). Every wait has a deadline, and every process group is killed
on the way out.
"""

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'tests'))

# jobs: the fixture that starts a test's Jobs and kills what is left of them at its end.
from test_multi_worker import (  # noqa: E402,F401  pylint: disable=wrong-import-position
    RUN, SGD_CONFIG, SHORT, Job, check, jobs, launcher, tf_config_workers)

pytestmark = pytest.mark.multiprocess


def worker_pids(job):
  """The two workers under the launcher of ``job`` (their command has no --num_workers)."""
  deadline = time.monotonic() + 60
  while True:
    found = subprocess.run(['pgrep', '-P', str(job.procs[0].pid)], capture_output=True,
                           text=True, timeout=30).stdout.split()
    if len(found) == 2 or time.monotonic() > deadline:
      return sorted(int(p) for p in found)
    time.sleep(0.2)


def index_of(pid):
  with open(f'/proc/{pid}/environ', 'rb') as f:
    variables = dict(item.split(b'=', 1) for item in f.read().split(b'\0') if b'=' in item)
  return json.loads(variables[b'TF_CONFIG'])['task']['index']


def _variables(path):
  reader = tf.train.load_checkpoint(path)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k.startswith('model/') or k.startswith('optimizer_variables/')}


STEPS = 60
DETERMINISTIC = ['--set', 'deterministic=true', '--set', f'max_steps={STEPS}',
                 '--set', 'save_checkpoint_steps=1000']


@pytest.fixture(name='straight', scope='module')
def fixture_straight(tmp_path_factory):
  """The variables of a two-worker run straight through STEPS steps, which both stops resume to."""
  logdir = tmp_path_factory.mktemp('straight') / 'run'
  job = Job(launcher(logdir, *DETERMINISTIC))
  try:
    check(job.wait(), job)
  finally:
    job.close()
  return _variables(str(logdir / f'ckpt-{STEPS}'))


@pytest.mark.parametrize('target', ['launcher', 'worker1'])
def test_a_signal_stops_every_worker_at_one_step_and_the_resumed_run_is_exact(
    jobs, tmp_path, straight, target):
  steps, deterministic = STEPS, DETERMINISTIC
  logdir = tmp_path / 'stopped'
  after = random.Random(target).randint(2, 12)
  job = jobs(launcher(logdir, *deterministic))
  job.wait_for(f'step {after} ')
  if target == 'launcher':
    job.procs[0].send_signal(signal.SIGTERM)
    # A scheduler signals the launcher and the workers; the workers get it twice: one stop.
    time.sleep(0.3)
    job.procs[0].send_signal(signal.SIGTERM)
  else:
    os.kill([p for p in worker_pids(job) if index_of(p) == 1][0], signal.SIGTERM)
  assert job.wait(timeout=180) == [143], job.output()[-3000:]
  out = job.output()
  stopped = [l for l in out.splitlines() if ' at step ' in l and l.startswith('stopped by ')]
  assert len(stopped) == 1, out[-3000:]
  step = int(stopped[0].split(' at step ')[1].split()[0])
  assert after <= step < steps, out[-3000:]
  assert '--num_workers=2' in stopped[0] and '--continue_learning' in stopped[0]
  assert sorted(os.path.basename(p) for p in glob.glob(str(logdir / 'ckpt-*.index'))) == \
      [f'ckpt-{step}.index']
  assert 'Traceback' not in out, out[-3000:]

  resumed = jobs(launcher(logdir, *deterministic, '--continue_learning'))
  check(resumed.wait(), resumed)
  assert f'starting at step {step}' in resumed.output()
  a = straight
  b = _variables(str(logdir / f'ckpt-{steps}'))
  assert a.keys() == b.keys() and len(a) > 20
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_killed_worker_ends_the_launched_job_quickly_and_keeps_the_checkpoint(jobs, tmp_path):
  logdir = tmp_path / 'killed'
  job = jobs(launcher(logdir, '--set', 'max_steps=100000', '--set', 'save_checkpoint_steps=5'))
  job.wait_for('step 8 ')
  os.kill(worker_pids(job)[-1], signal.SIGKILL)
  killed_at = time.monotonic()
  status = job.wait(timeout=120)[0]
  assert status != 0
  assert time.monotonic() - killed_at < 60
  assert 'error: worker' in job.output() and 'ending the others' in job.output()
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(logdir)))
  assert int(reader.get_tensor('global_step/.ATTRIBUTES/VARIABLE_VALUE')) >= 5


def _running(pid):
  """Whether ``pid`` is a process that has not ended (a zombie has)."""
  try:
    with open(f'/proc/{pid}/stat', encoding='utf-8') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except (FileNotFoundError, ProcessLookupError, IndexError):
    return False


def test_a_launcher_killed_by_sigkill_stops_its_workers_which_save_and_unlock(jobs, tmp_path):
  logdir = tmp_path / 'orphaned'
  job = jobs(launcher(logdir, '--set', 'max_steps=100000', '--set', 'save_checkpoint_steps=1000',
                      '--auto_resume'))
  job.wait_for('step 4 ')
  assert job.output().count(f'auto_resume: {logdir} is new; starting\n') == 1  # the chief's
  workers = worker_pids(job)
  assert len(workers) == 2, workers
  job.procs[0].send_signal(signal.SIGKILL)  # no handler can forward anything
  killed_at = time.monotonic()
  while any(_running(p) for p in workers) and time.monotonic() - killed_at < 120:
    time.sleep(0.2)
  assert not any(_running(p) for p in workers), job.output()[-3000:]
  # Its output ends when the workers close the pipe they inherited.
  assert job.wait(timeout=60) == [-signal.SIGKILL]
  out = job.output()
  stopped = [l for l in out.splitlines() if l.startswith('stopped by SIGTERM at step ')]
  assert len(stopped) == 1, out[-3000:]
  step = int(stopped[0].split(' at step ')[1].split()[0])
  assert step >= 4 and 'Traceback' not in out, out[-3000:]
  assert tf.train.latest_checkpoint(str(logdir)).endswith(f'ckpt-{step}')
  assert not (logdir / 'run.lock').exists()
  # Started again (a requeue), both workers take the same way: they resume.
  again = jobs(launcher(logdir, '--set', f'max_steps={step + 2}', '--auto_resume'))
  check(again.wait(timeout=300), again)
  assert f'auto_resume: {logdir} holds ckpt-{step}; resuming\n' in again.output()
  assert f'restored {logdir}/ckpt-{step} (step {step})' in again.output()
  assert tf.train.latest_checkpoint(str(logdir)).endswith(f'ckpt-{step + 2}')


def test_without_a_launcher_the_survivor_of_a_killed_peer_exits_in_one_line(jobs, tmp_path):
  logdir = tmp_path / 'raw'
  args = [RUN, '--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(logdir), *SHORT,
          '--set', 'max_steps=100000', '--set', 'save_checkpoint_steps=5']
  job = jobs(tf_config_workers(args))
  job.wait_for('step 8 ')
  os.kill(job.procs[1].pid, signal.SIGKILL)
  killed_at = time.monotonic()
  status = job.wait(timeout=300)[0]
  assert status == 1, job.output()[-3000:]
  assert time.monotonic() - killed_at < 120
  errors = [l for l in job.output().splitlines() if l.startswith('error: ')]
  assert len(errors) == 1 and 'failed or stopped answering' in errors[0], job.output()[-3000:]
  assert 'kept: ' in errors[0] and 'ckpt-' in errors[0]
  assert 'Traceback' not in job.output()


def test_a_stop_to_one_worker_as_the_cluster_starts_stops_both_at_one_saved_step(jobs, tmp_path):
  # The engine line comes right after the cluster's start-up, before the trainer's handler:
  # a worker that ended there would leave the other failing in its first collective.
  logdir = tmp_path / 'early'
  args = [RUN, '--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(logdir), *SHORT,
          '--set', 'max_steps=100000']
  job = jobs(tf_config_workers(args))
  job.wait_for('engine: multi_worker_mirrored')
  os.kill(job.procs[0].pid, signal.SIGTERM)
  statuses = job.wait(timeout=300)
  assert statuses == [143, 143], job.output()[-3000:]
  assert 'stopped by SIGTERM at step ' in job.output(0) and 'Traceback' not in job.output()
  assert tf.train.latest_checkpoint(str(logdir)) is not None
