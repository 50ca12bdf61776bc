"""The deadline and the SIGTERM relay around TensorFlow's cluster start-up (engines/start_watch)."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from framework.engines import start_watch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# A process that guards a block with the watchdog; the block sleeps, as if in a native wait.
_GUARDED = r'''
import sys, time
sys.path.insert(0, sys.argv[1])
from framework.engines.start_watch import StartWatchdog
with StartWatchdog(float(sys.argv[2]), 'error: the block is overdue'):
  time.sleep(float(sys.argv[3]))
print('block done', flush=True)
'''


def _guarded(timeout, block_seconds):
  started = time.monotonic()
  proc = subprocess.run([sys.executable, '-c', _GUARDED, ROOT, str(timeout), str(block_seconds)],
                        capture_output=True, text=True, timeout=60, check=False)
  return proc, time.monotonic() - started


def test_an_overdue_block_ends_its_process_with_one_line_after_the_timeout():
  proc, took = _guarded(timeout=1.0, block_seconds=30)
  assert proc.returncode == -signal.SIGKILL
  assert proc.stderr == 'error: the block is overdue\n' and proc.stdout == ''
  assert 1.0 <= took < 15  # ended at the deadline, not at the end of the 30 s block


def test_a_block_that_returns_in_time_leaves_no_line_and_no_watchdog():
  proc, _ = _guarded(timeout=5.0, block_seconds=0.2)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout == 'block done\n' and proc.stderr == ''


def test_no_timeout_guards_nothing():
  with start_watch.StartWatchdog(None, 'never printed') as watchdog:
    assert watchdog._child is None  # pylint: disable=protected-access


def _sleeper():
  return subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])


def test_a_sigterm_tensorflow_recorded_is_sent_again():
  asked = []

  def recorded(key, timeout_ms):
    asked.append((key, timeout_ms))
    return '/job:worker/task:0'

  child = _sleeper()
  try:
    ready = threading.Event()
    thread = start_watch.forward_taken_sigterm(recorded, pid=child.pid, ready=ready)
    # Nothing is sent before the run's stop handlers are in place.
    with pytest.raises(subprocess.TimeoutExpired):
      child.wait(timeout=0.5)
    ready.set()
    thread.join(timeout=10)
    assert child.wait(timeout=10) == -signal.SIGTERM
  finally:
    child.kill()
  assert asked == [('TF_DEFAULT_PREEMPTION_NOTICE_KEY', start_watch.RECORD_WAIT_MS)]


def test_no_record_sends_nothing():
  def not_set(key, timeout_ms):
    raise TimeoutError(f'{key} not set within {timeout_ms} ms')

  child = _sleeper()
  try:
    ready = threading.Event()
    ready.set()
    start_watch.forward_taken_sigterm(not_set, pid=child.pid, ready=ready).join(timeout=10)
    with pytest.raises(subprocess.TimeoutExpired):
      child.wait(timeout=0.5)
  finally:
    child.kill()
    child.wait()
