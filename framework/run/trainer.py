"""The trainer: builds a run from its config and owns its state; the work goes to its modules.

``Trainer`` is the run's state, created in ``__init__`` from a validated
config: seeds and precision, the data layers, the model, the gradient
pipeline (``optimize_loss``'s stages) and its arguments, the run's counters
and the ``tf.train.Checkpoint`` of all of it. In this file, in the order a run
meets them: set-up, restore and the start of training (broadcast, optimizer
hooks), the compiled train step (loss -> the pipeline's update -> the metrics
it returns), ``precise_bn`` and evaluation. The rest lives beside it:

- ``framework.run.train_loop``: the loop behind :meth:`Trainer.train`, given the
  pieces of the run it calls (:meth:`Trainer.loop_parts`), and its
  bookkeeping (when to stop, save, write summaries and evaluate; one-line
  errors for failed reads and writes); ``framework.run.run_outputs``, what it
  writes; ``framework.run.divergence``, the divergence check and ``TrainingError``;
- ``framework.tasks``: what depends on the workload (the model from the data
  layer's facts, the loss and train metrics, the evaluation and its metric
  that picks the best checkpoint, the serving signature, infer);
- ``framework.run.evaluation``: the report of an evaluation, the run's final line;
  ``framework.run.final_evaluation``, the best checkpoint on a final split of its own;
- ``framework.run.batch_policy``: the batch that grows (``batch_policy``);
- ``framework.run.benchmark``: ``--mode=benchmark``, the step timed;
- ``framework.run.checkpoints``: verified restore, safe saves, ``BestCheckpoint``;
- ``framework.run.stopping``: stopping on a signal, ``RunStopped``;
- ``framework.tasks.image_precise_bn``: the batch-norm statistics recomputed for a block;
- ``framework.run.summaries`` and ``framework.engines.console``: what TensorBoard and the
  console show.

Only the chief worker (rank 0, under either engine) writes checkpoints, summaries, the
resolved config and the progress bar. ``BestCheckpoint``, ``RunStopped`` and
``TrainingError`` are importable from here, as run.py and the scripts do.
"""

import contextlib
import os

import keras
import tensorflow as tf

from core.params import ConfigError
from data import DATA_LAYERS
from framework import tasks
from framework.config import schedule
from framework.config import validation as config_lib
from framework.engines import distributed
from optimizers import allreduce
from framework.engines import hardware
from framework.run import batch_policy
from framework.run import checkpoints
from framework.run import evaluation
from framework.run import noise_scale as noise_lib
from framework.run import stopping
from framework.run import summaries
from framework.run import train_loop
from framework.run.checkpoints import BestCheckpoint
from framework.run.divergence import TrainingError
from framework.run.final_evaluation import FinalEvaluation
from framework.run.stopping import RunStopped
from framework.tasks import image_precise_bn
from optimizers import exclusions
from optimizers.catalog import make_optimizer
from optimizers.pipeline import GradientPipeline
from optimizers.settings import UpdateSettings

# The trainer's interface; the last three are defined beside it and re-exported.
__all__ = ['Trainer', 'BestCheckpoint', 'RunStopped', 'TrainingError']


def _spans_multiple(start, length, every, end):
  """Whether run steps ``[start, start + length)`` hold a multiple of ``every`` or reach ``end``."""
  last = start + length - 1
  return tf.logical_or(last // every > (start - 1) // every, last >= end - 1)


class Trainer:
  """Builds everything a run needs from a validated config.

  Args:
    config: the validated config of the train (or benchmark) mode, or None for eval only.
    eval_config: the validated config used for evaluation, or None.
    logdir: the run directory (checkpoints, TensorBoard events, config.yaml).
    overrides: the run's ``--set`` strings; their keys are logged as hyperparameters.
  """

  def __init__(self, config, eval_config, logdir, overrides=()):
    self.config = config if config is not None else eval_config
    self.eval_config = eval_config
    self.logdir = logdir
    self.overrides = list(overrides)
    # (path, damaged newer ones, its run step) of the checkpoint restore() loaded; None before.
    self._restored = None
    # What depends on the kind of data and model: loss, metrics, evaluation, export.
    self.task = tasks.make_task(self.config, eval_config)
    self.num_workers = allreduce.size()
    self.rank = allreduce.rank()

    keras.utils.set_random_seed(self.config['random_seed'])
    if self.config['deterministic']:
      tf.config.experimental.enable_op_determinism()
    # launch resolved dtype auto already; a script's Trainer has it resolved here.
    self.config = dict(self.config, dtype=hardware.set_precision(self.config['dtype'],
                                                                 warn=distributed.is_chief()))

    self.train_data = self._data_layer(config, 'train') if config is not None else None
    self.eval_data = self._data_layer(eval_config, 'eval') if eval_config is not None else None
    # The split of the evaluation after training, when it differs (a test split after a dev one).
    # The evaluation after training, on a split of its own when the view names one.
    self.final = FinalEvaluation(config, eval_config, self.task, self._data_layer)
    self.model = self.task.build_model(self.train_data or self.eval_data)

    self.batch_size = self.config['batch_size_per_gpu']
    self.iter_size = self.config['iter_size']
    self.global_batch = self.batch_size * self.num_workers * self.iter_size
    self.steps_per_epoch, self.config = self._fit_schedule()
    self.max_steps = schedule.total_steps(self.config, self.steps_per_epoch)
    # A growing batch (batch_policy); None for fixed, where nothing of it is built.
    self.batch_control = (batch_policy.control_for(self.config, self.batch_size, self.num_workers,
                                                   self.max_steps, self.train_data.num_examples)
                          if self.train_data is not None else None)

    self.opt_kwargs = self._optimize_loss_arguments(self.config)
    # The noise scale, measured as the config says; in parts: each micro-step as its halves.
    measure, measure_params, self.noise_parts = noise_lib.pipeline_arguments(
        self.config, self.num_workers, trains=self.train_data is not None)
    self.opt_kwargs.update(noise_scale=measure, noise_scale_params=measure_params)
    config_lib.check_jit_compile(self.config, self.num_workers)
    self.pipeline = GradientPipeline(self.model.trainable_variables,
                                     UpdateSettings(**self.opt_kwargs, log_global_norm=True))
    if self.batch_control is not None:
      # The update's own summaries on the run's step axis, beside the train scalars: the run
      # step before the update (its update count would put them at other steps).
      self.pipeline.summary_step_fn = lambda: self.batch_control.step
    self.data_position, self.skipped_updates, self.data_layout = self._counters()
    # What a checkpoint of the run holds, by name (also to name what a checkpoint lacks).
    self.checkpoint_items = dict(model=self.model, data_position=self.data_position,
                                 skipped_updates=self.skipped_updates,
                                 **self.pipeline.checkpoint_items())
    if self.batch_control is not None:
      self.checkpoint_items['batch_policy'] = self.batch_control
    self.checkpoint = tf.train.Checkpoint(**self.checkpoint_items,
                                          **{checkpoints.DATA_LAYOUT: self.data_layout})
    # Regularization is L2 on weights, never on batch-norm parameters (by name or
    # by layer: Keras' applications name theirs '*_bn') or biases.
    self._regularized = exclusions.regularized(self.model)

  # --- set-up ------------------------------------------------------------------------------

  def _fit_schedule(self):
    """``(steps per epoch, config)``: the config's warm-up fitted to the run's length in steps.

    The config layer checks the warm-up only where the data layer declares its
    size, for one worker; here it is checked against this run's steps. Evaluating
    and exporting train nothing: no epoch to count (1). A global batch larger than
    the training split trains (the micro-batches stream on across epochs) but counts
    some examples twice in one update, seldom what a config meant: it is warned of.
    """
    if self.train_data is None:
      return 1, self.config
    steps_per_epoch = schedule.steps_per_epoch(self.train_data, self.batch_size, self.iter_size)
    config, note = schedule.fit_warmup(
        self.config, steps_per_epoch, bool(config_lib.durations_given(self.overrides)))
    if note is not None:
      distributed.log(note)
    if self.global_batch > self.train_data.num_examples:
      distributed.log(
          f'warning: the global batch {self.global_batch} ({self.batch_size} per worker x '
          f'{self.num_workers} worker(s) x iter_size {self.iter_size}) is larger than the '
          f'{self.train_data.num_examples} training examples: each update reads '
          f'{1 / steps_per_epoch:.2f} epochs, some examples twice')
    return steps_per_epoch, config

  def _counters(self):
    """The run's counters: ``(data position, skipped updates, data layout)`` variables.

    The skipped updates are those whose gradients were not finite (loss scaling
    overflow). The data layout is what the data position counts in ([workers,
    batch per worker]): saved with every checkpoint, never restored (a resume
    that differs is refused, restore()); it is kept out of ``checkpoint_items``
    so that checkpoints without it restore and fit too.
    """
    return (tf.Variable(0, dtype=tf.int64, trainable=False, name='data_position'),
            tf.Variable(0, dtype=tf.int64, trainable=False, name='skipped_updates'),
            tf.Variable([self.num_workers, self.batch_size], dtype=tf.int64, trainable=False,
                        name=checkpoints.DATA_LAYOUT))

  def _data_layer(self, cfg, mode):
    layer_cls = DATA_LAYERS.resolve(cfg['data_layer'])
    layer = layer_cls(cfg['data_layer_params'], mode, num_workers=self.num_workers,
                      worker_index=self.rank)
    layer.use_run_dir(self.logdir)
    return layer

  def _optimize_loss_arguments(self, cfg):
    if self.train_data is not None:
      lr_fn = schedule.learning_rate_fn(cfg, self.steps_per_epoch)
    else:
      lr_fn = schedule.base_rate_fn(cfg)  # no update, so no schedule
    optimizer, optimizer_params = cfg['optimizer'], dict(cfg['optimizer_params'])
    if cfg['agn_params'] is not None:
      optimizer = make_optimizer(optimizer, optimizer_params, float(lr_fn(0)),
                                 agn_params=cfg['agn_params'])
      optimizer_params = {}
    iter_size = cfg['iter_size']
    if self.batch_control is not None:
      lr_fn = self.batch_control.learning_rate_fn(lr_fn)
      iter_size = self.batch_control.iter_size
      note = self.batch_control.plan_note()
      if note is not None:
        distributed.log(note)
    return dict(
        optimizer=optimizer, optimizer_params=optimizer_params, learning_rate_decay_fn=lr_fn,
        dtype=cfg['dtype'], clip_gradients=cfg['max_grad_norm'],
        # The trainer writes these itself, every save_summaries_steps.
        summaries=[s for s in cfg['summaries'] if s not in config_lib.TRAINER_SUMMARIES],
        larc_params=cfg['larc_params'], loss_scaling=cfg['loss_scaling'],
        loss_scaling_params=cfg['loss_scaling_params'], multi_worker=self.num_workers > 1,
        iter_size=iter_size, compression=cfg['distribution_params']['compression'])

  def noise_scale(self):
    """The noise scale measured so far (``noise_lib.estimate``), in the task's example unit."""
    return noise_lib.estimate(self.pipeline)

  def current_batch(self):
    """The global batch of the next update (the batch policy's, when it grows)."""
    return batch_policy.current_batch(self.batch_control, self.global_batch)

  @property
  def global_step(self):
    """The run's step: the applied updates, or with a growing batch the examples over the starting batch.

    A run that only reads a checkpoint (eval, export, infer) builds no batch
    policy: a growing-batch run's checkpoint gives its run step itself.
    """
    if self.batch_control is not None:
      return int(self.batch_control.step.numpy())
    if self._restored is not None and self._restored[2] is not None:
      return self._restored[2]
    return int(self.pipeline.global_step.numpy())

  def restore(self, path=None):
    """Restores the newest intact checkpoint of the logdir (or ``path``).

    The newest checkpoint is verified first; when it is damaged or its files
    are missing, one line says so and the newest intact one is restored.
    When training goes on from it, :meth:`keep_for_rotation` keeps the older
    checkpoints safe from the checkpoint manager's rotation.

    Returns:
      The restored path, or None when the logdir holds no checkpoint.

    Raises:
      CheckpointError: checkpoints are there but none is intact (nothing is deleted).
      ConfigError: the checkpoint does not fit the model and optimizer built, or (a
        training run) its data position was counted with other workers or another batch
        per worker than this run's (``checkpoints.layout_change``).
    """
    damaged = []
    if path is None:
      path, damaged = checkpoints.newest_intact(self.logdir)
    if path is None:
      return None
    if damaged:
      distributed.log(checkpoints.describe_fallback(path, damaged))
    if self.train_data is not None:
      # Training goes on from the data position, which means the examples a run straight
      # through reads next only with the workers and batch it was counted in.
      refusal = checkpoints.layout_change(path, checkpoints.data_layout(path), self.num_workers,
                                          self.batch_size)
      if refusal is not None:
        raise ConfigError(refusal)
    self._restored = (path, damaged, None)
    try:
      tf.train.Checkpoint(**noise_lib.restorable(self.checkpoint_items, path,
                                                 distributed.log)).restore(
          path).assert_existing_objects_matched().expect_partial()
    except (AssertionError, ValueError, tf.errors.OpError) as exc:
      # TensorFlow's own message lists variables with their values: its first sentence only.
      error = ' '.join(str(exc).split()).split('. ')[0][:300]
    else:
      if self.train_data is None:
        self._restored = (path, damaged, checkpoints.checkpoint_step(path))
      return path
    # The run ends on this error; the half-done restore would otherwise print a
    # warning per value it did not restore, after the error line.
    tf.get_logger().setLevel('ERROR')
    from framework.run import warm_start  # pylint: disable=import-outside-toplevel
    try:
      problem = warm_start.describe_misfit(path, self.checkpoint_items) or error
    except (ValueError, tf.errors.OpError):
      problem = error
    raise ConfigError(f'{path}: does not fit the model and optimizer of this config '
                      f'({problem}); use the config it was written with (config.yaml in its run '
                      'directory)')

  def keep_for_rotation(self):
    """Lists the restored checkpoint as the latest one in the state file (chief, training)."""
    if self._restored is not None and distributed.is_chief():
      checkpoints.keep_for_rotation(self.logdir, *self._restored[:2])

  def broadcast_state(self):
    """Makes every worker start from rank 0's variables and optimizer slots."""
    if self.num_workers == 1:
      return
    state = (list(self.model.variables) + list(self.pipeline.state_variables())
             + [self.data_position]
             + (list(self.batch_control.variables) if self.batch_control is not None else []))
    allreduce.broadcast(state, root_rank=0)

  def begin(self):
    """Run once before training, after restore: broadcast, then the pipeline's start (AGN's center)."""
    self.broadcast_state()
    self.pipeline.start()

  # --- the train step ----------------------------------------------------------------------

  def _loss(self, batch):
    """The loss of one micro-batch and the task's train metrics (``{'accuracy': ...}``).

    The task's loss, plus the model's own losses and the L2 regularizer.
    """
    cfg = self.config
    loss, metrics = self.task.loss(self.model, batch)
    model_losses = [tf.cast(l, tf.float32) for l in self.model.losses]
    if model_losses:
      loss += tf.add_n(model_losses)
    if cfg['regularizer'] == 'l2':
      scale = cfg['regularizer_params']['scale']
      loss += scale * tf.add_n([tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in self._regularized])
    return loss, metrics

  def make_train_step(self):
    """The compiled micro-step: next batch -> the pipeline's update -> its metrics.

    With ``jit_compile`` the batch is taken outside the XLA cluster (XLA has
    no kernel for the iterator) and the rest of the step is compiled by XLA.
    """
    cfg = self.config
    summary_every = cfg['save_summaries_steps']
    pipeline = self.pipeline

    train_metrics = self.task.TRAIN_METRICS
    control = self.batch_control

    def update(batch):
      metrics = pipeline(noise_lib.loss_fn(self._loss, batch, self.noise_parts))
      self.data_position.assign_add(1)
      self.skipped_updates.assign_add(tf.cast(metrics['skipped'], tf.int64))
      if control is not None:
        # The run's step counts examples; the rate of the next update is read after it moved.
        with tf.control_dependencies([control.count(metrics['applied'])]):
          metrics.update(updates=metrics['global_step'], applied=tf.identity(metrics['applied']),
                         global_step=tf.identity(control.step),
                         global_batch=tf.identity(control.batch),
                         next_learning_rate=pipeline.learning_rate())
      # Under the pipeline's names: at the step this micro-step ends at, the console and
      # TensorBoard show the rate and scale of the update that starts there.
      return {'loss': metrics['loss'], **{name: metrics[name] for name in train_metrics},
              'skipped_updates': tf.identity(self.skipped_updates),
              'next_learning_rate': metrics['next_learning_rate'],
              'next_loss_scale': metrics['next_loss_scale'],
              'global_norm': metrics['global_norm'], 'global_step': metrics['global_step'],
              **{name: metrics[name] for name in noise_lib.METRICS if name in metrics},
              **{name: metrics[name] for name in ('updates', 'applied', 'global_batch')
                 if name in metrics}}

    if cfg['jit_compile']:
      update = tf.function(update, jit_compile=True)

    def step(iterator):
      return update(next(iterator))

    compiled = tf.function(step)

    def run(iterator):
      if summary_every:
        # In-graph summaries carry the step before the update; the last update is
        # recorded too, so the run's final weights are in TensorBoard.
        if control is None:
          clock = pipeline.global_step
          record = lambda: tf.logical_or(tf.equal(clock % summary_every, 0),
                                         tf.equal(clock, self.max_steps - 1))
        else:
          # An update of a grown batch spans several run steps: recorded when one of them is
          # a multiple of the cadence, or it is the last.
          record = lambda: _spans_multiple(control.step, control.advance(), summary_every,
                                           self.max_steps)
      else:
        record = False
      with tf.summary.record_if(record):
        return compiled(iterator)

    run.compiled = compiled
    return run

  def train_iterator(self):
    start = int(self.data_position.numpy())
    dataset = self.train_data.dataset(self.batch_size, seed=self.config['random_seed'],
                                      start_batch=start)
    return iter(dataset)

  # --- training ----------------------------------------------------------------------------

  def train(self, evaluate_every=None, stop=None, probe=None):
    """Trains until max_steps, checkpointing and (optionally) evaluating on the way.

    Args:
      evaluate_every: evaluate every this many steps and at the end (train_eval mode).
      stop: a ``framework.run.stopping.StopRequest``; when any worker received a
        signal, every worker stops after the same micro-step, the chief saves
        a checkpoint and writes its summaries, and ``RunStopped`` is raised.
      probe: a ``train_loop.Probe``: a look every few steps that may end training
        early (``--mode=critical_batch``'s branches evaluate their held-out loss so).

    Returns:
      The final eval metrics when evaluating, else None; with ``step`` and
      ``split``, where they come from, and ``selected_on`` for the best
      checkpoint evaluated on a final split (``evaluation.final_line``).

    Raises:
      RunStopped: after a requested stop was saved.
      TrainingError: non-finite values, or too many corrupt records.
      CheckpointError: a checkpoint or summary could not be written.
      DataError: a record could not be read, naming its file.
    """
    self.keep_for_rotation()
    if self.batch_control is not None:
      # A resumed run's next update, too, reads no example past the run's end.
      short = self.batch_control.fit_to_end(self.max_steps, int(self.pipeline.micro_step.numpy()))
      if short is not None:
        distributed.log(self.batch_control.describe_end(
            short, self.max_steps, float(self.pipeline.learning_rate())))
    return train_loop.train(self.loop_parts(), evaluate_every, stop, probe)

  def loop_parts(self):
    """What the train loop calls of this run (``train_loop.LoopParts``), and no trainer."""
    sizes = train_loop.Sizes(max_steps=self.max_steps, steps_per_epoch=self.steps_per_epoch,
                             batch_size=self.batch_size, num_workers=self.num_workers,
                             iter_size=self.iter_size)
    control = self.batch_control
    return train_loop.LoopParts(
        config=self.config, overrides=self.overrides, task=self.task, sizes=sizes,
        logdir=self.logdir, start_step=self.global_step, step=self.make_train_step(),
        open_batches=self.train_iterator, check_data=self.check_data,
        checkpoint=self.checkpoint, model=self.model, precise_bn=self.precise_bn,
        evaluate=self.evaluate, final_evaluate=self.final_evaluate, final_task=self.final.task,
        eval_split=evaluation.split_of(self.eval_data), batch_control=control,
        learning_rate=self.pipeline.learning_rate, describe_chain=self.pipeline.describe_chain)

  def check_data(self):
    """Raises ``DataError`` when more records were skipped as corrupt than the data layer allows."""
    self.train_data.check_corrupt_fraction(int(self.data_position.numpy()) * self.batch_size)

  def precise_bn(self, step, keep, when=True, stop=None):
    """Recomputes the batch-norm moving statistics over training batches (``precise_bn``).

    Inside the block the model's moving mean and variance are the plain
    averages over ``precise_bn.num_batches`` training batches, drawn with a
    seed made from the run's seed and ``step`` (so a resumed run draws the
    same ones) without moving the run's data position. Unless ``keep``, the
    statistics training had are put back after the block, so an evaluation in
    the middle of training leaves the training state as it was.

    Args:
      step: the global step, part of the batches' seed.
      keep: keep the recomputed statistics after the block (the end of training).
      when: a false value skips the recomputation (it is skipped anyway
        without ``precise_bn`` or train data).
      stop: a ``framework.run.stopping.StopRequest`` asked before each batch (on
        every worker); a signal puts the training statistics back and raises
        ``StopRequested`` before the block runs.

    Returns:
      A context manager (:func:`framework.tasks.image_precise_bn.recomputed_statistics`).
    """
    spec = self.config['precise_bn']
    if not when or spec is None or self.train_data is None:
      return contextlib.nullcontext()
    batch = spec['batch_size'] or self.batch_size
    batches = self.train_data.dataset(batch, seed=self.config['random_seed'] + 1 + step)
    return image_precise_bn.recomputed_statistics(
        self.model, stopping.until_stopped(batches.take(spec['num_batches']), stop), batch, keep,
        all_workers_sum=distributed.sum_array if self.num_workers > 1 else None)

  # --- evaluation --------------------------------------------------------------------------

  def evaluate(self):
    """The task's metrics over the whole eval split (all workers).

    Returns:
      dict of the task's ``EVAL_METRICS`` and ``examples``: ``loss``,
      ``accuracy`` and ``top5_accuracy`` for images; ``wer``, ``per``,
      ``loss`` and ``token_accuracy`` for sequences.
    """
    if self.eval_data is None:
      raise ConfigError('eval: no eval data layer is configured')
    return self.task.evaluate(self.model, self.eval_data, self.eval_config['batch_size_per_gpu'])

  def evaluate_and_report(self):
    """Evaluates the restored model, prints one line and writes the eval scalars (chief only)."""
    metrics = self.evaluate()
    writer = summaries.LazyWriter(os.path.join(self.logdir, summaries.EVAL_DIR),
                                  distributed.is_chief())
    evaluation.report(self.global_step, metrics, writer, self.task,
                      split=evaluation.split_of(self.eval_data))
    writer.close()
    return metrics

  def final_evaluate(self):
    """After training: the best checkpoint on the final split (``FinalEvaluation``), or None."""
    return self.final(self.model, self.logdir, self.global_step)
