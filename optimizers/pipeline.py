"""``GradientPipeline``: one large-batch update, as one chain of stages built once.

The stages, in the order of docs/math.md ("One update of optimize_loss"),
each an object of ``stages.py`` called as ``stage(grads, update) -> grads``:

1. loss × loss_scale -> gradients (float32) -> × 1/loss_scale (``scaled_gradients``, here)
2. accumulation over ``iter_size`` micro-batches (``Accumulate``)
3. all-reduce: the average over workers, either engine (``AllReduce``)
4. finite check -> loss-scaler update; a non-finite update stops here (``FiniteCheck``)
5. global-norm clipping (``Clip``)
6. LARC (``Larc``) and 7. the optimizer's step (``KerasStep``, ``FusedStep``),
   or the two as one native kernel (``FusedLarcStep``); then global_step += 1

Stages 2-7 are a ``stages.Chain``, built on the first update, when the
device, the graph (inside XLA or not) and the gradients are known: each
stage's form is chosen then (``stages.step_stages`` for 6 and 7) and never
again. ``describe_chain`` gives it as the run log prints it. A pipeline holds
the state of the update (optimizer, global step, loss scaler, accumulators)
and returns the metrics of each micro-step; the trainer calls it directly,
users' own loops through ``optimize_loss``.
"""

import tensorflow as tf

from core import noise_scale as noise_scale_formulas
from optimizers import allreduce
from optimizers import exclusions
from optimizers import native
from optimizers import stages
from optimizers.noise_scale import NoiseScale
from optimizers import validation
from optimizers.automatic_loss_scaler import make_loss_scaler
from optimizers.catalog import is_instance
from optimizers.catalog import make_optimizer
from optimizers.settings import UpdateSettings


# --- 1. the gradients of one micro-step --------------------------------------------------

def _to_float32(grad, factor=None):
  """``grad`` cast to float32, times ``factor`` when given (IndexedSlices: its values; None stays)."""
  if grad is None:
    return None
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(_to_float32(grad.values, factor), grad.indices, grad.dense_shape)
  grad = tf.cast(grad, tf.float32)
  return grad if factor is None else grad * factor


def scaled_gradients(loss_fn, var_list, loss_scale, extras=None):
  """Runs ``loss_fn`` on a tape and returns (loss, float32 gradients of loss·scale, unscaled).

  The loss is multiplied by ``loss_scale`` before differentiation so small
  half-precision gradients do not underflow; the gradients are cast to float32
  and multiplied by 1/loss_scale there, where they are representable.

  ``loss_fn`` may return a pair (loss, dict of tensors); the dict then goes
  into ``extras`` (e.g. the batch's accuracy, returned among the metrics).
  """
  # A fixed scale of 1 (the default) multiplies nothing: leave the two
  # multiplies per gradient out of the graph (x·1 is exact, so the gradients
  # are the same to the bit).
  unit = tf.get_static_value(loss_scale) == 1.0
  with tf.GradientTape() as tape:
    loss = loss_fn()
    if isinstance(loss, tuple):
      loss, extra = loss
      if extras is not None:
        extras.update(extra)
    scaled = tf.cast(loss, tf.float32)
    if not unit:
      scaled = scaled * loss_scale
  grads = tape.gradient(scaled, var_list)
  inverse = None if unit else 1.0 / loss_scale
  return tf.cast(loss, tf.float32), [_to_float32(g, inverse) for g in grads]


def mean_gradients(parts):
  """The mean of several lists of gradients (None where all are None; IndexedSlices stay sparse)."""
  inverse = 1.0 / len(parts)
  result = []
  for grads in zip(*parts):
    present = [g for g in grads if g is not None]
    if not present:
      result.append(None)
    elif all(isinstance(g, tf.IndexedSlices) for g in present):
      result.append(tf.IndexedSlices(tf.concat([g.values for g in present], 0) * inverse,
                                     tf.concat([g.indices for g in present], 0),
                                     present[0].dense_shape))
    else:
      result.append(tf.add_n([tf.convert_to_tensor(g) for g in present]) * inverse)
  return result


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
  """Stages 6 and 7 alone, with LARC given as ``larc_params``: the end of a chain, built and run once.

  Returns:
    {variable index: LARC factor} for the adapted variables.
  """
  larc = stages.Larc(larc_params, var_list) if larc_params is not None else None
  update = Update(learning_rate)
  for stage in stages.step_stages(optimizer, var_list, grads, larc, larc_rate_is_optimizers):
    grads = stage(grads, update)
  return update.larc_factors


def _base_learning_rate(optimizer, optimizer_params, learning_rate_decay_fn):
  """The fixed rate, popped from ``optimizer_params``, when there is no schedule; None with one."""
  if learning_rate_decay_fn is not None:
    if 'learning_rate' in optimizer_params:
      # OpenSeq2Seq passes both to the optimizer class, which takes one (a TypeError there).
      raise ValueError(f"optimize_loss: optimizer_params['learning_rate'] "
                       f"({optimizer_params['learning_rate']!r}) beside learning_rate_decay_fn, "
                       'which gives the rate at every step; allowed: one of them')
    return None
  if 'learning_rate' not in optimizer_params and not is_instance(optimizer):
    raise ValueError('optimize_loss: give learning_rate_decay_fn or '
                     "optimizer_params['learning_rate']")
  return optimizer_params.pop('learning_rate', None)


class GradientPipeline(tf.Module):
  """The state and stages of ``optimize_loss`` for one set of variables.

  Calling it runs one micro-step and returns its metrics (see ``__call__``).

  Args:
    var_list: the variables to train.
    settings: the update's ``UpdateSettings``.
    name: the module's name.
  """

  def __init__(self, var_list, settings, name='optimize_loss'):
    super().__init__(name=name)
    if not isinstance(settings, UpdateSettings):
      raise TypeError(f'GradientPipeline: settings must be an UpdateSettings, got '
                      f'{type(settings).__name__}')
    self.var_list = list(var_list)
    if not self.var_list:
      raise ValueError('optimize_loss: var_list is empty; nothing to train')
    self.settings = settings
    self.dtype = settings.dtype
    self.clip_gradients = settings.clip_gradients
    self.larc_params = settings.larc_params
    self.compression = settings.compression
    self.iter_size = settings.iter_size
    self.summaries = settings.summaries
    self.multi_worker = settings.multi_worker
    self.log_global_norm = settings.log_global_norm
    self.noise_scale_params = settings.noise_scale_params
    # The global norm is taken when clipping, logging or summarising it, and for the noise scale.
    self._with_norm = (self.clip_gradients is not None or self.log_global_norm
                       or 'global_gradient_norm' in self.summaries or settings.noise_scale)
    if self.multi_worker and allreduce.engine_name() == allreduce.NONE:
      # No engine was handed over (a script of the user's own): the Horovod it started.
      allreduce.join_started_horovod()
    optimizer_params = dict(settings.optimizer_params)
    self.learning_rate_decay_fn = settings.learning_rate_decay_fn
    self._base_lr = _base_learning_rate(settings.optimizer, optimizer_params,
                                        self.learning_rate_decay_fn)
    # The pipeline sets the optimizer's rate each update when it knows it; LARC's
    # rate is then the optimizer's own.
    self._larc_rate_is_optimizers = (self.learning_rate_decay_fn is not None
                                     or self._base_lr is not None)
    with tf.init_scope():
      self._create_state(settings.optimizer, optimizer_params, settings.loss_scaling,
                         settings.loss_scaling_params)

  def _create_state(self, optimizer, optimizer_params, loss_scaling, loss_scaling_params):
    """The variables of the pipeline, the optimizer (built) and the loss scaler."""
    self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
    # The step the update's summaries are written at: the update count, unless the caller
    # counts steps otherwise (a run whose batch grows counts examples: the trainer sets it).
    self.summary_step_fn = lambda: self.global_step
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
    self.accumulate = (stages.Accumulate(self.accumulator, self.micro_step, self.iter_size)
                       if self.accumulator is not None else None)
    self.noise = self._noise_scale()
    # Built on the first update (build_chain), when the forms of its stages can be chosen.
    self.chain = None

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

  def build_chain(self):
    """The chain of stages 2-7 (``stages.Chain``), built on the first call and kept.

    The update calls it when it first runs, so that each stage's form fits
    where it runs: the finite check's statistics in the native kernel where
    it applies (CPU, outside XLA, ``native.library_for``), and the step's
    forms chosen by ``stages.step_stages`` when the first update reaches it.
    """
    if self.chain is not None:
      return self.chain
    head = [self.accumulate] if self.accumulate is not None else []
    if self._averages_workers():
      head.append(stages.AllReduce(self.compression, self.allreduce_count))
    head.append(stages.FiniteCheck(self.loss_scaler, self._with_norm, self.last_global_norm,
                                   native.library_for([], [], [])))
    if self.noise is not None:
      head.append(self.noise)
    if self.clip_gradients is not None:
      head.append(stages.Clip(self.clip_gradients))
    larc = stages.Larc(self.larc_params, self.update_vars) if self.larc_params is not None else None
    self.chain = stages.Chain(
        head, lambda grads: stages.step_stages(
            self.optimizer, self.update_vars, grads, larc, self._larc_rate_is_optimizers,
            sets_rate=self._larc_rate_is_optimizers), self._finish)
    return self.chain

  def describe_chain(self):
    """The chain as the run log prints it (``update chain: accumulate(2) → ... → lars(native)``)."""
    return self.build_chain().describe()

  @property
  def grows(self):
    """Whether ``iter_size`` is a variable that the run may raise between updates (a growing batch)."""
    return isinstance(self.iter_size, tf.Variable)

  def _current_lr_value(self):
    if self.learning_rate_decay_fn is not None:
      rate = self.learning_rate_decay_fn(tf.constant(0, tf.int64))
      if rate is None:
        raise TypeError('optimize_loss: learning_rate_decay_fn returned None at global step 0 '
                        '(a missing return?); allowed: a function of the global step that '
                        'returns the learning rate, a number or a scalar tensor')
      return float(rate)
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
  def loss_scale(self):
    return self.loss_scaler.loss_scale

  def checkpoint_items(self):
    """The state to checkpoint besides the model, as tf.train.Checkpoint keyword arguments."""
    # The optimizer's variables are listed rather than the optimizer itself:
    # tf.train.Checkpoint treats an object with get_slot_names() as a TF 1
    # optimizer and would save its slots twice.
    items = {'global_step': self.global_step, 'micro_step': self.micro_step,
             'optimizer_variables': [stages.unwrap(v) for v in self.optimizer.variables],
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
    result += [stages.unwrap(v) for v in self.optimizer.variables]
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
    if not (callable(loss_fn) or isinstance(loss_fn, (list, tuple)) and loss_fn
            and all(callable(part) for part in loss_fn)):
      raise TypeError(f'optimize_loss: loss is a {type(loss_fn).__name__}; allowed: a function '
                      'of no arguments that computes the loss (or a list of them, a micro-batch '
                      'in parts): TF 2 takes the gradients of what it computes on its tape, and '
                      'a tensor computed before has none (OpenSeq2Seq\'s graph tensor: wrap its '
                      'computation in a lambda)')
    loss_scale = self.loss_scaler.loss_scale
    metrics = {'loss_scale': tf.identity(loss_scale), 'learning_rate': self.learning_rate()}
    # 1. loss × S -> float32 gradients -> × 1/S
    loss, grads = self._gradients(loss_fn, loss_scale, metrics)
    # 2. accumulation: the chain runs when an update is due.
    if self.accumulator is None:
      due = tf.constant(True)
      applied = self._update(grads)
    else:
      due = self.accumulate.add(grads, skip_update)
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
    if self.noise is not None:
      parts = self.noise_scale_params.get('parts', 1)
      given = 1 if callable(loss_fn) else len(loss_fn)
      if given != parts:
        # The estimate counts parts small-batch gradients per micro-step: others give wrong numbers.
        raise ValueError(f'noise_scale_params.parts: {parts}, but the micro-step is given as '
                         f'{given} loss function(s); allowed: as many as parts (a list of '
                         f'{parts} for parts > 1)')
    if callable(loss_fn):
      loss, grads = scaled_gradients(loss_fn, self.var_list, loss_scale, extras=metrics)
      if self.noise is not None:
        self.noise.add(stages.squared_norm_sum(grads))
      return loss, grads
    losses, parts, extras = [], [], []
    for part in loss_fn:
      extra = {}
      loss, grads = scaled_gradients(part, self.var_list, loss_scale, extras=extra)
      if self.noise is not None:
        self.noise.add(stages.squared_norm_sum(grads))
      losses.append(loss)
      parts.append(grads)
      extras.append(extra)
    for name in extras[0]:
      metrics[name] = tf.add_n([tf.cast(e[name], tf.float32) for e in extras]) / len(extras)
    return tf.add_n(losses) / len(losses), mean_gradients(parts)

  def _update(self, grads):
    """The chain on one update's gradients; returns whether the update was applied."""
    update = Update(self.learning_rate())
    if self.noise is not None:
      update.noise_small = self.noise.take()
    return self.build_chain()(grads, update)

  def _finish(self, update):
    """After the optimizer's step: the half-precision weights, the summaries, global_step += 1."""
    if self.masters is not None:
      self.masters.copy_back()
    if self.summaries:
      write_summaries(self.summaries, self.summary_step_fn(),
                      {'learning_rate': update.learning_rate,
                       'loss_scale': self.loss_scaler.loss_scale,
                       'global_norm': update.global_norm}, self.var_list, update.checked,
                      update.larc_factors)
    self.global_step.assign_add(1)


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
