"""``run.py --mode=critical_batch``: the critical batch of a config's run, along the run, with an interval.

McCandlish et al. (2018) model the updates S a run needs to reach a result
at batch B as S(B) = S_min·(1 + B_crit/B); the studies of this project count
the updates each batch needs to reach one target and fit that model. This
mode does the same from points of one run of the config, as Merrill et al.
(2025) branch from checkpoints of one run:

1. **The points.** The config's run is trained in the run directory to
   ``--points`` of its steps (a quarter, half and three quarters by
   default), its checkpoint at each kept in ``critical_batch/step_<N>/``; a
   logdir that holds a run of the config lends its own checkpoints instead,
   and ``--checkpoint`` names one point.
2. **The branches.** From each point, a branch at 1x, 2x, 4x, ... the
   config's global batch (up to ``--max_batch``, 16x by default) goes on with
   the run: the 1x branch is the run itself, a larger one the run with a
   ``batch_policy: steps`` switch to its batch at the point (by ``iter_size``,
   its rate the schedule's at the examples read times the ``lr_scaling``
   rule's factor). The held-out loss is evaluated on the eval split's first
   ``--heldout_examples`` every eighth of a window. The 1x branch reads one
   window (``--branch_examples``, a 16th of the run by default); its smoothed
   loss at the end is the target, and every larger branch runs until it is
   past it, or for four windows, or to the run's end.
3. **The fit.** Each branch's examples to the target come from its
   smoothed curve (``core.critical_batch``), S(B) = examples / B, and
   ``(S_min, B_crit)`` is the least-squares fit over the branches that
   reached it; a bootstrap of the evaluations' residuals gives the 90 %
   interval. The points together give the one fixed batch for the whole run
   and a growing ``batch_policy: steps`` schedule, written to
   ``critical_batch_schedule.yaml`` and printed as ``--set`` arguments.

Each finished branch keeps its record (``critical_batch/step_<N>/branch_<batch>.json``);
the same command again skips them, and a branch a signal stopped starts
again from its point. Only the chief writes files. docs/running.md says why
each default is what it is; docs/math.md states the method.
"""

import gc
import glob
import math
import os
import shutil
import time

import numpy as np

from core import critical_batch as fit_lib
from framework.run import critical_branches as branch_lib
from framework.run import critical_batch_results as results
from framework.run import session
from framework.run.resume import LaunchError
from framework.run.resume import enter_logdir

# Keys of a config that change no number a branch measures: a finished branch stands
# whatever they are.
COSMETIC_KEYS = ('print_loss_steps', 'save_summaries_steps', 'save_checkpoint_steps',
                 'num_checkpoints', 'summaries', 'print_samples_steps', 'import_paths',
                 'auto_resume', 'keep_checkpoint_every_n_hours')


# Keys of the run that wrote a --checkpoint that may differ from the config's: how its batch
# grew (the mode itself measures fixed batches; checkpoint_step reads such a run's step).
SOURCE_RUN_KEYS = ('batch_policy', 'batch_policy_params')


def branch_trainer_class():
  """``BranchTrainer``: a ``Trainer`` whose update's rate is given (``branch_rate_fn``)."""
  from framework.run.trainer import Trainer  # pylint: disable=import-outside-toplevel

  class BranchTrainer(Trainer):
    """The trainer of one branch: the config's, at the rate its point of the run gives."""

    def __init__(self, config, eval_config, logdir, overrides, rate):
      self.branch_rate = rate
      super().__init__(config, eval_config, logdir, overrides=overrides)

    def _optimize_loss_arguments(self, cfg):
      arguments = super()._optimize_loss_arguments(cfg)
      return dict(arguments, learning_rate_decay_fn=self.branch_rate)

  return BranchTrainer


class Looks:
  """The loss curve of a run or a branch as it trains: one value per look of a ``train_loop.Probe``.

  Online (``--branch_loss=online``): the mean loss of the micro-batches
  since the last look, over every worker, at the update halfway through
  them; held-out: the held-out loss at the look.

  Args:
    measurement: the :class:`Measurement` (its ``branch_loss`` and held-out loss).
    trainer: the trainer whose model is looked at.
    record: ``f(step or update at the value, value, step of the look)``.
    since: the step training starts from.
  """

  def __init__(self, measurement, trainer, record, since=0):
    self.measurement = measurement
    self.trainer = trainer
    self.record = record
    self.since = since
    self.sum = 0.0
    self.count = 0

  def each(self, values):
    self.sum += float(values['loss'])
    self.count += 1

  def look(self, step):
    from framework.engines import distributed  # pylint: disable=import-outside-toplevel
    if step <= self.since:
      return
    if self.measurement.branch_loss == 'heldout':
      at, value = step, self.measurement.heldout_loss(self.trainer)
    else:
      total, count = distributed.sum_array(np.array([self.sum, self.count], np.float64))
      if not count:
        return
      # Each micro-batch's loss is that of the model after the updates before it: the mean
      # over the interval is the model's halfway through it.
      at, value = 0.5 * (self.since + step - 1), total / count
    self.sum, self.count, self.since = 0.0, 0, step
    self.record(at, value, step)


class QuietRefusal(Exception):
  """A refusal the chief worker says in its line; another worker ends with status 2 quietly."""


def launch(options, configs, logdir, resume, dtype_line=None):
  """Runs the mode once the engine has started and the configs are checked; returns the exit status.

  Args:
    options: run.py's parsed flags.
    configs: the resolved configs (``train`` and ``eval`` views).
    logdir: the run directory.
    resume: the command that goes on after a stop (this command again).
    dtype_line: what ``dtype: auto`` resolved to, for a config.yaml this mode writes.

  Raises:
    LaunchError: a mistake (status 2) or a failed run (status 1), in one line.
  """
  # pylint: disable=import-outside-toplevel
  from framework.engines import distributed
  from optimizers import allreduce
  from framework.run import checkpoints
  from framework.run.resume import remove_if_empty
  cfg = configs['train']
  if cfg['batch_policy'] != 'fixed':
    raise LaunchError('batch_policy: --mode=critical_batch measures fixed batches against each '
                      f'other, and this config grows its batch ({cfg["batch_policy"]!r}); run '
                      'it with --set batch_policy=fixed')
  base_batch = cfg['batch_size_per_gpu'] * allreduce.size() * cfg['iter_size']
  max_batch = options.max_batch or branch_lib.DEFAULT_MAX_BATCH_FACTOR * base_batch
  try:
    batches = results.branch_batches(base_batch, max_batch)
  except results.ResultsError as exc:
    raise LaunchError(str(exc)) from None
  lock = enter_logdir(logdir, distributed.is_chief())
  try:
    with session.holding(lock, lambda held: held.made_logdir and remove_if_empty(logdir)):
      with session.stop_signals(logdir, True) as stop:
        try:
          return Measurement(options, configs, logdir, resume, dtype_line, stop, batches,
                             max_batch).run()
        except results.ResultsError as exc:
          raise LaunchError(str(exc)) from None
        except checkpoints.CheckpointError as exc:
          if exc.failure is None:
            raise LaunchError(str(exc), status=1) from None
          # The mode goes on from its records: the same command, not --continue_learning.
          raise LaunchError(
              f'{exc.failure}; its partial files were removed; the finished points and branches '
              f'are kept in {os.path.join(logdir, results.RESULTS_DIR)}. Free space or fix the '
              f'permissions of {exc.directory}, then give the same command again: {resume}',
              status=1) from None
        except QuietRefusal:
          raise
        except Exception as exc:  # pylint: disable=broad-except
          session.raise_one_line(exc, logdir)
  except QuietRefusal:
    return 2


def recorded_config(cfg):
  """The train view as config.yaml records it, as plain data (what a record is compared by)."""
  from framework.run.resume import as_recorded_data  # pylint: disable=import-outside-toplevel
  return as_recorded_data(cfg)


def config_change(saved, new):
  """The changes between two recorded configs that change what a branch measures, or []."""
  from framework.run import rundir  # pylint: disable=import-outside-toplevel
  fixed, free = rundir.config_changes(saved, new)
  return [c for c in fixed + free if c[0].split('.', 1)[0] not in COSMETIC_KEYS]


class Measurement:
  """One ``--mode=critical_batch`` command: the points, their branches, the summary.

  Args:
    options: run.py's parsed flags.
    configs: the resolved configs.
    logdir: the run directory.
    resume: the command that goes on after a stop.
    dtype_line: what ``dtype: auto`` resolved to.
    stop: the run's ``stopping.StopRequest``.
    batches: the branches' global batches, smallest (1x) first.
    max_batch: ``--max_batch`` or its default.
  """

  def __init__(self, options, configs, logdir, resume, dtype_line, stop, batches, max_batch):
    from framework.engines import distributed  # pylint: disable=import-outside-toplevel
    from optimizers import allreduce  # pylint: disable=import-outside-toplevel
    self.options = options
    self.configs = configs
    self.cfg = configs['train']
    self.logdir = logdir
    self.resume = resume
    self.dtype_line = dtype_line
    self.stop = stop
    self.batches = batches
    self.max_batch = max_batch
    # The default ladder goes on past 16x while the whole run's updates still halve at its
    # largest batch (:meth:`rungs`); a --max_batch given is where it stops.
    self.extend = options.max_batch is None
    self.workers = allreduce.size()
    self.chief = distributed.is_chief()
    self.log = distributed.log
    self.fractions = (branch_lib.parse_points(options.points)[0] if options.points
                      else branch_lib.DEFAULT_POINTS)
    self.branch_loss = options.branch_loss or branch_lib.DEFAULT_BRANCH_LOSS
    self.heldout_examples = 0
    self.started = time.monotonic()
    self.root = os.path.join(logdir, results.RESULTS_DIR)
    self.config = recorded_config(self.cfg)
    self.run_curve = None  # the run's own loss curve, when this mode trained the run
    self.run_curve_loss = None  # the loss it reads ('online' or 'heldout')

  def say(self, line):
    """A line of the chief's, printed now (the table's lines keep their columns)."""
    if self.chief:
      print(line, flush=True)

  # --- the command -------------------------------------------------------------------------

  def run(self):
    """Measures what is not measured yet and writes the summary; returns the exit status."""
    # pylint: disable=import-outside-toplevel
    from framework.run import checkpoints
    from framework.run.trainer import RunStopped, Trainer
    own, _ = checkpoints.newest_intact(self.logdir)
    marker = results.read_json(os.path.join(self.root, results.WARMUP_NAME))
    if self.options.checkpoint == 'latest' and own is None and marker is None:
      # Before anything is built: a data layer may write its statistics into the logdir.
      self.check_new_logdir()
    base = Trainer(self.cfg, self.configs['eval'], self.logdir, overrides=self.options.set)
    self.unit = base.task.example_unit
    self.base_batch = self.batches[0]
    self.run_steps = base.max_steps
    # No branch past one epoch's examples (a batch of more reads some twice in an update).
    self.rung_limit = int(base.steps_per_epoch * self.base_batch)
    # The run's schedule at the config's batch, which every branch follows by its examples.
    self.schedule_fn = base.pipeline.learning_rate_decay_fn
    self.sizes(base)
    try:
      points = self.choose_points(base, own, marker)
    except RunStopped as exc:
      return self.stopped(exc, 'in the training to the points')
    measured = [None] * len(points)
    rungs, last = {}, None
    while True:
      for index, (step, path) in enumerate(points):
        if measured[index] is not None and step not in rungs:
          continue
        # A stop agreed after a point's branches ends the command before the next point's.
        signum = self.stop.agreed() if last is not None else None
        if signum:
          from framework.run import stopping  # pylint: disable=import-outside-toplevel
          self.say(f'stopped by {self.stop.name or "a signal to another worker"} after the '
                   f'branches from step {last}: their results are kept in {self.root}; the '
                   f'same command measures the rest: {self.resume}')
          return stopping.exit_status(signum)
        try:
          measured[index] = self.measure_point(base, step, path, rungs.get(step))
        except RunStopped as exc:
          return self.stopped(exc, f'in a branch from step {step}')
        last = step
      rungs = self.rungs(measured)
      if not rungs:
        break
      self.log(f'the whole run\'s updates still halve at its largest batch, '
               f'{min(rungs.values()) // 2} {self.unit}: one more rung at every point')
    if self.chief:
      self.summarize(measured)
    return 0

  def sizes(self, base):
    """The windows, the looks' cadence and the ladder, from the run's length."""
    b0 = self.base_batch
    given = self.options.branch_examples
    if given is not None:
      if given % b0:
        raise results.ResultsError(
            f'--branch_examples: {given} {self.unit} is no whole number of updates of the '
            f'config\'s batch ({b0} {self.unit}); allowed: a multiple of {b0}')
      if given >= self.run_steps * b0:
        raise results.ResultsError(
            f'--branch_examples: {given} {self.unit} is the whole run of the config '
            f'({self.run_steps * b0} {self.unit}) or more; allowed: less')
      self.fewest = self.most = given
    else:
      self.fewest = max(1, int(round(self.run_steps * branch_lib.WINDOW_FEWEST_SHARE))) * b0
      self.most = max(1, int(round(self.run_steps * branch_lib.WINDOW_MOST_SHARE))) * b0
    # The looks: every 256th of the run (an online look costs nothing but a sum).
    self.eval_every = max(1, int(round(self.run_steps / branch_lib.LOOKS_PER_RUN)))
    eval_batch = self.configs['eval']['batch_size_per_gpu'] * self.workers
    heldout = self.options.heldout_examples or branch_lib.DEFAULT_HELDOUT_EXAMPLES
    self.heldout_batches = max(1, math.ceil(heldout / eval_batch))
    fitting = [b for b in self.batches
               if branch_lib.MIN_UPDATES * b <= branch_lib.CAP_WINDOWS * self.fewest]
    fitting = fitting if len(fitting) >= 2 else self.batches[:2]
    if len(fitting) < len(self.batches):
      self.log(f'note: a branch of {self.batches[-1]} {self.unit} would make fewer than '
               f'{branch_lib.MIN_UPDATES} updates in {branch_lib.CAP_WINDOWS} of the shortest '
               f'window ({self.fewest} {self.unit}); the largest branch is {fitting[-1]}')
      self.batches = fitting

  # --- the points --------------------------------------------------------------------------

  def choose_points(self, base, own, marker):
    """``[(run step, checkpoint path)]`` of the points, training the run to them where needed."""
    # pylint: disable=import-outside-toplevel
    from framework.run import checkpoints
    from framework.run import warm_start
    if self.options.checkpoint != 'latest':
      path = warm_start.choose(self.logdir, self.options.checkpoint, base.task.BEST_METRIC)
      self.check_checkpoint_config(path)
      return [(checkpoints.checkpoint_step(path), path)]
    if own is not None and marker is None:
      return self.points_of_run(base)
    targets = [max(1, int(round(f * self.run_steps))) for f in self.fractions]
    targets = sorted(set(targets))
    for step in targets:
      if (self.run_steps - step) * self.base_batch < self.fewest:
        raise results.ResultsError(
            f'--points: the point at step {step} leaves {self.run_steps - step} steps of the run '
            f'after it, fewer than the 1x branch\'s shortest window of '
            f'{self.fewest // self.base_batch}; allowed: points at most '
            f'{1 - self.fewest / self.base_batch / self.run_steps:.3f} of the run')
    self.train_to(base, targets, own, marker)
    return [(step, self.point_checkpoint(step)) for step in targets]

  def most_window(self, step):
    """The longest window of the point at ``step``: ``self.most``, or half of what is left of
    the run, so that a branch slower than the 1x one still has room to reach its target
    before the schedule's end (past it the rate is the schedule's last)."""
    left = (self.run_steps - step) * self.base_batch
    return min(self.most, max(left // 2, min(self.fewest, left)))

  def run_window(self, step):
    """The point's 1x curve and window from the run's own curve (None, None: not recorded)."""
    if self.run_curve is None or self.run_curve_loss != self.branch_loss:
      return None, None  # none, or of the other loss: the 1x branch is then measured anew
    curve = [[(mid - step) * self.base_batch, value] for mid, value, look in self.run_curve
             if look > step]
    return curve, fit_lib.window_end(curve, self.fewest, self.most_window(step))

  def point_checkpoint(self, step):
    return os.path.join(results.point_dir(self.root, step), f'ckpt-{step}')

  def train_to(self, base, targets, own, marker):
    """Trains the config's run to each point, keeping its checkpoint there, and on to their windows.

    The run's online loss is recorded as it trains (``critical_batch/run_curve.json``):
    it is the 1x branch of every point. Training goes on past the last point until
    every point's window is decided (or the run ends).
    """
    # pylint: disable=import-outside-toplevel
    from framework.engines import distributed
    from framework.run import checkpoints
    from framework.run import train_loop
    from framework.run.resume import check_resume_config
    from framework.run.resume import record_configs
    curve_path = os.path.join(self.root, results.RUN_CURVE_NAME)
    recorded = results.read_json(curve_path) or {}
    self.run_curve = recorded.get('curve', [])
    self.run_curve_loss = recorded.get('branch_loss', 'online')
    if marker is not None and marker.get('done'):
      return
    if self.run_curve_loss != self.branch_loss:
      # The looks so far read the other loss: the run's curve starts again from here.
      self.run_curve, self.run_curve_loss = [], self.branch_loss
    marker = dict(marker or {}, points=targets, run_steps=self.run_steps, done=False)
    marker.setdefault('wall_s', 0.0)
    marker.setdefault('examples', 0)
    if own is not None:
      check_resume_config(self.logdir, self.cfg)
      base.restore()
      self.log(f'continuing the config\'s run from step {base.global_step} to its points '
               f'{", ".join(map(str, targets))} and their windows')
    else:
      self.log(f'no checkpoint in {self.logdir} to branch from: training the config\'s run to '
               f'its points, steps {", ".join(map(str, targets))} of {self.run_steps} '
               f'(--points {",".join(f"{f:g}" for f in self.fractions)}), and on until each '
               'point\'s window is decided')
    # The looks after the checkpoint trained from are to be made again.
    self.run_curve = [row for row in self.run_curve if row[2] <= base.global_step]
    if self.chief:
      os.makedirs(self.root, exist_ok=True)
      results.write_json(os.path.join(self.root, results.WARMUP_NAME), marker)
      record_configs(self.options, dict(self.configs, train=base.config), self.logdir,
                     base.global_step, self.dtype_line)
    base.begin()
    looks = Looks(self, base, lambda mid, value, step: self.run_curve.append([mid, value, step]),
                  since=base.global_step)

    def windows_decided(step):
      return step >= targets[-1] and all(self.run_window(t)[1] is not None for t in targets)

    def decided(step):
      looks.look(step)
      if self.chief:
        results.write_json(curve_path, {'every': self.eval_every, 'branch_loss': self.branch_loss,
                                        'curve': self.run_curve})
      return windows_decided(step)

    probe = train_loop.Probe(self.eval_every, decided, looks.each)
    ends = [t for t in targets if base.global_step < t] + [self.run_steps]
    for end in ends:
      started, first = time.monotonic(), base.global_step
      # The schedule stays the whole run's (its warm-up and decay); the run stops at the point.
      base.max_steps = end
      try:
        base.train(stop=self.stop, probe=probe)
      finally:
        marker['wall_s'] = round(marker['wall_s'] + time.monotonic() - started, 1)
        marker['examples'] += (base.global_step - first) * self.base_batch
        if self.chief:
          results.write_json(os.path.join(self.root, results.WARMUP_NAME), marker)
      # The chief's view, taken before it copies: a worker that looks after the copy exists
      # would skip the barrier the chief waits in.
      if end in targets and distributed.chief_decides(
          not os.path.exists(self.point_checkpoint(end) + '.index')):
        self.keep_point(checkpoints.newest_intact(self.logdir)[0], end)
        distributed.max_over_workers(0)  # every worker reads the copy after the chief made it
      if windows_decided(base.global_step):
        break
    marker['done'] = True
    if self.chief:
      results.write_json(os.path.join(self.root, results.WARMUP_NAME), marker)

  def keep_point(self, path, step):
    """Copies the run's checkpoint at a point into the point's directory (chief), safe from rotation."""
    if not self.chief:
      return
    os.makedirs(results.point_dir(self.root, step), exist_ok=True)
    for name in glob.glob(glob.escape(path) + '.*'):
      suffix = os.path.basename(name)[len(os.path.basename(path)):]
      shutil.copyfile(name, self.point_checkpoint(step) + suffix + '.tmp')
      os.replace(self.point_checkpoint(step) + suffix + '.tmp', self.point_checkpoint(step) + suffix)

  def points_of_run(self, base):
    """The logdir's own checkpoints nearest the points (within an eighth of the run)."""
    # pylint: disable=import-outside-toplevel
    from framework.run import checkpoints
    from framework.run.resume import check_resume_config
    check_resume_config(self.logdir, self.cfg)
    steps = {}
    for index in glob.glob(os.path.join(glob.escape(self.logdir), 'ckpt-*.index')):
      path = index[:-len('.index')]
      try:
        steps[checkpoints.checkpoint_step(path)] = path
      except Exception:  # pylint: disable=broad-except
        continue  # a damaged one: the others stand
    chosen = []
    for fraction in self.fractions:
      goal = fraction * self.run_steps
      near = [s for s in steps if abs(s - goal) <= self.run_steps / 8
              and (self.run_steps - s) * self.base_batch >= self.fewest]
      if near:
        step = min(near, key=lambda s: abs(s - goal))
        if step not in [c[0] for c in chosen]:
          chosen.append((step, steps[step]))
          continue
      self.log(f'note: no checkpoint of {self.logdir} near step {goal:.0f} ({fraction:g} of the '
               'run) with a window after it: that point is left out (a new --logdir trains the '
               'run to every point)')
    if not chosen:
      raise results.ResultsError(
          f'{self.logdir}: none of its checkpoints (steps {", ".join(map(str, sorted(steps)))}) '
          f'is near a point of the run with a window of {self.fewest} {self.unit} after it; '
          'measure in a new --logdir, which trains the run to its points')
    return sorted(chosen)

  def check_checkpoint_config(self, path):
    """Refuses a checkpoint written by a run of another config (its run directory's config.yaml)."""
    # pylint: disable=import-outside-toplevel
    from framework.run import rundir
    directory = os.path.dirname(os.path.abspath(path))
    for candidate in (directory, os.path.dirname(directory)):
      if os.path.isfile(os.path.join(candidate, rundir.CONFIG_NAME)):
        saved, _, _ = rundir.newest_saved_config(candidate)
        if saved is None:
          return
        # The source run's batch policy is its own (the branches grow from its model): this
        # config is compared as that run would have recorded it.
        source = dict(self.cfg, **{k: saved[k] for k in SOURCE_RUN_KEYS if k in saved})
        changes = config_change(saved, recorded_config(source))
        if changes:
          raise results.ResultsError(
              f'--checkpoint={self.options.checkpoint}: written by a run of another config '
              f'({rundir.describe_changes(changes[:3])}{" and more" if len(changes) > 3 else ""};'
              f' {os.path.join(candidate, rundir.CONFIG_NAME)}); branch it under the config it '
              'was written with')
        return
    self.log(f'note: no config.yaml beside {path} to compare this config with')

  def check_new_logdir(self):
    """Refuses to train a run into a logdir that holds other files and no checkpoint.

    The chief looks (the others could see the files it writes next) and every
    worker ends: the chief with the line, the others quietly.
    """
    # pylint: disable=import-outside-toplevel
    from framework.engines import distributed
    from framework.run import rundir
    problem = None
    if self.chief:
      # The lock, and the log a sweep (scripts/sweep.py) writes of this very command.
      names = sorted(n for n in os.listdir(self.logdir)
                     if n not in (rundir.LOCK_NAME, rundir.SWEEP_LOG_NAME))
      if names:
        problem = (f'logdir {self.logdir} holds no checkpoint to branch from, and '
                   f'--mode={branch_lib.MODE} '
                   f'would train one there first, but it is not empty (it holds {names[0]}'
                   f'{" and more" if len(names) > 1 else ""}); choose a new or empty --logdir, '
                   'or a run directory with checkpoints')
    if distributed.max_over_workers(int(problem is not None)):
      raise LaunchError(problem, status=2) if problem else QuietRefusal()

  def stopped(self, exc, where):
    from framework.run import stopping  # pylint: disable=import-outside-toplevel
    self.stop.saved = exc.checkpoint
    self.say(f'stopped by {self.stop.name or "a signal to another worker"} {where} at step '
             f'{exc.step}: the finished parts are kept in {self.root}; the same command goes on: '
             f'{self.resume}')
    return stopping.exit_status(exc.signum)

  # --- one point ---------------------------------------------------------------------------

  def heldout_loss(self, trainer):
    """The held-out loss of the trainer's model now (the evaluated examples are counted)."""
    loss, examples = trainer.task.heldout_loss(trainer.model, trainer.eval_data,
                                               self.configs['eval']['batch_size_per_gpu'],
                                               self.heldout_batches)
    self.heldout_examples = int(examples)
    return float(loss)

  def checkpoint_key(self, path):
    """The checkpoint as the records name it: relative to the logdir inside it, so that a run
    directory moved or copied whole keeps its records; absolute outside it."""
    path, logdir = os.path.abspath(path), os.path.abspath(self.logdir)
    inside = os.path.commonpath([path, logdir]) == logdir
    return os.path.relpath(path, logdir) if inside else path

  def settings(self, path, step, window):
    """What a branch's result depends on besides its batch and the config (``results.SETTINGS``)."""
    return {'checkpoint': self.checkpoint_key(path), 'checkpoint_step': step, 'window': window,
            'fewest': self.fewest, 'most': self.most, 'eval_every': self.eval_every,
            'heldout_batches': self.heldout_batches, 'branch_loss': self.branch_loss,
            'batch_size_per_gpu': self.cfg['batch_size_per_gpu'],
            # None where the rule jumps the rate at once (as records without the key).
            'ramp_updates': branch_lib.ramp_updates(
                2, branch_lib.rate_ratio(self.cfg, 2, self.workers)) or None}

  def measure_point(self, base, step, path, rung=None):
    """The branches from one point not measured yet (and the ``rung`` past them), then its fit."""
    directory = results.point_dir(self.root, step)
    start = self.start_record(base, step, path, directory)
    records = {}
    for batch in self.ladder():
      record = results.read_branch(directory, batch)
      if record is not None:
        records[batch] = record
    one = records.get(self.base_batch)
    if one is None:
      curve, window = self.run_window(step)
      if window is not None:
        # The run itself is the 1x branch: its online curve after the point.
        one = {'batch': self.base_batch, 'iter_size': self.cfg['iter_size'], 'window': window,
               'curve': [row for row in curve if row[0] <= self.most_window(step) + 1e-9],
               'examples': window, 'updates': window // self.base_batch, 'unit': self.unit,
               'reached': True, 'target': None, 'diverged': None, 'noise_scale': None,
               'workers': self.workers, 'wall_s': 0.0, 'from_run': True,
               'settings': self.settings(path, step, window)}
        if self.chief:
          results.write_json(results.branch_path(directory, self.base_batch), one)
        records[self.base_batch] = one
    window = one['window'] if one is not None else None
    kept = [b for b in self.batches if b in records and not records[b].get('from_run')]
    for batch, record in records.items():
      change = results.settings_change(record, self.settings(path, step, record['window']))
      if change is not None:
        raise results.ResultsError(
            f'{results.branch_path(directory, batch)}: measured with other settings ({change}); '
            f'give the flags it was measured with, or move {self.root} away to measure anew')
    at = ('' if start['loss'] is None else f': held-out loss {start["loss"]:.4f}')
    self.log(f'point at step {step} of {self.run_steps} ({os.path.basename(path)}){at}; branches '
             f'{", ".join(map(str, self.batches))} {self.unit}'
             + (f'; {len(kept)} of {len(self.batches)} measured before, kept' if kept else ''))
    if one is None:
      records[self.base_batch] = one = self.measure_branch(step, path, self.base_batch, directory,
                                                           start, None)
      window = one['window']
    if not window:
      self.log(f'point at step {step}: the 1x branch\'s loss did not fall by '
               f'{fit_lib.MIN_PROGRESS_IN_NOISE:g}x its noise or {fit_lib.MIN_PROGRESS_IN_ERRORS:g} '
               f'standard errors of its trend in '
               f'{self.most_window(step)} {self.unit}; no branch is run from it')
      return self.point_result(step, path, start, records, window)
    target, margin = fit_lib.window_target(one['curve'], start['loss'], window)
    for batch in self.batches[1:]:
      if batch not in records:
        records[batch] = self.measure_branch(step, path, batch, directory, start, window, target,
                                             margin)
    if rung is not None and rung not in records:
      records[rung] = self.measure_branch(step, path, rung, directory, start, window, target,
                                          margin)
    return self.point_result(step, path, start, records, window)

  def start_record(self, base, step, path, directory):
    """The held-out loss at the point, evaluated once and kept with the config it was measured by.

    Raises:
      ResultsError: the point's branches were measured under another config.
    """
    from framework.run import rundir  # pylint: disable=import-outside-toplevel
    record_path = os.path.join(directory, results.START_NAME)
    record = results.read_json(record_path)
    if (record is not None and record.get('checkpoint') == self.checkpoint_key(path)
        and record.get('branch_loss') == self.branch_loss):
      changes = config_change(record.get('config') or {}, self.config)
      if changes:
        raise results.ResultsError(
            f'{directory}: its branches were measured with another config '
            f'({rundir.describe_changes(changes[:3])}{" and more" if len(changes) > 3 else ""}); '
            f'give that config, or move {self.root} away to measure anew')
      return record
    started = time.monotonic()
    loss = None
    if self.branch_loss == 'heldout':
      branch_lib.restore_for_branch(base, path)
      loss = self.heldout_loss(base)
    record = {'checkpoint': self.checkpoint_key(path), 'step': step, 'loss': loss,
              'branch_loss': self.branch_loss,
              'heldout_batches': self.heldout_batches, 'heldout_examples': self.heldout_examples,
              'config': self.config,
              'wall_s': round(time.monotonic() - started, 1)}
    if self.chief:
      os.makedirs(directory, exist_ok=True)
      for name in glob.glob(os.path.join(glob.escape(directory), 'branch_*.json')):
        os.remove(name)  # of another checkpoint at this step: not this point's
      results.write_json(record_path, record)
    return record

  def measure_branch(self, step, path, batch, directory, start, window, target=None,
                     margin=0.0):
    """Trains one branch from the point, its loss looked at as it goes; the chief writes its record.

    The 1x branch (``window`` None) runs until its window is decided
    (``fit_lib.window_end``); a larger one until its loss is past ``target``,
    or for ``CAP_WINDOWS`` windows, or to the run's end.
    """
    # pylint: disable=import-outside-toplevel
    from framework.run import train_loop
    from framework.run.trainer import TrainingError
    BranchTrainer = branch_trainer_class()  # pylint: disable=invalid-name
    started = time.monotonic()
    factor = batch // self.base_batch
    is_base = window is None
    left = (self.run_steps - step) * self.base_batch
    cap = int(self.most_window(step) if is_base else min(branch_lib.CAP_WINDOWS * window, left))
    branch_dir = os.path.join(directory, f'branch_{batch}')
    if self.chief:
      shutil.rmtree(branch_dir, ignore_errors=True)  # what a stopped attempt left
    self.log(f'branch at batch {batch} (iter_size {self.cfg["iter_size"] * factor}) from step '
             f'{step}: ' + (f'until its {self.branch_loss} loss has fallen enough, {self.fewest} '
                            f'to {cap} {self.unit}' if is_base
                            else f'to {self.branch_loss} loss {target:.4f} or {cap} {self.unit}'))
    cfg = branch_lib.branch_config(self.cfg, factor)
    rate = branch_lib.branch_rate_fn(self.schedule_fn, step, factor,
                                     branch_lib.rate_ratio(self.cfg, factor, self.workers))
    trainer = BranchTrainer(cfg, self.configs['eval'], self.logdir, self.options.set, rate)
    # Built with the run directory, the data layers read what the run derived from its data
    # (statistics, vocabularies); the branch writes its checkpoints and events in its own.
    trainer.logdir = branch_dir
    branch_lib.restore_for_branch(trainer, path)
    # Its updates, counted from 0; its looks every eval_every steps of the run's examples.
    trainer.max_steps = max(1, cap // batch)
    trainer.begin()
    curve = []
    decided = {'window': None}

    def record(mid, value, _):
      curve.append([mid * batch, value])

    looks = Looks(self, trainer, record)

    def look(updates):
      looks.look(updates)
      if is_base:
        decided['window'] = fit_lib.window_end(curve, self.fewest, cap)
        return decided['window'] is not None
      return fit_lib.reached(curve, start['loss'], target, margin)

    diverged = None
    try:
      trainer.train(stop=self.stop,
                    probe=train_loop.Probe(max(1, self.eval_every // factor), look,
                                           looks.each if self.branch_loss == 'online' else None))
    except TrainingError as exc:
      diverged = str(exc)
      self.log(f'branch at batch {batch} diverged: {diverged}')
    noise = getattr(trainer, 'noise_scale', None)
    noise = branch_lib.plain_numbers(noise()) if callable(noise) else None
    updates = int(trainer.pipeline.global_step.numpy())
    del trainer
    gc.collect()
    if is_base:
      window = decided['window'] if decided['window'] is not None else (
          fit_lib.window_end(curve, self.fewest, cap) or 0)
    record = {'batch': batch, 'iter_size': self.cfg['iter_size'] * factor, 'curve': curve,
              'window': window, 'examples': updates * batch, 'updates': updates,
              'unit': self.unit,
              'reached': bool(is_base or (curve and fit_lib.reached(curve, start['loss'], target,
                                                                    0.0))),
              'target': target, 'diverged': diverged, 'noise_scale': noise or None,
              'workers': self.workers, 'wall_s': round(time.monotonic() - started, 1),
              'settings': self.settings(path, step, window)}
    if self.chief:
      results.write_json(results.branch_path(directory, batch), record)
      shutil.rmtree(branch_dir, ignore_errors=True)  # the result is kept; the weights are not needed
    return record

  def ladder(self):
    """The batches a point may have records of: the ladder, and the rungs past it it may grow."""
    batches = list(self.batches)
    while self.extend and batches[-1] * 2 <= self.rung_limit:
      batches.append(batches[-1] * 2)
    return batches

  def next_rung(self, point):
    """The batch of one more branch past a point's largest, or None where the point cannot grow.

    One more where the ladder may grow (no --max_batch) and the point's
    largest branch reached the target; none past one epoch's examples or
    with fewer than ``MIN_UPDATES`` updates in a cap.
    """
    if not self.extend or not point.get('measured', True) or not point.get('branches'):
      return None
    top = max(point['branches'], key=lambda b: b['batch'])
    rung = 2 * top['batch']
    cap = min(branch_lib.CAP_WINDOWS * point['window'],
              (self.run_steps - point['step']) * self.base_batch)
    if (rung > self.rung_limit or branch_lib.MIN_UPDATES * rung > cap or top['diverged']
        or not top['reached'] or point['updates'].get(str(top['batch'])) is None):
      return None
    return rung

  def rungs(self, points):
    """``{step: batch}`` of one more rung at every measured point, or None.

    The whole run's fit (:meth:`run_fit`) is what the rungs are for: while it
    is open above (its updates still halve at its largest batch, or its
    interval's upper end is past it), every measured point gets the next
    doubling, when every one can (:meth:`next_rung`): the run's updates are
    known only at the batches every point reached.
    """
    usable = [p for p in points if p.get('measured', True)]
    if not usable or not results.open_above(self.run_fit(points)):
      return None
    rungs = {p['step']: self.next_rung(p) for p in usable}
    if any(r is None for r in rungs.values()):
      return None
    return rungs

  def run_fit(self, points):
    """The whole run's fit (``fit_lib.whole_run``) over the measured points, each with its share."""
    usable = [p for p in points if p.get('measured', True)]
    for point, share in zip(points, fit_lib.point_shares([p['share_of_run'] for p in points])):
      point['share'] = share
    if usable and len(usable) < len(points):
      # The run's parts are those of the points that measured something.
      for point, share in zip(usable, fit_lib.point_shares([p['share_of_run'] for p in usable])):
        point['share'] = share
    if not usable:
      return {'updates': {}, 'b_crit': None, 'interval': None, 'at_least': None, 'shape': None,
              's_min': None, 'fitted_draws': 0, 'high_censored': False}
    return fit_lib.whole_run(usable, self.base_batch)

  def point_result(self, step, path, start, records, window):
    """The fit at one point (``fit_lib.measure_point``), with the noise scale and the costs."""
    curves = {b: {'curve': r['curve']} for b, r in records.items()
              if r['curve'] and not r['diverged']}
    if self.base_batch not in curves:
      point = {'measured': False, 'why': 'the 1x branch diverged', 'updates': {},
               'examples': {}, 'b_crit': None, 'interval': None}
    elif not window:
      point = {'measured': False, 'updates': {}, 'examples': {}, 'b_crit': None,
               'interval': None, 'why': (
                   f'the 1x branch\'s {self.branch_loss} loss did not fall by '
                   f'{fit_lib.MIN_PROGRESS_IN_NOISE:g}x its noise or {fit_lib.MIN_PROGRESS_IN_ERRORS:g} '
                   f'standard errors of its trend within '
                   f'{self.most_window(step)} {self.unit}')}
    else:
      curves = {b: c for b, c in curves.items() if b == self.base_batch or records[b]['target']
                is not None}
      point = fit_lib.measure_point(curves, start['loss'], self.base_batch, window)
    noise = self.noise_scale(records)
    point.update(step=step, checkpoint=os.path.abspath(path), share_of_run=step / self.run_steps,
                 heldout_examples=start.get('heldout_examples', 0),
                 b_simple=noise[0], b_simple_branch=noise[1],
                 updates={str(b): (point['updates'].get(b)) for b in sorted(records)},
                 examples={str(b): (point['examples'].get(b)) for b in sorted(records)},
                 # What each branch ran, in updates: a lower bound of S where it did not reach.
                 updates_read={str(b): records[b]['examples'] / b for b in sorted(records)
                               if not records[b].get('diverged')},
                 # The largest branch that reached the target: what "more than" is of.
                 largest_batch=max([b for b, u in point['updates'].items() if u is not None]
                                   or records),
                 window=window,
                 branches=[dict({k: r.get(k) for k in ('batch', 'iter_size', 'examples',
                                                       'updates', 'reached', 'diverged',
                                                       'wall_s')}, from_run=bool(r.get('from_run')))
                           for r in (records[b] for b in sorted(records))],
                 # What the branches trained (the run's own 1x curve counts with the run).
                 examples_read=sum(r['examples'] for r in records.values()
                                   if not r.get('from_run')),
                 evaluations=(sum(len(r['curve']) for r in records.values())
                              + (start['loss'] is not None)),
                 wall_s=round(sum(r['wall_s'] for r in records.values()) + start['wall_s'], 1))
    return point

  def noise_scale(self, records):
    """B_simple at a point: the 2x branch's estimate, else the smallest branch's that measured."""
    measured = sorted((b for b, r in records.items() if r.get('noise_scale')),
                      key=lambda b: (b != 2 * self.base_batch, b))
    for batch in measured:
      value = records[batch]['noise_scale'].get('b_simple')
      if value is not None and math.isfinite(value) and value > 0:
        return value, batch
    return None, None

  # --- the summary -------------------------------------------------------------------------

  def summarize(self, points):
    """The table, ``critical_batch.json``, ``critical_batch.png``, the schedule and the last lines."""
    usable = [p for p in points if p.get('measured', True)]
    run = self.run_fit(points)
    for point in points:
      point.pop('drawn_updates', None)  # the draws' updates, summed into the run's; not kept
    answer, interval, at_least = run['b_crit'], run['interval'], run['at_least']
    # The batches of every point: the ladder, and the rungs some points grew past it.
    batches = sorted({int(b) for p in points for b in p['updates']} | set(self.batches))
    proposed = fit_lib.growing_schedule(usable, self.base_batch, batches[-1])
    warmup = results.read_json(os.path.join(self.root, results.WARMUP_NAME)) or {}
    run_examples = self.run_steps * self.base_batch
    trained = warmup.get('examples', 0) + sum(p['examples_read'] for p in points)
    heldout = points[0]['heldout_examples'] if points else 0  # 0 for the online loss
    evaluated = sum(p['evaluations'] for p in points) * heldout
    summary = {
        'critical_batch': answer, 'interval': interval, 'critical_batch_at_least': at_least,
        # The whole run's updates at each batch every point reached (the parts' summed, in
        # updates of the run) and their fit, which the answer is.
        'run_updates': {str(b): s * self.run_steps for b, s in run['updates'].items()},
        'run_fit': {'s_min': (None if run['s_min'] is None else run['s_min'] * self.run_steps),
                    'shape': run['shape'], 'fitted_draws': run['fitted_draws'],
                    'high_censored': run['high_censored']},
        'unit': self.unit,
        'base_batch': self.base_batch, 'batches': batches, 'max_batch': self.max_batch,
        'points': points, 'run_steps': self.run_steps, 'branch_loss': self.branch_loss,
        'window_fewest': self.fewest, 'window_most': self.most,
        'cap_windows': branch_lib.CAP_WINDOWS, 'eval_every_steps': self.eval_every,
        'heldout_examples': heldout,
        'schedule': (None if proposed is None
                     else {'batches': proposed[0], 'boundaries': proposed[1]}),
        'noise_scale_setting': self.cfg['noise_scale'],
        'lr_scaling': (self.cfg['lr_scaling'] or {}).get('rule', 'linear (no lr_scaling)'),
        # The measurement's cost in runs of the config: the examples it trained on (the run
        # to its points and the branches), and its forward passes over held-out examples
        # (about a third of a training example's compute each).
        'compute': {'trained_examples': trained, 'heldout_examples_evaluated': evaluated,
                    'run_examples': run_examples,
                    'runs': round((trained + evaluated / 3.0) / run_examples, 3)},
        'wall_s': round(warmup.get('wall_s', 0.0) + sum(p['wall_s'] for p in points), 1),
        'command_wall_s': round(time.monotonic() - self.started, 1),
        'workers': self.workers, 'config': os.path.abspath(self.options.config)}
    summary_path = os.path.join(self.logdir, results.SUMMARY_NAME)
    plot_path = os.path.join(self.logdir, results.PLOT_NAME)
    results.write_json(summary_path, summary)
    results.plot(plot_path, points, answer, self.unit,
                 f'{os.path.basename(self.options.config)}: branches from '
                 f'{len(points)} points, target: the 1x branch\'s {self.branch_loss} loss at the '
                 'end of its window')
    wrote = [summary_path, plot_path]
    if proposed is not None:
      schedule_path = os.path.join(self.logdir, results.SCHEDULE_NAME)
      from core.files import write_text_atomically  # pylint: disable=import-outside-toplevel
      write_text_atomically(schedule_path, results.schedule_text(
          *proposed, os.path.basename(self.options.config)))
      wrote.append(schedule_path)
    self.say(f'critical batch along the run of {os.path.basename(self.options.config)} (target '
             f'at each point: the 1x branch\'s {self.branch_loss} loss at the end of its window):')
    for line in results.table_lines(points, batches, self.unit, summary):
      self.say('  ' + line)
    self.say(f'cost: {summary["compute"]["runs"]:.2f} runs of the config in compute '
             f'({trained} {self.unit} trained, {evaluated} evaluated), '
             f'{summary["wall_s"] / 60:.1f} min')
    self.say('wrote ' + ', '.join(os.path.abspath(p) for p in wrote))
    for line in results.last_lines(summary):
      self.say(line)
