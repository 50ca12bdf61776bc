"""How ``horovodrun`` stops a job on SIGTERM or SIGINT without losing the save or the status.

Horovod's launcher (0.28.1, ``--gloo``) runs each worker as ``/bin/sh -c
'<environment> python run.py ...'`` under a helper process of its own, the
"middleman" (``horovod.runner.common.util.safe_shell_exec``). When horovodrun
gets a stop signal, each middleman, as published,

- sends SIGTERM to the shell's children, kills whatever is left 5 s later,
  then stops the shell (SIGSTOP), signals it and waits for it from a second
  thread while its main thread waits for the same shell. Whichever thread
  reaps the shell first reads its status; when it is the second one, the
  main thread's wait fails and Python's ``subprocess`` reports status 0. So
  horovodrun could exit 0 after a SIGTERM, and a scheduler that requeues a
  job on a non-zero status would take the preempted run for a finished one;
- gives a worker 5 s to finish its step and save: a larger model is killed
  while it saves, and the stop is lost;
- where ``/bin/sh`` runs its command in place (bash does), finds the worker
  to be the shell itself and stops it with SIGSTOP before the SIGTERM can be
  handled: the worker never saves.

:func:`patch_middleman` replaces the middleman's stop with
:func:`stop_worker`: SIGTERM to the worker, up to :data:`STOP_GRACE_SECONDS`
to save and exit, SIGKILL for whatever is left, and no wait on the shell, so
the middleman's main thread reads the worker's own status. :func:`run`
records the signal horovodrun got: a second one reaches every worker on this
machine at once (run.py then exits without saving, as it does on a second
signal; a worker on another host stays Horovod's, ended through ssh), and a job
that a signal stopped exits 128 + the signal number (143, 130) with one line,
as run.py and ``run.py --num_workers`` do. ``scripts/horovodrun.py`` applies
both; ``scripts/setup.sh`` makes it the environment's ``horovodrun``.
"""

import signal
import sys
import threading
import time

import psutil

from core.signals import STOP_SIGNALS
from core.signals import STOP_STATUSES
from core.signals import exit_status

# How long a worker has to finish its step, save and exit after horovodrun forwards a stop signal.
STOP_GRACE_SECONDS = 60.0
_SHELL = '/bin/sh'  # what subprocess.Popen(..., shell=True) runs


def _worker_processes(shell):
  """The processes that run the worker's command under the middleman's shell."""
  try:
    cmdline = shell.cmdline()
    children = shell.children()
  except psutil.NoSuchProcess:
    return []
  if cmdline[:2] == [_SHELL, '-c'] and children:
    return children
  return [shell]  # the shell ran the command in place, or has not started it yet


def _running(proc):
  """Whether ``proc`` still runs. Reads /proc only: psutil's wait would reap a child of ours."""
  try:
    return proc.status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


def stop_worker(shell_pid, grace=None):
  """Stops the worker under ``shell_pid``: SIGTERM, ``grace`` seconds, then SIGKILL.

  Never waits on the shell, nor on the worker when the shell ran it in
  place: that process is the middleman's child, and its status is for the
  middleman's main thread to read.
  """
  grace = STOP_GRACE_SECONDS if grace is None else grace
  try:
    shell = psutil.Process(shell_pid)
  except psutil.NoSuchProcess:
    return
  workers = _worker_processes(shell)
  for proc in workers:
    try:
      proc.terminate()
    except psutil.NoSuchProcess:
      pass
  deadline = time.monotonic() + grace
  alive = [proc for proc in workers if _running(proc)]
  while alive and time.monotonic() < deadline:
    time.sleep(0.1)
    alive = [proc for proc in alive if _running(proc)]
  for proc in alive:
    try:
      for child in proc.children(recursive=True):
        child.kill()
      proc.kill()
    except psutil.NoSuchProcess:
      pass


def patch_middleman():
  """Makes Horovod's middleman stop its worker with :func:`stop_worker`.

  It must run in the middleman process itself, which Horovod starts with
  multiprocessing's 'spawn': ``scripts/horovodrun.py`` calls it when the
  file is imported, which 'spawn' does again in the middleman before it
  starts.
  """
  # pylint: disable=import-outside-toplevel
  from horovod.runner.common.util import safe_shell_exec
  safe_shell_exec.terminate_executor_shell_and_children = stop_worker


class _Signals:
  """The stop signals horovodrun got; the first one sets Horovod's shutdown event."""

  def __init__(self):
    self.received = []
    self.event = threading.Event()

  def register(self):
    """Horovod's ``register_shutdown_event``: installs the handlers, returns the event."""
    for signum in STOP_SIGNALS:
      signal.signal(signum, self._handle)
    return self.event

  def _handle(self, signum, frame):
    del frame
    self.received.append(signum)
    self.event.set()
    if len(self.received) > 1:
      _signal_workers(signum)


def _signal_workers(signum):
  """Sends ``signum`` to the workers started here (on this machine: they carry HOROVOD_RANK)."""
  for proc in psutil.Process().children(recursive=True):
    try:
      if 'HOROVOD_RANK' in proc.environ():
        proc.send_signal(signum)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
      pass


def _recording(statuses, exec_command_fn):
  """Horovod's ``_exec_command_fn``, recording each worker's (exit status, end time) by rank."""

  def make(settings):
    exec_command = exec_command_fn(settings)

    def run_worker(command, slot_info, events):
      status, ended = exec_command(command, slot_info, events)
      statuses[slot_info.rank] = (status, ended)
      return status, ended

    return run_worker

  return make


def job_status(signals, statuses):
  """The job's exit status and the line that says why, after Horovod found a worker non-zero.

  ``signals``: the stop signals horovodrun got; ``statuses``: rank -> (status, end time).
  """
  failed = sorted((ended, rank, status) for rank, (status, ended) in statuses.items() if status)
  if signals:
    name, status = signal.Signals(signals[0]).name, exit_status(signals[0])
    return status, f'horovodrun: stopped by {name}; every worker has ended (exit status {status})'
  if all(status in STOP_STATUSES for _, _, status in failed):
    status = failed[0][2]
    return status, (f'horovodrun: worker {failed[0][1]} was stopped by '
                    f'{STOP_STATUSES[status]}; every worker has ended (exit status {status})')
  _, rank, status = next(f for f in failed if f[2] not in STOP_STATUSES)
  return status, (f'horovodrun: worker {rank} of {len(statuses)} exited with status {status}; '
                  'the others were ended')


def run():
  """Runs Horovod's command line; returns the exit status of the job."""
  # pylint: disable=import-outside-toplevel
  from horovod.runner import gloo_run
  from horovod.runner.launch import run_commandline
  signals = _Signals()
  statuses = {}
  gloo_run.register_shutdown_event = signals.register
  # pylint: disable-next=protected-access
  gloo_run._exec_command_fn = _recording(statuses, gloo_run._exec_command_fn)
  try:
    run_commandline()
  except RuntimeError:
    if not any(status for status, _ in statuses.values()):
      raise
    status, line = job_status(signals.received, statuses)
    print(line, file=sys.stderr, flush=True)
    return status
  return 0
