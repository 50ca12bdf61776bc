"""``run.py --mode=critical_batch``: a workload's critical batch, measured from a checkpoint.

McCandlish et al. (2018) call critical the batch up to which a larger batch
costs (almost) no more examples to reach the same loss; Merrill et al. (2025)
measure it directly: from one checkpoint, short branches at growing batches
each read the same examples, and the critical batch is the largest whose loss
stays within a tolerance of the small batch's. This mode does that:

1. The checkpoint: ``--checkpoint`` of the run directory (``latest``,
   ``best`` or a path, as eval and export read it). When the logdir holds no
   checkpoint, the config's own run is trained first to ``--warmup_fraction``
   of its updates (the noise scale, and with it the critical batch, grows
   during training: the early transient says little about the rest), saved in
   the run directory as a train run saves it, and continued by the same
   command after a stop.
2. The branches: 1x, 2x, 4x, ... the config's global batch up to
   ``--max_batch``, the batch grown by ``iter_size`` (the micro-batch stays
   the config's, and so does the memory). Each restores the checkpoint's
   model and optimizer state and reads the same ``--branch_examples`` (the
   same micro-batches, from the checkpoint's data position) at the
   schedule's rate at the checkpoint, scaled for the branch's batch by the
   config's ``lr_scaling`` rule (linearly without one), held, then cooled
   linearly to 0 over the last ``--cooldown_fraction`` of its updates.
3. Each branch's held-out loss (the task's ``loss`` over the eval split) is
   compared with the 1x branch's (:mod:`framework.run.critical_batch_results`),
   and the gradient noise scale B_simple, which the branches at 2x and above
   measure for free (``noise_scale: auto``), is reported beside it.

Each finished branch keeps its result
(``critical_batch/<checkpoint>/branch_<batch>.json``); the same command again
skips them, and a branch a signal stopped starts again from the checkpoint.
Only the chief writes files. docs/running.md says why each default is what it is.
"""

import gc
import glob
import json
import os
import shutil
import time

from framework.config import config_file
from framework.run import critical_branches as branch_lib
from framework.run import critical_batch_results as results
from framework.run.resume import LaunchError
from framework.run.resume import enter_logdir



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
  from core import signals
  from core.params import ConfigError
  from data.base import DataError
  from framework.engines import distributed
  from optimizers import allreduce
  from framework.engines import start_watch
  from framework.run import checkpoints
  from framework.run import stopping
  from framework.run.launch import peer_failure
  from framework.run.resume import remove_if_empty
  from framework.run.trainer import TrainingError
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
  stop = stopping.StopRequest(logdir).install()
  pending = signals.take_pending()
  if pending is not None:
    stop.take(pending)
  start_watch.stop_handlers_ready()
  finished = False
  try:
    status = Measurement(options, configs, logdir, resume, dtype_line, stop, batches,
                         max_batch).run()
    finished = True
    return status
  except QuietRefusal:
    return 2
  except (ConfigError, DataError, results.ResultsError) as exc:
    raise LaunchError(config_file.format_error(exc) if isinstance(exc, ConfigError)
                      else str(exc)) from None
  except (TrainingError, checkpoints.CheckpointError) as exc:
    raise LaunchError(str(exc), status=1) from None
  except Exception as exc:  # pylint: disable=broad-except
    failure = peer_failure(exc, distributed, logdir)
    if failure is None:
      raise
    raise LaunchError(failure, status=1) from None
  finally:
    signals.ending()
    stop.uninstall()
    if lock is not None:
      lock.release()
      if not finished and lock.made_logdir:
        remove_if_empty(logdir)


class Measurement:
  """One ``--mode=critical_batch`` command: the checkpoint, the branches and the summary.

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
    self.workers = allreduce.size()
    self.chief = distributed.is_chief()
    self.log = distributed.log
    self.tolerance = (options.tolerance if options.tolerance is not None
                      else branch_lib.DEFAULT_TOLERANCE)
    self.fraction = (options.warmup_fraction if options.warmup_fraction is not None
                     else branch_lib.DEFAULT_WARMUP_FRACTION)
    self.cooldown = (options.cooldown_fraction if options.cooldown_fraction is not None
                     else branch_lib.DEFAULT_COOLDOWN_FRACTION)
    self.started = time.monotonic()
    self.results_root = os.path.join(logdir, results.RESULTS_DIR)

  def say(self, line):
    """A line of the chief's, printed now (the table's lines keep their columns)."""
    if self.chief:
      print(line, flush=True)

  # --- the command -------------------------------------------------------------------------

  def run(self):
    """Measures the branches not measured yet and writes the summary; returns the exit status."""
    # pylint: disable=import-outside-toplevel
    from framework.run.trainer import RunStopped, Trainer
    base = Trainer(self.cfg, self.configs['eval'], self.logdir, overrides=self.options.set)
    self.unit = base.task.example_unit
    epoch = (base.train_data.train_batches_per_epoch(base.batch_size) * base.batch_size
             * self.workers)
    if self.options.max_batch is None:
      self.fit_default_ladder(epoch)
    self.examples = results.choose_examples(self.options.branch_examples, epoch,
                                            self.batches[-1], self.unit)
    if self.batches[-1] != self.max_batch:
      self.log(f'note: --max_batch {self.max_batch} is no power-of-two multiple of the config\'s '
               f'batch {self.batches[0]}; the largest branch is {self.batches[-1]}')
    try:
      path, self.warmup = self.starting_checkpoint(base)
    except RunStopped as exc:
      return self.stopped_in_warmup(exc)
    self.checkpoint = os.path.abspath(path)
    self.step = branch_lib.checkpoint_step(path)
    self.directory = os.path.join(self.results_root, os.path.basename(path))
    self.rate = float(self.schedule_rate(base))
    self.start = self.start_metrics(base, path)
    del base
    gc.collect()
    plan = self.plan()
    for index, (batch, record) in enumerate(plan):
      if record is not None:
        continue
      try:
        self.measure_branch(batch, index)
      except RunStopped as exc:
        return self.stopped_in_branch(exc, batch, plan)
      signum = self.stop.agreed()
      if signum and any(r is None for _, r in plan[index + 1:]):
        self.say(f'stopped by {self.stop.name or "a signal to another worker"} after the '
                 f'branch at batch {batch}: its result is kept in {self.directory}; the same '
                 f'command measures the rest: {self.resume}')
        self.stop.saved = results.branch_path(self.directory, batch)
        from framework.run import stopping  # pylint: disable=import-outside-toplevel
        return stopping.exit_status(signum)
    if self.chief:
      self.summarize()
    return 0

  def fit_default_ladder(self, epoch):
    """Ends the default ladder where an epoch still gives the largest branch its fewest updates."""
    fitting = [b for b in self.batches if results.MIN_UPDATES * b <= epoch] or self.batches[:1]
    if len(fitting) < len(self.batches):
      self.log(f'note: one epoch of the training split ({epoch} {self.unit}) gives a branch '
               f'of {self.batches[-1]} {self.unit} fewer than {results.MIN_UPDATES} updates: the '
               f'largest branch is {fitting[-1]} (--max_batch sets it)')
      self.batches, self.max_batch = fitting, fitting[-1]

  def schedule_rate(self, base):
    """The learning rate the config's schedule gives at the checkpoint's step."""
    from framework.config import schedule  # pylint: disable=import-outside-toplevel
    return schedule.learning_rate_fn(base.config, base.steps_per_epoch)(self.step)

  # --- the checkpoint ----------------------------------------------------------------------

  def starting_checkpoint(self, base):
    """The checkpoint the branches start from, trained first when the logdir holds none.

    Returns:
      ``(path, the warm-up's record or None)``.
    """
    # pylint: disable=import-outside-toplevel
    from framework.run import checkpoints
    from framework.run import warm_start
    if self.options.checkpoint != 'latest':
      return warm_start.choose(self.logdir, self.options.checkpoint, base.task.BEST_METRIC), None
    path, damaged = checkpoints.newest_intact(self.logdir)
    if damaged:
      self.log(checkpoints.describe_fallback(path, damaged, using='branching from'))
    marker = self.read_warmup()
    target = max(1, int(round(self.fraction * base.max_steps)))
    if path is not None and (marker is None or branch_lib.checkpoint_step(path) >= target):
      if self.options.warmup_fraction is not None and marker is None:
        self.log(f'--warmup_fraction not used: {self.logdir} holds {os.path.basename(path)}, '
                 'which the branches start from')
      ours = marker is not None and branch_lib.checkpoint_step(path) == marker.get('steps')
      return path, (marker if ours else None)
    if path is None and marker is None:
      self.check_new_logdir()
    marker = {'steps': target, 'fraction': self.fraction, 'run_steps': base.max_steps,
              'wall_s': (marker or {}).get('wall_s', 0.0) if path is not None else 0.0}
    self.warm_up(base, marker, resuming=path is not None)
    path, _ = checkpoints.newest_intact(self.logdir)
    return path, marker

  def read_warmup(self):
    try:
      with open(os.path.join(self.results_root, results.WARMUP_NAME), encoding='utf-8') as f:
        marker = json.load(f)
    except (OSError, ValueError):
      return None
    return marker if isinstance(marker, dict) else None

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
      names = sorted(n for n in os.listdir(self.logdir) if n != rundir.LOCK_NAME)
      if names:
        problem = (f'logdir {self.logdir} holds no checkpoint to branch from, and '
                   f'--mode={branch_lib.MODE} '
                   f'would train one there first, but it is not empty (it holds {names[0]}'
                   f'{" and more" if len(names) > 1 else ""}); choose a new or empty --logdir, '
                   'or a run directory with checkpoints')
    if distributed.max_over_workers(int(problem is not None)):
      raise LaunchError(problem, status=2) if problem else QuietRefusal()

  def warm_up(self, base, marker, resuming):
    """Trains the config's own run to ``marker['steps']``, saved in the logdir as a train run."""
    # pylint: disable=import-outside-toplevel
    from framework.run.resume import check_resume_config
    from framework.run.resume import record_configs
    if resuming:
      check_resume_config(self.logdir, self.cfg)
      restored = base.restore()
      self.log(f'continuing the warm-up before branching: {restored} (step {base.global_step}) '
               f'to step {marker["steps"]}')
    else:
      self.log(f'no checkpoint in {self.logdir} to branch from: training the config first for '
               f'{marker["steps"]} of its {marker["run_steps"]} steps (--warmup_fraction '
               f'{self.fraction:g}), its schedule that of the whole run')
    if self.chief:
      os.makedirs(self.results_root, exist_ok=True)
      results.write_json(os.path.join(self.results_root, results.WARMUP_NAME), marker)
      record_configs(self.options, dict(self.configs, train=base.config), self.logdir,
                     base.global_step, self.dtype_line)
    # The schedule stays the whole run's (its warm-up and decay); the run stops early.
    base.max_steps = marker['steps']
    base.begin()
    started = time.monotonic()
    try:
      base.train(evaluate_every=None, stop=self.stop)
    finally:
      # The warm-up's cost, over every command that trained part of it.
      marker['wall_s'] = round(marker.get('wall_s', 0.0) + time.monotonic() - started, 1)
      if self.chief:
        results.write_json(os.path.join(self.results_root, results.WARMUP_NAME), marker)

  def stopped_in_warmup(self, exc):
    from framework.run import stopping  # pylint: disable=import-outside-toplevel
    self.stop.saved = exc.checkpoint
    self.say(f'stopped by {self.stop.name or "a signal to another worker"} at step {exc.step} of '
             f'the warm-up before branching: saved {exc.checkpoint}; the same command goes on: '
             f'{self.resume}')
    return stopping.exit_status(exc.signum)

  def start_metrics(self, base, path):
    """The held-out metrics at the checkpoint (the fit of the checkpoint checked on the way).

    Evaluated once per checkpoint and kept beside its branches.
    """
    branch_lib.restore_for_branch(base, path)
    record_path = os.path.join(self.directory, results.START_NAME)
    try:
      with open(record_path, encoding='utf-8') as f:
        record = json.load(f)
      if record.get('checkpoint') == self.checkpoint:
        return record
    except (OSError, ValueError, AttributeError):
      pass
    started = time.monotonic()
    metrics = branch_lib.plain_numbers(base.evaluate())
    record = {'checkpoint': self.checkpoint, 'step': self.step, 'metrics': metrics,
              'wall_s': round(time.monotonic() - started, 1)}
    self.log(f'{os.path.basename(path)} (step {self.step}): held-out '
             f'{base.task.describe_eval(metrics)}')
    if self.chief:
      os.makedirs(self.directory, exist_ok=True)
      results.write_json(record_path, record)
    return record

  # --- the branches ------------------------------------------------------------------------

  def settings(self, batch):
    """What a branch's result depends on besides its batch (``results.SETTINGS``)."""
    factor = batch // self.batches[0]
    return {'checkpoint': self.checkpoint, 'checkpoint_step': self.step,
            'examples': self.examples, 'batch_size_per_gpu': self.cfg['batch_size_per_gpu'],
            'learning_rate': branch_lib.branch_learning_rate(self.cfg, self.rate, factor,
                                                             self.workers),
            'cooldown_fraction': self.cooldown}

  def plan(self):
    """``[(batch, finished record or None)]``; says which are kept and how the rate is chosen.

    Raises:
      ResultsError: a finished branch was measured with other settings.
    """
    plan = []
    for batch in self.batches:
      record = results.read_branch(self.directory, batch)
      if record is not None:
        change = results.settings_change(record, self.settings(batch))
        if change is not None:
          raise results.ResultsError(
              f'{results.branch_path(self.directory, batch)}: measured with other settings '
              f'({change}); give the flags it was measured with, or move {self.directory} '
              'away to measure anew')
      plan.append((batch, record))
    kept = [batch for batch, record in plan if record is not None]
    rule = self.cfg['lr_scaling']
    if rule is not None:
      how = f'times the lr_scaling {rule["rule"]} rule\'s ratio for its batch'
    else:
      how = 'times its batch over the config\'s (no lr_scaling in the config: linear scaling)'
    self.log(f'branches from {os.path.basename(self.checkpoint)} (step {self.step}): '
             f'{", ".join(map(str, self.batches))} {self.unit}, each on {self.examples} '
             f'{self.unit}; learning rate held at {self.rate:.6g}, the schedule\'s at the '
             f'checkpoint, {how}, '
             + (f'cooled to 0 over the last {100 * self.cooldown:g}% of each branch'
                if self.cooldown else 'to the end of each branch')
             + f'; tolerance {self.tolerance:g}')
    if kept:
      self.log(f'{len(kept)} of {len(plan)} branches measured before, kept: '
               f'{", ".join(map(str, kept))} (in {self.directory})')
    return plan

  def measure_branch(self, batch, index):
    """Trains and evaluates one branch; the chief writes its record."""
    # pylint: disable=import-outside-toplevel
    from framework.engines import distributed
    from optimizers import allreduce  # pylint: disable=import-outside-toplevel
    from framework.run import evaluation
    from framework.run import summaries
    from framework.run.trainer import Trainer, TrainingError
    started = time.monotonic()
    factor = batch // self.batches[0]
    updates = self.examples // batch
    settings = self.settings(batch)
    rate = settings['learning_rate']
    branch_dir = os.path.join(self.directory, f'branch_{batch}')
    if self.chief:
      shutil.rmtree(branch_dir, ignore_errors=True)  # what a stopped attempt left
    self.log(f'branch {index + 1} of {len(self.batches)}: batch {batch} (iter_size '
             f'{self.cfg["iter_size"] * factor}), {updates} updates at learning rate {rate:.6g}')
    cfg = branch_lib.branch_config(self.cfg, factor, updates, rate, self.cooldown)
    trainer = Trainer(cfg, self.configs['eval'], self.logdir, overrides=self.options.set)
    # Built with the run directory, the data layers read what the run derived from its data
    # (statistics, vocabularies); the branch writes its checkpoints and events in its own.
    trainer.logdir = branch_dir
    branch_lib.restore_for_branch(trainer, self.checkpoint)
    trainer.begin()
    diverged = metrics = None
    try:
      trainer.train(evaluate_every=None, stop=self.stop)
    except TrainingError as exc:
      diverged = str(exc)
      self.log(f'branch at batch {batch} diverged: {diverged}')
    if diverged is None:
      metrics = branch_lib.plain_numbers(trainer.evaluate())
      writer = summaries.LazyWriter(os.path.join(branch_dir, summaries.EVAL_DIR), self.chief)
      evaluation.report(trainer.global_step, metrics, writer, trainer.task,
                        split=evaluation.split_of(trainer.eval_data))
      writer.close()
    noise = getattr(trainer, 'noise_scale', None)
    noise = branch_lib.plain_numbers(noise()) if callable(noise) else None
    del trainer
    gc.collect()
    loss = None if metrics is None else results.finite_or_none(metrics['loss'])
    record = {'batch': batch, 'iter_size': cfg['iter_size'], 'updates': updates,
              'examples': self.examples, 'unit': self.unit, 'learning_rate': rate,
              'cooldown_fraction': self.cooldown, 'heldout_loss': loss, 'metrics': metrics,
              'diverged': diverged, 'noise_scale': noise or None, 'workers': allreduce.size(),
              'wall_s': round(time.monotonic() - started, 1), 'settings': settings}
    if self.chief:
      results.write_json(results.branch_path(self.directory, batch), record)
      for path in glob.glob(os.path.join(glob.escape(branch_dir), 'ckpt-*')) + [
          os.path.join(branch_dir, 'checkpoint')]:
        try:
          os.remove(path)  # the result is kept; the branch's weights are not needed
        except OSError:
          pass

  def stopped_in_branch(self, exc, batch, plan):
    from framework.run import stopping  # pylint: disable=import-outside-toplevel
    self.stop.saved = exc.checkpoint
    kept = sum(1 for b, r in plan if r is not None or b < batch)
    self.say(f'stopped by {self.stop.name or "a signal to another worker"} in the branch at '
             f'batch {batch} (update {exc.step} of {self.examples // batch}): the same command '
             f'measures it again from {os.path.basename(self.checkpoint)}, keeping the {kept} '
             f'finished branch(es): {self.resume}')
    return stopping.exit_status(exc.signum)

  # --- the summary -------------------------------------------------------------------------

  def summarize(self):
    """The table, ``critical_batch.json``, ``critical_batch.png`` and the two last lines."""
    records = [results.read_branch(self.directory, batch) for batch in self.batches]
    critical, gaps = results.critical_batch(records, self.tolerance)
    b_simple, noise_batch = results.noise_scale(records, self.batches[0])
    branches = [{'batch': r['batch'], 'iter_size': r['iter_size'], 'updates': r['updates'],
                 'examples': r['examples'], 'heldout_loss': r['heldout_loss'], 'gap': g,
                 'wall_s': r['wall_s'], 'learning_rate': r['learning_rate'],
                 'noise_scale': (r['noise_scale'] or {}).get('b_simple'),
                 'diverged': r['diverged']} for r, g in zip(records, gaps)]
    summary = {
        'critical_batch': critical, 'unit': self.unit, 'tolerance': self.tolerance,
        'noise_scale': b_simple, 'noise_scale_branch': noise_batch, 'branches': branches,
        'checkpoint': self.checkpoint, 'checkpoint_step': self.step,
        'checkpoint_heldout_loss': results.finite_or_none(self.start['metrics'].get('loss')),
        'warmup': self.warmup, 'learning_rate_at_checkpoint': self.rate,
        'lr_scaling': (self.cfg['lr_scaling'] or {}).get('rule', 'linear (no lr_scaling)'),
        'base_batch': self.batches[0], 'max_batch': self.max_batch,
        'branch_examples': self.examples, 'workers': self.workers,
        # The measurement's cost, whichever commands did its parts: the warm-up (when the
        # branches start from it), the checkpoint's evaluation and the branches.
        'wall_s': round(sum(r['wall_s'] for r in records) + self.start.get('wall_s', 0.0)
                        + (self.warmup or {}).get('wall_s', 0.0), 1),
        'command_wall_s': round(time.monotonic() - self.started, 1),
        'config': os.path.abspath(self.options.config)}
    summary_path = os.path.join(self.logdir, results.SUMMARY_NAME)
    plot_path = os.path.join(self.logdir, results.PLOT_NAME)
    results.write_json(summary_path, summary)
    results.plot(plot_path, records, self.tolerance, critical, b_simple, self.unit,
                 f'{os.path.basename(self.options.config)} from step {self.step}: '
                 f'{self.examples} {self.unit} per branch, tolerance {self.tolerance:g}')
    self.say(f'critical batch from {os.path.basename(self.checkpoint)} (step {self.step}), '
             f'held-out loss after {self.examples} {self.unit} per branch:')
    for line in results.table_lines(records, gaps, critical, self.unit):
      self.say('  ' + line)
    self.say(f'wrote {os.path.abspath(summary_path)} and {os.path.abspath(plot_path)}')
    for line in results.last_lines(critical, self.batches, b_simple, noise_batch, self.unit):
      self.say(line)
