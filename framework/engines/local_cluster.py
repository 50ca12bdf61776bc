"""``run.py --num_workers=N``: N workers of one run on this machine, under TF_CONFIG.

The launcher starts N copies of the same command, each with a ``TF_CONFIG``
naming N free localhost ports and its own index, so each selects the
``multi_worker_mirrored`` engine as under any other launcher. It

- shares the machine's cores among the workers (TensorFlow's thread pools and
  OpenMP, unless the environment sets them), and gives worker i GPU i when
  ``nvidia-smi`` lists at least N GPUs and ``CUDA_VISIBLE_DEVICES`` is not set;
- forwards SIGINT and SIGTERM to every worker, which stop together at the same
  step, save once and exit 128 + the signal; so does the launcher (a worker
  that the forwarded signal ended as Python started counts as stopped);
- ends the others when one worker fails or dies, and exits with that worker's
  status (1 for a worker killed by a signal it did not get from here), so a
  dead worker never leaves the job hanging;
- has its own death end the workers (Linux): each worker is started with
  ``PR_SET_PDEATHSIG`` set to SIGTERM, so a launcher killed by SIGKILL (or
  an OOM kill) stops them as any preemption does (they save and exit 143)
  instead of leaving them training unseen, holding the run's lock.

No TensorFlow is imported here: the workers start it themselves.
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from core import signals
from core.signals import STOP_SIGNALS
from core.signals import STOP_STATUSES
from core.signals import exit_status

# How long the others get to stop by themselves after one worker failed, before SIGKILL.
GRACE_SECONDS = 10.0
_THREAD_VARIABLES = ('TF_NUM_INTRAOP_THREADS', 'OMP_NUM_THREADS')


def free_ports(count):
  """``count`` distinct ports that are free on localhost now."""
  sockets = []
  try:
    for _ in range(count):
      s = socket.socket()
      s.bind(('127.0.0.1', 0))
      sockets.append(s)
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def gpu_count():
  """The GPUs ``nvidia-smi`` lists on this machine (0 without it)."""
  if shutil.which('nvidia-smi') is None:
    return 0
  try:
    listing = subprocess.run(['nvidia-smi', '--list-gpus'], capture_output=True, text=True,
                             timeout=60, check=True).stdout
  except (OSError, subprocess.SubprocessError):
    return 0
  return sum(1 for line in listing.splitlines() if line.startswith('GPU '))


def available_cores():
  """The CPU cores this process may run on (its affinity; all of them where that is not known)."""
  try:
    return len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    return os.cpu_count() or 1


def most_workers(gpus=None, cores=None):
  """The most workers ``--num_workers`` starts here, with what bounds it in words.

  Every worker is a whole TensorFlow process with its own copy of the model
  and its data; on one machine they are useful up to one per GPU, or without
  GPUs one per core (beyond that they only take turns on the same cores, and
  each adds its memory).

  Returns:
    ``(count, 'N GPUs' or 'N CPU cores')``.
  """
  gpus = gpu_count() if gpus is None else gpus
  if gpus:
    return gpus, f'{gpus} GPU{"s" if gpus > 1 else ""}'
  cores = available_cores() if cores is None else cores
  return cores, f'{cores} CPU core{"s" if cores > 1 else ""}'


def worker_environments(count, environ=None, ports=None, gpus=None):
  """The environments of ``count`` local workers: TF_CONFIG, their share of the cores and GPUs.

  Args:
    gpus: the machine's GPUs (default: :func:`gpu_count`); with at least
      ``count`` of them, worker i sees GPU i alone.
  """
  environ = dict(os.environ if environ is None else environ)
  ports = ports or free_ports(count)
  gpus = gpu_count() if gpus is None else gpus
  cluster = {'worker': [f'localhost:{p}' for p in ports]}
  threads = str(max(1, (os.cpu_count() or 1) // count))
  result = []
  for index in range(count):
    env = dict(environ)
    env['TF_CONFIG'] = json.dumps({'cluster': cluster, 'task': {'type': 'worker', 'index': index}})
    # run.py names --num_workers in the command that resumes the run.
    env['LARGEBATCH_NUM_WORKERS'] = str(count)
    for name in _THREAD_VARIABLES:
      env.setdefault(name, threads)
    env.setdefault('TF_NUM_INTEROP_THREADS', '1' if count > 1 else threads)
    if gpus >= count and 'CUDA_VISIBLE_DEVICES' not in environ:
      env['CUDA_VISIBLE_DEVICES'] = str(index)  # one process per GPU
    result.append(env)
  return result


def without_flag(argv, flag):
  """``argv`` without ``--flag=V`` or ``--flag V``."""
  result, skip = [], False
  for arg in argv:
    if skip:
      skip = False
      continue
    if arg == flag:
      skip = True
      continue
    if arg.startswith(flag + '='):
      continue
    result.append(arg)
  return result


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _libc_prctl():
  """libc's ``prctl``, or None off Linux (or without a C library to load)."""
  if not sys.platform.startswith('linux'):
    return None
  try:
    return ctypes.CDLL(None, use_errno=True).prctl
  except (OSError, AttributeError):
    return None


def ends_with_parent(signum=signal.SIGTERM):
  """A ``preexec_fn`` that has the child get ``signum`` when the process starting it dies.

  The setting is made in the forked child before its exec and is kept across
  exec (and across run.py's own re-exec under tcmalloc, the same process);
  it is cleared only for a set-user-id program. None where there is no
  ``prctl`` (there the workers outlive a killed launcher).
  """
  prctl = _libc_prctl()  # loaded here: the forked child only calls it
  if prctl is None:
    return None
  parent = os.getpid()
  # The fork copies this process's Python handler of the signal (the launcher's
  # forwarding): one arriving before the exec would run it in the child and be
  # lost. The default ends the child, which had not started anything.
  reset = threading.current_thread() is threading.main_thread()

  def preexec():
    if reset:
      signal.signal(signum, signal.SIG_DFL)
    prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    if os.getppid() != parent:  # the launcher died between the fork and the prctl
      os._exit(128 + int(signum))  # pylint: disable=protected-access

  return preexec


class LocalCluster:
  """N worker processes of one command; :meth:`wait` returns the job's exit status."""

  def __init__(self, command, count, environ=None, start=True):
    self.processes = []
    self.forwarded = None  # the signal forwarded to the workers, if any
    self._command, self._environments = command, worker_environments(count, environ)
    if start:
      self.start()

  def start(self):
    """Starts the workers; none after a stop signal was forwarded (they would start for nothing)."""
    for env in self._environments:
      if self.forwarded is not None:
        break
      # The main thread starts them: the death signal follows the thread that forked.
      self.processes.append(subprocess.Popen(self._command, env=env,
                                             preexec_fn=ends_with_parent()))

  def forward(self, signum, frame=None):
    """Passes a stop signal on to every worker still running (a second one too)."""
    del frame
    self.forwarded = signum
    for proc in self.processes:
      if proc.poll() is None:
        proc.send_signal(signum)

  def _end_others(self):
    for proc in self.processes:
      if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline and any(p.poll() is None for p in self.processes):
      time.sleep(0.1)
    for proc in self.processes:
      if proc.poll() is None:
        proc.kill()
        proc.wait()

  def wait(self):
    """Waits for every worker; ends the rest when one fails. Returns the job's exit status.

    A worker that exits 128 + a stop signal stopped cleanly (a signal reached
    it, the workers agreed on the step and the chief saved): the others are
    stopping too and are waited for, not interrupted while the chief saves.
    """
    while True:
      statuses = [p.poll() for p in self.processes]
      done = [s for s in statuses if s is not None]
      # A worker the forwarded signal ended before its handlers were installed (as
      # Python starts) had not started anything: it stopped as the others do.
      statuses = [exit_status(self.forwarded)
                  if self.forwarded is not None and s == -self.forwarded else s
                  for s in statuses]
      failed = [(i, s) for i, s in enumerate(statuses)
                if s not in (None, 0) and s not in STOP_STATUSES]
      if failed:
        index, status = failed[0]
        print(f'error: worker {index} of {len(self.processes)} '
              f'{_describe(status)}; ending the others', file=sys.stderr, flush=True)
        self._end_others()
        return status if status > 0 else 1
      if len(done) == len(statuses):
        stopped = [s for s in done if s in STOP_STATUSES]
        if stopped:
          return stopped[0]
        return exit_status(self.forwarded) if self.forwarded is not None and any(done) else 0
      time.sleep(0.1)


def _describe(status):
  if status < 0:
    return f'was killed by {signal.Signals(-status).name}'
  return f'exited with status {status}'


def run(command, count):
  """Runs ``command`` as ``count`` local workers, forwarding SIGINT/SIGTERM; returns the status.

  The forwarding starts before the first worker does, so that no signal finds
  a worker started and the launcher without its handler.
  """
  cluster = LocalCluster(command, count, start=False)
  previous = {s: signal.signal(s, cluster.forward) for s in STOP_SIGNALS}
  try:
    cluster.start()
    return cluster.wait()
  finally:
    # The job has ended with its status: a repeat of a stop is ignored from here on
    # (core.signals' handler, which run.py installed), not taken for a new one.
    signals.ending()
    for s, handler in previous.items():
      signal.signal(s, handler)
    for proc in cluster.processes:
      if proc.poll() is None:
        proc.kill()
        proc.wait()


def slurm_tasks(environ=None):
  """The number of tasks of this Slurm job step, or 0 outside Slurm."""
  environ = os.environ if environ is None else environ
  if 'SLURM_PROCID' not in environ:
    return 0
  for name in ('SLURM_STEP_NUM_TASKS', 'SLURM_NTASKS'):
    if environ.get(name, '').isdigit():
      return int(environ[name])
  return 1
