"""``GradientPipeline``: one large-batch update, as a short chain of stages.

The stages, in the order of docs/math.md ("One update of optimize_loss"),
each an object of ``stages.py`` called as ``stage(grads, update) -> grads``:

1. loss × loss_scale -> gradients (float32) -> × 1/loss_scale (``stages.scaled_gradients``)
2. accumulation over ``iter_size`` micro-batches (``Accumulate``)
3. all-reduce: the average over workers, either engine (``AllReduce``)
4. finite check -> loss-scaler update; a non-finite update stops here (``FiniteCheck``)
5. global-norm clipping (``Clip``)
6. LARC (``Larc``) and 7. the optimizer's update, then global_step += 1

The chain ends in one call, ``backend.update_all(optimizer, grads, variables,
learning_rate, larc=...)``, which runs LARC and the update as one native
kernel where it can and otherwise LARC as a stage, then the optimizer's own
path (native kernel, XLA, Keras' reference). A pipeline holds the state of
the update (optimizer, global step, loss scaler, accumulators) and returns
the metrics of each micro-step; the trainer calls it directly, users' own
loops through ``optimize_loss``.
"""

import tensorflow as tf

from core import noise_scale as noise_scale_formulas
from optimizers import allreduce
from optimizers import backend
from optimizers import exclusions
from optimizers import stages
from optimizers.noise_scale import NoiseScale
from optimizers import validation
from optimizers.automatic_loss_scaler import make_loss_scaler
from optimizers.catalog import is_instance
from optimizers.catalog import make_optimizer
from optimizers.catalog import normalize_dtype


class Update:
  """What the stages of one update share besides the gradients.

  Attributes:
    learning_rate: the base learning rate of the update (float32 tensor).
    global_norm: the global norm of its gradients before clipping, once
      ``FiniteCheck`` took it (None when nobody asked for it).
    checked: the gradients as ``FiniteCheck`` saw them (averaged, not yet
      clipped), for the summaries.
    go_on: set by a stage that may end the update (``FiniteCheck``): a
      boolean tensor, False to stop there; the pipeline runs the rest of the
      chain under ``tf.cond`` on it.
    larc_factors: {variable index: LARC factor}, set by ``Larc``.
    noise_small: the mean squared norm of the update's small-batch gradients
      (``noise_scale.NoiseScale.take``), averaged over the workers by
      ``AllReduce``; None when the noise scale is not measured.
  """

  def __init__(self, learning_rate):
    self.learning_rate = learning_rate
    self.global_norm = None
    self.checked = None
    self.go_on = None
    self.larc_factors = {}
    self.noise_small = None


def larc_and_apply(optimizer, grads, var_list, learning_rate, larc_params,
                   larc_rate_is_optimizers=True):
  """Stages 6 and 7 with LARC given as ``larc_params``: ``backend.update_all``.

  Returns:
    {variable index: LARC factor} for the adapted variables.
  """
  larc = stages.Larc(larc_params, var_list) if larc_params is not None else None
  return backend.update_all(optimizer, grads, var_list, Update(learning_rate), larc,
                            larc_rate_is_optimizers)


def _checked_settings(clip_gradients, larc_params, compression, iter_size):
  """The checked (clip_gradients, larc_params, compression, iter_size) of a pipeline."""
  if isinstance(iter_size, tf.Variable):
    if iter_size.dtype != tf.int64 or iter_size.shape.rank != 0:
      raise ValueError(f'iter_size as a variable must be a scalar int64, got {iter_size!r}')
  elif not isinstance(iter_size, int) or isinstance(iter_size, bool) or iter_size < 1:
    raise ValueError(f'iter_size must be an integer >= 1, got {iter_size!r}')
  if clip_gradients is not None and not (isinstance(clip_gradients, (int, float))
                                         and clip_gradients > 0):
    raise ValueError(f'clip_gradients must be a number > 0 or None, got {clip_gradients!r}')
  larc_params = validation.check_larc_params(larc_params) if larc_params is not None else None
  return clip_gradients, larc_params, validation.check_compression(compression), iter_size


def _base_learning_rate(optimizer, optimizer_params, learning_rate_decay_fn):
  """Pops ``learning_rate`` from ``optimizer_params``; the fixed rate when there is no schedule."""
  if learning_rate_decay_fn is not None:
    optimizer_params.pop('learning_rate', None)
    return None
  if 'learning_rate' not in optimizer_params and not is_instance(optimizer):
    raise ValueError('optimize_loss: give learning_rate_decay_fn or '
                     "optimizer_params['learning_rate']")
  return optimizer_params.pop('learning_rate', None)


class GradientPipeline(tf.Module):
  """The state and stages of ``optimize_loss`` for one set of variables.

  Calling it runs one micro-step and returns its metrics (see ``__call__``).

  Args: as ``optimize_loss``, plus
    var_list: the variables to train.
    iter_size: micro-batches per update: an int, or a scalar int64
      ``tf.Variable`` that the caller may raise between updates (a batch
      that grows, ``framework.run.batch_policy``).
    multi_worker: average the gradients over the workers (Horovod or
      tf.distribute) once per applied update; ``on_horovod``, OpenSeq2Seq's
      name for it, is still accepted.
    compression: ``'none'`` or ``'fp16'`` (float16 on the wire) for the
      all-reduce; OpenSeq2Seq's ``horovod_params={'compression': ...}`` is
      still read when it is not given.
    log_global_norm: compute the global gradient norm every step for logging
      (it is computed anyway when clipping or summarising it).
    noise_scale: measure the gradient noise scale (``noise_scale.NoiseScale``)
      from the update's small-batch gradients: its micro-batches, the
      workers' gradients before the all-reduce, and the parts of a micro-step
      (``__call__``); it needs two or more of them per update.
    noise_scale_params: ``micro_batch``, the examples (or words) of one
      small-batch gradient, so that B_simple is in examples (default 1: in
      small batches); ``parts``, the loss functions each micro-step is given
      as (default 1); ``decay``, of the estimates' moving averages (0.99).
  """

  def __init__(self, var_list, optimizer, optimizer_params=None, learning_rate_decay_fn=None,
               dtype=tf.float32, clip_gradients=None, summaries=None, larc_params=None,
               loss_scaling=1.0, loss_scaling_params=None, multi_worker=False, iter_size=1,
               horovod_params=None, log_global_norm=False, name='optimize_loss', on_horovod=None,
               compression=None, noise_scale=False, noise_scale_params=None):
    super().__init__(name=name)
    self.var_list = list(var_list)
    if not self.var_list:
      raise ValueError('optimize_loss: var_list is empty; nothing to train')
    self.dtype = normalize_dtype(dtype)
    if compression is None:
      compression = (horovod_params or {}).get('compression')
    self.clip_gradients, self.larc_params, self.compression, self.iter_size = _checked_settings(
        clip_gradients, larc_params, compression, iter_size)
    self.summaries = validation.check_summaries(summaries)
    self.multi_worker = bool(multi_worker if on_horovod is None else on_horovod)
    self.log_global_norm = log_global_norm
    self.noise_scale_params = dict(noise_scale_params or {}) if noise_scale else None
    # The global norm is taken when clipping, logging or summarising it, and for the noise scale.
    self._with_norm = (self.clip_gradients is not None or self.log_global_norm
                       or 'global_gradient_norm' in self.summaries or bool(noise_scale))
    if self.multi_worker and allreduce.engine_name() == allreduce.NONE:
      # OpenSeq2Seq's on_horovod=True starts Horovod; an engine already running serves as it is.
      allreduce.init()
    optimizer_params = dict(optimizer_params or {})
    self.learning_rate_decay_fn = learning_rate_decay_fn
    self._base_lr = _base_learning_rate(optimizer, optimizer_params, learning_rate_decay_fn)
    # The pipeline sets the optimizer's rate each update when it knows it; LARC's
    # rate is then the optimizer's own.
    self._larc_rate_is_optimizers = (learning_rate_decay_fn is not None
                                     or self._base_lr is not None)
    with tf.init_scope():
      self._create_state(optimizer, optimizer_params, loss_scaling, loss_scaling_params)

  def _create_state(self, optimizer, optimizer_params, loss_scaling, loss_scaling_params):
    """The variables of the pipeline, the optimizer (built) and the loss scaler."""
    self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
    # Micro-batches accumulated since the last applied update.
    self.micro_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='micro_step')
    # Allreduce calls, so tests and logs can confirm one per applied update.
    self.allreduce_count = tf.Variable(0, dtype=tf.int64, trainable=False, name='allreduce_count')
    # The global norm of the last update's gradients, returned with every micro-step.
    self.last_global_norm = tf.Variable(0.0, trainable=False, name='last_global_norm')
    self.optimizer = make_optimizer(optimizer, optimizer_params, self._current_lr_value())
    if allreduce.rank() == 0:
      # A list written for another model's names excludes nothing: say so once, not per step.
      exclusions.warn_unmatched(self.var_list, self.optimizer, self.larc_params)
    self.loss_scaler = make_loss_scaler(loss_scaling, loss_scaling_params)
    mixed = self.dtype.startswith('mixed_')
    self.masters = stages.MasterWeights(self.var_list) if mixed else None
    self.update_vars = self.masters.masters if self.masters is not None else self.var_list
    self.optimizer.build(list(self.update_vars))
    self.accumulator = (stages.GradientAccumulator(self.var_list) if self.grows
                        or self.iter_size > 1 else None)
    self.noise = self._noise_scale()
    self.chain = self._chain()
    self.larc = (stages.Larc(self.larc_params, self.update_vars)
                 if self.larc_params is not None else None)

  def _averages_workers(self):
    """Whether the update averages the workers' gradients (the ``AllReduce`` stage).

    An optimizer that communicates by itself (AGN: once per period) is not
    given gradients averaged every update.
    """
    return self.multi_worker and not getattr(self.optimizer, 'COMMUNICATES_ITSELF', False)

  def _noise_scale(self):
    """The ``NoiseScale`` stage when the noise scale is measured, else None."""
    if self.noise_scale_params is None:
      return None
    params = self.noise_scale_params
    unknown = sorted(set(params) - {'micro_batch', 'parts', 'decay'})
    if unknown:
      raise ValueError(f'noise_scale_params: unknown key(s) {unknown}; allowed: decay, '
                       'micro_batch, parts')
    workers = allreduce.size() if self._averages_workers() else 1
    iter_size = int(self.iter_size.numpy()) if self.grows else self.iter_size
    sources = iter_size * workers * int(params.get('parts', 1))
    if sources < 2:
      raise ValueError('noise_scale needs two or more small-batch gradients per update '
                       '(iter_size >= 2, two or more workers, or a micro-step in two parts); '
                       f'this update has {sources}')
    return NoiseScale(sources, params.get('micro_batch', 1.0),
                      params.get('decay', noise_scale_formulas.DEFAULT_DECAY),
                      workers=workers if self.grows else None)

  def _chain(self):
    """Stages 2-5, those before the optimizer's call; LARC (6) is handed to that call."""
    chain = []
    if self.accumulator is not None:
      chain.append(stages.Accumulate(self.accumulator, self.micro_step, self.iter_size))
    if self._averages_workers():
      chain.append(stages.AllReduce(self.compression, self.allreduce_count))
    chain.append(stages.FiniteCheck(self.loss_scaler, self._with_norm, self.last_global_norm))
    if self.noise is not None:
      chain.append(self.noise)
    if self.clip_gradients is not None:
      chain.append(stages.Clip(self.clip_gradients))
    return chain

  @property
  def grows(self):
    """Whether ``iter_size`` is a variable that the run may raise between updates (a growing batch)."""
    return isinstance(self.iter_size, tf.Variable)

  def _current_lr_value(self):
    if self.learning_rate_decay_fn is not None:
      return float(self.learning_rate_decay_fn(tf.constant(0, tf.int64)))
    if self._base_lr is not None:
      return self._base_lr
    return None

  def start(self):
    """Once before training, after a restore and the broadcast of the state.

    An optimizer with state of its own across the workers starts it here
    (``synchronize``: AGN takes its center from rank 0).
    """
    synchronize = getattr(self.optimizer, 'synchronize', None)
    if synchronize is not None:
      synchronize()

  def learning_rate(self):
    """The learning rate for the next update (a float32 tensor)."""
    if self.learning_rate_decay_fn is not None:
      return tf.cast(self.learning_rate_decay_fn(self.global_step), tf.float32)
    if self._base_lr is not None:
      return tf.constant(self._base_lr, tf.float32)
    return tf.cast(self.optimizer.learning_rate, tf.float32)

  @property
  def on_horovod(self):
    """OpenSeq2Seq's name of ``multi_worker``."""
    return self.multi_worker

  @property
  def loss_scale(self):
    return self.loss_scaler.loss_scale

  def checkpoint_items(self):
    """The state to checkpoint besides the model, as tf.train.Checkpoint keyword arguments."""
    # The optimizer's variables are listed rather than the optimizer itself:
    # tf.train.Checkpoint treats an object with get_slot_names() as a TF 1
    # optimizer and would save its slots twice.
    items = {'global_step': self.global_step, 'micro_step': self.micro_step,
             'optimizer_variables': [backend.unwrap(v) for v in self.optimizer.variables],
             'loss_scaler': self.loss_scaler}
    if self.accumulator is not None:
      items['accumulators'] = list(self.accumulator.sums)
    if self.masters is not None and self.masters.has_half:
      items['master_weights'] = self._half_masters()
    if self.noise is not None:
      items['noise_scale'] = self.noise
    return items

  def state_variables(self):
    """Every variable of the pipeline's state (optimizer slots included), e.g. to broadcast."""
    result = [self.global_step, self.micro_step]
    result += [backend.unwrap(v) for v in self.optimizer.variables]
    result += list(self.loss_scaler.variables)
    if self.accumulator is not None:
      result += list(self.accumulator.sums)
    if self.masters is not None:
      result += self._half_masters()
    if self.noise is not None:
      result += list(self.noise.variables)
    return result

  def _half_masters(self):
    return [m for m, v in zip(self.masters.masters, self.masters.model_vars) if m is not v]

  # --- one micro-step, stage by stage ------------------------------------------------------

  def __call__(self, loss_fn, skip_update=None):
    """One micro-step: gradients of ``loss_fn``, and an update when one is due.

    Args:
      loss_fn: zero-argument callable returning the loss of one micro-batch, or
        a pair (loss, dict of tensors): the dict (e.g. the batch's accuracy)
        is returned among the metrics. A list of such callables gives the
        micro-batch in parts (``noise_scale_params['parts']`` of them): the
        micro-step's gradient, loss and dict are their means, and each
        part's gradient is a small-batch gradient of the noise scale.
      skip_update: optional boolean; True accumulates only. When None the
        update happens every ``iter_size`` micro-steps.

    Returns:
      A dict of tensors: ``loss`` (float32, unscaled); ``learning_rate`` and
      ``loss_scale`` as this micro-step used them; ``applied`` (an update was
      applied) and ``skipped`` (one was due but its gradients were not
      finite); ``global_step`` after this micro-step; ``next_learning_rate``
      and ``next_loss_scale``, those of the next update; ``global_norm``,
      when it is computed, of the latest update's gradients before clipping
      (on an accumulation-only micro-step, the previous update's); with the
      noise scale, ``noise_scale`` (B_simple), ``noise_gradient_sq``,
      ``noise_trace`` and ``noise_updates`` (``NoiseScale.estimates``); and
      the entries of ``loss_fn``'s dict.
    """
    loss_scale = self.loss_scaler.loss_scale
    metrics = {'loss_scale': tf.identity(loss_scale), 'learning_rate': self.learning_rate()}
    # 1. loss × S -> float32 gradients -> × 1/S
    loss, grads = self._gradients(loss_fn, loss_scale, metrics)
    # 2. accumulation: the chain runs when an update is due.
    if self.accumulator is None:
      due = tf.constant(True)
      applied = self._update(grads)
    else:
      due = self.chain[0].add(grads, skip_update)
      applied = tf.cond(due, lambda: self._update(grads), lambda: tf.constant(False))
    metrics.update(loss=loss, applied=applied,
                   skipped=tf.logical_and(due, tf.logical_not(applied)),
                   global_step=tf.identity(self.global_step),
                   next_learning_rate=self.learning_rate(),
                   next_loss_scale=tf.identity(self.loss_scaler.loss_scale))
    if self._with_norm:
      metrics['global_norm'] = tf.identity(self.last_global_norm)
    if self.noise is not None:
      metrics.update(self.noise.estimates())
    return metrics

  def _gradients(self, loss_fn, loss_scale, metrics):
    """(loss, gradients) of a micro-step, given whole or in parts; each adds to the noise scale."""
    if callable(loss_fn):
      loss, grads = stages.scaled_gradients(loss_fn, self.var_list, loss_scale, extras=metrics)
      if self.noise is not None:
        self.noise.add(grads)
      return loss, grads
    losses, parts, extras = [], [], []
    for part in loss_fn:
      extra = {}
      loss, grads = stages.scaled_gradients(part, self.var_list, loss_scale, extras=extra)
      if self.noise is not None:
        self.noise.add(grads)
      losses.append(loss)
      parts.append(grads)
      extras.append(extra)
    for name in extras[0]:
      metrics[name] = tf.add_n([tf.cast(e[name], tf.float32) for e in extras]) / len(extras)
    return tf.add_n(losses) / len(losses), stages.mean_gradients(parts)

  def _update(self, grads):
    """The chain on one update's gradients; returns whether the update was applied."""
    update = Update(self.learning_rate())
    if self.noise is not None:
      update.noise_small = self.noise.take()
    return self._run(self.chain, grads, update)

  def _run(self, chain, grads, update):
    """Runs ``chain`` in order, the rest of it under ``tf.cond`` after a stage that may stop it."""
    for k, stage in enumerate(chain):
      grads = stage(grads, update)
      if update.go_on is not None:
        go_on, update.go_on = update.go_on, None
        rest = chain[k + 1:]
        return tf.cond(go_on, lambda: self._run(rest, grads, update), lambda: tf.constant(False))
    return self._finish(grads, update)

  def _finish(self, grads, update):
    """Stages 6 and 7 in one call, then global_step += 1; returns True."""
    lr = update.learning_rate
    if self._larc_rate_is_optimizers:
      self.optimizer.learning_rate = lr
    backend.update_all(self.optimizer, grads, self.update_vars, update, self.larc,
                       self._larc_rate_is_optimizers)
    if self.masters is not None:
      self.masters.copy_back()
    if self.summaries:
      write_summaries(self.summaries, self.global_step,
                      {'learning_rate': lr, 'loss_scale': self.loss_scaler.loss_scale,
                       'global_norm': update.global_norm}, self.var_list, update.checked,
                      update.larc_factors)
    self.global_step.assign_add(1)
    return tf.constant(True)


# --- the summaries optimize_loss writes inside its update (``summaries=[...]``) ----------

def write_summaries(wanted, step, values, var_list, grads, larc_factors):
  """Writes the ``wanted`` summaries of one update at ``step``.

  Args:
    wanted: checked names of ``optimize_loss``'s ``summaries``.
    step: the global step before the update.
    values: the update's scalars ``learning_rate``, ``loss_scale`` and ``global_norm``.
    var_list: the variables; their gradients ``grads`` (None entries are left out).
    larc_factors: {variable index: LARC factor}.
  """
  if not wanted:
    return
  # Written inside the update's tf.cond; reset the name scope so the tags
  # are the plain names ('learning_rate', not 'cond/learning_rate').
  with tf.compat.v1.name_scope(None):
    _write_unscoped(set(wanted), step, values, var_list, grads, larc_factors)


def _write_unscoped(wanted, step, values, var_list, grads, larc_factors):
  names = [exclusions.variable_name(v) for v in var_list]
  for key, tag in (('learning_rate', 'learning_rate'), ('loss_scale', 'loss_scale'),
                   ('global_norm', 'global_gradient_norm')):
    if tag in wanted:
      tf.summary.scalar(tag, values[key], step=step)
  for name, g, v in zip(names, grads, var_list):
    if g is None:
      continue
    if 'gradients' in wanted:
      tf.summary.histogram(f'gradients/{name}', g, step=step)
    if 'gradient_norm' in wanted:
      tf.summary.scalar(f'gradient_norm/{name}', stages.norms([g])[0], step=step)
    if 'variables' in wanted:
      tf.summary.histogram(f'variables/{name}', v, step=step)
    if 'variable_norm' in wanted:
      tf.summary.scalar(f'variable_norm/{name}', stages.norms([v])[0], step=step)
  if 'larc_summaries' in wanted:
    for i, factor in larc_factors.items():
      tf.summary.scalar(f'larc_grad_update/{names[i]}', factor, step=step)
      tf.summary.scalar(f'larc_clip_on/{names[i]}', tf.cast(factor < 1.0, tf.float32), step=step)
