"""Child processes for the tests, with a deadline on every wait that holds when a child is silent.

A test that acts on a line a child prints (a step reached, a point started)
must not read the child's pipe itself: ``for line in proc.stdout`` blocks for
ever when the child hangs without printing. A ``Child`` reads its pipes on
threads of its own, so every wait is a queue get, a ``wait`` or a thread join,
each with a timeout; leaving its ``with`` block kills it if it still runs.
"""

import os
import queue
import signal
import subprocess
import threading
import time

# How long a killed child may take to be reaped (it cannot catch SIGKILL).
KILL_SECONDS = 30


class ChildTimeout(AssertionError):
  """A child printed no awaited line, or did not end, within its deadline."""


class Child(subprocess.Popen):
  """``subprocess.Popen`` of a command whose stdout is read line by line with deadlines.

  stdout is always a pipe of text lines; stderr is a second pipe unless
  ``stderr=subprocess.STDOUT`` is given. Use it as a context manager: at the
  end of the block a child still running is killed with SIGKILL (its whole
  process group when started with ``start_new_session=True``, as horovodrun and
  its workers are) and reaped, with a deadline.
  """

  def __init__(self, args, *, stderr=subprocess.PIPE, **kwargs):
    super().__init__(args, stdout=subprocess.PIPE, stderr=stderr, text=True, **kwargs)
    self._group = bool(kwargs.get('start_new_session'))
    self._lines = queue.Queue()  # stdout lines not yet handed out; None once stdout ends
    self._stderr = []
    self._readers = [threading.Thread(target=self._pump, args=(self.stdout, self._lines.put),
                                      daemon=True)]
    if self.stderr is not None:
      self._readers.append(threading.Thread(target=self._pump,
                                            args=(self.stderr, self._stderr.append), daemon=True))
    for reader in self._readers:
      reader.start()

  @staticmethod
  def _pump(stream, put):
    for line in stream:
      put(line)
    put(None)

  def stderr_text(self):
    """What the child wrote to stderr so far (empty when stderr goes to stdout)."""
    return ''.join(line for line in list(self._stderr) if line is not None)

  def wait_for_line(self, wanted, timeout):
    """Reads stdout up to the first line for which ``wanted(line)`` is true.

    Args:
      wanted: a predicate on one line (with its newline).
      timeout: seconds from now; the deadline holds when the child prints nothing.

    Returns:
      The lines read, the wanted one last. Lines after it are left for the next
      call or for ``communicate``.

    Raises:
      ChildTimeout: no such line within ``timeout`` seconds, or stdout ended first;
        the message holds what the child printed.
    """
    deadline = time.monotonic() + timeout
    lines = []
    while True:
      try:
        line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
      except queue.Empty:
        raise ChildTimeout(f'{self.args[0]}: no awaited line within {timeout} s; it printed:\n'
                           f'{"".join(lines)}\n{self.stderr_text()}') from None
      if line is None:
        self._lines.put(None)  # stdout stays ended for the next reader
        raise ChildTimeout(f'{self.args[0]} ended its output before the awaited line:\n'
                           f'{"".join(lines)}\n{self.stderr_text()}')
      lines.append(line)
      if wanted(line):
        return lines

  def communicate(self, input=None, timeout=None):  # pylint: disable=redefined-builtin
    """Waits for the child to end; returns (stdout not yet read, stderr or None).

    Unlike ``Popen.communicate`` a timeout is required, and the child's output
    is waited for with that same deadline (a grandchild may hold the pipes open).

    Raises:
      subprocess.TimeoutExpired: the child or its output did not end in time.
    """
    if input is not None or timeout is None:
      raise TypeError('Child.communicate takes no input and needs a timeout')
    deadline = time.monotonic() + timeout
    self.wait(timeout=timeout)
    for reader in self._readers:
      reader.join(timeout=max(0.0, deadline - time.monotonic()))
      if reader.is_alive():
        raise subprocess.TimeoutExpired(self.args, timeout)
    rest = []
    while True:
      line = self._lines.get_nowait()
      if line is None:
        break
      rest.append(line)
    self._lines.put(None)
    return ''.join(rest), (self.stderr_text() if self.stderr is not None else None)

  def kill_all(self):
    """SIGKILL to the child, or to its whole process group when it has one of its own.

    The group is killed even when the child itself has ended: horovodrun's
    workers can outlive it.
    """
    if self._group:
      try:
        os.killpg(self.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass  # no process of the group is left
    elif self.poll() is None:
      self.kill()

  def __exit__(self, *exc_info):
    self.kill_all()
    self.wait(timeout=KILL_SECONDS)
    for reader in self._readers:
      reader.join(timeout=KILL_SECONDS)
    self.stdout.close()
    if self.stderr is not None:
      self.stderr.close()
