"""Running the points of a sweep as run.py processes, resuming, and reading their results.

Each point runs as ``python run.py --config CONFIG --mode MODE --logdir
OUT/<point> --continue_learning --set ...`` with its output in
``OUT/<point>/run.log``. A finished point gets ``result.json`` (the metrics
of run.py's last lines, the wall time, the machine and the curve of its evaluations, so
that the file alone serves a report; a study keeps it under version control)
and is skipped by a later sweep
with the same OUT; a failed point gets ``error.txt`` (the last line it
printed) and runs again, from an empty directory, next time.
"""

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time

from framework.sweep.grid import SweepError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_PY = os.path.join(ROOT, 'run.py')

RESULT_FILE = 'result.json'
ERROR_FILE = 'error.txt'
LOG_FILE = 'run.log'
METRICS = ('accuracy', 'top5', 'loss', 'steps')

# What run.py and the trainer print; parsed back from run.log.
FINAL_RE = re.compile(r'^final test accuracy: (\S+) \(top-5 (\S+), loss (\S+)\) at step (\d+)')
EVAL_RE = re.compile(r'^eval at step (\d+): loss (\S+), top-1 (\S+), top-5 (\S+)')
TRAINING_RE = re.compile(r'^training .* for (\d+) steps')

def log(message):
  """Prints a line of the sweep's own progress."""
  print(f'[sweep] {message}', flush=True)


# ---------------------------------------------------------------------------
# Reading a finished run

def parse_metrics(log_text):
  """Reads the final metrics from run.py's output.

  Returns:
    ``{'accuracy', 'top5', 'loss', 'steps'}``, each None when run.py did not
    print it: train_eval ends with ``final test accuracy: ...`` (the last
    ``eval at step ...`` line serves when that is missing), train and
    benchmark only give the steps of ``training ... for N steps``.
  """
  metrics = dict.fromkeys(METRICS)
  for line in log_text.splitlines():
    line = line.strip()
    final, evaluation, training = FINAL_RE.match(line), EVAL_RE.match(line), TRAINING_RE.match(line)
    if final:
      metrics.update(accuracy=float(final.group(1)), top5=float(final.group(2)),
                     loss=float(final.group(3)), steps=int(final.group(4)))
    elif evaluation:
      metrics.update(steps=int(evaluation.group(1)), loss=float(evaluation.group(2)),
                     accuracy=float(evaluation.group(3)), top5=float(evaluation.group(4)))
    elif training and metrics['steps'] is None:
      metrics['steps'] = int(training.group(1))
  return metrics


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


def eval_curve(logdir):
  """``[(step, top-1 accuracy)]`` of every evaluation in the run's ``run.log``."""
  try:
    with open(os.path.join(logdir, LOG_FILE), encoding='utf-8', errors='replace') as f:
      lines = f.read().splitlines()
  except OSError:
    return []
  matches = (EVAL_RE.match(line.strip()) for line in lines)
  return [(int(m.group(1)), float(m.group(3))) for m in matches if m]


def eval_seconds(logdir):
  """``{step: seconds from the run's first event to that evaluation's event}``, or {}."""
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=import-outside-toplevel
  starts, times = [], {}
  for directory, tag in ((logdir, None), (os.path.join(logdir, 'eval'), 'accuracy')):
    if not os.path.isdir(directory):
      return {}
    events = event_accumulator.EventAccumulator(directory, size_guidance={'tensors': 0})
    events.Reload()
    if tag is None:
      starts.append(events.FirstEventTimestamp())
    elif tag in events.Tags()['tensors']:
      times = {e.step: e.wall_time for e in events.Tensors(tag)}
  return {step: wall - starts[0] for step, wall in times.items()}


def timed_curve(logdir):
  """``[[step, top-1, seconds or None]]`` of the run's evaluations, as result.json keeps them.

  The seconds count from the run's first TensorBoard event (the start of
  training) to the evaluation's; None where the events do not say.
  """
  try:
    seconds = eval_seconds(logdir)
  except (ValueError, OSError):
    seconds = {}
  return [[step, accuracy, None if step not in seconds else round(seconds[step], 2)]
          for step, accuracy in eval_curve(logdir)]


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
    result = subprocess.run([sys.executable, '-m', 'framework.check_configs'], cwd=ROOT, env=env,
                            input=json.dumps(request), capture_output=True, text=True,
                            check=False)
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
    # run.log is in the run directory before run.py looks at it, and run.py
    # refuses a non-empty directory unless told to continue; the sweep empties
    # the directory first, so there is no checkpoint to continue from.
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
    """Runs the sweep; returns the names of the points that failed."""
    os.makedirs(self.out, exist_ok=True)
    pending = []
    for point in self.points:
      result = read_result(self.logdir(point))
      if result is None:
        pending.append(point)
        continue
      self.done += 1
      self.skipped += 1
      accuracy = (result.get('metrics') or {}).get('accuracy')
      log(f'skipped {point.name}: finished before (accuracy {format_metric(accuracy)})')
      if result.get('overrides') != self.overrides(point):
        log(f'warning: {point.name} finished with other --set values ({result.get("overrides")}); '
             f'delete {self.logdir(point)} to run it again with the current ones')
    self.progress()
    try:
      while pending or self.running:
        while pending and len(self.running) < self.args.jobs:
          self.start(pending.pop(0))
        time.sleep(0.1)
        for process in [p for p in self.running if p.poll() is not None]:
          self.finish(process)
    except KeyboardInterrupt:
      for process, (point, _, log_file) in self.running.items():
        process.terminate()
        process.wait()
        log_file.close()
        log(f'interrupted {point.name}; it runs again next time')
      raise
    return [p.name for p in self.points if p.name in self.errors]

  def start(self, point):
    logdir = self.logdir(point)
    if os.path.isdir(logdir) and os.listdir(logdir):
      if not os.path.exists(os.path.join(logdir, LOG_FILE)):
        self.errors[point.name] = (f'{logdir} exists and holds files the sweep did not write; '
                                   'move it away to run this point')
        self.done += 1
        self.failed += 1
        log(f'FAILED {point.name}: {self.errors[point.name]}')
        return
      # A failed or interrupted run: start again from nothing, so that run.py
      # does not refuse the directory and no stale checkpoint is resumed.
      shutil.rmtree(logdir)
    os.makedirs(logdir, exist_ok=True)
    command = self.command(point)
    # The log stays open while the run goes on; finish() closes it.
    log_file = open(os.path.join(logdir, LOG_FILE), 'w', encoding='utf-8')
    log_file.write('$ ' + shlex.join(command) + '\n')
    log_file.flush()
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    self.running[process] = (point, time.monotonic(), log_file)
    log(f'started {point.name}')
    self.progress()

  def finish(self, process):
    point, started, log_file = self.running.pop(process)
    log_file.close()
    wall = time.monotonic() - started
    logdir = self.logdir(point)
    log_path = os.path.join(logdir, LOG_FILE)
    self.done += 1
    if process.returncode == 0:
      with open(log_path, encoding='utf-8', errors='replace') as f:
        metrics = parse_metrics(f.read())
      result = {'point': {k: v for k, (_, v) in point.grid.items()}, 'derived': point.derived,
                'seed': point.seed, 'overrides': self.overrides(point),
                'mode': self.args.mode, 'config': self.config, 'metrics': metrics,
                'wall_s': round(wall, 2), 'finished': time.strftime('%Y-%m-%d %H:%M:%S'),
                'curve': timed_curve(logdir), 'machine': machine()}
      with open(os.path.join(logdir, RESULT_FILE), 'w', encoding='utf-8') as f:
        json.dump(result, f, indent=2)
      if self.args.archive:
        os.makedirs(self.args.archive, exist_ok=True)
        shutil.copyfile(os.path.join(logdir, RESULT_FILE),
                        os.path.join(self.args.archive, f'{point.name}.json'))
      log(f'finished {point.name}: accuracy {format_metric(metrics["accuracy"])}, '
           f'{metrics["steps"]} steps, {wall:.1f} s')
    else:
      status = (f'killed by signal {-process.returncode}' if process.returncode < 0
                else f'exit status {process.returncode}')
      error = last_line(log_path) or status
      with open(os.path.join(logdir, ERROR_FILE), 'w', encoding='utf-8') as f:
        f.write(error + '\n')
      self.errors[point.name] = error
      self.failed += 1
      log(f'FAILED {point.name} ({status}): {error}  [log: {log_path}]')
    self.progress()


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


def format_metric(value, digits=4):
  """``value`` with ``digits`` decimals, or 'n/a' for None."""
  return 'n/a' if value is None else f'{value:.{digits}f}'
