"""The stages of one update: small transforms with one signature, and the tensor math they use.

One update is a chain (``Chain``) of stages, each called as ``stage(grads,
update) -> grads``, in the order of docs/math.md:

  accumulate (``Accumulate``) -> all-reduce (``AllReduce``) -> finite check
  and loss scale (``FiniteCheck``) -> [noise scale] -> clip (``Clip``) ->
  LARC (``Larc``) -> the optimizer's step (``KerasStep``, ``FusedStep``)

``update`` (a ``Update``) carries what the stages of one update share: its
learning rate, the global norm, whether it goes on, the LARC factors. A stage
holds only its own settings, variables and the form of its math chosen when
the chain was built: ``FiniteCheck`` takes its
statistics with the native kernel or with tensor ops, the optimizer's step is
Keras' own (``KerasStep``), the optimizer's native kernel or its XLA launches
(``FusedStep``), and ``FusedLarcStep`` is one native kernel that replaces the
LARC stage and a momentum step. ``step_stages`` holds the rules of that
choice. Nothing on the path chooses a form again.

The norms of the clipping and LARC stages are taken with one
``tf.nn.l2_loss`` kernel per tensor (``squared_norms``).
"""

import functools
import logging
import math

import keras
import tensorflow as tf

from optimizers import allreduce
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


def squared_norm_sum(grads):
  """Σ‖g‖² of the non-None gradients, in float32 (0 when there are none)."""
  return tf.reduce_sum(squared_norms([g for g in grads if g is not None]))


def global_norm(grads):
  """The float32 global L2 norm of the non-None gradients (0 when there are none)."""
  return tf.sqrt(squared_norm_sum(grads))


def gradient_stats(grads):
  """Finite check and largest magnitude of a list of gradients.

  Args:
    grads: a list of gradient tensors; None entries are skipped and
      ``tf.IndexedSlices`` contribute their ``values``. Any dtype; the stats
      are computed in float32.

  Returns:
    ``(has_nan, amax)``: a bool scalar tensor that is True when any element is
    NaN or infinite, and a float32 scalar tensor with the largest |g| (0 when
    there are no elements, +inf when ``has_nan``).

  Raises:
    ValueError: when ``grads`` is a single tensor instead of a list.
  """
  if isinstance(grads, (tf.Tensor, tf.Variable, tf.IndexedSlices)):
    raise ValueError(f'grads: expected a list of gradient tensors, got a single {type(grads).__name__}')
  finite = [tf.constant(True)]
  maxima = [tf.constant(0.0, tf.float32)]
  for grad in grads:
    if grad is None:
      continue
    if isinstance(grad, tf.IndexedSlices):
      grad = grad.values
    grad = tf.cast(grad, tf.float32)
    # A max does not reliably propagate NaN, so finiteness is its own reduction.
    finite.append(tf.reduce_all(tf.math.is_finite(grad)))
    maxima.append(tf.reduce_max(tf.abs(grad)))
  has_nan = tf.logical_not(tf.reduce_all(tf.stack(finite)))
  amax = tf.where(has_nan, tf.constant(math.inf, tf.float32), tf.reduce_max(tf.stack(maxima)))
  return has_nan, amax


def gradient_statistics(grads, with_norm, kernels=None):
  """The finite check, the largest |g| and, if ``with_norm``, the global norm of the gradients.

  With ``kernels`` (the loaded native op library, given where it applies:
  float32 gradients on the CPU, outside XLA), one pass of its
  ``LargebatchGradientStats`` op; otherwise the tensor ops of
  ``gradient_stats`` and ``global_norm``, which give the
  same flag and maximum and the same norm up to float32 summation order. A
  sparse gradient counts with its rows summed per index on both (as
  ``squared_norms`` takes them: the dense gradient's norm), so an
  embedding's gradient keeps the kernel.

  Returns:
    (has_nan, amax, norm): a bool scalar, True when any element is NaN or
    infinite; the largest |g| (+inf when has_nan, 0 for no elements); the
    float32 L2 norm of all the gradients together (the kernel sums it in
    double), None unless ``with_norm``.
  """
  present = [summed_rows(g) for g in grads if g is not None]
  if kernels is None or not present:
    has_nan, amax = gradient_stats(present)
    return has_nan, amax, (global_norm(present) if with_norm else None)
  all_finite, amax, norm = kernels.largebatch_gradient_stats(
      gradients=[tf.convert_to_tensor(g) for g in present])
  return tf.logical_not(all_finite), amax, (norm if with_norm else None)


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

  def describe(self):
    wire = ', fp16' if self.compression == 'fp16' else ''
    return f'allreduce({allreduce.engine_name()}{wire})'

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
    kernels: the native op library where its statistics kernel applies
      (``native.library_for``), else None: tensor ops.
  """

  def __init__(self, loss_scaler, with_norm, last_norm, kernels=None):
    self.loss_scaler = loss_scaler
    self.with_norm = with_norm
    self.last_norm = last_norm
    self.kernels = kernels

  def describe(self):
    # A scaler of the user's own may have no description: its class names it.
    describe = getattr(self.loss_scaler, 'describe', None)
    return describe() if describe is not None else type(self.loss_scaler).__name__

  def __call__(self, grads, update):
    has_nan, amax, norm = gradient_statistics(grads, self.with_norm, self.kernels)
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

  def describe(self):
    return f'clip({self.clip_norm:g})'

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
  (``norm_vector``).

  Args:
    grads: gradients (None entries pass through).
    var_list: the matching variables.
    learning_rate: the current base learning rate.
    params: checked ``larc_params`` (see ``validation.check_larc_params``).
    adapts: ``exclusions.larc_mask(var_list, params)`` when known already.

  Returns:
    (new gradients, {variable index: LARC factor}) for the adapted variables.
  """
  if adapts is None:
    adapts = exclusions.larc_mask(var_list, params)
  adapted = [i for i, g in enumerate(grads) if g is not None and adapts[i]]
  if not adapted:
    return list(grads), {}
  g_norms = norm_vector([grads[i] for i in adapted])
  v_norms = norm_vector([unwrap(var_list[i]) for i in adapted])
  factors = larc_coefficients(g_norms, v_norms, learning_rate, params['larc_eta'],
                              params['larc_mode'], params['min_update'], params['epsilon'])
  result = list(grads)
  coefficients = {}
  for k, i in enumerate(adapted):
    c = factors[k]
    result[i] = _map_dense(lambda g, c=c: g * tf.cast(c, g.dtype), grads[i])
    coefficients[i] = c
  return result, coefficients


class Larc:
  """Stage 6, LARC: scales each adapted gradient by its LARC factor (``larc``).

  The factors go to ``update.larc_factors``. Where one native kernel does LARC
  and the optimizer's step (``FusedLarcStep``), that stage takes its place.

  Args:
    params: checked ``larc_params``.
    var_list: the variables it updates; which of them LARC adapts is decided
      once, here.
  """

  def __init__(self, params, var_list):
    self.params = params
    self.variables = list(var_list)
    self.adapts = exclusions.larc_mask(var_list, params)

  def describe(self):
    return f"larc({self.params['larc_mode']})"

  def __call__(self, grads, update):
    grads, update.larc_factors = larc(grads, self.variables, update.learning_rate, self.params,
                                      self.adapts)
    return grads


def step_name(optimizer):
  """The optimizer's short name in the chain's description: ``LARSOptimizer`` -> ``lars``."""
  name = type(optimizer).__name__.lower()
  return name[:-len('optimizer')] if name.endswith('optimizer') and name != 'optimizer' else name


def _in_this_graph(grad):
  """``grad`` as a tensor (or IndexedSlices) of the graph being built, without a copy.

  Keras' update passes the gradients through a custom_gradient op (its
  replica-context sum, an identity on one replica), which needs them all
  from one graph: the gradients LARC left alone come from outside the branch
  the update runs in, the scaled ones from inside it.
  """
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(tf.identity(grad.values), tf.identity(grad.indices),
                            grad.dense_shape)
  return tf.identity(grad)


def apply_fused(optimizer, update_fn, grads, trainable_variables):
  """What Keras' ``apply`` does around an update that it adds nothing to, with ``update_fn`` as the update.

  Builds the optimizer if needed, runs ``update_fn(grads, variables,
  indices, learning_rate)`` on every variable at once (``variables`` the
  tf.Variables behind the Keras ones, ``indices`` their places in the built
  list; a sparse gradient is given as the dense tensor it sums to), applies
  the variables' constraints and counts the iteration.

  Returns:
    What ``update_fn`` returns.
  """
  trainable_variables = list(trainable_variables)
  if not optimizer.built:
    with keras.name_scope(optimizer.name, caller=optimizer):
      optimizer.build(trainable_variables)
    optimizer.built = True
  with tf.name_scope(optimizer.name):
    # pylint: disable-next=protected-access
    indices = [optimizer._get_variable_index(v) for v in trainable_variables]
    result = update_fn([tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                        for g in grads], unwrap_all(trainable_variables), indices,
                       optimizer.learning_rate)
    for variable in trainable_variables:
      if variable.constraint is not None:
        variable.assign(variable.constraint(variable))
  optimizer.iterations.assign_add(1)
  return result


class Step:
  """What the forms of stage 7, the optimizer's step, share.

  Args:
    optimizer: the Keras optimizer.
    variables: the variables it updates.
    sets_rate: give the optimizer the update's learning rate first (the
      pipeline's schedule drives it), else it keeps its own.
  """

  def __init__(self, optimizer, variables, sets_rate=False):
    self.optimizer = optimizer
    self.variables = list(variables)
    self.sets_rate = sets_rate

  def take_rate(self, update):
    """Gives the optimizer the update's learning rate when this step sets it."""
    if self.sets_rate:
      self.optimizer.learning_rate = update.learning_rate


class KerasStep(Step):
  """Stage 7 in Keras' own form: its ``apply``, ``update_step`` variable by variable.

  The form of an optimizer without fused updates (Keras' own, AGN), of one
  asked for none (``fused=False``), and wherever a fused one does not apply
  (``step_stages``).
  """

  def __init__(self, optimizer, variables, sets_rate=False):
    super().__init__(optimizer, variables, sets_rate)
    # The package's optimizers keep Keras' apply as reference_apply (their apply is fused).
    self.apply = getattr(optimizer, 'reference_apply', optimizer.apply)

  def describe(self):
    return f'{step_name(self.optimizer)}(keras)'

  def __call__(self, grads, update):
    self.take_rate(update)
    present = [i for i, g in enumerate(grads) if g is not None]
    self.apply([_in_this_graph(grads[i]) for i in present], [self.variables[i] for i in present])
    return grads


class FusedStep(Step):
  """Stage 7 in a fused form: the optimizer's update of every variable at once.

  Args:
    optimizer: a package optimizer (``backend.FusedUpdate``).
    variables: the variables it updates.
    form: ``'native'``, the optimizer's native kernel (``native_update``,
      given ``kernels``), or ``'xla'``, its XLA launches (``xla_update``).
    kernels: the loaded native op library, with ``'native'``.
    sets_rate: as ``Step``.
  """

  def __init__(self, optimizer, variables, form, kernels=None, sets_rate=False):
    super().__init__(optimizer, variables, sets_rate)
    self.form = form
    self.update = (functools.partial(optimizer.native_update, kernels) if form == 'native'
                   else optimizer.xla_update)

  def describe(self):
    return f'{step_name(self.optimizer)}({self.form})'

  def __call__(self, grads, update):
    if update is not None:
      self.take_rate(update)
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
      self.optimizer.reference_apply([], [])
      return grads
    apply_fused(self.optimizer, self.update, [_in_this_graph(grads[i]) for i in present],
                [self.variables[i] for i in present])
    return grads


class FusedLarcStep(Step):
  """Stages 6 and 7 as one native kernel: LARC, then momentum SGD.

  ``KerasMomentum.native_larc_update`` reads each variable once for its
  LARC factor and its update; the factors go to ``update.larc_factors`` as
  the LARC stage's would.

  Args:
    optimizer: a ``KerasMomentum`` with momentum > 0.
    larc_stage: the ``Larc`` stage it replaces (its params and mask).
    kernels: the loaded native op library.
    sets_rate: as ``Step``.
  """

  def __init__(self, optimizer, larc_stage, kernels, sets_rate=False):
    super().__init__(optimizer, larc_stage.variables, sets_rate)
    self.larc = larc_stage
    self.kernels = kernels

  def describe(self):
    return f"larc({self.larc.params['larc_mode']})+{step_name(self.optimizer)}(native)"

  def __call__(self, grads, update):
    self.take_rate(update)
    present = [i for i, g in enumerate(grads) if g is not None]
    adapts = self.larc.adapts
    update_fn = functools.partial(self.optimizer.native_larc_update, self.kernels,
                                  larc_params=self.larc.params,
                                  adapt=[adapts[i] for i in present])
    factors = apply_fused(self.optimizer, update_fn, [grads[i] for i in present],
                          [self.variables[i] for i in present])
    update.larc_factors = {i: factors[k] for k, i in enumerate(present) if adapts[i]}
    return grads


# --- the choice of the step's forms, once, when the chain is built -------------------------

NATIVE = 'native'
XLA = 'xla'
KERAS = 'keras'

_LOG = logging.getLogger('optimizers')
_logged = set()


@tf.autograph.experimental.do_not_convert
def step_stages(optimizer, variables, grads, larc=None, larc_rate_is_optimizers=True,
                sets_rate=False):
  """The stages that end an update's chain: LARC (when given) and the optimizer's step.

  Called once, when the chain is built (``Chain``), with the
  gradients as they reach the end of the chain. The rules, in order:

  * with ``larc``: one native kernel for LARC and the step
    (``FusedLarcStep``) when the optimizer has it
    (``KerasMomentum``), momentum > 0, LARC works at the optimizer's own
    rate, Keras' ``apply`` would add nothing (``keras_adds_nothing``) and the
    kernel applies (``native.library_for``); else ``larc`` as a stage of its
    own, then the step:
  * Keras' own step (``KerasStep``) for an optimizer without fused
    updates, or asked for none (``fused=False``), when Keras' ``apply``
    would add a step around ``update_step``, a gradient is sparse and not
    read as dense (``SPARSE_AS_DENSE``: LAMB reads it so), or a
    ``tf.distribute`` strategy routes each variable's update;
  * else the optimizer's native kernel where it applies (float32, dense, CPU,
    outside XLA, built and loaded, not off by ``LARGEBATCH_NATIVE_KERNELS=0``);
  * else its XLA launches.

  Args:
    optimizer: the Keras optimizer.
    variables: the variables of the update.
    grads: their gradients as the step will take them (None: not updated).
    larc: the ``Larc`` stage, or None.
    larc_rate_is_optimizers: whether LARC's learning rate is the one the
      optimizer's update uses (when it is not, LARC and the step stay apart).
    sets_rate: the step gives the optimizer the update's learning rate first
      (``Step``).

  Returns:
    A list of 
  """
  present = [i for i, g in enumerate(grads) if g is not None]
  grads = [grads[i] for i in present]
  fused_variables = [variables[i] for i in present]
  if not present or not hasattr(optimizer, 'xla_update'):
    return ([larc] if larc is not None else []) + [
        KerasStep(optimizer, variables, sets_rate)]
  if larc is not None and larc_rate_is_optimizers and hasattr(optimizer, 'native_larc_update') \
      and optimizer.momentum > 0 and keras_adds_nothing(optimizer, fused_variables):
    kernels = native.library_for(fused_variables, [], grads)
    if kernels is not None:
      return [_chosen(FusedLarcStep(optimizer, larc, kernels, sets_rate))]
  step = _step(optimizer, variables, fused_variables, grads, sets_rate)
  return ([larc] if larc is not None else []) + [_chosen(step)]


def _step(optimizer, variables, fused_variables, grads, sets_rate):
  """The optimizer's step alone, in the form the rules of ``step_stages`` give."""
  if getattr(optimizer, 'SPARSE_AS_DENSE', False):
    # The fused forms are given a sparse gradient densified (apply_fused);
    # its values stand in for it here, where only types and dtypes are checked.
    grads = [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]
  if not (optimizer.fused and fusable(grads) and keras_adds_nothing(optimizer, fused_variables)):
    return KerasStep(optimizer, variables, sets_rate)
  if hasattr(optimizer, 'native_update'):
    kernels = native.library_for(fused_variables, optimizer.native_slots(fused_variables), grads)
    if kernels is not None:
      return FusedStep(optimizer, variables, NATIVE, kernels, sets_rate)
  return FusedStep(optimizer, variables, XLA, sets_rate=sets_rate)


def keras_adds_nothing(optimizer, variables):
  """Whether Keras' ``apply`` would do nothing but ``update_step`` and count the iteration.

  A decay the optimizer folds into its update (``FOLDS_WEIGHT_DECAY``) is no
  step of Keras'.
  """
  decoupled_decay = optimizer.weight_decay and not getattr(optimizer, 'FOLDS_WEIGHT_DECAY', False)
  return not (optimizer.clipnorm is not None or optimizer.clipvalue is not None
              or optimizer.global_clipnorm is not None or decoupled_decay
              or optimizer.use_ema or optimizer.gradient_accumulation_steps
              or optimizer.loss_scale_factor is not None
              or any(getattr(v, 'overwrite_with_gradient', False) for v in variables))


def _chosen(step):
  """Logs the first time an optimizer class takes a form (INFO, ``optimizers`` logger)."""
  key = (type(step.optimizer).__name__, step.describe())
  if key not in _logged:
    _logged.add(key)
    native_used = isinstance(step, FusedLarcStep) or getattr(step, 'form', None) == NATIVE
    reason = f' ({native.error()})' if not native_used and native.error() else ''
    _LOG.info('%s: step %s%s', key[0], key[1], reason)
  return step


def fusable(grads):
  """Whether the fused path applies: every gradient dense and no tf.distribute strategy.

  Under a ``tf.distribute`` strategy Keras routes each variable's update
  through the strategy, which the per-variable path keeps doing.
  """
  if tf.distribute.has_strategy():
    return False
  return all(not isinstance(g, tf.IndexedSlices) for g in grads)


class Chain:
  """The stages of one update in order, run once per update: ``chain(grads, update)``.

  The stages before the optimizer's step are given when the chain is made.
  The step's own (LARC, when asked for, and the step, in the forms
  ``step_stages`` chooses) are made by ``build_step(grads)`` the
  first time an update reaches them, when the gradients they take are known
  (their dtypes, which are sparse, which are None), and are kept: every
  later update runs the same stages.

  A stage that may end the update (``FiniteCheck``) sets ``update.go_on``;
  the rest of the chain then runs under ``tf.cond`` on it.

  Args:
    stages: the stages before the step, in order.
    build_step: ``grads -> list of stages``, called once.
    finish: ``update -> None``, run after the step (the global step, the summaries).
  """

  def __init__(self, stages, build_step, finish):
    self.stages = list(stages)
    self.step = None
    self._build_step = build_step
    self._finish = finish

  def describe(self):
    """The stages as the log prints them: ``accumulate(2) → allreduce(horovod) → backoff → ...``."""
    step = [s.describe() for s in self.step] if self.step is not None else ['step (at the first update)']
    return ' → '.join([s.describe() for s in self.stages] + step)

  def __call__(self, grads, update):
    """Runs the chain on one update's gradients; returns whether the update was applied."""
    return self._run(self.stages, grads, update)

  def _run(self, stages, grads, update):
    for k, stage in enumerate(stages):
      grads = stage(grads, update)
      if update.go_on is not None:
        go_on, update.go_on = update.go_on, None
        rest = stages[k + 1:]
        return tf.cond(go_on, lambda: self._run(rest, grads, update), lambda: tf.constant(False))
    if self.step is None:
      self.step = list(self._build_step(grads))
    for stage in self.step:
      grads = stage(grads, update)
    self._finish(update)
    return tf.constant(True)


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
  An update that ``skip_update`` decides (OpenSeq2Seq's ``skip_update_ph``)
  divides the sums by ``iter_size`` however many micro-batches it holds, as
  OpenSeq2Seq divides each micro-batch's gradient by ``iter_size``
  (docs/math.md, "One update of `optimize_loss`", step 2).

  Args:
    accumulator: the ``GradientAccumulator`` holding the sums.
    micro_step: an int64 tf.Variable, micro-batches added since the last update.
    iter_size: micro-batches per update.
  """

  def __init__(self, accumulator, micro_step, iter_size):
    self.accumulator = accumulator
    self.micro_step = micro_step
    self.iter_size = iter_size
    self.decided_by_caller = False

  def describe(self):
    grows = isinstance(self.iter_size, tf.Variable)
    return 'accumulate(iter_size, grows)' if grows else f'accumulate({self.iter_size})'

  def add(self, grads, skip_update=None):
    """Adds a micro-batch's gradients; returns whether an update is due (a boolean tensor).

    ``skip_update``, when given, decides instead of the count: True accumulates only.
    """
    self.accumulator.add(grads)
    self.micro_step.assign_add(1)
    # Read by __call__ in the same trace: who decides the update decides its divisor.
    self.decided_by_caller = skip_update is not None
    if skip_update is None:
      return self.micro_step >= self.iter_size
    return tf.logical_not(tf.convert_to_tensor(skip_update))

  def __call__(self, grads, update):
    del grads, update  # added already, by ``add``
    count = self.iter_size if self.decided_by_caller else self.micro_step
    grads = self.accumulator.take(count)
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
