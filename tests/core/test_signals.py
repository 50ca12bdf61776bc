"""The start-up answer to stop signals (core.signals), sent to this process for real."""

import os
import signal

import pytest

from core import signals


@pytest.fixture
def guarded():
  previous = signals.guard_start()
  yield
  signals.take_pending()
  signals.restore(previous)


def test_a_stop_at_start_up_ends_it_in_one_line(guarded):  # pylint: disable=unused-argument
  with pytest.raises(signals.StartupStopped) as stopped:
    os.kill(os.getpid(), signal.SIGTERM)
    signal.sigtimedwait([], 0)  # a point where Python runs the handler
  assert stopped.value.status == 143
  assert stopped.value.line() == ('stopped by SIGTERM during start-up: no step had run, '
                                  'nothing was lost')


def test_a_started_cluster_keeps_the_first_stop_for_the_run(guarded):  # pylint: disable=unused-argument
  signals.defer_stops()
  os.kill(os.getpid(), signal.SIGINT)
  os.kill(os.getpid(), signal.SIGTERM)  # a second one: the first is what the run takes
  assert signals.take_pending() == signal.SIGINT
  # The deferral ends with it: the next signal ends the start-up again.
  assert signals.take_pending() is None
  with pytest.raises(signals.StartupStopped) as stopped:
    signals.replay(signal.SIGTERM)
  assert stopped.value.status == 143


def test_nothing_is_kept_when_no_signal_came(guarded):  # pylint: disable=unused-argument
  signals.defer_stops()
  assert signals.take_pending() is None
