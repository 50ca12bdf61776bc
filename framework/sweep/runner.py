"""Running the points of a sweep as run.py processes, resuming, and reading their results.

Each point runs as ``python run.py --config CONFIG --mode MODE --logdir
OUT/<point> --continue_learning --set ...`` with its output in
``OUT/<point>/run.log``. A finished point gets ``result.json`` (the metrics
of run.py's last lines, the wall time, the machine and the curve of its evaluations, so
that the file alone serves a report; a study keeps it under version control)
and is skipped by a later sweep with the same OUT. A point that was stopped
(a signal to the sweep) or failed after saving a checkpoint resumes from its
checkpoints next time, its output appended to ``run.log``; a point that
finished although its ``result.json`` was never written (the sweep was
killed at that moment) is recognised from ``run.log`` and recorded without
running again; only a point that saved nothing starts again from an empty
directory. A failed point gets ``error.txt`` (the last line it printed).

``run.log`` holds one section per attempt, opened and closed by the sweep's
own lines (``[sweep] attempt N started at <unix time> ...`` and ``[sweep]
attempt N ended after S s with exit status E``), so that the wall time and
the seconds to each evaluation count the time the point ran, not the time
between attempts.
"""

import glob
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

from core import signals
from framework import rundir
from framework.sweep.grid import SweepError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_PY = os.path.join(ROOT, 'run.py')

RESULT_FILE = 'result.json'
ERROR_FILE = 'error.txt'
LOG_FILE = 'run.log'
# Every result holds these (None when run.py did not print them), and any other
# metric its lines name (a sequence model's wer, per, token_accuracy).
METRICS = ('accuracy', 'top5', 'loss', 'steps')

# What run.py and the trainer print; parsed back from run.log. Each task words its
# lines (framework.tasks): "final <split> <metric>: <value> (<name> <value>, ...) at
# step N" and "eval at step N: <name> <value>, ..." (framework.evaluation; a split
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
# tests/framework/test_tasks.py holds the two equal).
HIGHER_IS_BETTER = {'accuracy': True, 'top5': True, 'token_accuracy': True,
                    'wer': False, 'per': False, 'ser': False, 'ter': False, 'loss': False}
TRAINING_RE = re.compile(r'^training .* for (\d+) steps')
STOPPED_RE = re.compile(r'^stopped by \S+ at step (\d+) of \d+: saved (\S+);')
# The last line run.py prints when a training run ends well, and a benchmark's.
COMPLETE_RE = re.compile(r'^(TensorBoard: tensorboard --logdir |benchmark: )')
# The sweep's own lines around each attempt in run.log.
ATTEMPT_RE = re.compile(r'^\[sweep\] attempt (\d+) started at (\S+) ')
ENDED_RE = re.compile(r'^\[sweep\] attempt (\d+) ended after (\S+) s with exit status (-?\d+)')
RESUMED_RE = re.compile(r'; resuming from ckpt-(\d+)$')
# How long checking every point's config may take (one process, TensorFlow loaded once).
CHECK_SECONDS = 1800
# How long the runs under way may take to save and stop after a signal to the sweep.
STOP_SECONDS = 300
# How long a run killed with SIGKILL may take to be reaped.
KILL_SECONDS = 30

# The lock a sweep holds on its --out while it runs: one sweep per directory.
SWEEP_LOCK = 'sweep.lock'


def log(message):
  """Prints a line of the sweep's own progress."""
  print(f'[sweep] {message}', flush=True)


# ---------------------------------------------------------------------------
# Reading a finished run

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
    N steps``. ``steps`` is the step the run ended at.
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
  return metrics


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


def eval_curve(logdir, metric='accuracy'):
  """``[(step, metric)]`` of the evaluations in the run's ``run.log``, by step.

  A step evaluated by two attempts (the second resumed from an earlier
  checkpoint) counts once, with the later evaluation.
  """
  matches = (EVAL_RE.match(line.strip()) for line in read_log(logdir).splitlines())
  curve = {}
  for m in matches:
    if m and metric in named_values(m.group(2)):
      curve[int(m.group(1))] = named_values(m.group(2))[metric]
  return sorted(curve.items())


def eval_times(logdir, metric='accuracy'):
  """``({step: unix time of that evaluation's event}, unix time of the run's first event)``."""
  from framework import tf_import  # pylint: disable=import-outside-toplevel
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
  last TensorBoard event it wrote at or before the step the next attempt
  resumed from, since the next attempt does again what came after that
  checkpoint (at the next attempt's start when no event says). The last
  attempt, running or killed, has no end.
  """
  files = None
  spans = []
  for i, attempt in enumerate(tried):
    end = float('inf')
    if attempt['seconds'] is not None:
      end = attempt['start'] + attempt['seconds']
    elif i + 1 < len(tried):
      following = tried[i + 1]
      if files is None:
        files = _event_files(logdir)
      last = _last_event_time(files, attempt['start'], following['start'],
                              following.get('resumed_from'))
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


def read_error(logdir):
  path = os.path.join(logdir, ERROR_FILE)
  if not os.path.isfile(path):
    return None
  with open(path, encoding='utf-8') as f:
    return f.read().strip()


# ---------------------------------------------------------------------------
# Running

class Sweep:
  """Runs the points that have no result yet, ``jobs`` at a time.

  Args:
    args: the sweep's flags: ``config``, ``out``, ``mode``, ``set`` (the
      overrides given to every point), ``jobs`` and ``archive`` (a directory
      that receives a copy of each finished point's result.json, or None).
    points: the :class:`framework.sweep.grid.Point` list to run, in order.
  """

  def __init__(self, args, points):
    self.args = args
    self.points = points
    self.out = os.path.abspath(args.out)
    self.config = os.path.abspath(args.config)
    self.done = self.failed = self.skipped = 0
    self.running = {}
    self.errors = {}
    # The signal that stopped the sweep (set by scripts/sweep.py), passed on to the runs.
    self.stop_signal = None

  def logdir(self, point):
    return os.path.join(self.out, point.name)

  def overrides(self, point):
    """The point's ``--set`` values, after the sweep's own."""
    return list(self.args.set) + point.overrides

  def check_points(self):
    """Resolves and validates every point's config as run.py would, running nothing.

    One process checks all points, so TensorFlow starts once.

    Raises:
      SweepError: naming each point whose config run.py would refuse, and why.
    """
    request = {'config': self.config, 'mode': self.args.mode,
               'variants': [self.overrides(p) for p in self.points]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
    try:
      result = subprocess.run([sys.executable, '-m', 'framework.check_configs'], cwd=ROOT,
                              env=env, input=json.dumps(request), capture_output=True, text=True,
                              check=False, timeout=CHECK_SECONDS)
    except subprocess.TimeoutExpired:
      raise SweepError(f'the configs could not be checked within {CHECK_SECONDS} s; nothing was '
                       'run') from None
    try:
      errors = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
      raise SweepError('the configs could not be checked: '
                       f'{last_text_line(result.stderr) or f"exit status {result.returncode}"}'
                       ) from None
    bad = [(p, e) for p, e in zip(self.points, errors) if e is not None]
    if bad:
      raise SweepError('\n'.join(f'point {p.name}: {e.removeprefix("error: ")}' for p, e in bad)
                       + f'\n{len(bad)} of {len(self.points)} point(s) have a config error; '
                       'nothing was run')

  def command(self, point):
    # --continue_learning: run.py refuses a non-empty directory without it (run.log
    # is there first), and a point that saved checkpoints resumes from them.
    command = [sys.executable, RUN_PY, '--config', self.config, '--mode', self.args.mode,
               '--logdir', self.logdir(point), '--continue_learning']
    for override in self.overrides(point):
      command += ['--set', override]
    return command

  def progress(self):
    left = len(self.points) - self.done - len(self.running)
    log(f'{self.done}/{len(self.points)} done ({self.skipped} skipped, {self.failed} failed), '
         f'{len(self.running)} running, {left} left')

  def run(self):
    """Runs the sweep; returns the names of the points that failed.

    The sweep holds ``OUT/sweep.lock`` (``flock``) while it runs: a second
    sweep on the same ``--out`` is refused. A point whose directory a live run
    holds (``run.lock``; an earlier sweep was killed and left it going) fails
    this time, its directory untouched.

    Raises:
      KeyboardInterrupt: when ``stop_signal`` was set (``scripts/sweep.py``
        sets it on SIGINT or SIGTERM) or on a Ctrl-C that Python turned into
        it, after the runs under way were stopped and saved.
      SweepError: another sweep runs in ``--out``.
    """
    os.makedirs(self.out, exist_ok=True)
    lock = rundir.RunLock(self.out, log=log, name=SWEEP_LOCK)
    try:
      lock.acquire()
    except rundir.RunDirError:
      holder = lock.holder() or (0, '?')
      raise SweepError(f'{self.out} is in use by another sweep (pid {holder[0]} on {holder[1]}); '
                       'wait for it to end, or give another --out') from None
    try:
      return self._run()
    finally:
      lock.release()

  def _run(self):
    pending = []
    for point in self.points:
      result = read_result(self.logdir(point))
      if result is None and finished_in_log(read_log(self.logdir(point))):
        # It finished, but the sweep that ran it ended before writing its result.
        result = self.record(point, 'recorded')
      if result is None:
        pending.append(point)
        continue
      self.done += 1
      self.skipped += 1
      log(f'skipped {point.name}: finished before ({own_metric_text(result)})')
      if result.get('overrides') != self.overrides(point):
        log(f'warning: {point.name} finished with other --set values ({result.get("overrides")}); '
             f'delete {self.logdir(point)} to run it again with the current ones')
    self.progress()
    try:
      while (pending or self.running) and self.stop_signal is None:
        while pending and len(self.running) < self.args.jobs and self.stop_signal is None:
          self.start(pending.pop(0))
        time.sleep(0.1)
        for process in [p for p in self.running if p.poll() is not None]:
          self.finish(process)
    except KeyboardInterrupt:
      self.stop_signal = self.stop_signal or signal.SIGINT
    if self.stop_signal is not None:
      self.stop_runs(self.stop_signal)
      raise KeyboardInterrupt
    return [p.name for p in self.points if p.name in self.errors]

  def signal_runs(self, signum):
    """Passes a signal on to the runs under way (run.py saves and stops on the first)."""
    for process in self.running:
      if process.poll() is None:
        process.send_signal(signum)

  def stop_runs(self, signum):
    """Stops the runs under way as a preemption stops run.py, and records how each ended.

    Each run gets ``signum`` once (the runs have process groups of their own,
    so a Ctrl-C at the terminal reaches the sweep alone), finishes its step,
    saves a checkpoint and exits; the point resumes from it next time. A run
    that ended well meanwhile is recorded as finished. A run still going after
    ``STOP_SECONDS`` is killed.
    """
    self.signal_runs(signum)
    deadline = time.monotonic() + STOP_SECONDS
    for process in list(self.running):
      try:
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        log(f'{self.running[process][0].name} did not stop within {STOP_SECONDS} s: killed')
        process.kill()
        process.wait(timeout=KILL_SECONDS)
      self.finish(process, interrupted=True)

  def prepare(self, point):
    """Readies the point's directory for an attempt; returns its newest checkpoint or None.

    A directory with checkpoints is kept (the attempt resumes from them, its
    output appended to run.log); one without is emptied.

    Raises:
      SweepError: the directory holds files the sweep did not write.
    """
    logdir = self.logdir(point)
    if not (os.path.isdir(logdir) and os.listdir(logdir)):
      os.makedirs(logdir, exist_ok=True)
      return None
    live = rundir.RunLock(logdir).live_holder()
    if live is not None:
      # A run still training there (one an earlier sweep, killed, left behind):
      # its directory is neither emptied nor shared.
      raise SweepError(f'{logdir} is in use by a run that is still going (pid {live[0]} on '
                       f'{live[1]}), left by an earlier sweep that was stopped without it; let it '
                       f'finish (the next sweep records it) or stop it (kill {live[0]})')
    if not os.path.exists(os.path.join(logdir, LOG_FILE)):
      raise SweepError(f'{logdir} exists and holds files the sweep did not write; move it away '
                       'to run this point')
    saved = newest_checkpoint(logdir)
    if saved is None:
      # Nothing saved: start again from nothing, so that run.py does not refuse the directory.
      shutil.rmtree(logdir)
      os.makedirs(logdir)
    elif os.path.exists(os.path.join(logdir, ERROR_FILE)):
      os.remove(os.path.join(logdir, ERROR_FILE))  # of the attempt this one takes up
    return saved

  def start(self, point):
    logdir = self.logdir(point)
    try:
      saved = self.prepare(point)
    except SweepError as exc:
      self.errors[point.name] = str(exc)
      self.done += 1
      self.failed += 1
      log(f'FAILED {point.name}: {self.errors[point.name]}')
      return
    number = len(attempts(read_log(logdir))) + 1
    command = self.command(point)
    # The log stays open while the run goes on; finish() closes it.
    log_file = open(os.path.join(logdir, LOG_FILE), 'a', encoding='utf-8')
    started = time.time()
    log_file.write(f'[sweep] attempt {number} started at {started:.2f} '
                   f'({time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))})'
                   + (f'; resuming from {os.path.basename(saved)}' if saved else '') + '\n')
    log_file.write('$ ' + shlex.join(command) + '\n')
    log_file.flush()
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    # A process group of its own: a Ctrl-C at the terminal reaches the sweep
    # only, which passes one signal on; two would make run.py exit without saving.
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                               process_group=0)
    self.running[process] = (point, time.monotonic(), log_file, number, saved)
    log(f'resumed {point.name} from {saved} (attempt {number})' if saved
        else f'started {point.name}')
    self.progress()

  def finish(self, process, interrupted=False):
    """Records how a run ended; ``interrupted``: the sweep stopped it."""
    point, started, log_file, number, saved = self.running.pop(process)
    wall = time.monotonic() - started
    log_file.flush()
    logdir = self.logdir(point)
    log_path = os.path.join(logdir, LOG_FILE)
    text = last_attempt_text(read_log(logdir))
    error = last_text_line(text)
    log_file.write(f'[sweep] attempt {number} ended after {wall:.2f} s with exit status '
                   f'{process.returncode}\n')
    log_file.close()
    if process.returncode == 0 or (completed(text) and (interrupted or process.returncode < 0)):
      self.done += 1
      result = self.record(point, 'finished')
      metrics = result['metrics']
      log(f'finished {point.name}: {own_metric_text(result)}, '
           f'{metrics["steps"]} steps, {result["wall_s"]:.1f} s'
           + (f' over {result["attempts"]} attempts' if result['attempts'] > 1 else ''))
    elif interrupted:
      stopped = [m for m in map(STOPPED_RE.match, text.splitlines()) if m]
      kept = newest_checkpoint(logdir)
      if stopped and process.returncode in signals.STOP_STATUSES:
        log(f'interrupted {point.name} at step {stopped[-1].group(1)}: saved '
            f'{stopped[-1].group(2)}; it resumes from there next time')
      elif kept:
        log(f'interrupted {point.name} (exit status {process.returncode}); it resumes from '
            f'{kept} next time')
      else:
        log(f'interrupted {point.name} (exit status {process.returncode}) before it saved a '
            'checkpoint; it starts again next time')
    else:
      status = (f'killed by signal {-process.returncode}' if process.returncode < 0
                else f'exit status {process.returncode}')
      error = error or status
      if saved and error.startswith('error: --continue_learning: the checkpoints in'):
        # A --set the point's checkpoints cannot take: the way out is a fresh start.
        error += (f' (this attempt resumed from {saved}; move {logdir} away to run the point '
                  'afresh)')
      with open(os.path.join(logdir, ERROR_FILE), 'w', encoding='utf-8') as f:
        f.write(error + '\n')
      self.errors[point.name] = error
      self.done += 1
      self.failed += 1
      log(f'FAILED {point.name} ({status}): {error}  [log: {log_path}]')
    self.progress()

  def record(self, point, how):
    """Writes the point's result.json (and its archive copy) from its run.log; returns it.

    Args:
      point: a point whose last attempt ended well.
      how: 'finished' (the sweep saw the run end) or 'recorded' (found so in run.log).
    """
    logdir = self.logdir(point)
    text = read_log(logdir)
    tried = attempts(text)
    # An attempt killed with its session counts up to the checkpoint the next one resumed from.
    spans = attempt_spans(logdir, tried)
    if tried and tried[-1]['seconds'] is None:
      # The sweep did not see this attempt end: it ran until run.log was last written.
      spans[-1] = (spans[-1][0], os.path.getmtime(os.path.join(logdir, LOG_FILE)))
    metrics = parse_metrics(text)
    result = {'point': {k: v for k, (_, v) in point.grid.items()}, 'derived': point.derived,
              'seed': point.seed, 'overrides': self.overrides(point),
              'mode': self.args.mode, 'config': self.config, 'metrics': metrics,
              'wall_s': round(sum(end - start for start, end in spans), 2),
              'attempts': max(1, len(tried)), 'finished': time.strftime('%Y-%m-%d %H:%M:%S'),
              'curve': timed_curve(logdir, curve_metric(text), spans),
              'curve_metric': curve_metric(text), 'machine': machine()}
    with open(os.path.join(logdir, RESULT_FILE), 'w', encoding='utf-8') as f:
      json.dump(result, f, indent=2)
    if self.args.archive:
      os.makedirs(self.args.archive, exist_ok=True)
      shutil.copyfile(os.path.join(logdir, RESULT_FILE),
                      os.path.join(self.args.archive, f'{point.name}.json'))
    if how == 'recorded':
      log(f'recorded {point.name}: it had finished ({own_metric_text(result)}) before its '
          'result was written')
    return result


def newest_checkpoint(logdir):
  """The newest periodic checkpoint a run directory holds (by its index file), or None."""
  steps = []
  for path in glob.glob(os.path.join(glob.escape(logdir), 'ckpt-*.index')):
    match = re.fullmatch(r'ckpt-(\d+)\.index', os.path.basename(path))
    if match:
      steps.append(int(match.group(1)))
  return os.path.join(logdir, f'ckpt-{max(steps)}') if steps else None


def machine():
  """This machine in one line, e.g. ``AMD EPYC (family 26, model 2), 2 CPUs``.

  Kept in every result.json, so that a study whose runs span machines
  compares wall times only between runs of one machine.
  """
  fields = {}
  try:
    with open('/proc/cpuinfo', encoding='utf-8', errors='replace') as f:
      for line in f:
        name, sep, value = line.partition(':')
        if sep and name.strip() in ('model name', 'cpu family', 'model'):
          fields.setdefault(name.strip(), value.strip())
  except OSError:
    pass
  name = fields.get('model name') or platform.processor() or platform.machine() or 'unknown CPU'
  if 'cpu family' in fields and 'model' in fields:
    name += f' (family {fields["cpu family"]}, model {fields["model"]})'
  return f'{name}, {os.cpu_count()} CPUs'


def own_metric_text(result):
  """``accuracy 0.9123`` or ``wer 0.3120``: a result's own metric (its curve's), for the sweep's lines."""
  name = result.get('curve_metric') or 'accuracy'
  return f'{name} {format_metric((result.get("metrics") or {}).get(name))}'


def format_metric(value, digits=4):
  """``value`` with ``digits`` decimals, or 'n/a' for None."""
  return 'n/a' if value is None else f'{value:.{digits}f}'
