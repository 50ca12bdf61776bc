"""A sweep killed outright ends its run: the run saves, stops and frees its directory.

run.py --num_workers' workers end with their launcher through
``PR_SET_PDEATHSIG``; a sweep's runs are started the same way
(framework/sweep/runner.py), so SIGKILL to the sweep is a SIGTERM to its run,
which stops as at a preemption. Before, the run trained on unseen and the
next sweep marked its point FAILED ("in use by a run that is still going").
"""

import os
import signal
import sys
import time

import pytest

from framework.run import rundir
from tests.processes import Child

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'scripts', 'sweep.py')
SGD_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py')
SHORT = ['--set', 'num_epochs=null', '--set', 'data_layer=synthetic',
         '--set', 'data_layer_params={image_shape: [28, 28, 1], num_classes: 10, num_examples: 500}',
         '--set', 'lr_policy_params={learning_rate: 0.1, power: 1.0, decay_steps: 10}',
         '--set', 'optimizer_params={momentum: 0.9}', '--set', 'eval_params.batch_size_per_gpu=500']

pytestmark = pytest.mark.slow


def ended(pid):
  """Whether the process is gone (or a zombie no one has reaped yet)."""
  try:
    with open(f'/proc/{pid}/stat', encoding='ascii') as f:
      return f.read().rsplit(')', 1)[1].split()[0] == 'Z'
  except FileNotFoundError:
    return True


def wait_for(predicate, timeout, what):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if predicate():
      return
    time.sleep(0.2)
  raise AssertionError(f'not within {timeout} s: {what}')


def test_a_sweep_killed_with_sigkill_stops_its_run(tmp_path):
  out = tmp_path / 'sweep'
  name = 'optimizer_params.momentum=0.9'
  logdir = out / name
  log = logdir / 'run.log'
  with Child([sys.executable, SCRIPT, '--config', SGD_CONFIG, *SHORT, '--set', 'max_steps=100000',
              '--set', 'batch_size_per_gpu=32', '--set', 'print_loss_steps=1',
              '--grid', 'optimizer_params.momentum=0.9', '--out', str(out)],
             cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')) as sweep:
    sweep.wait_for_line(lambda line: f'started {name}' in line, timeout=300)
    wait_for(lambda: log.exists() and '\nstep 3 ' in log.read_text(errors='replace'), 300,
             'the run at step 3')
    holder = rundir.RunLock(str(logdir)).live_holder()
    assert holder is not None and holder[0] != sweep.pid
    sweep.send_signal(signal.SIGKILL)
    sweep.wait(timeout=60)
  run_pid = holder[0]
  wait_for(lambda: ended(run_pid), 120, f'the run (pid {run_pid}) to end after its sweep died')
  text = log.read_text(errors='replace')
  stopped = [l for l in text.splitlines() if l.startswith('stopped by SIGTERM at step ')]
  assert stopped, text[-2000:]
  step = int(stopped[0].split(' at step ')[1].split()[0])
  assert os.path.exists(logdir / f'ckpt-{step}.index')
  assert rundir.RunLock(str(logdir)).live_holder() is None
