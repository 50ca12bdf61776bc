"""What a sweep point's run directory says: its run.log, result.json and error.txt.

run.log holds run.py's output, one section per attempt between the sweep's own
``[sweep] attempt N started/ended`` lines (framework.sweep.runner writes them).
The final metrics, the curve of evaluations and the seconds each took
(counting the time the point ran, not the time between attempts), whether the
run got to its end and where a signal stopped it, are read from the run's
record (``metrics.jsonl``, framework.run.record): the console's lines are for
people. The attempts come from the sweep's own lines. A run without a record
(a benchmark) has no metrics. Nothing here runs a process or imports
TensorFlow.
"""

import json
import os
import re

from framework.config.config_file import TRAINING_MODES
from framework.run import record
from framework.run import rundir

RESULT_FILE = 'result.json'
ERROR_FILE = 'error.txt'
LOG_FILE = rundir.SWEEP_LOG_NAME
# Every result holds these (None when run.py did not print them), and any other
# metric its lines name (a sequence model's wer, per, token_accuracy).
METRICS = ('accuracy', 'top5', 'loss', 'steps')
# Not a metric of the task: the gradient noise scale, in a result when its run measured it.
NOISE_SCALE = 'noise_scale'
# Not a metric either: the updates of a run whose batch grew (batch_policy), fewer than its steps.
UPDATES = 'updates'
# Either is in a result only when its run printed it.
RUN_FACTS = (NOISE_SCALE, UPDATES)

# Whether more is better, for each metric a run's record can name as its own (the
# ``start`` event's ``metric``): its task's BEST_METRIC and HIGHER_IS_BETTER
# (framework.tasks, which load TensorFlow; tests/framework/tasks/test_tasks.py holds the
# two equal). The report reads it for the curves of results written before the record
# named it.
HIGHER_IS_BETTER = {'accuracy': True, 'top5': True, 'token_accuracy': True,
                    'wer': False, 'per': False, 'ser': False, 'ter': False, 'loss': False}
# The sweep's own lines around each attempt in run.log.
ATTEMPT_RE = re.compile(r'^\[sweep\] attempt (\d+) started at (\S+) ')
ENDED_RE = re.compile(r'^\[sweep\] attempt (\d+) ended after (\S+) s with exit status (-?\d+)')
RESUMED_RE = re.compile(r'; resuming from ckpt-(\d+)$')


# The record's names (framework.run.record: the task's metric names) as results name them.
_RECORD_NAMES = {'top5_accuracy': 'top5'}


def record_metrics(events):
  """A result's metrics from a run's record (``metrics.jsonl``), or None without an end.

  The final event's metrics (the last evaluation's when there is none), the
  steps the run ended at, the noise scale where the run measured it
  (infinite while its |G|² estimate is not positive) and the updates where
  a batch policy ran. A run that wrote no ``end`` (a benchmark; a run stopped
  before its end) gives None, and its log is read instead.
  """
  end = record.last(events, 'end')
  if end is None:
    return None
  metrics = dict.fromkeys(METRICS)
  numbers = record.last(events, 'final') or record.last(events, 'eval')
  if numbers is not None:
    metrics.update({_RECORD_NAMES.get(name, name): value
                    for name, value in numbers['metrics'].items() if name != 'examples'})
  metrics['steps'] = end['step']
  status = end.get('noise_scale_status')
  if status == 'measured':
    metrics[NOISE_SCALE] = end['noise_scale']
  elif status == 'unbounded':
    metrics[NOISE_SCALE] = float('inf')
  start = record.last(events, 'start')
  if start is not None and start.get('batch_policy', 'fixed') != 'fixed':
    metrics[UPDATES] = end['updates']
  return metrics


def run_metrics(logdir):
  """The run's final metrics from its record; each None for a run whose record has no end.

  A benchmark writes no record, and a run from before the record has none.
  """
  metrics = record_metrics(record.read(logdir))
  return metrics if metrics is not None else dict.fromkeys(METRICS)


def run_curve_metric(logdir):
  """The run's own metric, which its curve follows: its record's (``accuracy``, ``wer``, ...).

  A record from before it named the metric gives ``wer`` where the evaluations
  hold it, else ``accuracy``.
  """
  events = record.read(logdir)
  start = record.last(events, 'start')
  if start is not None and start.get('metric'):
    return _RECORD_NAMES.get(start['metric'], start['metric'])
  numbers = [e['metrics'] for e in events if e['kind'] in ('eval', 'final')]
  return 'wer' if numbers and 'wer' in numbers[-1] else 'accuracy'


def last_text_line(text):
  """The last non-empty line of ``text``, stripped; '' when there is none."""
  lines = [l.strip() for l in text.splitlines() if l.strip()]
  return lines[-1] if lines else ''


def last_line(path):
  """The last non-empty line of a file: run.py's one-line error, or the exception of a crash."""
  try:
    with open(path, encoding='utf-8', errors='replace') as f:
      return last_text_line(f.read())
  except OSError:
    return ''


def read_log(logdir):
  """The text of the point's ``run.log`` ('' when there is none)."""
  try:
    with open(os.path.join(logdir, LOG_FILE), encoding='utf-8', errors='replace') as f:
      return f.read()
  except OSError:
    return ''


def attempts(log_text):
  """The attempts of a point, from the sweep's own lines in its run.log.

  Returns:
    list of ``{'start': unix time, 'seconds': float or None, 'status': int or
    None, 'resumed_from': step or None}``, oldest first; ``seconds`` and
    ``status`` are None for an attempt whose end the sweep did not see (it was
    killed, or the attempt is running); ``resumed_from`` is the checkpoint's
    step an attempt started from.
  """
  found = []
  for line in log_text.splitlines():
    started, ended = ATTEMPT_RE.match(line), ENDED_RE.match(line)
    if started:
      resumed = RESUMED_RE.search(line)
      found.append({'start': float(started.group(2)), 'seconds': None, 'status': None,
                    'resumed_from': int(resumed.group(1)) if resumed else None})
    elif ended and found:
      found[-1].update(seconds=float(ended.group(2)), status=int(ended.group(3)))
  return found


def last_attempt_text(log_text):
  """The part of run.log the last attempt wrote (all of it for a log without sections)."""
  starts = [m.start() for m in re.finditer(r'^\[sweep\] attempt \d+ started at ', log_text,
                                           re.MULTILINE)]
  return log_text[starts[-1]:] if starts else log_text


def finished(logdir, log_text, mode):
  """Whether the point's last attempt ended well.

  The sweep's closing line says so (exit status 0); otherwise, for a mode that
  trains, the run's record does: its last attempt wrote an ``end`` (the sweep
  did not see the end, or a signal came as the run ended).
  """
  tried = attempts(log_text)
  if tried and tried[-1]['status'] == 0:
    return True
  # critical_batch writes its run's record too, with an end at each of its stages.
  return mode in TRAINING_MODES and ended(logdir)


def ended(logdir):
  """Whether the record's last attempt got to the end of training (an ``end``, no ``stop``)."""
  return record.last(record.last_attempt(record.read(logdir)), 'end') is not None


def stopped(logdir):
  """The record's ``stop`` of the last attempt (``step``, ``signal``, ``checkpoint``), or None."""
  return record.last(record.last_attempt(record.read(logdir)), 'stop')


def _record_name(metric):
  """A result's metric name as the record names it (``top5``: ``top5_accuracy``)."""
  return next((k for k, v in _RECORD_NAMES.items() if v == metric), metric)


def _record_evaluations(events, metric):
  """``{step: (value, unix time)}`` of the record's evaluations holding ``metric``; {} without."""
  name = _record_name(metric)
  return {e['step']: (e['metrics'][name], e['time']) for e in events
          if e['kind'] == 'eval' and e['metrics'].get(name) is not None}


def eval_curve(logdir, metric='accuracy'):
  """``[(step, metric)]`` of the run's evaluations, by step: its record's, else its ``run.log``'s.

  A step evaluated by two attempts (the second resumed from an earlier
  checkpoint) counts once, with the later evaluation (the record keeps that
  one alone).
  """
  evaluations = _record_evaluations(record.read(logdir), metric)
  return sorted((step, value) for step, (value, _) in evaluations.items())


def eval_times(logdir, metric='accuracy'):
  """``({step: unix time of that evaluation}, unix time of the run's first start)`` from the record.

  ``({}, None)`` for a run without one.
  """
  events = record.read(logdir)
  starts = [e['time'] for e in events if e['kind'] == 'start']
  return ({step: when for step, (_, when) in _record_evaluations(events, metric).items()},
          starts[0] if starts else None)


def attempt_spans(logdir, tried):
  """``[(start, end)]``: the unix times in which each attempt of ``tried`` did work a straight run does.

  An attempt the sweep saw end ends then. One it did not see end (killed
  with the session it ran in) but that a later attempt resumed ends at the
  last event it wrote in the run's record at or before the step the next
  attempt resumed from, since the next attempt does again what came after
  that checkpoint (at the next attempt's start when no event says). The last
  attempt, running or killed, has no end.
  """
  events = record.read(logdir)
  spans = []
  for i, attempt in enumerate(tried):
    end = float('inf')
    if attempt['seconds'] is not None:
      end = attempt['start'] + attempt['seconds']
    elif i + 1 < len(tried):
      following = tried[i + 1]
      since, before, step = attempt['start'], following['start'], following.get('resumed_from')
      last = max((e['time'] for e in events if since <= e['time'] < before
                  and (step is None or e['step'] <= step)), default=None)
      end = following['start'] if last is None else last
    spans.append((attempt['start'], end))
  return spans


def running_seconds(spans, start, end):
  """The seconds of ``[start, end]`` that fall inside the attempts' ``spans`` (``[(from, to)]``)."""
  return sum(max(0.0, min(to, end) - max(since, start)) for since, to in spans)


def timed_curve(logdir, metric='accuracy', spans=None):
  """``[[step, metric, seconds or None]]`` of the run's evaluations, as result.json keeps them.

  ``metric`` is the run's own (:func:`run_curve_metric`): top-1 ``accuracy``
  for an image classifier, ``wer`` for a sequence model.

  The seconds count from the record's first ``start`` (the start of
  training) to the evaluation's, within the attempts only: the time between
  a stopped attempt and the one that resumed it is not counted. ``spans``:
  the attempts' :func:`attempt_spans` when the caller has them (read from the
  run's log and record otherwise).
  """
  times, first = eval_times(logdir, metric)
  if spans is None:
    spans = attempt_spans(logdir, attempts(read_log(logdir)))
  curve = []
  for step, value in eval_curve(logdir, metric):
    seconds = None
    if step in times and first is not None:
      seconds = (running_seconds(spans, first, times[step]) if spans
                 else times[step] - first)
    curve.append([step, value, None if seconds is None else round(seconds, 2)])
  return curve


def read_result(logdir):
  path = os.path.join(logdir, RESULT_FILE)
  if not os.path.isfile(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def result_problem(logdir):
  """Why the run directory's ``result.json`` cannot be read, in one line naming it; None when it reads.

  None too when there is none (a point not finished). ``read_result`` takes
  such a file as no result; ``--best`` must not, or a finished point would
  silently lose to another.
  """
  path = os.path.join(logdir, RESULT_FILE)
  if not os.path.isfile(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      result = json.load(f)
  except OSError as exc:
    return f'{path} cannot be read ({exc.strerror or exc})'
  except ValueError as exc:
    return f'{path} is not a result the sweep wrote (not JSON: {exc})'
  if not isinstance(result, dict) or not isinstance(result.get('metrics', {}), dict):
    return f'{path} is not a result the sweep wrote (a JSON {type(result).__name__}, not its mapping)'
  return None


def read_error(logdir):
  path = os.path.join(logdir, ERROR_FILE)
  if not os.path.isfile(path):
    return None
  with open(path, encoding='utf-8') as f:
    return f.read().strip()


def own_metric_text(result):
  """``accuracy 0.9123`` or ``wer 0.3120``: a result's own metric (its curve's), for the sweep's lines."""
  name = result.get('curve_metric') or 'accuracy'
  return f'{name} {format_metric((result.get("metrics") or {}).get(name))}'


def format_metric(value, digits=4):
  """``value`` with ``digits`` decimals, or 'n/a' for None."""
  return 'n/a' if value is None else f'{value:.{digits}f}'
