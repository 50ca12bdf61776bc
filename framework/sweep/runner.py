"""Running the points of a sweep as run.py processes and resuming them.

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
between attempts (framework.sweep.results reads them back).
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
from framework.config.config_file import TRAINING_MODES
from framework.engines import local_cluster
from framework.run import rundir
from framework.sweep.grid import SweepError
from framework.sweep.results import ERROR_FILE
from framework.sweep.results import LOG_FILE
from framework.sweep.results import RESULT_FILE
from framework.sweep.results import attempt_spans
from framework.sweep.results import attempts
from framework.sweep.results import ended
from framework.sweep.results import finished
from framework.sweep.results import last_attempt_text
from framework.sweep.results import last_text_line
from framework.sweep.results import own_metric_text
from framework.sweep.results import read_log
from framework.sweep.results import read_result
from framework.sweep.results import run_curve_metric
from framework.sweep.results import run_metrics
from framework.sweep.results import stopped
from framework.sweep.results import timed_curve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_PY = os.path.join(ROOT, 'run.py')

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
      result = subprocess.run([sys.executable, '-m', 'framework.sweep.check_configs'], cwd=ROOT,
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
    # is there first), and a point that saved checkpoints resumes from them. The
    # critical batch goes on from its own records and takes no such flag.
    command = [sys.executable, RUN_PY, '--config', self.config, '--mode', self.args.mode,
               '--logdir', self.logdir(point)]
    if self.args.mode != 'critical_batch':
      command.append('--continue_learning')
    for override in self.overrides(point):
      command += ['--set', override]
    return command + list(getattr(self.args, 'run_flags', []))

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
      if result is None and finished(self.logdir(point), read_log(self.logdir(point)),
                                     self.args.mode):
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
    # The sweep's death is a SIGTERM to the run (Linux), as run.py --num_workers' is to
    # its workers: a sweep killed outright (SIGKILL, the OOM killer) stops its run, which
    # saves and exits as at a preemption, instead of leaving it training unseen.
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                               process_group=0, preexec_fn=local_cluster.ends_with_parent())
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
    if process.returncode == 0 or (self.args.mode in TRAINING_MODES and ended(logdir)
                                   and (interrupted or process.returncode < 0)):
      self.done += 1
      result = self.record(point, 'finished')
      metrics = result['metrics']
      log(f'finished {point.name}: {own_metric_text(result)}, '
           f'{metrics["steps"]} steps, {result["wall_s"]:.1f} s'
           + (f' over {result["attempts"]} attempts' if result['attempts'] > 1 else ''))
    elif interrupted:
      stop = stopped(logdir)
      kept = newest_checkpoint(logdir)
      if stop is not None and process.returncode in signals.STOP_STATUSES:
        log(f'interrupted {point.name} at step {stop["step"]}: saved {stop["checkpoint"]}; it '
            'resumes from there next time')
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
    """Writes the point's result.json (and its archive copy) from its record; returns it.

    Args:
      point: a point whose last attempt ended well.
      how: 'finished' (the sweep saw the run end) or 'recorded' (found so afterwards).
    """
    logdir = self.logdir(point)
    text = read_log(logdir)
    tried = attempts(text)
    # An attempt killed with its session counts up to the checkpoint the next one resumed from.
    spans = attempt_spans(logdir, tried)
    if tried and tried[-1]['seconds'] is None:
      # The sweep did not see this attempt end: it ran until run.log was last written.
      spans[-1] = (spans[-1][0], os.path.getmtime(os.path.join(logdir, LOG_FILE)))
    metrics = run_metrics(logdir)
    metric = run_curve_metric(logdir)
    result = {'point': {k: v for k, (_, v) in point.grid.items()}, 'derived': point.derived,
              'seed': point.seed, 'overrides': self.overrides(point),
              'mode': self.args.mode, 'config': self.config, 'metrics': metrics,
              'wall_s': round(sum(end - start for start, end in spans), 2),
              'attempts': max(1, len(tried)), 'finished': time.strftime('%Y-%m-%d %H:%M:%S'),
              'curve': timed_curve(logdir, metric, spans), 'curve_metric': metric,
              'machine': machine()}
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
