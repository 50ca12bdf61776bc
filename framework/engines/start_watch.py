"""Deadlines and stop signals around TensorFlow's own start-up of a multi-worker cluster.

``tf.distribute.MultiWorkerMirroredStrategy`` connects the workers in native
code that holds Python's interpreter lock until every task has met: no Python
thread, deadline or signal handler runs meanwhile. The rendezvous before it
(``framework.engines.distributed.rendezvous``) makes sure every peer is there, but a
peer that answers it and dies in the second before the start-ups meet would
leave this worker in that wait for ever. Two pieces close the gaps:

* :class:`StartWatchdog`: a small child process, started just before the
  native call, that waits on a pipe. The parent closes the pipe when the
  call returns (or dies, which closes it too) and the watchdog exits quietly;
  if ``timeout_seconds`` pass first, it prints one line and ends the parent
  with SIGKILL, the one signal the native wait cannot ignore (status 137).
* :func:`forward_taken_sigterm`: during the start-up TensorFlow installs a
  native SIGTERM handler of its own (its preemption notifier), which records
  the signal in the cluster's key-value store instead of ending the process.
  After Python's handlers are back, a short-lived thread waits for that record
  and sends SIGTERM again, to Python's handler, so a stop that landed in the
  start-up stops the run as any other does. The record is the cluster's, so
  every worker sees it, each at its own moment; each sends its SIGTERM only
  once its run's stop handler is in place (:func:`stop_handlers_ready`), so
  that all of them stop training at the same step and save, rather than one
  ending in its start-up while another waits for it in its first step.
"""

import os
import signal
import subprocess
import sys
import threading

# The key TensorFlow's preemption notifier sets when it takes a SIGTERM.
PREEMPTION_KEY = 'TF_DEFAULT_PREEMPTION_NOTICE_KEY'
# The notifier polls its flag once a second; its record is in the store soon after.
RECORD_WAIT_MS = 2500

# Set once the run's own stop handlers are installed (or the mode has none).
_HANDLERS_READY = threading.Event()

# The watchdog's program (run with -I -S: no site packages, nothing of the project).
_WATCHDOG = r'''
import os, select, signal, sys
parent, timeout, line = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if select.select([0], [], [], timeout)[0]:
  sys.exit(0)  # the start-up returned (the pipe closed), or the parent ended
sys.stderr.write(line + '\n')
sys.stderr.flush()
os.kill(parent, signal.SIGKILL)
'''


class StartWatchdog:
  """Ends this process with one line if the block it guards outlives ``timeout_seconds``.

  Use as a context manager around a call that cannot be interrupted from
  Python. ``timeout_seconds`` None guards nothing.

  Args:
    timeout_seconds: the deadline of the block.
    line: the line the watchdog prints on stderr before it ends this process.
  """

  def __init__(self, timeout_seconds, line):
    self.timeout_seconds = timeout_seconds
    self.line = line
    self._child = None

  def __enter__(self):
    if self.timeout_seconds is not None:
      self._child = subprocess.Popen(
          [sys.executable, '-I', '-S', '-c', _WATCHDOG, str(os.getpid()),
           str(float(self.timeout_seconds)), self.line],
          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True)
    return self

  def __exit__(self, *exc_info):
    if self._child is not None:
      self._child.stdin.close()  # the watchdog's select returns: it exits 0
      self._child.wait()
      self._child = None
    return False


def stop_handlers_ready():
  """Says that the run's stop handlers are installed: a taken SIGTERM may now be sent again."""
  _HANDLERS_READY.set()


def forward_taken_sigterm(get_key_value, pid=None, ready=None):
  """Starts a thread that re-sends a SIGTERM TensorFlow's start-up took (see the module docstring).

  Args:
    get_key_value: ``(key, timeout_in_ms) -> value`` of the cluster's
      key-value store (``context.context().get_config_key_value``); raises
      when the key is not set in time. It must not hold the interpreter lock
      while it waits (TensorFlow's does not).
    pid: the process to signal (this one by default).
    ready: the event to wait for before signalling (default: the one
      :func:`stop_handlers_ready` sets).

  Returns:
    The started daemon thread.
  """
  pid = os.getpid() if pid is None else pid
  ready = _HANDLERS_READY if ready is None else ready

  def wait_for_record():
    try:
      get_key_value(PREEMPTION_KEY, RECORD_WAIT_MS)
    except Exception:  # pylint: disable=broad-except  # not set in time: no SIGTERM was taken
      return
    ready.wait()
    os.kill(pid, signal.SIGTERM)

  thread = threading.Thread(target=wait_for_record, name='sigterm-forward', daemon=True)
  thread.start()
  return thread
