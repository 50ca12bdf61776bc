"""horovodrun's stop of a worker (framework/engines/horovod_launcher.py), as Horovod's middleman
runs it.

The middleman starts ``/bin/sh -c COMMAND``, waits for that shell in its main
thread, and calls the stop from another thread. These tests do the same with
a small worker that saves on SIGTERM and exits 143, and check the status the
main thread reads: the worker's own, never the 0 that a second reaper leaves.
"""

import shlex
import signal
import subprocess
import sys
import threading
import time

import pytest

from framework.engines import horovod_launcher

WORKER = '''
import signal, sys, time
saved, ready = sys.argv[1], sys.argv[2]
seconds = float(sys.argv[3])
def stop(signum, frame):
  time.sleep(seconds)  # the step and the save
  open(saved, "w").write("saved")
  sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop if seconds >= 0 else signal.SIG_IGN)
open(ready, "w").close()
while True:
  time.sleep(0.05)
'''


def _middleman(tmp_path, seconds, exec_in_place=False, grace=10.0):
  """Runs the worker under /bin/sh as the middleman does, stops it; returns (status, saved, secs)."""
  script = tmp_path / 'worker.py'
  script.write_text(WORKER)
  saved, ready = tmp_path / 'saved', tmp_path / 'ready'
  command = ' '.join(shlex.quote(str(a)) for a in (sys.executable, script, saved, ready, seconds))
  shell = subprocess.Popen(('exec ' if exec_in_place else 'HOROVOD_RANK=0 ') + command, shell=True)
  try:
    deadline = time.monotonic() + 60
    while not ready.exists():
      assert time.monotonic() < deadline and shell.poll() is None, 'the worker did not start'
      time.sleep(0.05)
    started = time.monotonic()
    stopper = threading.Thread(target=horovod_launcher.stop_worker, args=(shell.pid, grace))
    stopper.start()
    status = shell.wait(timeout=60)
    stopper.join(timeout=60)
    assert not stopper.is_alive()
    return status, saved.exists(), time.monotonic() - started
  finally:
    if shell.poll() is None:
      shell.kill()
      shell.wait()


@pytest.mark.parametrize('exec_in_place', [False, True], ids=['dash', 'exec'])
def test_the_worker_saves_and_its_status_reaches_the_middleman(tmp_path, exec_in_place):
  # With exec (bash's way with `sh -c`), the shell is the worker: Horovod's own stop froze it
  # with SIGSTOP before its SIGTERM. tests/scripts/test_horovodrun.py saves for longer than the
  # 5 s Horovod gave.
  status, saved, seconds = _middleman(tmp_path, 1.0, exec_in_place)
  assert saved and status == 143
  assert 1.0 <= seconds < 11


def test_a_worker_that_does_not_stop_is_killed_after_the_grace(tmp_path):
  status, saved, seconds = _middleman(tmp_path, -1, grace=1.0)
  assert not saved
  assert status == 128 + signal.SIGKILL  # as /bin/sh reports a child that SIGKILL ended
  assert 1.0 <= seconds < 10


def test_the_status_is_the_workers_every_time(tmp_path):
  # Horovod's own stop also waited on the shell from its thread; one time in tens the main
  # thread's wait then found no child and read 0.
  for attempt in range(8):
    case = tmp_path / str(attempt)
    case.mkdir()
    assert _middleman(case, 0.0)[:2] == (143, True)


def test_a_shell_without_a_child_yet_is_stopped_itself():
  # A signal just after the launch can come before the shell has started its command.
  shell = subprocess.Popen('read line', shell=True, stdin=subprocess.PIPE)
  try:
    time.sleep(0.5)
    assert shell.poll() is None
    horovod_launcher.stop_worker(shell.pid, grace=5.0)
    assert shell.wait(timeout=30) == -signal.SIGTERM
  finally:
    if shell.poll() is None:
      shell.kill()
      shell.wait()


def test_the_stop_of_a_process_that_is_gone_does_nothing():
  proc = subprocess.Popen([sys.executable, '-c', 'pass'])
  proc.wait(timeout=60)
  horovod_launcher.stop_worker(proc.pid, grace=1.0)


def test_patch_middleman_replaces_horovods_stop():
  from horovod.runner.common.util import safe_shell_exec  # pylint: disable=import-outside-toplevel
  original = safe_shell_exec.terminate_executor_shell_and_children
  try:
    horovod_launcher.patch_middleman()
    assert safe_shell_exec.terminate_executor_shell_and_children is horovod_launcher.stop_worker
  finally:
    safe_shell_exec.terminate_executor_shell_and_children = original


def test_the_job_status_after_a_signal_to_horovodrun_is_128_plus_the_signal():
  # Whatever the workers reported: one may have finished its save as the other was killed.
  status, line = horovod_launcher.job_status([signal.SIGINT, signal.SIGTERM],
                                             {0: (130, 2.0), 1: (137, 1.0)})
  assert status == 130
  assert line == 'horovodrun: stopped by SIGINT; every worker has ended (exit status 130)'


def test_the_job_status_after_a_signal_to_a_worker_is_that_workers():
  status, line = horovod_launcher.job_status([], {0: (143, 2.0), 1: (143, 1.0)})
  assert status == 143
  assert line == ('horovodrun: worker 1 was stopped by SIGTERM; every worker has ended '
                  '(exit status 143)')


def test_the_job_status_after_a_failure_is_the_failed_workers_even_if_it_ended_later():
  # The others, ended by the launcher, save and exit 143 before the failed one is reported.
  status, line = horovod_launcher.job_status([], {0: (143, 1.0), 1: (137, 2.0), 2: (0, 0.5)})
  assert status == 137
  assert line == 'horovodrun: worker 1 of 3 exited with status 137; the others were ended'
