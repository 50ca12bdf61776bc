"""The run's record: ``metrics.jsonl`` in its run directory, the interface for programs.

The console's lines are for people; sweeps, studies and reports read this. One
JSON object per line, in the order things happened, each with ``kind``,
``step`` (the run's step: examples over the starting global batch) and
``time`` (seconds since the epoch); docs/running.md lists every field:

- ``start``: training starts (again, for a resumed run) at ``step``, with the
  task's own metric (``metric``, which more is better of: ``higher_is_better``);
- ``train``: every ``print_loss_steps`` steps, the step's loss, metrics, rate;
- ``batch``: a batch policy changed the global batch;
- ``eval``: an evaluation (``split``, the metrics);
- ``final``: the run's final numbers (the last evaluation, or the best
  checkpoint's on the final split), as its ``final ...`` line gives them;
- ``end``: training ended at ``step``, with its updates and noise scale;
- ``stop``: a signal stopped training at ``step`` after saving ``checkpoint``.

A resumed run goes on from its checkpoint's step as if it had run straight
through: the events after that step, and an earlier ``final`` and ``end``,
and a ``stop``, are dropped when it starts. Only the chief writes. Values that are not finite
numbers are written as null (JSON has no NaN), so ``pandas.read_json(path,
lines=True)`` reads the file. Nothing here imports TensorFlow.
"""

import json
import math
import numbers
import os
import time

from core import files

RECORD_NAME = 'metrics.jsonl'
# The events of an attempt's end, dropped from the record when the next attempt starts: a
# resumed run writes its own end, and a run straight through has no stop.
ENDING_KINDS = ('final', 'end', 'stop')


def plain(value):
  """A value as JSON holds it: numbers as int or float (null when not finite), the rest as given."""
  if isinstance(value, bool) or value is None or isinstance(value, str):
    return value
  if isinstance(value, numbers.Integral):
    return int(value)
  if hasattr(value, 'dtype') and getattr(value, 'ndim', 1) == 0 and isinstance(value,
                                                                             numbers.Real):
    # A numpy float32 (a step's loss) by its shortest repr, 0.05 and not 0.05000000074505806.
    value = float(str(value))
    return value if math.isfinite(value) else None
  if isinstance(value, numbers.Real):
    value = float(value)
    return value if math.isfinite(value) else None
  if isinstance(value, dict):
    return {str(k): plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [plain(v) for v in value]
  if hasattr(value, 'item'):  # a numpy scalar
    return plain(value.item())
  return str(value)


def read(logdir):
  """The record's events, in order (``[]`` when the run wrote none); a torn last line is left out."""
  path = os.path.join(logdir, RECORD_NAME)
  try:
    with open(path, encoding='utf-8') as f:
      lines = f.read().splitlines()
  except OSError:
    return []
  events = []
  for line in lines:
    try:
      events.append(json.loads(line))
    except ValueError:
      continue  # the line a killed run was writing
  return events


def last(events, kind):
  """The last event of ``kind``, or None."""
  return next((e for e in reversed(events) if e.get('kind') == kind), None)


def last_attempt(events):
  """The events from the last ``start`` on: what the latest attempt wrote ([] without a start)."""
  starts = [i for i, e in enumerate(events) if e.get('kind') == 'start']
  return events[starts[-1]:] if starts else []


class Record:
  """Appends a run's events to its ``metrics.jsonl`` (see the module docstring).

  Args:
    logdir: the run directory.
    enabled: whether this process writes (the chief of a run that trains).
    start_step: the step training starts at: later events of an earlier
      attempt are dropped, and its ``final``, ``end`` and ``stop``.
  """

  def __init__(self, logdir, enabled, start_step):
    self.path = os.path.join(logdir, RECORD_NAME)
    self.enabled = enabled
    if not enabled:
      return
    os.makedirs(logdir, exist_ok=True)  # a critical batch's branch starts in a new directory
    kept = [e for e in read(logdir)
            if e.get('step', 0) <= start_step and e.get('kind') not in ENDING_KINDS]
    files.write_text_atomically(self.path, ''.join(json.dumps(e) + '\n' for e in kept))

  def add(self, kind, step, **fields):
    """Appends one event (``kind``, ``step``, ``time`` and ``fields``), flushed at once."""
    if not self.enabled:
      return
    event = {'kind': kind, 'step': int(step), 'time': round(time.time(), 3),
             **{k: plain(v) for k, v in fields.items()}}
    with open(self.path, 'a', encoding='utf-8') as f:
      f.write(json.dumps(event) + '\n')
