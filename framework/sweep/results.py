"""What a sweep point's run directory says: its run.log, result.json and error.txt.

run.log holds run.py's output, one section per attempt between the sweep's own
``[sweep] attempt N started/ended`` lines (framework.sweep.runner writes them).
These functions read back the final metrics, the curve of evaluations and the
seconds each took (counting the time the point ran, not the time between
attempts) from the run's record (``metrics.jsonl``, framework.run.record), and
the attempts and whether the point finished from the sweep's own lines; a run
without a record (a benchmark, a run from before the record) is read from its
console lines and TensorBoard events. Nothing here runs a process or imports
TensorFlow (the TensorBoard event reader is imported when a curve is timed
from events).
"""

import glob
import json
import os
import re

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

# What run.py and the trainer print; parsed back from run.log. Each task words its
# lines (framework.tasks): "final <split> <metric>: <value> (<name> <value>, ...) at
# step N" and "eval at step N: <name> <value>, ..." (framework.run.evaluation; a split
# other than test is named: "final validation accuracy: ...", "... on the validation
# split"); the first metric of the final line is the run's own (accuracy for images,
# wer for sequences). A final line of the best checkpoint ends "(best checkpoint by
# <split> <metric>; the run ended at step M)": the run's steps are M.
FINAL_RE = re.compile(r'^final (\S+) (\w+): (\S+) \((.*?)\) at step (\d+)'
                      r'(?: \(best checkpoint by [^;)]*(?:; the run ended at step (\d+))?\))?')
EVAL_RE = re.compile(r'^eval at step (\d+): (.*)$')
_PAIR_RE = re.compile(r'([A-Za-z][\w-]*) (-?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf))(?=,|$| \()')
# The image classifier's names in its lines, as results name them.
_ALIASES = {'top-1': 'accuracy', 'top-5': 'top5'}
# Whether more is better, for each metric a run's final line can lead with: its
# task's BEST_METRIC and HIGHER_IS_BETTER (framework.tasks, which load TensorFlow;
# tests/framework/tasks/test_tasks.py holds the two equal).
HIGHER_IS_BETTER = {'accuracy': True, 'top5': True, 'token_accuracy': True,
                    'wer': False, 'per': False, 'ser': False, 'ter': False, 'loss': False}
TRAINING_RE = re.compile(r'^training .* for (\d+) steps')
# The gradient noise scale as a run ended (framework.run.launch.noise_scale_line); a run
# that measured it with |G|² not yet positive says 'unbounded', which reads as infinity.
NOISE_SCALE_RE = re.compile(r'^noise scale \(B_simple\): (\d+|unbounded)')
# The end of a run whose batch grew (framework.run.batch_policy.BatchControl.summary_line).
UPDATES_RE = re.compile(r'^batch policy \S+: (\d+) updates to step')
STOPPED_RE = re.compile(r'^stopped by \S+ at step (\d+) of \d+: saved (\S+);')
# The last line run.py prints when a training run ends well, and a benchmark's.
COMPLETE_RE = re.compile(r'^(TensorBoard: tensorboard --logdir |benchmark: )')
# The sweep's own lines around each attempt in run.log.
ATTEMPT_RE = re.compile(r'^\[sweep\] attempt (\d+) started at (\S+) ')
ENDED_RE = re.compile(r'^\[sweep\] attempt (\d+) ended after (\S+) s with exit status (-?\d+)')
RESUMED_RE = re.compile(r'; resuming from ckpt-(\d+)$')


# The record's names (framework.run.record: the task's metric names) as results name them.
_RECORD_NAMES = {'top5_accuracy': 'top5'}


def record_metrics(events):
  """:func:`parse_metrics`'s result from a run's record (``metrics.jsonl``), or None without an end.

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


def run_metrics(logdir, log_text):
  """The run's final metrics: from its record where it has one, else from its log."""
  metrics = record_metrics(record.read(logdir))
  return metrics if metrics is not None else parse_metrics(log_text)


def named_values(text):
  """``{name: value}`` of the ``name value`` pairs of an eval or final line's text."""
  return {_ALIASES.get(name, name): float(value) for name, value in _PAIR_RE.findall(text)}


def parse_metrics(log_text):
  """Reads the final metrics from run.py's output.

  Returns:
    ``{'accuracy', 'top5', 'loss', 'steps'}`` and every other metric the
    lines name (``wer``, ``per``, ``token_accuracy`` for sequences), each None
    when run.py did not print it: train_eval ends with ``final <split>
    <metric>: ...`` (the last ``eval at step ...`` line serves when that is
    missing), train and benchmark only give the steps of ``training ... for
    N steps``. ``steps`` is the step the run ended at. With the noise scale
    measured, ``noise_scale`` is the ``noise scale (B_simple): N`` line's N; with
    a batch that grew, ``updates`` is the ``batch policy P: N updates`` line's N.
  """
  metrics = dict.fromkeys(METRICS)
  for line in log_text.splitlines():
    line = line.strip()
    final, evaluation, training = FINAL_RE.match(line), EVAL_RE.match(line), TRAINING_RE.match(line)
    if final:
      metrics.update({final.group(2): float(final.group(3)), **named_values(final.group(4)),
                      'steps': int(final.group(6) or final.group(5))})
    elif evaluation:
      metrics.update(named_values(evaluation.group(2)), steps=int(evaluation.group(1)))
    elif training and metrics['steps'] is None:
      metrics['steps'] = int(training.group(1))
    noise = NOISE_SCALE_RE.match(line)
    if noise:
      metrics[NOISE_SCALE] = float('inf' if noise.group(1) == 'unbounded' else noise.group(1))
    updates = UPDATES_RE.match(line)
    if updates:
      metrics[UPDATES] = int(updates.group(1))
  return metrics


def run_curve_metric(logdir, log_text):
  """:func:`curve_metric` from the run's record where its evaluations are there, else its log."""
  numbers = [e['metrics'] for e in record.read(logdir) if e['kind'] in ('eval', 'final')]
  if numbers:
    return 'wer' if 'wer' in numbers[-1] else 'accuracy'
  return curve_metric(log_text)


def curve_metric(log_text):
  """The run's own metric, which its curve follows: the first of its final line, else ``accuracy``.

  ``accuracy`` for an image classifier, ``wer`` for a sequence model.
  """
  for line in reversed(log_text.splitlines()):
    final = FINAL_RE.match(line.strip())
    if final:
      return final.group(2)
  for line in log_text.splitlines():
    evaluation = EVAL_RE.match(line.strip())
    if evaluation and 'wer' in named_values(evaluation.group(2)):
      return 'wer'
  return 'accuracy'


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


def finished_in_log(log_text):
  """Whether the point's last attempt ended well, as run.log tells it.

  The sweep's closing line says so (exit status 0); otherwise run.py's own
  last line does (the sweep did not see the end, or a signal came as the run
  ended).
  """
  tried = attempts(log_text)
  if tried and tried[-1]['status'] == 0:
    return True
  return completed(last_attempt_text(log_text))


def completed(attempt_text):
  """Whether run.py printed the last line of a run that got to its end.

  Such a run may still exit by a signal, one that came as the process ended.
  """
  return any(COMPLETE_RE.match(line.strip()) for line in attempt_text.splitlines())


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
  if evaluations:
    return sorted((step, value) for step, (value, _) in evaluations.items())
  matches = (EVAL_RE.match(line.strip()) for line in read_log(logdir).splitlines())
  curve = {}
  for m in matches:
    if m and metric in named_values(m.group(2)):
      curve[int(m.group(1))] = named_values(m.group(2))[metric]
  return sorted(curve.items())


def eval_times(logdir, metric='accuracy'):
  """``({step: unix time of that evaluation}, unix time of the run's start)``.

  From the record (its evaluations, its first start) where the run has one,
  else from the TensorBoard events (an evaluation's event, the run's first).
  """
  events = record.read(logdir)
  evaluations = _record_evaluations(events, metric)
  starts = [e['time'] for e in events if e['kind'] == 'start']
  if evaluations and starts:
    return {step: when for step, (_, when) in evaluations.items()}, starts[0]
  from framework.engines import tf_import  # pylint: disable=import-outside-toplevel
  tf_import.import_tensorflow()  # the reader loads TensorFlow: without its start-up lines
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=import-outside-toplevel
  first, times = None, {}
  for directory, tag in ((logdir, None), (os.path.join(logdir, 'eval'), metric)):
    if not os.path.isdir(directory):
      return {}, None
    events = event_accumulator.EventAccumulator(directory, size_guidance={'tensors': 0})
    events.Reload()
    if tag is None:
      first = events.FirstEventTimestamp()
    elif tag in events.Tags()['tensors']:
      times = {e.step: e.wall_time for e in events.Tensors(tag)}
  return times, first


def _event_files(logdir):
  """``[(creation unix time, path)]`` of the TensorBoard event files of a run and of its evaluations."""
  found = []
  for path in glob.glob(os.path.join(glob.escape(logdir), '**', 'events.out.tfevents.*'),
                        recursive=True):
    try:
      found.append((float(os.path.basename(path).split('.')[3]), path))
    except (IndexError, ValueError):
      continue
  return found


def _last_event_time(files, since, before, max_step):
  """The wall time of the last event at or before ``max_step`` in the files created in ``[since, before)``."""
  from tensorboard.backend.event_processing import event_file_loader  # pylint: disable=import-outside-toplevel
  last = None
  for created, path in files:
    if not since <= created < before:
      continue
    try:
      for event in event_file_loader.EventFileLoader(path).Load():
        if (max_step is None or event.step <= max_step) and event.wall_time < before:
          last = event.wall_time if last is None else max(last, event.wall_time)
    except (OSError, ValueError):
      continue
  return last


def attempt_spans(logdir, tried):
  """``[(start, end)]``: the unix times in which each attempt of ``tried`` did work a straight run does.

  An attempt the sweep saw end ends then. One it did not see end (killed
  with the session it ran in) but that a later attempt resumed ends at the
  last event it wrote at or before the step the next attempt resumed from
  (in the run's record, else in its TensorBoard events), since the next
  attempt does again what came after that checkpoint (at the next attempt's
  start when no event says). The last attempt, running or killed, has no end.
  """
  events = record.read(logdir)
  files = None
  spans = []
  for i, attempt in enumerate(tried):
    end = float('inf')
    if attempt['seconds'] is not None:
      end = attempt['start'] + attempt['seconds']
    elif i + 1 < len(tried):
      following = tried[i + 1]
      since, before, step = attempt['start'], following['start'], following.get('resumed_from')
      if events:
        last = max((e['time'] for e in events if since <= e['time'] < before
                    and (step is None or e['step'] <= step)), default=None)
      else:
        if files is None:
          files = _event_files(logdir)
        last = _last_event_time(files, since, before, step)
      end = following['start'] if last is None else last
    spans.append((attempt['start'], end))
  return spans


def running_seconds(spans, start, end):
  """The seconds of ``[start, end]`` that fall inside the attempts' ``spans`` (``[(from, to)]``)."""
  return sum(max(0.0, min(to, end) - max(since, start)) for since, to in spans)


def timed_curve(logdir, metric='accuracy', spans=None):
  """``[[step, metric, seconds or None]]`` of the run's evaluations, as result.json keeps them.

  ``metric`` is the run's own (:func:`curve_metric`): top-1 ``accuracy`` for
  an image classifier, ``wer`` for a sequence model.

  The seconds count from the run's first TensorBoard event (the start of
  training) to the evaluation's, within the attempts only: the time between
  a stopped attempt and the one that resumed it is not counted. None where
  the events do not say. ``spans``: the attempts' :func:`attempt_spans`
  when the caller has them (read from the run's log and events otherwise).
  """
  try:
    times, first = eval_times(logdir, metric)
  except (ValueError, OSError):
    times, first = {}, None
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
