"""Tests of framework.run.launch's logdir checks: one-line LaunchErrors with their exit status."""

import argparse
import os

import pytest

from framework.run import launch
from framework.run import rundir


def options(mode='train', continue_learning=False):
  return argparse.Namespace(mode=mode, continue_learning=continue_learning)


def test_a_new_training_run_gets_its_directory_and_the_lock(tmp_path):
  logdir = tmp_path / 'run'
  lock = launch.check_logdir(str(logdir), options(), chief=True)
  assert lock.held
  with open(logdir / rundir.LOCK_NAME, encoding='utf-8') as f:
    assert f.read().split()[0] == str(os.getpid())
  # The lock is live: a second run in the same directory is refused, naming this process.
  with pytest.raises(launch.LaunchError, match=f'is in use by another run \\(pid {os.getpid()} '):
    launch.check_logdir(str(logdir), options(continue_learning=True), chief=True)
  lock.release()
  assert os.listdir(logdir) == []
  # Not the chief: nothing is created or locked.
  assert launch.check_logdir(str(tmp_path / 'other'), options(), chief=False) is None
  assert not (tmp_path / 'other').exists()


@pytest.mark.parametrize('mode, continue_learning, setup, message', [
    ('train', False, 'file', 'is a file, not a directory; choose another --logdir'),
    ('eval', False, None, 'does not exist; eval needs a run directory with checkpoints'),
    ('export', False, None, 'does not exist; export needs a run directory with checkpoints'),
    ('train', True, None, '--continue_learning: logdir {logdir} does not exist, there is '
                          'nothing to resume'),
    ('train_eval', False, 'files', 'is not empty; pass --continue_learning to resume from it'),
])
def test_logdir_mistakes_are_one_line_with_status_2(tmp_path, mode, continue_learning, setup,
                                                    message):
  logdir = tmp_path / 'run'
  if setup == 'file':
    logdir.write_text('')
  elif setup == 'files':
    logdir.mkdir()
    (logdir / 'ckpt-1.index').write_text('')
  with pytest.raises(launch.LaunchError) as error:
    launch.check_logdir(str(logdir), options(mode, continue_learning), chief=True)
  assert message.format(logdir=logdir) in str(error.value)
  assert '\n' not in str(error.value) and error.value.status == 2
  assert not (logdir / rundir.LOCK_NAME).exists()


def test_reading_modes_take_no_lock_and_logdir_defaults_to_the_config_stem(tmp_path):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  assert launch.check_logdir(str(logdir), options('eval'), chief=True) is None
  assert os.listdir(logdir) == []
  config = argparse.Namespace(logdir=None, config='configs/fashion_mnist_lars.py')
  assert launch.choose_logdir(config, {'logdir': None}) == os.path.join('runs', 'fashion_mnist_lars')
  assert launch.choose_logdir(config, {'logdir': 'runs/x'}) == 'runs/x'
  config.logdir = 'runs/flag'
  assert launch.choose_logdir(config, {'logdir': 'runs/x'}) == 'runs/flag'


@pytest.mark.parametrize('files, resume, line', [
    (None, False, 'auto_resume: {logdir} is new; starting'),
    ([], False, 'auto_resume: {logdir} is empty; starting'),
    # A stale lock alone (a run killed before it wrote anything) is no run.
    ([rundir.LOCK_NAME], False, 'auto_resume: {logdir} is empty; starting'),
    (['checkpoint', 'ckpt-4.index', 'ckpt-4.data-00000-of-00001', 'ckpt-12.index',
      'config.yaml'], True, 'auto_resume: {logdir} holds ckpt-12; resuming'),
    (['config.yaml', 'events.out.tfevents.1'], True,
     'auto_resume: {logdir} holds a run with no checkpoint yet (config.yaml); resuming'),
    (['config-0.yaml'], True,
     'auto_resume: {logdir} holds a run with no checkpoint yet (config-0.yaml); resuming'),
])
def test_auto_resume_starts_a_new_or_empty_logdir_and_resumes_a_run(tmp_path, files, resume,
                                                                    line):
  logdir = tmp_path / 'run'
  if files is not None:
    logdir.mkdir()
    for name in files:
      (logdir / name).write_text('')
  assert launch.auto_resume(str(logdir)) == (resume, line.format(logdir=logdir))


def test_auto_resume_refuses_files_that_are_no_run_in_one_line(tmp_path):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  for name in ('notes.txt', 'run.log', rundir.LOCK_NAME):
    (logdir / name).write_text('')
  with pytest.raises(launch.LaunchError) as error:
    launch.auto_resume(str(logdir))
  assert str(error.value) == (
      f'--auto_resume: logdir {logdir} is not empty and holds no run (no checkpoint, no '
      'config.yaml; it holds notes.txt and more); choose another --logdir, or empty it')
  assert error.value.status == 2
