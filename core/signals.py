"""The signals that stop a run or a sweep cleanly, and the exit status they leave.

SIGTERM (preemption, a scheduler, ``kill``) and SIGINT (Ctrl-C) both stop
cleanly; a process so stopped exits with ``128 + signal number`` (143, 130),
as a shell reports a process the signal ended. ``framework.run.stopping`` (a
training run) and ``scripts/sweep.py`` (a sweep of runs) both follow this;
it lives here because the sweep must not load TensorFlow to know it.

run.py's answer to a stop signal outside training lives here too (it comes
before TensorFlow is loaded): from its parsed flags until the trainer installs
its handler, a signal raises :class:`StartupStopped` (one line, 128 + the
signal: nothing had run); after the run has ended, it is ignored.
"""

import contextlib
import signal
import threading

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_status(signum):
  """The documented exit status of a process stopped by ``signum``."""
  return 128 + int(signum)


# The exit status of a process that a stop signal stopped cleanly, and the signal's name:
# {143: 'SIGTERM', 130: 'SIGINT'}.
STOP_STATUSES = {exit_status(s): signal.Signals(s).name for s in STOP_SIGNALS}


class StartupStopped(BaseException):
  """A stop signal came before training could save anything: the process ends at once.

  A ``BaseException``, like ``KeyboardInterrupt``, so that no ``except
  Exception`` of the code it interrupts takes it for an error of its own.

  Attributes:
    signum: the signal.
    during: where it came, in words ('during start-up', 'while waiting for ...').
    outcome: what that means for the run, in words.
  """

  def __init__(self, signum, during, outcome):
    super().__init__(f'stopped by signal {signum} {during}')
    self.signum = signum
    self.during = during
    self.outcome = outcome

  @property
  def status(self):
    return exit_status(self.signum)

  def line(self):
    """The one line a process stopped so prints."""
    return f'stopped by {signal.Signals(self.signum).name} {self.during}: {self.outcome}'


# Before a run's own handler (framework.run.stopping.StopRequest) is installed, a stop
# signal raises StartupStopped; once the run has ended (finished, saved or failed)
# it is ignored, since the process is already ending with its status. The state
# is read by the one handler, so moving from one phase to the next leaves no gap
# in which a signal finds no handler or the wrong one.
_NOTHING_LOST = 'no step had run, nothing was lost'
_phase = {'ending': False, 'during': 'during start-up', 'outcome': _NOTHING_LOST,
          'defer': False, 'pending': None}


def _on_stop_signal(signum, frame):
  del frame
  if _phase['ending']:
    return
  if _phase['defer']:
    if _phase['pending'] is None:
      _phase['pending'] = signum  # for the run's own handler (see defer_stops)
    return
  raise StartupStopped(signum, _phase['during'], _phase['outcome'])


def guard_start():
  """Installs the start-up handler of SIGTERM and SIGINT (main thread); returns the previous ones.

  From here on a stop signal is never fatal unhandled: it raises
  :class:`StartupStopped` until the run's own handler takes over, and is
  ignored after :func:`ending`.
  """
  _phase.update(ending=False, during='during start-up', outcome=_NOTHING_LOST, defer=False,
                pending=None)
  return {s: signal.signal(s, _on_stop_signal) for s in STOP_SIGNALS}


def restore(previous):
  """Puts back handlers returned by :func:`guard_start`."""
  for signum, handler in previous.items():
    signal.signal(signum, handler)


def ending():
  """The run has ended with its status: a stop signal from now on is ignored."""
  _phase['ending'] = True


def defer_stops():
  """Keeps a stop signal for the run's own handler instead of ending the process at once.

  For the workers of a cluster that has started: one that ended in its
  start-up would leave the others waiting for it in their first collective,
  where they fail; kept, the stop reaches the trainer's handler
  (:func:`take_pending`), and every worker stops at the same step and saves.
  """
  _phase['defer'] = True


def take_pending():
  """Ends :func:`defer_stops`; returns the stop signal that came meanwhile, or None."""
  signum = _phase['pending']
  _phase.update(defer=False, pending=None)
  return signum


def replay(signum):
  """Answers ``signum`` now as the start-up handler does (raises :class:`StartupStopped`)."""
  _on_stop_signal(signum, None)


def describe_phase(during, outcome=_NOTHING_LOST):
  """Says where a stop signal lands from now on, for the line :class:`StartupStopped` prints."""
  _phase.update(during=during, outcome=outcome)


@contextlib.contextmanager
def stop_raises(during):
  """In the block a stop signal raises :class:`StartupStopped` naming ``during``.

  Used for waits in Python before training can save anything (the workers'
  rendezvous): outside run.py, whose :func:`guard_start` covers them too, the
  handler is installed for the block alone. Off the main thread, nothing is
  installed (Python runs handlers there only).
  """
  saved = dict(_phase)
  _phase.update(ending=False, during=during, outcome=_NOTHING_LOST)
  previous = {}
  if threading.current_thread() is threading.main_thread():
    previous = {s: signal.signal(s, _on_stop_signal) for s in STOP_SIGNALS}
  try:
    yield
  finally:
    restore(previous)
    _phase.update(saved)
