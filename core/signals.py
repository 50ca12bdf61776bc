"""The signals that stop a run or a sweep cleanly, and the exit status they leave.

SIGTERM (preemption, a scheduler, ``kill``) and SIGINT (Ctrl-C) both stop
cleanly; a process so stopped exits with ``128 + signal number`` (143, 130),
as a shell reports a process the signal ended. ``framework.stopping`` (a
training run) and ``scripts/sweep.py`` (a sweep of runs) both follow this;
it lives here because the sweep must not load TensorFlow to know it.
"""

import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_status(signum):
  """The documented exit status of a process stopped by ``signum``."""
  return 128 + int(signum)


# The exit status of a process that a stop signal stopped cleanly, and the signal's name:
# {143: 'SIGTERM', 130: 'SIGINT'}.
STOP_STATUSES = {exit_status(s): signal.Signals(s).name for s in STOP_SIGNALS}
