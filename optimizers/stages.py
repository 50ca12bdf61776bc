"""The stages of one update: small transforms with one signature, and the tensor math they use.

``pipeline.GradientPipeline`` runs them in the order of docs/math.md:
accumulation (``GradientAccumulator``) -> all-reduce (``AllReduce``) ->
finite check and loss-scaler update (``FiniteCheck``) -> global-norm
clipping (``Clip``) -> LARC (``Larc``) -> the optimizer's update
(``backend.update_all``). Each stage is called as ``stage(grads, update) ->
grads``: ``update`` (a ``pipeline.Update``) carries what the stages of one update
share (its learning rate, the global norm, whether it goes on, the LARC
factors). A stage holds only its own settings and variables, and its math
is a plain tensor function here, so each can be tested on its own.

The norms of the clipping and LARC stages are taken with one
``tf.nn.l2_loss`` kernel per tensor (``squared_norms``); ``norms`` and
``larc_reference`` keep the one-``tf.norm``-per-tensor form they are checked
against.
"""

import keras
import tensorflow as tf

from optimizers import allreduce
from optimizers import automatic_loss_scaler
from optimizers import exclusions
from optimizers import native


def unwrap(var):
  """The tf.Variable behind a Keras 3 variable (or the argument itself)."""
  return var.value if isinstance(var, keras.Variable) else var


def unwrap_all(variables):
  """``unwrap`` of each variable, as a list."""
  return [unwrap(v) for v in variables]


def _map_dense(fn, grad):
  """Applies ``fn`` to a dense gradient or to the values of an IndexedSlices one."""
  if grad is None:
    return None
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(fn(grad.values), grad.indices, grad.dense_shape)
  return fn(grad)


def to_float32(grads):
  """Casts gradients to float32 (None stays None)."""
  return [_map_dense(lambda g: tf.cast(g, tf.float32), g) for g in grads]


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
  if unit:
    return tf.cast(loss, tf.float32), to_float32(grads)
  inverse = 1.0 / loss_scale
  grads = [_map_dense(lambda g: tf.cast(g, tf.float32) * inverse, g) for g in grads]
  return tf.cast(loss, tf.float32), grads


def summed_rows(grad):
  """The rows of a sparse gradient with the rows of each repeated index added: one row per index.

  A tf.IndexedSlices gradient holds one row per lookup (an embedding's, one
  per token), so an id read twice has two rows; the dense gradient holds their
  sum. Norms are of the dense gradient: Σ‖row‖² of the rows as they come is
  not its squared norm. A dense tensor comes back as it is.
  """
  if not isinstance(grad, tf.IndexedSlices):
    return grad
  unique, positions = tf.unique(grad.indices)
  return tf.math.unsorted_segment_sum(grad.values, positions, tf.shape(unique)[0])


def norms(tensors):
  """float32 L2 norms of a list of tensors (IndexedSlices: of the dense tensor they sum to)."""
  return [tf.norm(tf.cast(summed_rows(t), tf.float32)) for t in tensors]


def _dense_float32(tensor):
  return tf.cast(summed_rows(tensor), tf.float32)


def squared_norms(tensors):
  """Σx² of each tensor, in float32, as one vector, with one ``tf.nn.l2_loss`` kernel per tensor.

  ``tf.nn.l2_loss`` takes Σx²/2 in one vectorised pass without a temporary;
  ``tf.norm`` materialises x² first (2-5x slower on CPU, docs/performance.md).

  Args:
    tensors: tensors or variables (``tf.IndexedSlices``: of the dense tensor they sum to).

  Returns:
    A float32 vector with one entry per tensor (shape ``[0]`` for none).
  """
  if not tensors:
    return tf.zeros([0], tf.float32)
  # 2·(Σx²/2) is exact in binary floating point.
  return tf.stack([2.0 * tf.nn.l2_loss(_dense_float32(t)) for t in tensors])


def norm_vector(tensors):
  """L2 norms of each tensor, in float32, as one vector (see ``squared_norms``)."""
  return tf.sqrt(squared_norms(tensors))


def global_norm(grads):
  """The float32 global L2 norm of the non-None gradients (0 when there are none)."""
  return tf.sqrt(tf.reduce_sum(squared_norms([g for g in grads if g is not None])))


def gradient_statistics(grads, with_norm):
  """The finite check, the largest |g| and, if ``with_norm``, the global norm of the gradients.

  One native kernel pass (``native.gradient_stats``) when the gradients are
  float32 on the CPU; otherwise the tensor ops of
  ``automatic_loss_scaler.gradient_stats`` and ``global_norm``, which give the
  same flag and maximum and the same norm up to float32 summation order. A
  sparse gradient counts with its rows summed per index on both (as
  ``squared_norms`` takes them: the dense gradient's norm), so an
  embedding's gradient keeps the kernel.

  Returns:
    (has_nan, amax, norm): as ``gradient_stats``; norm is None unless ``with_norm``.
  """
  present = [summed_rows(g) for g in grads if g is not None]
  stats = native.gradient_stats_where_applies(present) if present else None
  if stats is not None:
    has_nan, amax, norm = stats
    return has_nan, amax, (norm if with_norm else None)
  return gradient_statistics_reference(grads, with_norm)


def gradient_statistics_reference(grads, with_norm):
  """``gradient_statistics`` with the tensor ops only (the reference path)."""
  grads = [summed_rows(g) for g in grads if g is not None]
  has_nan, amax = automatic_loss_scaler.gradient_stats(grads)
  return has_nan, amax, (global_norm(grads) if with_norm else None)


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


def clip_by_global_norm(grads, clip_norm, use_norm=None):
  """Scales every gradient by clip_norm / max(global_norm, clip_norm).

  Args:
    grads: gradients (None entries pass through).
    clip_norm: the largest global norm allowed.
    use_norm: a precomputed global norm; computed when None.

  Returns:
    (clipped gradients, the global norm before clipping).
  """
  if use_norm is None:
    use_norm = global_norm(grads)
  clip_norm = tf.cast(clip_norm, tf.float32)
  factor = clip_norm / tf.maximum(use_norm, clip_norm)
  return [_map_dense(lambda g: g * tf.cast(factor, g.dtype), g) for g in grads], use_norm


class AllReduce:
  """Stage 3: the average of the gradients over the workers (either engine), once per update.

  Args:
    compression: ``'none'`` or ``'fp16'`` (float16 on the wire).
    count: a tf.Variable counting the calls, so that tests and logs can
      confirm one all-reduce per applied update.
  """

  def __init__(self, compression, count):
    self.compression = compression
    self.count = count

  def __call__(self, grads, update):
    if update.noise_small is None:
      grads = allreduce.average(grads, self.compression)
    elif self.compression == 'none':
      # The noise scale's mean |g_small|² travels in the gradients' all-reduce.
      *grads, update.noise_small = allreduce.average(list(grads) + [update.noise_small], 'none')
    else:
      # Not in float16: a squared norm may be beyond its range.
      grads = allreduce.average(grads, self.compression)
      update.noise_small, = allreduce.average([update.noise_small], 'none')
    self.count.assign_add(1)
    return grads


class FiniteCheck:
  """Stage 4: the finite check and the loss scaler's update; non-finite gradients end the update.

  One pass over the gradients (``gradient_statistics``) gives the finite
  flag, the largest magnitude (for LogMax) and, when ``with_norm``, the
  global norm, which goes to ``update.global_norm`` and ``last_norm``.

  Args:
    loss_scaler: the pipeline's loss scaler (``automatic_loss_scaler``).
    with_norm: take the global norm (to clip, log or summarise it).
    last_norm: a float32 tf.Variable keeping the latest update's norm.
  """

  def __init__(self, loss_scaler, with_norm, last_norm):
    self.loss_scaler = loss_scaler
    self.with_norm = with_norm
    self.last_norm = last_norm

  def __call__(self, grads, update):
    has_nan, amax, norm = gradient_statistics(grads, self.with_norm)
    self.loss_scaler.update_op(has_nan, amax)
    if norm is not None:
      self.last_norm.assign(norm)
    update.global_norm = norm
    update.checked = grads
    update.go_on = tf.logical_not(has_nan)
    return grads


class Clip:
  """Stage 5: global-norm clipping to ``clip_norm`` (``clip_by_global_norm``), with the update's norm."""

  def __init__(self, clip_norm):
    self.clip_norm = clip_norm

  def __call__(self, grads, update):
    grads, _ = clip_by_global_norm(grads, self.clip_norm, update.global_norm)
    return grads


def larc_coefficients(grad_norms, var_norms, learning_rate, larc_eta, larc_mode, min_update,
                      epsilon):
  """The LARC factor c for each variable, from float32 norms.

  clip: c = min(1, max(eta·‖v‖ / (lr·(‖g‖ + eps)), min_update));
  scale: c = max(eta·‖v‖ / (‖g‖ + eps), min_update);
  and c = 1 (the gradient passes unchanged) when ‖v‖ = 0 or ‖g‖ = 0, and in
  clip mode when lr = 0, as LARS's trust ratio does.

  OpenSeq2Seq applies the formulas unconditionally. A zero-initialised bias or
  batch-norm beta then gets 0/0 = NaN in clip mode while a warm-up starts at
  lr 0, which poisons the whole update, and c = min_update otherwise, so it
  barely ever moves away from zero. With the rule above no factor is ever
  non-finite and such a variable trains at the base learning rate until its
  norm is positive.
  """
  lr = tf.cast(learning_rate, tf.float32)
  usable = tf.logical_and(var_norms > 0.0, grad_norms > 0.0)
  if larc_mode == 'clip':
    usable = tf.logical_and(usable, lr > 0.0)
    # Unusable entries divide by 1: no 0/0 or x/0 is evaluated at all.
    denominator = tf.where(usable, lr * (grad_norms + epsilon), 1.0)
    factors = tf.minimum(tf.maximum(larc_eta * var_norms / denominator, min_update), 1.0)
  else:
    denominator = tf.where(usable, grad_norms + epsilon, 1.0)
    factors = tf.maximum(larc_eta * var_norms / denominator, min_update)
  return tf.where(usable, factors, tf.ones_like(factors))


def larc(grads, var_list, learning_rate, params, adapts=None):
  """Applies LARC to the gradients.

  The norms of all adapted gradients and variables are taken in one go
  (``norm_vector``); ``larc_reference`` is the same stage with one ``tf.norm``
  per tensor.

  Args:
    grads: gradients (None entries pass through).
    var_list: the matching variables.
    learning_rate: the current base learning rate.
    params: checked ``larc_params`` (see ``validation.check_larc_params``).
    adapts: ``exclusions.larc_mask(var_list, params)`` when known already.

  Returns:
    (new gradients, {variable index: LARC factor}) for the adapted variables.
  """
  return _larc(grads, var_list, learning_rate, params, norm_vector, adapts)


def larc_reference(grads, var_list, learning_rate, params, adapts=None):
  """``larc`` with the norms taken one ``tf.norm`` at a time (the reference path)."""
  return _larc(grads, var_list, learning_rate, params, lambda ts: tf.stack(norms(ts)), adapts)


class Larc:
  """Stage 6, LARC: scales each adapted gradient by its LARC factor (``larc``).

  ``backend.update_all`` takes it as ``larc=``, the end of the chain: it
  either calls it as a stage, or reads ``params`` and ``adapts`` to run LARC
  inside the optimizer's native kernel. The factors go to
  ``update.larc_factors``.

  Args:
    params: checked ``larc_params``.
    var_list: the variables it updates; which of them LARC adapts is decided
      once, here.
  """

  def __init__(self, params, var_list):
    self.params = params
    self.variables = list(var_list)
    self.adapts = exclusions.larc_mask(var_list, params)

  def __call__(self, grads, update):
    grads, update.larc_factors = larc(grads, self.variables, update.learning_rate, self.params,
                                      self.adapts)
    return grads


def _larc(grads, var_list, learning_rate, params, norms_fn, adapts=None):
  if adapts is None:
    adapts = exclusions.larc_mask(var_list, params)
  adapted = [i for i, g in enumerate(grads) if g is not None and adapts[i]]
  if not adapted:
    return list(grads), {}
  g_norms = norms_fn([grads[i] for i in adapted])
  v_norms = norms_fn([unwrap(var_list[i]) for i in adapted])
  factors = larc_coefficients(g_norms, v_norms, learning_rate, params['larc_eta'],
                              params['larc_mode'], params['min_update'], params['epsilon'])
  result = list(grads)
  coefficients = {}
  for k, i in enumerate(adapted):
    c = factors[k]
    result[i] = _map_dense(lambda g, c=c: g * tf.cast(c, g.dtype), grads[i])
    coefficients[i] = c
  return result, coefficients


class GradientAccumulator(tf.Module):
  """float32 accumulators for gradient accumulation over micro-batches.

  Args:
    var_list: the variables whose gradients are accumulated.
  """

  def __init__(self, var_list, name='gradient_accumulator'):
    super().__init__(name=name)
    with tf.init_scope():
      self.sums = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False,
                               name=f'accumulator_{i}') for i, v in enumerate(var_list)]

  def add(self, grads):
    """Adds one micro-batch's gradients (None counts as zero)."""
    for acc, g in zip(self.sums, grads):
      if g is not None:
        acc.assign_add(tf.convert_to_tensor(g))

  def mean(self, count):
    """The accumulated gradients divided by ``count``."""
    inverse = 1.0 / tf.cast(count, tf.float32)
    return [acc * inverse for acc in self.sums]

  def take(self, count):
    """``mean(count)``, then the sums start again from zero (the mean was read before)."""
    result = self.mean(count)
    self.reset()
    return result

  def reset(self):
    for acc in self.sums:
      acc.assign(tf.zeros_like(acc))


class Accumulate:
  """Stage 2: gradient accumulation over ``iter_size`` micro-batches (float32 means).

  ``add`` runs every micro-step: it adds the micro-batch's gradients and
  says whether an update is due. As the chain's first stage, run when one
  is, it returns the mean of the gradients added since the last update
  (the micro-step's own among them) and starts the sums again from zero.

  Args:
    accumulator: the ``GradientAccumulator`` holding the sums.
    micro_step: an int64 tf.Variable, micro-batches added since the last update.
    iter_size: micro-batches per update.
  """

  def __init__(self, accumulator, micro_step, iter_size):
    self.accumulator = accumulator
    self.micro_step = micro_step
    self.iter_size = iter_size

  def add(self, grads, skip_update=None):
    """Adds a micro-batch's gradients; returns whether an update is due (a boolean tensor).

    ``skip_update``, when given, decides instead of the count: True accumulates only.
    """
    self.accumulator.add(grads)
    self.micro_step.assign_add(1)
    if skip_update is None:
      return self.micro_step >= self.iter_size
    return tf.logical_not(tf.convert_to_tensor(skip_update))

  def __call__(self, grads, update):
    del grads, update  # added already, by ``add``
    grads = self.accumulator.take(self.micro_step)
    self.micro_step.assign(0)
    return grads


class MasterWeights(tf.Module):
  """float32 master copies of half-precision variables.

  The optimizer updates the float32 copy; the half-precision variable is then
  overwritten with the rounded copy, so small updates are not lost to rounding.
  Variables that are already float32 (the Keras 3 mixed-precision policies keep
  them so) are used directly.
  """

  def __init__(self, var_list, name='master_weights'):
    super().__init__(name=name)
    self.model_vars = list(var_list)
    self.masters = []
    with tf.init_scope():
      for v in self.model_vars:
        if v.dtype in (tf.float16, tf.bfloat16):
          master = tf.Variable(tf.cast(unwrap(v), tf.float32), trainable=False,
                               name='master/' + exclusions.variable_name(v))
          self.masters.append(master)
        else:
          self.masters.append(v)

  @property
  def has_half(self):
    return any(m is not v for m, v in zip(self.masters, self.model_vars))

  def copy_back(self):
    """Writes the masters back into the half-precision variables."""
    for m, v in zip(self.masters, self.model_vars):
      if m is not v:
        v.assign(tf.cast(m, v.dtype))
