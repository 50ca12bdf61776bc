"""scripts/slurm_train.sbatch run by bash as Slurm would, with its variables set by hand.

A stub ``srun`` runs its command (one task), a stub ``scontrol`` records the
requeue asked for: the first start trains until SIGTERM (the time limit's
signal), saves and requeues; the same script again resumes to max_steps.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.processes import Child

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'scripts', 'slurm_train.sbatch')

pytestmark = pytest.mark.slow

SRUN = """#!/usr/bin/env bash
# srun of one task on this machine: its options are dropped, its command runs in its place.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
exec "$@"
"""
SCONTROL = """#!/usr/bin/env bash
echo "$@" >> "$(dirname "$0")/scontrol.calls"
"""


def slurm_env(tmp_path, restarts):
  stubs = tmp_path / 'bin'
  stubs.mkdir(exist_ok=True)
  for name, text in (('srun', SRUN), ('scontrol', SCONTROL)):
    (stubs / name).write_text(text)
    (stubs / name).chmod(0o755)
  env = {k: v for k, v in os.environ.items()
         if k not in ('TF_CONFIG', 'LARGEBATCH_NUM_WORKERS') and not k.startswith('SLURM_')}
  return dict(env, PATH=f'{stubs}:{env["PATH"]}', TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT,
              PYTHON=sys.executable, CONFIG='configs/fashion_mnist_sgd.py', MODE='train',
              SLURM_SUBMIT_DIR=ROOT, SLURM_JOB_ID='4242', SLURM_JOB_NAME='fm', SLURM_PROCID='0',
              SLURM_LOCALID='0', SLURM_NODEID='0', SLURM_NTASKS='1', SLURM_NNODES='1',
              SLURM_RESTART_COUNT=str(restarts), LOGDIR=str(tmp_path / 'run'))


def test_the_batch_script_starts_stops_requeues_and_resumes_with_the_same_command(tmp_path):
  args = ['bash', SCRIPT, '--set', 'max_steps=40', '--set', 'batch_size_per_gpu=32',
          '--set', 'num_epochs=null', '--set', 'save_checkpoint_steps=1000',
          '--set', 'print_loss_steps=1', '--set', 'save_summaries_steps=null',
          '--set', 'lr_policy_params={learning_rate: 0.05, power: 1.0, decay_steps: 100}']
  logdir = tmp_path / 'run'
  with Child(args, env=slurm_env(tmp_path, 0), cwd=tmp_path) as job:
    lines = job.wait_for_line(lambda l: l.startswith('step 3 '), timeout=300)
    # The stub srun exec'd the task in its place: the script's one child is run.py.
    deadline = time.monotonic() + 30
    while True:
      children = subprocess.run(['pgrep', '-P', str(job.pid)], capture_output=True, text=True,
                                timeout=30).stdout.split()
      if len(children) == 1 or time.monotonic() > deadline:
        break
      time.sleep(0.2)
    assert len(children) == 1, children
    os.kill(int(children[0]), signal.SIGTERM)  # what --signal=TERM@120 sends each task
    out, err = job.communicate(timeout=120)
  out = ''.join(lines) + out
  assert job.returncode == 143, out + err
  assert out.startswith(f'slurm_train: job 4242, start 1, 1 task(s), logdir {logdir}\n'), out
  assert f'auto_resume: {logdir} is new; starting' in out
  stopped = [l for l in out.splitlines() if l.startswith('stopped by SIGTERM at step ')]
  assert len(stopped) == 1, out
  step = int(stopped[0].split(' at step ')[1].split()[0])
  assert out.strip().splitlines()[-1] == 'slurm_train: stopped and saved; requeueing job 4242'
  assert (tmp_path / 'bin' / 'scontrol.calls').read_text() == 'requeue 4242\n'
  assert (logdir / f'ckpt-{step}.index').exists() and 'Traceback' not in err

  # The requeued job: the same script and arguments, Slurm's restart count raised.
  again = subprocess.run(args, env=slurm_env(tmp_path, 1), cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
  assert again.returncode == 0, again.stdout + again.stderr
  assert 'slurm_train: job 4242, start 2,' in again.stdout
  assert f'auto_resume: {logdir} holds ckpt-{step}; resuming' in again.stdout
  assert f'restored {logdir}/ckpt-{step} (step {step})' in again.stdout
  assert (logdir / 'ckpt-40.index').exists() and not (logdir / 'run.lock').exists()
  assert (tmp_path / 'bin' / 'scontrol.calls').read_text() == 'requeue 4242\n'
