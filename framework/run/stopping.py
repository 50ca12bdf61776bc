"""Stopping a run cleanly on SIGTERM or SIGINT (preemption, Ctrl-C).

The first signal asks the trainer to stop after the current step: it saves a
checkpoint, writes its summaries and exits with ``128 + signal number`` (143
for SIGTERM, 130 for SIGINT, as a shell reports a process the signal ended).
A second signal exits at once, without saving, with status 1 and the line
``error: stopped by a second SIGTERM before the checkpoint was saved; kept:
<the latest checkpoint>`` (143 and 130 always mean a checkpoint of the stop
was saved); but the same signal again within :data:`REPEAT_SECONDS` of the
first is that first stop delivered twice and changes nothing: a scheduler
(Slurm's time limit, ``scancel``) or a terminal's Ctrl-C signals every
process of a job, and the launcher (horovodrun,
``run.py --num_workers``, ``scripts/sweep.py``) forwards what it got, so each
worker gets the stop twice within milliseconds. Under Horovod the workers agree
on the step to stop at (:meth:`StopRequest.agreed`), so a signal to any one
worker stops all of them at the same step and rank 0 saves once.

The trainer reports a stop that was saved by raising :class:`RunStopped`,
which run.py turns into the exit status and the resume command. Before the
handlers are installed and after they are uninstalled, ``core.signals`` (set
up by run.py) answers the stop signals: at start-up one ends the process in one
line, nothing having run; once the run has ended, one is ignored.
"""

import os
import signal
import time

from core.signals import STOP_SIGNALS as SIGNALS
from core.signals import exit_status
from framework.engines import distributed

# A repeat of the first signal this soon after it is the same stop, delivered twice.
REPEAT_SECONDS = 2.0


class RunStopped(Exception):
  """Training stopped on a signal after saving; ``checkpoint`` is the saved path (chief)."""

  def __init__(self, signum, step, checkpoint):
    super().__init__(f'stopped at step {step}')
    self.signum = signum
    self.step = step
    self.checkpoint = checkpoint


class StopRequested(Exception):
  """A signal came during work that stops at once rather than after a step (precise_bn).

  The train loop answers it as it answers a signal between steps: it saves
  and raises :class:`RunStopped`.
  """

  def __init__(self, signum):
    super().__init__(f'stop requested by signal {signum}')
    self.signum = signum


def until_stopped(items, stop):
  """Yields ``items``, asking ``stop`` (every worker) before each one.

  Args:
    items: an iterable (the batches of work that stops at once, precise_bn).
    stop: a :class:`StopRequest`, or None.

  Raises:
    StopRequested: a signal came (on any worker) before an item.
  """
  for item in items:
    signum = stop.agreed() if stop is not None else 0
    if signum:
      raise StopRequested(signum)
    yield item


class StopRequest:
  """Records the first SIGTERM/SIGINT; a second one ends the process at once.

  Args:
    logdir: the run directory, whose latest checkpoint the line of a second
      signal names as kept.
  """

  # The exit status of a process that a second signal ended before the stop was saved.
  UNSAVED_STATUS = 1

  def __init__(self, logdir=None):
    self.signum = None
    self.saved = None  # the checkpoint of the stop, once it is saved
    self._logdir = logdir
    self._first = None  # time.monotonic() of the first signal
    self._previous = {}

  def install(self):
    """Installs the handlers (main thread only); returns self."""
    for signum in SIGNALS:
      self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def take(self, signum):
    """Takes a stop signal that came before :meth:`install` as if it came now."""
    self._handle(signum, None)

  def uninstall(self):
    """Puts back the handlers found at :meth:`install`."""
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}

  @property
  def name(self):
    return signal.Signals(self.signum).name if self.signum is not None else None

  def _handle(self, signum, frame):
    del frame
    name = signal.Signals(signum).name
    now = time.monotonic()
    if self.signum == signum and now - self._first < REPEAT_SECONDS:
      return  # the first stop again, from the launcher or the scheduler
    if self.signum is not None and self.saved is not None:
      return  # the stop is saved and the process is ending with its status
    if self.signum is not None:
      # 143 and 130 say the stop was saved: a process ended unsaved says so otherwise.
      if distributed.is_chief():
        os.write(2, f'error: stopped by a second {name} before the checkpoint was saved; '
                    f'kept: {self._kept()}\n'.encode())
      # os._exit: safe whatever the main thread was doing.
      os._exit(self.UNSAVED_STATUS)  # pylint: disable=protected-access
    self.signum = signum
    self._first = now
    if distributed.is_chief():
      os.write(2, f'{name} received: stopping after the current step and saving a checkpoint '
                  f'(send it again to exit at once)\n'.encode())

  def _kept(self):
    """The latest checkpoint the logdir's state file names, in words."""
    if self._logdir is None:
      return 'the checkpoints saved before'
    from framework.run import checkpoints  # pylint: disable=import-outside-toplevel
    return checkpoints.latest_listed(self._logdir) or 'no checkpoint'

  def agreed(self):
    """The signal number any worker received, or 0 (a collective: every worker calls it).

    A signal to one worker stops them all at the same step.
    """
    return distributed.max_over_workers(self.signum or 0)
