"""The run directory: lock, per-start configs, atomic writes, resume compatibility."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from core import files
from framework.run import rundir


def test_config_changes_split_what_the_checkpoint_cannot_take():
  saved = {'model': 'resnet_cifar', 'model_params': {'depth': 8, 'weight_decay': 5e-4},
           'optimizer': 'Momentum', 'optimizer_params': {'momentum': 0.9}, 'max_steps': 10,
           'lr_policy_params': {'learning_rate': 0.1}, 'dtype': 'float32', 'iter_size': 1,
           'loss_scaling': 1.0, 'loss_scaling_params': None}
  new = dict(saved, model_params={'depth': 14, 'weight_decay': 1e-4, 'ghost_batch_size': 32},
             optimizer='LARS',
             max_steps=20, lr_policy_params={'learning_rate': 0.2, 'power': 2.0},
             loss_scaling='Backoff', loss_scaling_params={'scale_max': 256.0})
  fixed, free = rundir.config_changes(saved, new)
  assert fixed == [('loss_scaling', 1.0, 'Backoff'),
                   ('loss_scaling_params.scale_max', None, 256.0),
                   ('model_params.depth', 8, 14), ('optimizer', 'Momentum', 'LARS')]
  assert free == [('lr_policy_params.learning_rate', 0.1, 0.2),
                  ('lr_policy_params.power', None, 2.0), ('max_steps', 10, 20),
                  ('model_params.ghost_batch_size', None, 32),
                  ('model_params.weight_decay', 5e-4, 1e-4)]
  assert rundir.describe_changes(fixed[-1:]) == "optimizer: 'Momentum' -> 'LARS'"
  assert rundir.config_changes(saved, dict(saved)) == ([], [])


def test_each_start_keeps_its_config(tmp_path):
  assert rundir.write_start_configs(str(tmp_path), 'a: 1\n', 0).endswith('config-0.yaml')
  assert rundir.write_start_configs(str(tmp_path), 'a: 2\n', 6).endswith('config-6.yaml')
  # A second start at step 6 with another config does not overwrite the first.
  assert rundir.write_start_configs(str(tmp_path), 'a: 3\n', 6).endswith('config-6-2.yaml')
  assert rundir.write_start_configs(str(tmp_path), 'a: 3\n', 6).endswith('config-6-2.yaml')
  texts = {p.name: p.read_text() for p in tmp_path.iterdir()}
  assert texts == {'config-0.yaml': 'a: 1\n', 'config-6.yaml': 'a: 2\n',
                   'config-6-2.yaml': 'a: 3\n', 'config.yaml': 'a: 3\n'}
  assert rundir.read_saved_config(str(tmp_path)) == ({'a': 3}, None)
  umask = os.umask(0o022)
  try:
    rundir.write_start_configs(str(tmp_path), 'a: 4\n', 8)
  finally:
    os.umask(umask)
  assert os.stat(tmp_path / 'config-8.yaml').st_mode & 0o777 == 0o644
  (tmp_path / 'config.yaml').write_text('')
  saved, problem = rundir.read_saved_config(str(tmp_path))
  assert saved is None and problem.endswith('config.yaml holds no config')


def test_a_failed_atomic_write_leaves_nothing_and_keeps_the_old_file(tmp_path):
  path = tmp_path / 'config.yaml'
  path.write_text('old\n')

  with pytest.raises(TypeError):
    files.write_text_atomically(str(path), object())  # the write fails half-way
  assert sorted(p.name for p in tmp_path.iterdir()) == ['config.yaml']
  assert path.read_text() == 'old\n'


def test_the_lock_refuses_a_live_holder_and_takes_over_a_stale_one(tmp_path):
  logs = []
  lock = rundir.RunLock(str(tmp_path), log=logs.append)
  lock.acquire()
  assert lock.live_holder() == (os.getpid(), socket.gethostname())
  with pytest.raises(rundir.RunDirError, match=f'is in use by another run \\(pid {os.getpid()} on '):
    rundir.RunLock(str(tmp_path)).acquire()
  lock.release()
  assert not (tmp_path / rundir.LOCK_NAME).exists()

  gone = int(subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                            capture_output=True, text=True, check=True, timeout=60).stdout)
  (tmp_path / rundir.LOCK_NAME).write_text(f'{gone} {socket.gethostname()}\n')
  lock = rundir.RunLock(str(tmp_path), log=logs.append)
  assert lock.live_holder() is None
  lock.acquire()
  assert logs == [f'removing the stale lock {tmp_path}/{rundir.LOCK_NAME} of a run that is gone '
                  f'(pid {gone})']
  assert lock.holder() == (os.getpid(), socket.gethostname())
  lock.release()
  # A lock held on another host cannot be checked: it counts as live.
  (tmp_path / rundir.LOCK_NAME).write_text('1234 some-other-host\n')
  assert rundir.RunLock(str(tmp_path)).live_holder() == (1234, 'some-other-host')


def test_the_saved_config_is_read_as_its_train_view(tmp_path):
  # The layout --config reads: the train view is base_params overlaid with train_params.
  (tmp_path / 'config.yaml').write_text(
      'base_params: {model: resnet_cifar, max_steps: 10, batch_size_per_gpu: 32}\n'
      'train_params: {batch_size_per_gpu: 64}\n'
      'eval_params: {batch_size_per_gpu: 1000}\n')
  saved, problem = rundir.read_saved_config(str(tmp_path))
  assert problem is None
  assert saved == {'model': 'resnet_cifar', 'max_steps': 10, 'batch_size_per_gpu': 64}
  # A flat file, as earlier versions wrote, is that view already.
  (tmp_path / 'config.yaml').write_text('model: resnet_cifar\nmax_steps: 10\n')
  assert rundir.read_saved_config(str(tmp_path)) == ({'model': 'resnet_cifar', 'max_steps': 10},
                                                     None)


def test_the_newest_readable_config_stands_in_for_a_damaged_one(tmp_path):
  logdir = str(tmp_path)
  rundir.write_start_configs(logdir, 'base_params: {optimizer: LARS}\n', 0)
  rundir.write_start_configs(logdir, 'base_params: {optimizer: LARS, max_steps: 8}\n', 4)
  rundir.write_start_configs(logdir, 'base_params: {optimizer: LARS, max_steps: 9}\n', 4)
  assert [os.path.basename(p) for p in rundir.start_config_paths(logdir)] == [
      'config-4-2.yaml', 'config-4.yaml', 'config-0.yaml']
  assert rundir.newest_saved_config(logdir) == (
      {'optimizer': 'LARS', 'max_steps': 9}, f'{logdir}/config.yaml', [])
  # Bytes that are not UTF-8, then text that is not YAML: the next newest copy is read.
  (tmp_path / 'config.yaml').write_bytes(b'base_params:\n  optimizer: \xff\xfe\n')
  (tmp_path / 'config-4-2.yaml').write_text('base_params: [\n')
  saved, path, problems = rundir.newest_saved_config(logdir)
  assert (saved, path) == ({'optimizer': 'LARS', 'max_steps': 8}, f'{logdir}/config-4.yaml')
  assert problems == [f'{logdir}/config.yaml cannot be read (UnicodeDecodeError)',
                      f'{logdir}/config-4-2.yaml cannot be read (ParserError)']
  for name in ('config-4.yaml', 'config-0.yaml'):
    (tmp_path / name).write_text('')
  saved, path, problems = rundir.newest_saved_config(logdir)
  assert saved is None and path is None and len(problems) == 4
  assert problems[-1] == f'{logdir}/config-0.yaml holds no config'


RACE_CHILD = '''
import json, os, sys, time
sys.path.insert(0, {root!r})
from framework.run import rundir
dirs, go, out, release = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
while not os.path.exists(go):
  time.sleep(0.001)
held, locks = [], []
for d in dirs:
  lock = rundir.RunLock(d, log=lambda message: None)
  try:
    lock.acquire()
  except rundir.RunDirError:
    continue
  held.append(d)
  locks.append(lock)  # kept until both are done: a second holder of the same directory is the bug
with open(out + '.tmp', 'w') as f:
  json.dump(held, f)
os.rename(out + '.tmp', out)
while not os.path.exists(release):
  time.sleep(0.01)
'''


def test_two_runs_starting_together_never_both_hold_the_lock(tmp_path):
  # Two processes race through the same 300 new directories: the lock of each
  # must go to exactly one of them (the pid was written after the file was
  # created, so a reader in between took the empty file for a stale lock).
  dirs = []
  for i in range(300):
    directory = tmp_path / f'run{i}'
    directory.mkdir()
    dirs.append(str(directory))
  go, release = tmp_path / 'go', tmp_path / 'release'
  outs = [tmp_path / f'held{i}.json' for i in range(2)]
  script = RACE_CHILD.format(root=os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.dirname(os.path.abspath(__file__))))))
  children = [subprocess.Popen([sys.executable, '-c', script, json.dumps(dirs), str(go), str(out),
                                str(release)]) for out in outs]
  try:
    go.write_text('')
    deadline = time.monotonic() + 120
    while not all(out.exists() for out in outs):
      assert time.monotonic() < deadline, 'a child did not finish its 300 tries in 120 s'
      assert all(child.poll() is None for child in children), 'a child failed'
      time.sleep(0.05)
  finally:
    release.write_text('')  # the children let go of their locks only now
    for child in children:
      child.wait(timeout=60)
  held = [set(json.loads(out.read_text())) for out in outs]
  assert [child.returncode for child in children] == [0, 0]
  assert not held[0] & held[1], f'{len(held[0] & held[1])} directories had two holders'
  assert held[0] | held[1] == set(dirs)
