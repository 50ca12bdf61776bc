"""The train loop: steps to ``max_steps`` and decides when to stop, save, summarize and evaluate.

``Trainer.train`` gives :func:`train` the pieces of the run the loop calls,
as one :class:`LoopParts` (the compiled step, the batches, the checkpoint and
model, the evaluations, the precise batch-norm block, the data check, the
run's sizes and task), and no trainer. :func:`train`

1. opens what the run writes (``framework.run.run_outputs.RunOutputs``: the periodic checkpoints,
   the best checkpoint, the train and eval summary writers; the chief alone
   writes), so that a logdir that cannot be written fails before any step;
2. runs a :class:`TrainLoop` over the compiled step; between steps the loop
   keeps the run's bookkeeping from the metrics each step returns (its
   global step among them): the divergence check (``framework.run.divergence``), the
   images/sec window, the train summaries, the periodic checkpoints, the
   evaluations (with the best checkpoint), and the stop on a signal, which
   saves and raises ``stopping.RunStopped``;
3. turns the TensorFlow errors a user can act on into one line: unreadable
   input into ``DataError``, a failed write into ``CheckpointError``.

Metrics are read by the names of the run's task (``framework.tasks``): its
train metrics, its eval metrics and the one that picks the best checkpoint,
in its direction.
"""

import dataclasses
import json
import math
import os
import signal
import time
from typing import Any, Callable, ContextManager, Iterator, Optional, Sequence

import tensorflow as tf

from core import files
from data.base import DataError
from data.base import data_error_in
from framework.engines import console
from framework.engines import distributed
from framework.run import batch_policy
from framework.run import checkpoints
from framework.run import evaluation
from framework.run import run_outputs
from framework.run import samples
from framework.run import summaries
from framework.run.checkpoints import CheckpointError
from framework.run.divergence import Divergence
from framework.run.run_outputs import RunOutputs
from framework.run.stopping import RunStopped
from framework.run.stopping import StopRequested

# The images/sec rate is measured over a window of steps that starts again after this long.
_RATE_WINDOW_SECONDS = 10.0
_WRITE_FAILURES = ('No space left', 'Read-only file system', 'Permission denied',
                   'Disk quota exceeded')
# In the logdir while the end of training (precise_bn, last evaluation) that a
# signal cut off is still to do; the resumed run does it.
ENDING_MARK = 'ending.json'



@dataclasses.dataclass(frozen=True)
class Sizes:
  """The run's sizes, as the trainer counted them.

  Attributes:
    max_steps: the global step training ends at.
    steps_per_epoch: applied updates per epoch.
    batch_size: examples per micro-batch on one worker.
    num_workers: the workers training together.
    iter_size: micro-batches per applied update.
  """
  max_steps: int
  steps_per_epoch: float
  batch_size: int
  num_workers: int
  iter_size: int

  @property
  def global_batch(self):
    """Examples per applied update over all workers."""
    return self.batch_size * self.num_workers * self.iter_size


@dataclasses.dataclass(frozen=True)
class LoopParts:
  """What the train loop calls of a run, and nothing more (``Trainer.train`` makes it).

  Attributes:
    config: the run's train config, read for its cadences (``save_checkpoint_steps``,
      ``save_summaries_steps``, ``print_loss_steps``, ``precise_bn``), the divergence
      check (``dtype``, ``loss_scaling``) and the run's config summary.
    overrides: the run's ``--set`` strings (their keys are hyperparameters).
    task: the run's ``framework.tasks`` task: the names of its metrics, the one
      that picks the best checkpoint and its direction, its unit.
    sizes: the run's :class:`Sizes`.
    logdir: the run directory.
    start_step: the global step training starts at.
    step: the compiled micro-step, ``step(iterator) -> {name: tensor}`` with
      ``global_step``, ``loss`` and the task's train metrics.
    open_batches: ``f() -> iterator`` of the training batches from the data position.
    check_data: ``f()`` after each micro-step; raises ``DataError`` when too
      many records were skipped as corrupt.
    checkpoint: the ``tf.train.Checkpoint`` of the run's state.
    model: the model, whose variables are checked before each save.
    precise_bn: ``f(step, keep, when=True, stop=None)``, the context manager
      of ``Trainer.precise_bn``.
    evaluate: ``f() -> metrics`` over the eval split.
    final_evaluate: ``f() -> (metrics, step, split)`` of the best checkpoint on
      the final split, or None when the run has none.
    final_task: the task that decoded the final split and describes its line,
      when it is not ``task`` (a wider beam on the test split); None: ``task``.
    eval_split: the name of the split ``evaluate`` reads (the eval data
      layer's ``split``), named by the eval lines; None: unknown.
    batch_control: the run's ``framework.run.batch_policy.BatchControl`` when
      its batch grows (the loop asks it after each applied update), else None.
    learning_rate: ``f() -> tensor``, the rate of the next update (for the
      line of a batch change).
    describe_chain: ``f() -> str``, the update's chain of stages as it was
      built by the first step (``GradientPipeline.describe_chain``), said once.
  """
  config: dict
  overrides: Sequence[str]
  task: Any
  sizes: Sizes
  logdir: str
  start_step: int
  step: Callable[[Iterator], dict]
  open_batches: Callable[[], Iterator]
  check_data: Callable[[], None]
  checkpoint: tf.train.Checkpoint
  model: Any
  precise_bn: Callable[..., ContextManager]
  evaluate: Callable[[], dict]
  final_evaluate: Callable[[], Optional[tuple]]
  final_task: Any = None
  eval_split: Optional[str] = None
  batch_control: Any = None
  learning_rate: Optional[Callable[[], Any]] = None
  describe_chain: Optional[Callable[[], str]] = None


def _due(step, last, every):
  """Whether ``step`` has reached a multiple of ``every`` that ``last`` had not (None, 0: never).

  Counted from step 0, not from the start of this process, so a resumed run
  saves and evaluates at the steps a run straight through does.
  """
  return bool(every) and step // every > last // every


@dataclasses.dataclass(frozen=True)
class Probe:
  """A look at the run every ``every`` steps and at its last one, which may end training early.

  Attributes:
    every: the steps between two looks (counted from step 0, as the cadences are).
    look: ``f(step) -> bool``, called on every worker after the micro-step
      that reached the step; True ends training at that step (the end of
      training, its checkpoint, then follows as at ``max_steps``).
    each: ``f(values)``, called after every micro-step with its metrics (numpy
      values: the micro-batch's ``loss`` among them), or None.
  """
  every: int
  look: Callable[[int], bool]
  each: Optional[Callable[[dict], None]] = None


def train(parts, evaluate_every=None, stop=None, probe=None):
  """Trains the run of ``parts`` until its ``max_steps``; ``Trainer.train`` documents the contract.

  Args:
    parts: the run's :class:`LoopParts`.
    evaluate_every: evaluate every this many steps and at the end, or None.
    stop: a ``stopping.StopRequest``, or None.
    probe: a :class:`Probe`, or None.

  Returns:
    The final eval metrics when evaluating, else None.
  """
  outputs = RunOutputs(parts.checkpoint, parts.model, parts.logdir, parts.config,
                       trains=parts.start_step < parts.sizes.max_steps, task=parts.task,
                       start_step=parts.start_step)
  try:
    with outputs.writer.as_default():
      if outputs.writes:  # at every start: a resumed run's values replace the first ones
        run_outputs.write_run_config(parts)
      eval_metrics = TrainLoop(parts, outputs, evaluate_every, stop, probe).run()
    outputs.close()
  except tf.errors.OpError as exc:
    error = _user_error(exc, parts.logdir)
    if error is None:
      raise
    raise error from None
  return eval_metrics


def _user_error(exc, logdir):
  """The one-line error a TensorFlow error in training means for the user, or None."""
  data_error = data_error_in(exc)
  if data_error is not None:
    return DataError(data_error)
  if isinstance(exc, tf.errors.DataLossError):
    return DataError(f'corrupt input data: {str(exc).splitlines()[0]}')
  if _is_write_failure(exc, logdir):
    kept = checkpoints.latest_listed(logdir)
    return CheckpointError(f'writing to {logdir} failed: '
                           f'{checkpoints.describe_write_failure(exc, logdir)}; '
                           f'kept: {kept or "no checkpoint"}')
  return None


def _is_write_failure(exc, logdir):
  """Whether a TensorFlow error is a failed write into the logdir (events, checkpoints)."""
  message = str(exc)
  return logdir in message or os.path.abspath(logdir) in message or any(
      text in message for text in _WRITE_FAILURES)



class _Rate:
  """Images per second over the steps of a window that starts again every few seconds."""

  def __init__(self, images_per_step):
    self.images_per_step = images_per_step
    self.start = time.perf_counter()
    self.images = 0
    self.elapsed = 0.0
    self.value = 0.0  # the rate at the last step

  def step(self):
    """Counts one step's images; returns the window's rate."""
    self.images += self.images_per_step
    self.elapsed = time.perf_counter() - self.start
    self.value = self.images / self.elapsed if self.elapsed > 0 else 0.0
    return self.value

  def roll(self):
    """Starts a new window once the current one is long enough."""
    if self.elapsed > _RATE_WINDOW_SECONDS:
      self.start, self.images = time.perf_counter(), 0


class TrainLoop:
  """One ``Trainer.train`` call, from its first step to ``max_steps`` or a stop.

  Args:
    parts: the run's :class:`LoopParts`.
    outputs: its open :class:`RunOutputs`.
    evaluate_every: evaluate every this many steps and at the end, or None.
    stop: a ``stopping.StopRequest``, or None.
    probe: a :class:`Probe`, or None.
  """

  def __init__(self, parts, outputs, evaluate_every, stop, probe=None):
    self.parts = parts
    self.config = parts.config
    self.task = parts.task
    self.sizes = parts.sizes
    self.outputs = outputs
    self.evaluate_every = evaluate_every
    self.stop = stop
    self.probe = probe
    # The global step, as the last micro-step returned it.
    self.step = parts.start_step
    self.last_probe = self.step
    self.probe_done = False  # the probe asked to end training
    # The steps of the last checkpoint, train summary, evaluation and printed samples.
    self.last_saved = self.last_summary = self.last_eval = self.last_samples = self.step
    self.last_recorded = self.step  # the step of the record's last train event
    self.eval_metrics = None  # the last evaluation's metrics (the final split's at the end)
    self.values = None  # the last micro-step's metrics, as numpy values
    self.rate = _Rate(self.sizes.batch_size * self.sizes.num_workers)
    self.control = parts.batch_control
    self.divergence = Divergence(self.config, self.sizes.iter_size if self.control is None
                                 else self.control.current_iter_size, self.step)
    self.progress = None  # the console's progress, shown while run() steps
    self.advised = False  # whether the batch was said to be past the noise scale

  def run(self):
    """Steps until ``max_steps``; returns the final eval metrics when evaluating, else None.

    Raises:
      RunStopped: after a requested stop was saved.
      TrainingError: non-finite values, or too many corrupt records.
    """
    step_fn = self.parts.step
    iterator = self.parts.open_batches()
    self._open_progress()
    chain_said = self.parts.describe_chain is None
    while self.step < self.sizes.max_steps and not self.probe_done:
      signum = self.stop.agreed() if self.stop is not None else 0
      if signum:
        self._stop(signum)
      metrics = step_fn(iterator)
      if not chain_said:
        # The first step built the chain: each stage's form is known from here on.
        distributed.log(f'update chain: {self.parts.describe_chain()}')
        chain_said = True
      self._after_step({k: v.numpy() for k, v in metrics.items()})
    if self.probe is not None and not self.probe_done and self.step > self.last_probe:
      self.last_probe = self.step
      self.probe.look(self.step)  # the last step is always looked at
    self.progress.close()
    try:
      self._end()
    except StopRequested as exc:
      self._stop(exc.signum, ending=True)
    if self.stop is not None and self.stop.signum is not None:
      distributed.log(f'{self.stop.name} came during the last evaluation, after the last '
                      'checkpoint: the run is complete and ends normally')
    self._record_end()
    if distributed.is_chief():
      remove_ending_mark(self.parts.logdir)
    return self.eval_metrics

  def _end(self):
    """The end of training: precise batch norm, the last checkpoint, the last evaluation.

    A signal during precise_bn, or after the last checkpoint and before the
    last evaluation, raises StopRequested; the evaluation itself runs to its end.
    """
    step = self.step
    with self.parts.precise_bn(step, keep=True, stop=self.stop):
      self.outputs.save(step)
      self.last_saved = step
      signum = self.stop.agreed() if self.stop is not None else 0
      if signum:
        raise StopRequested(signum)
      if self.evaluate_every is not None:
        self._evaluate(step)
    if self.evaluate_every is not None:
      self._final_evaluate()

  def _open_progress(self):
    cfg, sizes = self.config, self.sizes
    distributed.log(
        f'training {cfg["model"] if isinstance(cfg["model"], str) else "model"} for '
        f'{sizes.max_steps} steps ({sizes.steps_per_epoch} steps/epoch), global batch '
        f'{sizes.global_batch} = {sizes.batch_size} per worker x {sizes.num_workers} '
        f'worker(s) x iter_size {sizes.iter_size}; starting at step {self.step}'
        + (f'; {self.control.describe()}' if self.control is not None else ''))
    self.outputs.record.add('start', self.step, max_steps=sizes.max_steps,
                            steps_per_epoch=sizes.steps_per_epoch,
                            global_batch=self._current_batch(), start_batch=sizes.global_batch,
                            batch_size_per_gpu=sizes.batch_size, workers=sizes.num_workers,
                            iter_size=sizes.iter_size, unit=self.task.example_unit,
                            metric=self.task.BEST_METRIC,
                            higher_is_better=self.task.HIGHER_IS_BETTER,
                            batch_policy=(self.control.policy_name if self.control is not None
                                          else 'fixed'))
    self.progress = console.Progress(
        sizes.max_steps, self.step, sizes.steps_per_epoch, cfg['print_loss_steps'],
        enabled=distributed.is_chief(), show_loss_scale=console.loss_scaling_on(cfg),
        metrics=self.task.CONSOLE_METRICS, unit=self.task.example_unit)

  def _after_step(self, values):
    """The bookkeeping after one micro-step whose metrics are ``values``."""
    cfg = self.config
    self.values = values
    step = self.step = int(values['global_step'])
    if self.probe is not None and self.probe.each is not None:
      self.probe.each(values)
    if self.control is not None and values['applied']:
      self._batch_policy(step, values)
    self.divergence.check(step, values['loss'], self.outputs.latest)
    self.parts.check_data()
    rate = self.rate.step()
    self.progress.update(step, values, rate)
    if _due(step, self.last_recorded, cfg['print_loss_steps']):
      self.last_recorded = step
      self._record_train(step, values, rate)
    self._advise(step, values)
    if self.outputs.writes and self._summary_due(step):
      self.last_summary = step
      self._write_summaries(step)
    self.rate.roll()
    if _due(step, self.last_samples, cfg.get('print_samples_steps')):
      self.last_samples = step
      samples.print_samples(self.parts, step)
    if _due(step, self.last_saved, cfg['save_checkpoint_steps']):
      self.outputs.save(step)
      self.last_saved = step
    if _due(step, self.last_eval, self.evaluate_every) and step < self.sizes.max_steps:
      try:
        with self.parts.precise_bn(step, keep=False, when=cfg['precise_bn'] and
                                   cfg['precise_bn']['before_each_eval'], stop=self.stop):
          self._evaluate(step)
      except StopRequested as exc:
        self._stop(exc.signum)
      self.last_eval = step
    if self.probe is not None and _due(step, self.last_probe, self.probe.every):
      self.last_probe = step
      self.probe_done = bool(self.probe.look(step))

  def _batch_policy(self, step, values):
    """Asks the batch policy after an applied update; a change is one line and two scalars."""
    change = self.control.decide(values, self.sizes.steps_per_epoch)
    if change is not None:
      rate = float(self.parts.learning_rate())
      distributed.log(self.control.describe_change(*change, values, rate, self.task.example_unit))
      self.outputs.record.add('batch', step, old=change[0], new=change[1],
                              iter_size=change[1] // self.control.unit, learning_rate=rate,
                              updates=values['updates'], noise_scale=values.get('noise_scale'))
      # The step's line shows the next update's batch and rate, as it does without a change.
      values.update(global_batch=change[1], next_learning_rate=rate)
      if self.outputs.writes:
        self.control.write_scalars(step)
    # The run ends at max_steps, as a fixed batch does: no update reads past it.
    short = self.control.fit_to_end(self.sizes.max_steps)
    if short is not None:
      rate = float(self.parts.learning_rate())
      distributed.log(self.control.describe_end(short, self.sizes.max_steps, rate))
      values.update(global_batch=short, next_learning_rate=rate)

  def _advise(self, step, values):
    """Says once when the global batch is above twice the measured noise scale.

    The estimate is trusted once its moving average spans its window (about
    1/(1 - decay) updates) or a quarter of the run, whichever comes first.
    """
    # A run looked at by a probe is --mode=critical_batch's own, where the advice points.
    if self.advised or self.probe is not None or 'noise_scale' not in values or (
        self.control is not None and self.control.policy_name == 'noise_scale'):
      return
    window = 1.0 / (1.0 - self.config['noise_scale_params']['decay'])
    if values['noise_updates'] < min(window, self.sizes.max_steps / 4):
      return
    b_simple, unit = float(values['noise_scale']), self.task.example_unit
    batch = int(values.get('global_batch', self.sizes.global_batch))
    if math.isfinite(b_simple) and 0 < b_simple and batch > 2 * b_simple:
      self.advised = True
      distributed.log(
          f'the global batch ({batch} {unit}) is {batch / b_simple:.1f}x the measured gradient '
          f'noise scale (B_simple {b_simple:.0f} {unit} at step {step}): past it, a larger batch '
          'buys few fewer updates for its extra examples; see docs/critical_batch.md, and '
          'measure the critical batch with --mode=critical_batch')

  def _summary_due(self, step):
    """Train scalars are written every save_summaries_steps updates and at the last one.

    Only after an update: with iter_size > 1 the step stays the same for
    several micro-steps, and a resumed run starts at a step already written.
    An update of a grown batch advances the step by several, past a multiple
    as often as onto one: it is written once it reaches or passes one.
    """
    return step > self.last_summary and (_due(step, self.last_summary,
                                              self.config['save_summaries_steps'])
                                         or step >= self.sizes.max_steps)

  def _write_summaries(self, step):
    # The examples seen are the step x the starting batch (a growing batch counts its steps so).
    summaries.write_train_scalars(step, self.values, self.rate.value,
                                  self.sizes.steps_per_epoch, self.sizes.global_batch,
                                  self.task.TRAIN_METRICS, self.task.example_unit)
    if self.control is not None:
      self.control.write_scalars(step)

  def _evaluate(self, step):
    """Evaluates, reports, and offers the checkpoint to the best one (by the task's metric)."""
    metrics = self.parts.evaluate()
    evaluation.report(step, metrics, self.outputs.eval_writer, self.task,
                      split=self.parts.eval_split)
    if self.outputs.best is not None:
      self.outputs.best.offer(step, metrics[self.task.BEST_METRIC])
    # Where the numbers come from, for the run's final line (evaluation.final_line).
    self.eval_metrics = dict(metrics, step=step, split=self.parts.eval_split)
    self.outputs.record.add('eval', step, split=self.parts.eval_split or evaluation.USUAL_SPLIT,
                            metrics=metrics)

  def _final_evaluate(self):
    """The best checkpoint on the final split, when the run has one (``Trainer.final_evaluate``)."""
    final = self.parts.final_evaluate()
    if final is None:
      return
    metrics, step, split = final
    writer = summaries.LazyWriter(os.path.join(self.parts.logdir, f'{summaries.EVAL_DIR}_{split}'),
                                  distributed.is_chief())
    selected_on = self.parts.eval_split
    by = f'{selected_on} {self.task.BEST_METRIC}' if selected_on else self.task.BEST_METRIC
    evaluation.report(step, metrics, writer, self.parts.final_task or self.task,
                      label=f'{split} split, best checkpoint by {by},')
    writer.close()
    self.eval_metrics = dict(metrics, step=step, split=split, selected_on=selected_on)

  def _current_batch(self):
    return batch_policy.current_batch(self.control, self.sizes.global_batch)

  def _record_train(self, step, values, rate):
    """The record's ``train`` event: what the step's console line shows, by name."""
    names = ('loss', *self.task.TRAIN_METRICS, 'next_learning_rate', 'global_norm',
             'noise_scale', 'next_loss_scale', 'skipped_updates', 'updates')
    fields = {name: values[name] for name in names if name in values}
    self.outputs.record.add('train', step, epoch=step / self.sizes.steps_per_epoch,
                            global_batch=int(values.get('global_batch', self.sizes.global_batch)),
                            examples_per_sec=rate, **fields)

  def _record_end(self):
    """The record's ``final`` event (the run's final numbers, when it evaluated) and ``end``."""
    record = self.outputs.record
    if self.eval_metrics is not None:
      final = self.eval_metrics
      record.add('final', final.get('step', self.step),
                 split=final.get('split') or evaluation.USUAL_SPLIT,
                 selected_on=final.get('selected_on'),
                 metrics={k: v for k, v in final.items()
                          if k not in ('step', 'split', 'selected_on')})
    values = self.values or {}
    noise = {}
    if 'noise_scale' in values:
      # JSON has no infinity: an estimate whose |G|² is not positive yet says so in words.
      b_simple = float(values['noise_scale'])
      noise = {'noise_scale': b_simple,
               'noise_scale_status': ('measured' if math.isfinite(b_simple) else
                                      'not measured' if math.isnan(b_simple) else 'unbounded')}
    record.add('end', self.step, updates=values.get('updates', self.step),
               global_batch=self._current_batch(), **noise)

  def _stop(self, signum, ending=False):
    """Writes the summaries, saves the current step (unless saved already), raises RunStopped.

    Args:
      signum: the signal.
      ending: the signal cut off the end of training (:meth:`_end`): a mark in
        the logdir makes the resumed run do that end instead of "nothing to do".
    """
    step = self.step
    self.progress.close()
    if self.outputs.writes and self.values is not None and step > self.last_summary:
      self._write_summaries(step)
    path = self.outputs.latest()
    if self.outputs.manager is not None and (step != self.last_saved or path is None):
      path = self.outputs.save(step)
    if ending and distributed.is_chief():
      files.write_text_atomically(
          os.path.join(self.parts.logdir, ENDING_MARK),
          json.dumps({'step': step, 'signal': signal_name(signum)}) + '\n')
    tf.summary.flush()
    self.outputs.record.add('stop', step, signal=signal_name(signum), checkpoint=path)
    raise RunStopped(signum, step, path)


def ending_pending(logdir, step):
  """Whether a signal cut off the end of training (precise_bn, last evaluation) at ``step``."""
  try:
    with open(os.path.join(logdir, ENDING_MARK), encoding='utf-8') as f:
      return json.load(f).get('step') == step
  except (OSError, ValueError, AttributeError):
    return False


def remove_ending_mark(logdir):
  """Removes the mark of :func:`ending_pending` once the end of training is done."""
  try:
    os.remove(os.path.join(logdir, ENDING_MARK))
  except OSError:
    pass  # none (the usual case), or it cannot go: a resume would only do the end again


def signal_name(signum):
  return signal.Signals(signum).name
