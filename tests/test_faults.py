"""Fault injection through run.py in a subprocess: damaged checkpoints, incompatible resumes,
two runs on one logdir, signals, full and read-only disks, corrupt records, overflowing steps.

Each test checks the exit status, a one-line error without a traceback, and that every
checkpoint that existed before is still loadable. A refusal that comes before anything is
built (a config, logdir or resume mistake) is answered by run.py's main() in this process
(the ``run_main`` fixture, tests/conftest.py): a child would add only its start-up.
"""

import glob
import gzip
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import yaml

from test_run import ROOT, SGD_CONFIG, SHORT, checkpoint_values, run, start, wait_for_line
from test_run import write_imagenet_shards

from framework.run.stopping import REPEAT_SECONDS

# Each test runs run.py end to end, some several times.
pytestmark = pytest.mark.slow

TINY = ['--config', SGD_CONFIG, '--mode', 'train', *SHORT, '--set', 'batch_size_per_gpu=32',
        '--set', 'save_checkpoint_steps=2', '--set', 'print_loss_steps=1']


def last_line(result):
  assert 'Traceback' not in result.stderr, result.stderr
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  return lines[-1]


def loadable(logdir, steps):
  for step in steps:
    values = checkpoint_values(os.path.join(logdir, f'ckpt-{step}'))
    assert int(values['global_step/.ATTRIBUTES/VARIABLE_VALUE']) == step


def test_damaged_checkpoints_fall_back_to_the_newest_intact_one(tmp_path):
  logdir = str(tmp_path / 'run')
  run(*TINY, '--logdir', logdir, '--set', 'max_steps=6')
  before = {s: checkpoint_values(os.path.join(logdir, f'ckpt-{s}')) for s in (2, 4)}
  # The latest data file is truncated and the state file is lost.
  data = os.path.join(logdir, 'ckpt-6.data-00000-of-00001')
  with open(data, 'r+b') as f:
    f.truncate(os.path.getsize(data) // 2)
  os.remove(os.path.join(logdir, 'checkpoint'))
  result = run(*TINY, '--logdir', logdir, '--set', 'max_steps=8', '--continue_learning')
  assert 'ckpt-6' in result.stdout and 'resuming from ckpt-4' in result.stdout, result.stdout
  assert 'starting at step 4' in result.stdout
  loadable(logdir, (2, 4, 8))
  for step, values in before.items():
    after = checkpoint_values(os.path.join(logdir, f'ckpt-{step}'))
    for key in values:
      np.testing.assert_array_equal(values[key], after[key])

  # No intact checkpoint at all: one line, exit 1, nothing deleted.
  for name in os.listdir(logdir):
    if name.startswith('ckpt-') and name.endswith('.index'):
      os.remove(os.path.join(logdir, name))
  files = sorted(os.listdir(logdir))
  result = run(*TINY, '--logdir', logdir, '--set', 'max_steps=10', '--continue_learning',
               check=False)
  assert result.returncode == 1
  line = last_line(result)
  assert line.startswith('error: no intact checkpoint in') and 'nothing was deleted' in line
  assert sorted(os.listdir(logdir)) == files


def test_incompatible_resumes_are_refused_before_anything_is_written(trained, tmp_path, run_main):
  logdir = copy_of(trained, tmp_path)
  saved = (logdir / 'config.yaml').read_text()
  # Refused before anything is built: run.py's main() answers in this process.
  for change, message in (
      (['--set', 'model_params.depth=14'], 'model_params.depth: 8 -> 14'),
      (['--set', 'optimizer=LARS'], "optimizer: 'KerasMomentum' -> 'LARS'"),
      # float32 -> mixed_bfloat16 keeps the variables float32 and is taken; float16 is not.
      (['--set', 'dtype=float16'], "dtype: 'float32' -> 'float16'"),
      (['--set', 'iter_size=2'], 'iter_size: 1 -> 2')):
    result = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=4', '--continue_learning',
                      *change)
    assert result.returncode == 2, result.stderr
    line = last_line(result)
    assert line.startswith('error: --continue_learning: the checkpoints') and message in line, line
  assert (logdir / 'config.yaml').read_text() == saved
  assert sorted(p.name for p in logdir.glob('config*.yaml')) == ['config-0.yaml', 'config.yaml']

  # Nothing to do: one line, exit 0, nothing written.
  result = run(*TINY, '--logdir', str(logdir), '--set', 'max_steps=1', '--continue_learning')
  assert 'nothing to do: the checkpoint is at step 2' in result.stdout
  # A safe change is logged and kept in a config of its own; the first config stays.
  result = run(*TINY, '--logdir', str(logdir), '--set', 'max_steps=4', '--continue_learning',
               '--set', 'lr_policy_params.learning_rate=0.05')
  assert 'resuming with changed settings:' in result.stdout
  assert 'lr_policy_params.learning_rate: 0.1 -> 0.05' in result.stdout
  assert (logdir / 'config-0.yaml').read_text() == saved
  # Each start's copy is in the layout --config reads; its train view has the new length.
  start = yaml.safe_load((logdir / 'config-2.yaml').read_text())
  assert {**start['base_params'], **start['train_params']}['max_steps'] == 4
  loadable(str(logdir), (2, 4))

  # A mistyped logdir is not a new run.
  result = run_main(*TINY, '--logdir', tmp_path / 'rnu', '--set', 'max_steps=4',
                    '--continue_learning')
  assert result.returncode == 2 and 'does not exist' in last_line(result)
  assert not (tmp_path / 'rnu').exists()


def test_a_second_run_is_locked_out_and_signals_stop_the_first(tmp_path, run_main):
  logdir = str(tmp_path / 'run')
  proc = start(*TINY, '--logdir', logdir, '--set', 'max_steps=100000')
  try:
    wait_for_line(proc, 'step 3 ')
    # Locked out before anything is built: run.py's main() answers in this process.
    second = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=10', '--continue_learning')
    assert second.returncode == 2
    assert f'is in use by another run (pid {proc.pid}' in last_line(second)
    # Ctrl-C: the step finishes, a checkpoint is saved, exit status 130.
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
  finally:
    proc.kill()
  assert proc.returncode == 130 and 'Traceback' not in err, err
  last = out.strip().splitlines()[-1]
  assert last.startswith('stopped by SIGINT at step '), last
  step = int(last.split(' at step ')[1].split()[0])
  assert tf.train.latest_checkpoint(logdir).endswith(f'ckpt-{step}')
  loadable(logdir, [step])
  assert not os.path.exists(os.path.join(logdir, 'run.lock'))
  # The lock of a process that is gone is stale: the next run takes it over.
  gone = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True).stdout.strip()
  with open(os.path.join(logdir, 'run.lock'), 'w') as f:
    f.write(f'{gone} {socket.gethostname()}\n')
  result = run(*TINY, '--logdir', logdir, '--continue_learning', '--set', f'max_steps={step + 2}')
  assert f'removing the stale lock {logdir}/run.lock of a run that is gone (pid {gone})' in \
      result.stdout
  assert not os.path.exists(os.path.join(logdir, 'run.lock'))
  loadable(logdir, [step, step + 2])


def run_python(code):
  """Runs ``code`` in a Python process of its own, with a deadline; returns its CompletedProcess."""
  return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120,
                        check=False, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))


def test_a_second_signal_exits_at_once_and_the_same_one_at_once_again_is_the_first(tmp_path):
  # The repeat 0.3 s after the first is what a worker gets when a scheduler signals every
  # process of the job and the launcher forwards the signal too: the same stop.
  code = ('import os, signal, sys, time\n'
          f'sys.path.insert(0, {ROOT!r})\n'
          'from framework.run import stopping\n'
          f'stop = stopping.StopRequest({str(tmp_path)!r}).install()\n'
          'os.kill(os.getpid(), signal.SIGTERM)\n'
          'time.sleep(0.3)\n'
          'os.kill(os.getpid(), signal.SIGTERM)\n'
          'time.sleep(0.3)\n'
          'print("first:", stop.name, stop.agreed(), flush=True)\n'
          'time.sleep(stopping.REPEAT_SECONDS)\n'
          'os.kill(os.getpid(), signal.SIGTERM)\n'
          'time.sleep(5)\n'
          'print("not reached")\n')
  result = run_python(code)
  # Not 143: that status says the stop was saved.
  assert result.returncode == 1, result.stderr
  assert result.stdout == f'first: SIGTERM {int(signal.SIGTERM)}\n'
  assert [l for l in result.stderr.splitlines() if 'SIGTERM' in l] == [
      'SIGTERM received: stopping after the current step and saving a checkpoint (send it again '
      'to exit at once)',
      'error: stopped by a second SIGTERM before the checkpoint was saved; kept: no checkpoint']


def test_a_second_signal_during_an_evaluation_exits_1_naming_the_checkpoint_kept(tmp_path):
  # The first stop waits for the evaluation under way (of 200,000 synthetic images: tens of
  # seconds) to end; a second SIGTERM 2.3 s later (not a repeat) exits at once, and 143
  # would claim a save.
  logdir = str(tmp_path / 'run')
  with start(*TINY, '--mode', 'train_eval', '--logdir', logdir, '--set', 'max_steps=1000',
             '--set', 'eval_steps=3', '--set', 'data_layer=synthetic', '--set',
             'data_layer_params={image_shape: [28, 28, 1], num_classes: 10, num_examples: 200000}',
             '--set', 'eval_params.batch_size_per_gpu=100') as proc:
    wait_for_line(proc, 'step 3 ')
    proc.send_signal(signal.SIGTERM)
    time.sleep(REPEAT_SECONDS + 0.3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
  assert proc.returncode == 1, out + err
  assert 'Traceback' not in err and 'stopped by SIGTERM at step' not in out
  assert last_line(subprocess.CompletedProcess([], 1, out, err)) == (
      f'error: stopped by a second SIGTERM before the checkpoint was saved; kept: {logdir}/ckpt-2')
  loadable(logdir, [2])


@pytest.mark.parametrize('signum,after', [(signal.SIGTERM, 0.5), (signal.SIGINT, 1.5)])
def test_a_stop_signal_at_start_up_ends_in_one_line_with_nothing_lost(tmp_path, signum, after):
  # Before the trainer's handler is installed (the imports, the config, TensorFlow's start),
  # a stop signal used to kill run.py outright (-15).
  logdir = tmp_path / 'run'
  with start(*TINY, '--logdir', str(logdir), '--set', 'max_steps=1000') as proc:
    time.sleep(after)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
  name = signal.Signals(signum).name
  assert proc.returncode == 128 + signum, out + err
  assert 'Traceback' not in err, err
  last = out.strip().splitlines()[-1]
  if ' at step ' in last:  # a slow start: the trainer had its handler already, and saved
    assert last.startswith(f'stopped by {name} at step 0 of 1000: saved {logdir}/ckpt-0'), last
  else:
    assert last == f'stopped by {name} during start-up: no step had run, nothing was lost', out
    assert not logdir.exists() or not list(logdir.glob('ckpt-*'))


def test_a_stop_delivered_again_after_the_run_saved_is_ignored(tmp_path):
  # The repeat of a stop reaching run.py after its handler was uninstalled (the chief
  # had saved and printed its line) used to kill it during its shutdown.
  logdir = str(tmp_path / 'run')
  with start(*TINY, '--logdir', logdir, '--set', 'max_steps=100000') as proc:
    wait_for_line(proc, 'step 3 ')
    proc.send_signal(signal.SIGTERM)
    lines = wait_for_line(proc, 'stopped by SIGTERM at step ', timeout=120)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
  assert proc.returncode == 143, ''.join(lines) + out + err
  assert 'Traceback' not in err and 'error' not in err, err
  step = int(lines[-1].split(' at step ')[1].split()[0])
  loadable(logdir, [step])


def test_the_phases_of_a_process_answer_stop_signals_as_documented():
  # Start-up: the signal ends the process in one line. The trainer's handler takes a
  # signal over; once it is uninstalled at the end, a stop signal is ignored.
  code = ('import os, signal, sys, time\n'
          f'sys.path.insert(0, {ROOT!r})\n'
          'from core import signals\n'
          'from framework.run import stopping\n'
          'signals.guard_start()\n'
          'try:\n'
          '  os.kill(os.getpid(), signal.SIGINT)\n'
          '  time.sleep(5)\n'
          'except signals.StartupStopped as exc:\n'
          '  print(exc.line(), exc.status, flush=True)\n'
          'stop = stopping.StopRequest().install()\n'
          'os.kill(os.getpid(), signal.SIGTERM)\n'
          'time.sleep(0.3)\n'
          'stop.saved = "ckpt-1"\n'
          'signals.ending()\n'
          'stop.uninstall()\n'
          'for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):\n'
          '  os.kill(os.getpid(), signum)\n'
          '  time.sleep(0.3)\n'
          'print("ending with", stop.name, flush=True)\n'
          'sys.exit(143)\n')
  result = run_python(code)
  assert result.returncode == 143, result.stderr
  assert result.stdout.splitlines() == [
      'stopped by SIGINT during start-up: no step had run, nothing was lost 130',
      'ending with SIGTERM']


def _mount_tmpfs(path, size):
  path.mkdir()
  result = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(path)],
                          capture_output=True, text=True, check=False)
  if result.returncode != 0:
    pytest.skip(f'cannot mount a tmpfs here ({result.stderr.strip()}); '
                'test_injected_write_failures_are_one_line covers the same code by injection')


def _fill(directory, leave):
  """Fills the file system of ``directory`` up to ``leave`` free bytes."""
  path = os.path.join(directory, 'filler')
  if os.path.exists(path):
    os.remove(path)
  stat = os.statvfs(directory)
  free = stat.f_bavail * stat.f_frsize
  try:
    with open(path, 'wb') as f:
      f.write(b'\0' * max(0, free - leave))
  except OSError:
    pass  # full: the point


def test_full_and_read_only_disks_end_with_one_line(trained, tmp_path, run_main):
  mount = tmp_path / 'disk'
  _mount_tmpfs(mount, '16m')
  try:
    logdir = str(copy_of(trained, mount))
    # Room for the config and events, not for a checkpoint (about 1 MB).
    _fill(str(mount), 200 << 10)
    result = run(*TINY, '--logdir', logdir, '--set', 'max_steps=6', '--continue_learning',
                 check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    line = last_line(result)
    # The path and the OS error, not TensorFlow's op name with the cause cut off.
    where = re.escape(logdir)
    assert re.fullmatch(
        rf'error: could not write checkpoint {where}/ckpt-4: No space left on device \(writing '
        rf'{where}/ckpt-4_temp/\S+\); \d+\.\d MB free there; its partial files were removed; '
        rf'kept: {where}/ckpt-2\. Free space or fix the permissions of {where}, then resume '
        r'with --continue_learning', line) or (
            line.startswith(f'error: writing to {logdir} failed: No space left on device') and
            ' MB free there; kept: ' in line and 'ckpt-2' in line), line
    assert not [n for n in os.listdir(logdir) if n.endswith('_temp') or 'tmp' in n]
    assert all(os.path.getsize(os.path.join(logdir, n)) > 0 for n in os.listdir(logdir)
               if n.endswith('.yaml'))
    loadable(logdir, (2,))
    # No space at all: the start-up writes fail with one line. They come before anything is
    # built, as the read-only refusal below: run.py's main() answers in this process.
    _fill(str(mount), 0)
    result = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=6', '--continue_learning')
    assert result.returncode == 2
    assert last_line(result) == (f'error: cannot write to logdir {logdir}: No space left on '
                                 'device; nothing was written')
    loadable(logdir, (2,))
    os.remove(mount / 'filler')
    # Read-only: one line, nothing changed.
    subprocess.run(['mount', '-o', 'remount,ro', str(mount)], check=True)
    files = sorted(os.listdir(logdir))
    result = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=6', '--continue_learning')
    assert result.returncode == 2
    assert last_line(result) == (f'error: cannot write to logdir {logdir}: Read-only file system; '
                                 'nothing was written')
    assert sorted(os.listdir(logdir)) == files
    loadable(logdir, (2,))
  finally:
    subprocess.run(['umount', str(mount)], check=False)


# Failures injected by a sitecustomize on PYTHONPATH, for machines where a tmpfs cannot be
# mounted: the checkpoint writer fails as a full disk makes it fail, after leaving a partial
# temp directory; or the logdir refuses writes as a read-only file system does.
_HOOK = """
import errno, os
def _checkpoint_fails():
  import tensorflow as tf
  original = tf.train.CheckpointManager.save
  def save(self, checkpoint_number=None, **kw):
    if checkpoint_number is not None and checkpoint_number >= 4:
      temp = os.path.join(self.directory, f"ckpt-{checkpoint_number}_temp")
      os.makedirs(temp, exist_ok=True)
      open(os.path.join(temp, "part-00000-of-00001.index"), "w").close()
      raise tf.errors.ResourceExhaustedError(None, None, f"{temp}: No space left on device")
    return original(self, checkpoint_number=checkpoint_number, **kw)
  tf.train.CheckpointManager.save = save
def _read_only(directory):
  original = os.open
  def refuse(path, flags, *args, **kw):
    inside = os.path.abspath(path).startswith(directory + os.sep)
    if inside and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
      raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
    return original(path, flags, *args, **kw)
  os.open = refuse
fault = os.environ.get("INJECTED_FAULT")
if fault == "checkpoint":
  _checkpoint_fails()
elif fault and fault.startswith("read_only:"):
  _read_only(fault.split(":", 1)[1])
"""


def run_with_fault(tmp_path, fault, *args):
  hook = tmp_path / 'hook'
  hook.mkdir(exist_ok=True)
  (hook / 'sitecustomize.py').write_text(_HOOK)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', INJECTED_FAULT=fault,
             PYTHONPATH=os.pathsep.join([str(hook), ROOT]))
  return subprocess.run([sys.executable, os.path.join(ROOT, 'run.py'), *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600, check=False)


def test_injected_write_failures_are_one_line(trained, tmp_path):
  logdir = str(copy_of(trained, tmp_path))
  result = run_with_fault(tmp_path, 'checkpoint', *TINY, '--logdir', logdir,
                          '--set', 'max_steps=6', '--continue_learning')
  assert result.returncode == 1, result.stdout + result.stderr
  line = last_line(result)
  where = re.escape(logdir)
  assert re.fullmatch(
      rf'error: could not write checkpoint {where}/ckpt-4: No space left on device \(writing '
      rf'{where}/ckpt-4_temp\); \d+\.\d MB free there; its partial files were removed; kept: '
      rf'{where}/ckpt-2\. Free space .*', line), line
  assert not os.path.exists(os.path.join(logdir, 'ckpt-4_temp'))
  assert not os.path.exists(os.path.join(logdir, 'run.lock'))
  loadable(logdir, (2,))
  # A read-only logdir (os.open refuses writes, as on a read-only mount).
  files = sorted(os.listdir(logdir))
  result = run_with_fault(tmp_path, f'read_only:{logdir}', *TINY, '--logdir', logdir,
                          '--set', 'max_steps=6', '--continue_learning')
  assert result.returncode == 2
  assert last_line(result) == (f'error: cannot write to logdir {logdir}: Read-only file system; '
                               'nothing was written')
  assert sorted(os.listdir(logdir)) == files
  loadable(logdir, (2,))


def _imagenet(tmp_path, corrupt_record=None):
  data_dir = tmp_path / 'imagenet'
  data_dir.mkdir(parents=True)
  write_imagenet_shards(str(data_dir), 'train', 2, 24, seed=0)
  write_imagenet_shards(str(data_dir), 'validation', 1, 8, seed=1)
  if corrupt_record is not None:
    # Rewrite one record of shard 1 with JPEG bytes cut short and overwritten:
    # the record framing and its checksums are intact, the image is not.
    path = str(data_dir / 'train-00001-of-00002')
    records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    example = tf.train.Example.FromString(records[corrupt_record])
    jpeg = example.features.feature['image/encoded'].bytes_list.value[0]
    example.features.feature['image/encoded'].bytes_list.value[0] = (
        jpeg[:200] + b'\x00' * 64 + b'\xff\xd9')
    records[corrupt_record] = example.SerializeToString()
    with tf.io.TFRecordWriter(path) as writer:
      for record in records:
        writer.write(record)
  return data_dir


def _imagenet_args(data_dir, extra=''):
  params = (f'{{data_dir: {data_dir}, image_size: 32, num_classes: 10, num_examples: 48, '
            f'shuffle_buffer: 16{extra}}}')
  return ['--set', 'data_layer=imagenet', '--set', f'data_layer_params={params}',
          '--set', 'batch_size_per_gpu=8', '--set', 'model_params={depth: 8}',
          '--set', 'max_steps=12']


def test_corrupt_jpeg_is_named_or_skipped_and_labels_are_checked(tmp_path):
  data_dir = _imagenet(tmp_path, corrupt_record=5)
  shard = f'{data_dir}/train-00001-of-00002'
  result = run(*TINY, '--logdir', str(tmp_path / 'a'), *_imagenet_args(data_dir), check=False)
  assert result.returncode == 2, result.stderr
  assert last_line(result) == (f'error: {shard}: record 5: the JPEG image cannot be decoded; set '
                               'data_layer_params.skip_corrupt: true to skip such records')
  # skip_corrupt: 12 steps of 8 = two epochs of 48 records: the record is skipped twice.
  result = run(*TINY, '--logdir', str(tmp_path / 'b'),
               *_imagenet_args(data_dir, ', skip_corrupt: true, max_corrupt_fraction: 0.05'))
  skipped = [l for l in result.stderr.splitlines() if l.startswith('warning: skipped corrupt')]
  assert len(skipped) >= 2 and f'{shard}: record 5' in skipped[0], result.stderr
  assert skipped[0].endswith('1 skipped so far') and skipped[1].endswith('2 skipped so far')
  # More than the allowed fraction: one line.
  result = run(*TINY, '--logdir', str(tmp_path / 'c'),
               *_imagenet_args(data_dir, ', skip_corrupt: true, max_corrupt_fraction: 0.0'),
               check=False)
  assert result.returncode == 2
  assert 'corrupt records skipped' in last_line(result)
  assert 'max_corrupt_fraction (0.0)' in last_line(result)
  # Labels are 1..10: read 0-based, label 10 is outside [0, 10).
  clean = _imagenet(tmp_path / 'clean')
  result = run(*TINY, '--logdir', str(tmp_path / 'd'), *_imagenet_args(clean, ', label_offset: 0'),
               check=False)
  assert result.returncode == 2
  line = last_line(result)
  # The label and what to check first, the record's long path last.
  assert line.startswith('error: imagenet: image/class/label 10 - label_offset 0 is outside '
                         '[0, 10): check data_layer_params.label_offset and num_classes (record '), line
  assert f' of {clean}/train-0000' in line and line.endswith(')'), line


def test_idx_headers_of_every_split_are_checked_at_start_up(tmp_path):
  data_dir = tmp_path / 'fm'
  shutil.copytree('/usr/share/datasets/fashion-mnist', data_dir)
  # The test split's images claim 14x56: a train run stops before its first step.
  path = data_dir / 't10k-images-idx3-ubyte.gz'
  with gzip.open(path, 'rb') as f:
    raw = f.read()
  with gzip.open(path, 'wb') as f:
    f.write(raw[:8] + struct.pack('>II', 14, 56) + raw[16:])
  result = run(*TINY, '--logdir', str(tmp_path / 'r'), '--set', 'max_steps=2',
               '--set', f'data_layer_params.data_dir={data_dir}', check=False)
  assert result.returncode == 2
  assert last_line(result) == (f'error: {path}: the IDX header gives 14x56 images, Fashion-MNIST '
                               'images are 28x28')


def test_float16_trains_and_skipped_updates_are_counted(tmp_path):
  logdir = tmp_path / 'f16'
  # float16 gradients of a loss scaled by 2**30 overflow: the Backoff scaler
  # skips those updates and halves the scale until they fit.
  result = run(*TINY, '--logdir', str(logdir), '--set', 'dtype=float16', '--set', 'max_steps=4',
               '--set', 'loss_scaling=Backoff',
               '--set', 'loss_scaling_params={scale_min: 1.0, scale_max: 1073741824.0}',
               '--set', 'save_summaries_steps=1')
  values = checkpoint_values(tf.train.latest_checkpoint(str(logdir)))
  micro_steps = int(values['data_position/.ATTRIBUTES/VARIABLE_VALUE'])
  skipped = int(values['skipped_updates/.ATTRIBUTES/VARIABLE_VALUE'])
  # Every micro-step either applied an update or was skipped.
  assert int(values['global_step/.ATTRIBUTES/VARIABLE_VALUE']) == 4
  assert skipped == micro_steps - 4 and skipped >= 1, result.stdout
  model = {k: v for k, v in values.items() if k.startswith('model/')}
  assert all(np.all(np.isfinite(v)) for v in model.values())
  # Every variable is float16 but the logits layer's, which is float32 by design.
  assert {str(v.dtype) for v in model.values()} == {'float16', 'float32'}
  assert sum(v.dtype == np.float32 for v in model.values()) == 2
  steps = [l for l in result.stdout.splitlines() if l.startswith('step ')]
  assert steps[-1].split(' skipped ')[1].split()[0] == str(skipped)
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=import-outside-toplevel
  events = event_accumulator.EventAccumulator(str(logdir), size_guidance={'tensors': 0})
  events.Reload()
  logged = [int(tf.make_ndarray(e.tensor_proto)) for e in events.Tensors('skipped_updates')]
  assert logged[-1] == skipped


# ---------------------------------------------------------------------------
# Every way a checkpoint is named, the best checkpoint, the saved config, the end of training

# A train_eval run of four steps: checkpoints at 2 and 4, an evaluation and a
# best-checkpoint offer at each. What these tests read is the run directory, not what the
# model learns: synthetic images of Fashion-MNIST's shape, 256 of them to evaluate, where
# the 10,000 test images took most of each run's time. The ResNet-8 of the checkpoints is
# the one eval and export build from the Fashion-MNIST config (READ).
TRAIN_EVAL = ['--config', SGD_CONFIG, '--mode', 'train_eval', *SHORT,
              '--set', 'data_layer=synthetic',
              '--set', 'data_layer_params={image_shape: [28, 28, 1], num_classes: 10, '
                       'num_examples: 256}',
              '--set', 'eval_params.batch_size_per_gpu=256',
              '--set', 'batch_size_per_gpu=32', '--set', 'save_checkpoint_steps=2',
              '--set', 'eval_steps=2', '--set', 'print_loss_steps=1']
# Eval and export read the config as well (a run length among the rest).
READ = [*SHORT, '--set', 'max_steps=4']
EVAL = ['--config', SGD_CONFIG, '--mode', 'eval', *READ]
EVAL_LINE = re.compile(r'^eval at step (\d+): loss \S+, top-1 (\S+),', re.MULTILINE)


@pytest.fixture(name='evaluated', scope='module')
def fixture_evaluated(tmp_path_factory):
  """The logdir of a 4-step train_eval run, its evaluations and its best step; tests copy it."""
  logdir = tmp_path_factory.mktemp('evaluated') / 'run'
  result = run(*TRAIN_EVAL, '--logdir', str(logdir), '--set', 'max_steps=4')
  evals = {int(step): float(top1) for step, top1 in EVAL_LINE.findall(result.stdout)}
  assert sorted(evals) == [2, 4], result.stdout
  best = max(evals, key=lambda step: (evals[step], -step))  # the first of equals is kept
  assert json.loads((logdir / 'best' / 'best.json').read_text())['step'] == best
  return logdir, evals, best


@pytest.fixture(name='trained', scope='module')
def fixture_trained(tmp_path_factory):
  """The logdir of a 2-step train run (ckpt-2, config-0.yaml, config.yaml); tests copy it."""
  logdir = tmp_path_factory.mktemp('trained') / 'run'
  run(*TINY, '--logdir', str(logdir), '--set', 'max_steps=2')
  return logdir


def copy_of(logdir, tmp_path):
  copy = tmp_path / 'run'
  shutil.copytree(logdir, copy)
  return copy


def contents(directory):
  """``{relative path: bytes}`` of every file under ``directory``: what must not change."""
  return {str(p.relative_to(directory)): p.read_bytes()
          for p in sorted(directory.rglob('*')) if p.is_file()}


def truncate(path):
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)


def test_every_named_checkpoint_is_read_in_full_before_it_is_used(evaluated, tmp_path):
  logdir = copy_of(evaluated[0], tmp_path)
  best = evaluated[2]
  truncate(logdir / 'best' / f'best-{best}.data-00000-of-00001')
  truncate(logdir / 'ckpt-2.data-00000-of-00001')
  before = contents(logdir)
  # --checkpoint=best: the best directory's only checkpoint is damaged.
  result = run(*EVAL, '--logdir', str(logdir), '--checkpoint', 'best', check=False)
  assert result.returncode == 1, result.stdout + result.stderr
  assert last_line(result) == (
      f'error: --checkpoint=best: no intact checkpoint in {logdir}/best (best-{best}: Read less '
      'bytes than requested); nothing was deleted. Name another checkpoint, or restore the files '
      'from a backup')
  # --checkpoint=PATH, in eval and in export (which then writes nothing).
  damaged = (f'the checkpoint {logdir}/ckpt-2 is damaged (Read less bytes than requested); '
             'nothing was changed. Name another checkpoint, or restore its files from a backup')
  for mode in ('eval', 'export'):
    export_dir = tmp_path / 'export'
    result = run('--config', SGD_CONFIG, '--mode', mode, *READ, '--logdir', str(logdir),
                 '--checkpoint', f'{logdir}/ckpt-2',
                 *(['--export_dir', str(export_dir)] if mode == 'export' else []), check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert last_line(result) == f'error: --checkpoint={logdir}/ckpt-2: {damaged}'
    assert not export_dir.exists()
  # --init_checkpoint: refused before the new run writes anything, its logdir not left behind.
  new = tmp_path / 'new'
  result = run(*TINY, '--logdir', str(new), '--set', 'max_steps=1',
               '--init_checkpoint', f'{logdir}/ckpt-2', check=False)
  assert result.returncode == 1, result.stdout + result.stderr
  assert last_line(result) == f'error: --init_checkpoint {logdir}/ckpt-2: {damaged}'
  assert not new.exists()
  assert contents(logdir) == before
  loadable(str(logdir), (4,))


def test_a_saved_model_gives_weights_to_a_new_run_and_is_no_checkpoint_to_evaluate(
    evaluated, tmp_path, run_main):
  logdir = evaluated[0]
  export_dir = tmp_path / 'export'
  run('--config', SGD_CONFIG, '--mode', 'export', *READ, '--logdir', str(logdir),
      '--export_dir', str(export_dir))
  variables = f'{export_dir}/variables/variables'
  result = run(*EVAL, '--logdir', str(logdir), '--checkpoint', variables, check=False)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      f'error: --checkpoint={variables}: the variables of the SavedModel {export_dir} (an export, '
      "weights only), not a checkpoint of a run; eval and export read a run's checkpoints: "
      'latest, best, or a path such as <logdir>/ckpt-<step> (to start training from its '
      'weights, use --init_checkpoint)')
  assert 'array(' not in result.stderr and 'Traceback' not in result.stderr
  # Its weights start a new run: with a learning rate of ~0 the kernels stay those of ckpt-4.
  new = tmp_path / 'new'
  result = run(*TINY, '--logdir', str(new), '--set', 'max_steps=1',
               '--set', 'lr_policy_params.learning_rate=1e-30', '--init_checkpoint', variables)
  assert f'initialized from {variables} (model weights); starting at step 0' in result.stdout
  source = checkpoint_values(f'{logdir}/ckpt-4')
  started = checkpoint_values(str(new / 'ckpt-1'))
  kernels = [k for k in source if k.startswith('model/') and '_kernel/' in k]
  assert kernels
  for key in kernels:
    np.testing.assert_array_equal(started[key], source[key], err_msg=key)
  # It holds no optimizer state to start from.
  result = run(*TINY, '--logdir', str(tmp_path / 'state'), '--set', 'max_steps=1',
               '--init_checkpoint', variables, '--init_optimizer_state', check=False)
  assert result.returncode == 2
  assert last_line(result) == (
      f'error: --init_checkpoint {variables}: the variables of the SavedModel {export_dir} hold '
      'the model weights only, no optimizer state; drop --init_optimizer_state, or name a '
      'checkpoint of the run it was exported from')
  assert not (tmp_path / 'state').exists()
  # An export directory under a regular file: that file is named. Refused before anything is
  # built: run.py's main() answers in this process.
  (tmp_path / 'afile').write_text('x')
  result = run_main('--config', SGD_CONFIG, '--mode', 'export', *READ, '--logdir', logdir,
                    '--export_dir', tmp_path / 'afile' / 'sub' / 'x')
  assert result.returncode == 2
  assert last_line(result) == (
      f'error: --export_dir {tmp_path}/afile/sub/x: {tmp_path}/afile is a file, not a '
      'directory; give a path whose parents are directories (or do not exist yet)')


def test_a_config_that_does_not_fit_the_checkpoint_is_one_line_on_eval(evaluated):
  logdir = evaluated[0]
  result = run(*EVAL, '--logdir', str(logdir), '--set', 'model_params.depth=14', check=False)
  assert result.returncode == 2
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  # The error is the last line: no warning per unrestored value after it.
  assert lines[-1].startswith(f'error: {logdir}/ckpt-4: does not fit the model and optimizer of '
                              'this config (missing from the checkpoint: model/'), lines[-1]
  assert lines[-1].endswith('; use the config it was written with (config.yaml in its run '
                            'directory)')
  assert 'other shape: ' in lines[-1] and 'array(' not in lines[-1]
  assert not [l for l in lines if 'Value in checkpoint could not be found' in l]


def test_a_garbled_best_record_never_lets_a_worse_checkpoint_replace_the_best(evaluated, tmp_path):
  logdir = copy_of(evaluated[0], tmp_path)
  best = evaluated[2]
  kept = {name: data for name, data in contents(logdir / 'best').items()
          if name.startswith(f'best-{best}.')}
  assert len(kept) == 2
  # The eval events of the best step say 0.99 (an event file written after the run's): no
  # evaluation of this run can beat it, so the best checkpoint must stay.
  writer = tf.summary.create_file_writer(str(logdir / 'eval'))
  with writer.as_default():
    tf.summary.scalar('accuracy', 0.99, step=best)
  writer.close()
  (logdir / 'best' / 'best.json').write_text('{"step": 2, "accura')
  result = run(*TRAIN_EVAL, '--logdir', str(logdir), '--set', 'max_steps=6',
               '--continue_learning')
  assert (f'warning: {logdir}/best/best.json cannot be read (JSONDecodeError: ' in result.stdout)
  assert (f'the accuracy of {logdir}/best/best-{best}, 0.9900, was read back from the eval events '
          f'in {logdir}/eval, and the record rewritten') in result.stdout
  assert 'eval at step 6: ' in result.stdout
  assert json.loads((logdir / 'best' / 'best.json').read_text()) == {
      'step': best, 'accuracy': pytest.approx(0.99), 'checkpoint': f'{logdir}/best/best-{best}'}
  after = contents(logdir / 'best')
  assert {name: after[name] for name in kept} == kept
  assert not [name for name in after if name.startswith('best-6')]
  # No record and no events: the best checkpoint is kept and this run does not replace it.
  shutil.rmtree(logdir / 'eval')
  (logdir / 'best' / 'best.json').write_text('garbled')
  result = run(*TRAIN_EVAL, '--logdir', str(logdir), '--set', 'max_steps=8',
               '--continue_learning')
  assert (f'and no eval event in {logdir}/eval gives the accuracy of {logdir}/best/best-{best}: '
          f'it is kept and this run will not replace it (move {logdir}/best away to let it)'
          in result.stdout)
  assert 'eval at step 8: ' in result.stdout
  after = contents(logdir / 'best')
  assert {name: after[name] for name in kept} == kept and after['best.json'] == b'garbled'


def test_an_unreadable_config_yaml_is_replaced_by_the_newest_start_config(trained, tmp_path,
                                                                         run_main):
  logdir = copy_of(trained, tmp_path)
  (logdir / 'config.yaml').write_bytes(b'base_params:\n  optimizer: \xff\xfe\n')
  before = contents(logdir)
  # Refused before anything is built: run.py's main() answers in this process.
  result = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=4', '--continue_learning',
                    '--set', 'optimizer=LARS')
  assert result.returncode == 2, result.stdout + result.stderr
  assert (f'warning: {logdir}/config.yaml cannot be read (UnicodeDecodeError); comparing with '
          f'{logdir}/config-0.yaml, the newest readable config of the run') in result.stdout
  assert last_line(result) == (
      f"error: --continue_learning: the checkpoints in {logdir} cannot take these changes: "
      f"optimizer: 'KerasMomentum' -> 'LARS' (saved in {logdir}/config-0.yaml); resume with the saved "
      'values, or start a new run in another --logdir')
  assert contents(logdir) == before
  # No config readable at all: refused, nothing changed.
  (logdir / 'config-0.yaml').write_text('base_params: [\n')
  before = contents(logdir)
  result = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=4', '--continue_learning')
  assert result.returncode == 2, result.stdout + result.stderr
  assert last_line(result) == (
      f'error: --continue_learning: no readable config in {logdir} to compare this config with '
      f'({logdir}/config.yaml cannot be read (UnicodeDecodeError); {logdir}/config-0.yaml cannot '
      f'be read (ParserError)); nothing was changed. Put the config the checkpoints were written '
      f'with back as {logdir}/config.yaml, or start a new run in another --logdir')
  assert contents(logdir) == before
  loadable(str(logdir), (2,))


def as_written_before_the_data_layout(prefix):
  """Rewrites a checkpoint as runs wrote them before checkpoints recorded their workers and batch."""
  from tensorflow.core.protobuf import trackable_object_graph_pb2  # pylint: disable=import-outside-toplevel
  graph_key = '_CHECKPOINTABLE_OBJECT_GRAPH'
  reader = tf.train.load_checkpoint(prefix)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(graph_key))
  root = graph.nodes[0]
  kept = [child for child in root.children if child.local_name != 'data_layout']
  assert len(kept) == len(root.children) - 1
  del root.children[:]
  root.children.extend(kept)  # its node is left unreachable, as an unknown object would be
  names = sorted(n for n in reader.get_variable_to_shape_map() if not n.startswith('data_layout/'))
  tensors = [graph.SerializeToString() if n == graph_key else reader.get_tensor(n) for n in names]
  for path in glob.glob(glob.escape(prefix) + '.*'):
    os.remove(path)
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[''] * len(names),
                    tensors=tensors)


def test_a_resume_with_another_batch_per_worker_is_refused_and_older_checkpoints_resume(
    trained, tmp_path, run_main):
  # The data position counts batches of one worker (2 of 32 here): with 16 per worker it would
  # name other examples. Other workers: tests/test_multi_worker.py, tests/test_horovod.py.
  logdir = copy_of(trained, tmp_path)
  prefix = f'{logdir}/ckpt-2'
  before = contents(logdir)
  # The refusals come before anything is built: run.py's main() answers in this process.
  result = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=4', '--continue_learning',
                    '--set', 'batch_size_per_gpu=16')
  assert result.returncode == 2, result.stdout + result.stderr
  assert last_line(result) == (
      f'error: --continue_learning: {prefix} was trained with 1 worker(s) and '
      'batch_size_per_gpu=32, and this run has 1 worker(s) and batch_size_per_gpu=16: its data '
      'position counts batches of one worker, and each epoch is dealt to the workers in whole '
      'batches, so this run would not read the examples a run straight through reads next; '
      'nothing was changed. Resume with 1 worker(s) and batch_size_per_gpu=32, or start a new '
      f'run in another --logdir from its weights with --init_checkpoint {prefix}')
  assert 'resuming with changed settings' not in result.stdout
  assert contents(logdir) == before
  assert checkpoint_values(prefix)['data_layout/.ATTRIBUTES/VARIABLE_VALUE'].tolist() == [1, 32]

  # A checkpoint written before the layout was recorded: its batch is the config's, and a
  # change of it is refused the same way; with the same batch it resumes, with a note.
  as_written_before_the_data_layout(prefix)
  assert 'data_layout/.ATTRIBUTES/VARIABLE_VALUE' not in checkpoint_values(prefix)
  result = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=4', '--continue_learning',
                    '--set', 'batch_size_per_gpu=16')
  assert result.returncode == 2, result.stdout + result.stderr
  assert last_line(result).startswith(
      f'error: --continue_learning: {prefix} was trained with batch_size_per_gpu=32, and this '
      'run has 1 worker(s) and batch_size_per_gpu=16: ')
  result = run(*TINY, '--logdir', str(logdir), '--set', 'max_steps=4', '--continue_learning')
  assert (f'note: {prefix} does not record the workers it was trained with (written before '
          'checkpoints did): resume it with as many as then (1 now), or its data position names '
          'other examples') in result.stdout
  assert 'starting at step 2' in result.stdout
  values = checkpoint_values(f'{logdir}/ckpt-4')
  assert int(values['data_position/.ATTRIBUTES/VARIABLE_VALUE']) == 4
  assert values['data_layout/.ATTRIBUTES/VARIABLE_VALUE'].tolist() == [1, 32]
  loadable(str(logdir), (2, 4))


def test_config_files_that_are_not_utf8_or_repeat_a_key_are_one_line(tmp_path, run_main):
  # Config mistakes end before anything is built: run.py's main() answers in this process.
  config = tmp_path / 'x.yaml'
  config.write_bytes(b'base_params:\n  model: \xff\xfe\n')
  result = run_main('--config', config, '--logdir', tmp_path / 'r')
  assert result.returncode == 2
  assert last_line(result) == (f'error: {config}:2: not UTF-8 text (byte 0xff at offset 22); '
                               'save the file as UTF-8')
  config.write_text('base_params:\n  model: resnet_cifar\n  batch_size_per_gpu: 32\n'
                    '  model: resnet50\n')
  result = run_main('--config', config, '--logdir', tmp_path / 'r')
  assert result.returncode == 2
  assert last_line(result) == (f"error: {config}:4: duplicate key 'model' (first given on line "
                               '2); a key may appear once in a mapping')
  assert not (tmp_path / 'r').exists()


def test_a_global_batch_larger_than_the_training_set_is_said(tmp_path):
  result = run(*TINY, '--logdir', str(tmp_path / 'r'), '--set', 'max_steps=1',
               '--set', 'data_layer=synthetic', '--set', 'batch_size_per_gpu=16',
               '--set', 'iter_size=8', '--set',
               'data_layer_params={image_shape: [28, 28, 1], num_classes: 10, num_examples: 64}')
  # 16 x 8 = 128 images an update, twice the 64 of the set: two epochs an update.
  assert ('warning: the global batch 128 (16 per worker x 1 worker(s) x iter_size 8) is larger '
          'than the 64 training examples: each update reads 2.00 epochs, some examples twice'
          in result.stdout), result.stdout


# precise_bn over 200 batches of 64 takes seconds: the signal lands in it.
PRECISE = ['--set', 'precise_bn={num_batches: 200, batch_size: 64, before_each_eval: false}',
           '--set', 'deterministic=true', '--set', 'save_checkpoint_steps=3',
           '--set', 'max_steps=4']


def model_state(path):
  """A checkpoint's tensors but its save counter (how many saves the run made)."""
  return {k: v for k, v in checkpoint_values(path).items() if not k.startswith('save_counter')}


def test_sigterm_during_precise_bn_stops_and_the_resume_does_the_end(tmp_path):
  logdir = str(tmp_path / 'stopped')
  with start(*TINY, *PRECISE, '--logdir', logdir) as proc:
    # The last step is printed once the train loop is done: precise_bn comes next.
    wait_for_line(proc, 'step 4 ')
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
  assert proc.returncode == 143 and 'Traceback' not in err, err
  last = out.strip().splitlines()[-1]
  assert last.startswith(f'stopped by SIGTERM at step 4 of 4: saved {logdir}/ckpt-4; resume '
                         'with: '), last
  assert 'precise batch norm' not in out
  # The checkpoint holds the state training had at step 4, batch-norm statistics included,
  # as a run without precise_bn has it.
  plain = str(tmp_path / 'plain')
  run(*TINY, *PRECISE, '--set', 'precise_bn=null', '--logdir', plain)
  stopped, expected = model_state(f'{logdir}/ckpt-4'), model_state(f'{plain}/ckpt-4')
  assert stopped.keys() == expected.keys()
  for key, value in expected.items():
    np.testing.assert_array_equal(stopped[key], value, err_msg=key)
  # The resume does the end that was cut off, and ends as a run straight through does.
  result = run(*TINY, *PRECISE, '--logdir', logdir, '--continue_learning')
  assert ('a signal cut off the end of training at step 4: doing it now (precise batch norm, '
          'last checkpoint, last evaluation)') in result.stdout
  assert 'precise batch norm: moving statistics averaged over 200 batches of 64' in result.stdout
  assert not os.path.exists(os.path.join(logdir, 'ending.json'))
  straight = str(tmp_path / 'straight')
  run(*TINY, *PRECISE, '--logdir', straight)
  resumed, expected = model_state(f'{logdir}/ckpt-4'), model_state(f'{straight}/ckpt-4')
  moving = [k for k in expected if 'moving_mean' in k]
  assert moving and any(np.any(resumed[k] != stopped[k]) for k in moving)
  for key, value in expected.items():
    np.testing.assert_array_equal(resumed[key], value, err_msg=key)


def test_a_new_run_refused_for_a_value_leaves_no_empty_logdir(tmp_path, run_main):
  # The optimizer's constructor judges its values once TensorFlow is loaded, before anything
  # is built: run.py's main() answers in this process.
  logdir = tmp_path / 'runs' / 'new'
  result = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=1',
                    '--set', 'optimizer_params.momentum=-1')
  assert result.returncode == 2
  assert last_line(result).startswith('error: optimizer_params.momentum: ')
  assert not logdir.exists()


def test_auto_resume_the_same_command_starts_then_resumes_to_max_steps(tmp_path):
  # What a scheduler that requeues a job does: the same command, whatever the logdir holds.
  logdir = str(tmp_path / 'run')
  command = [*TINY, '--logdir', logdir, '--set', 'max_steps=40', '--auto_resume']
  with start(*command) as proc:
    lines = wait_for_line(proc, 'step 3 ')
    proc.send_signal(signal.SIGTERM)  # the time limit is near: save and requeue
    out, err = proc.communicate(timeout=120)
  out = ''.join(lines) + out
  assert proc.returncode == 143 and 'Traceback' not in err, out + err
  assert f'auto_resume: {logdir} is new; starting\n' in out
  last = out.strip().splitlines()[-1]
  assert last.startswith('stopped by SIGTERM at step '), last
  step = int(last.split(' at step ')[1].split()[0])
  assert 3 <= step < 40 and '--auto_resume' in last

  second = run(*command)
  assert f'auto_resume: {logdir} holds ckpt-{step}; resuming\n' in second.stdout
  assert f'restored {logdir}/ckpt-{step} (step {step})' in second.stdout, second.stdout
  assert 'final test accuracy' not in second.stdout  # --mode=train: no evaluation
  loadable(logdir, [step, 40])
  assert not os.path.exists(os.path.join(logdir, 'run.lock'))
  # Once more, the run done: nothing to do, exit 0 (a requeue after the end is harmless).
  third = run(*command)
  assert f'auto_resume: {logdir} holds ckpt-40; resuming\n' in third.stdout
  assert 'nothing to do: the checkpoint is at step 40' in third.stdout


def test_auto_resume_refuses_a_logdir_that_holds_no_run_in_one_line(tmp_path, run_main):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  (logdir / 'notes.txt').write_text('mine\n')
  # Refused before anything is built: run.py's main() answers in this process.
  result = run_main(*TINY, '--logdir', logdir, '--set', 'max_steps=4', '--auto_resume')
  assert result.returncode == 2
  assert last_line(result) == (
      f'error: --auto_resume: logdir {logdir} is not empty and holds no run (no checkpoint, no '
      'config.yaml; it holds notes.txt); choose another --logdir, or empty it')
  assert os.listdir(logdir) == ['notes.txt']
