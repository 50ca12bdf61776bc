"""``optimize_loss``: one large-batch train step, assembled from small stages.

The order of the stages is fixed by the numerical contract:

1. loss × loss_scale -> gradients (float32) -> × 1/loss_scale
2. accumulation over ``iter_size`` micro-batches (float32, mean)
3. Horovod allreduce (average), once per applied update
4. finite check -> loss-scaler update; a non-finite step stops here
5. global-norm clipping (``clip_gradients``)
6. LARC (``larc_params``)
7. the optimizer's update, then global_step += 1

``optimize_loss`` keeps the OpenSeq2Seq signature. In TF 2 there is no graph to
hold state between calls, so the first call for a model (or variable list)
creates a :class:`GradientPipeline` holding the optimizer, the global step, the
loss scaler and the accumulators, and later calls reuse it; they must pass the
same arguments (a call with others is a ValueError naming them). Wrap the
whole step in one ``tf.function``; it traces once.
"""

import functools
import numbers
import types

import keras
import tensorflow as tf

from core import precision
from core.registry import Registry
from optimizers import allreduce
from optimizers import fused
from optimizers import native
from optimizers import stages
from optimizers import tf1_compat
from optimizers.agn import AGNOptimizer
from optimizers.automatic_loss_scaler import make_loss_scaler
from optimizers.lamb import LAMB
from optimizers.lars import LARSOptimizer


@keras.saving.register_keras_serializable(package='largebatch')
class MomentumOptimizer(fused.XlaUpdateMixin, tf1_compat.TF1OptimizerMixin,
                        keras.optimizers.SGD):
  """Momentum SGD under its TF 1 name and arguments (``use_nesterov``).

  Keras' update v ← m·v − lr·g; w ← w + v equals TF 1's accumulator form for a
  constant learning rate. The updates of all variables run as one XLA launch
  (``fused.XlaUpdateMixin``).
  """

  def __init__(self, learning_rate=0.01, momentum=0.9, use_nesterov=False, name='Momentum',
               **kwargs):
    if isinstance(momentum, (int, float)) and not 0 <= momentum <= 1:
      raise ValueError(f'Momentum: momentum must be in [0, 1], got {momentum!r}')
    super().__init__(learning_rate=learning_rate, momentum=float(momentum),
                     nesterov=bool(use_nesterov), name=name, **kwargs)

  def get_slot_names(self):
    return ['momentum']

  def _slot_lists(self):
    return {'momentum': self.momentums}

  def fused_larc_applies(self, grads, variables):
    """Whether ``apply_with_larc`` can run LARC and this update as one native kernel.

    It can for dense float32 gradients of float32 variables on the CPU when
    nothing of Keras' own runs between LARC and the update (no ``clipnorm``,
    ``clipvalue``, ``global_clipnorm``, ``weight_decay``, EMA or gradient
    accumulation) and momentum > 0 (Keras keeps no slots without it).
    """
    if (self.clipnorm is not None or self.clipvalue is not None
        or self.global_clipnorm is not None or self.weight_decay or self.use_ema
        or self.gradient_accumulation_steps or not self.momentum > 0):
      return False
    return native.applies([tf1_compat.unwrap(v) for v in variables], [], grads)

  def apply_with_larc(self, grads, variables, larc_params):
    """LARC (``stages.larc`` at this optimizer's learning rate), then ``apply``, in one kernel.

    Call only where ``fused_larc_applies`` is true. Same math as
    ``stages.larc`` followed by ``apply``: each adapted variable's gradient is
    scaled by its LARC factor c, then v ← m·v − lr·c·g; w ← w + v.

    Returns:
      A float32 vector, the LARC factor of each variable (1 for skipped ones).
    """
    # Plain attributes (not tracked by Keras), read by _backend_update_step.
    self.__dict__['_pending_larc'] = larc_params
    try:
      self.apply(grads, variables)
    finally:
      self.__dict__['_pending_larc'] = None
    return self.__dict__.pop('_larc_factors')

  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    params = self.__dict__.get('_pending_larc')
    if params is None:
      return super()._backend_update_step(grads, trainable_variables, learning_rate)
    slots = [tf1_compat.unwrap(self.momentums[self._get_variable_index(v)])
             for v in trainable_variables]
    adapt = [stages.larc_adapts(v, params) for v in trainable_variables]
    self.__dict__['_larc_factors'] = native.trust_momentum(
        [tf1_compat.unwrap(v) for v in trainable_variables], slots, grads, learning_rate, adapt,
        'larc_' + params['larc_mode'], self.momentum, eeta=params['larc_eta'],
        epsilon=params['epsilon'], min_update=params['min_update'], use_nesterov=self.nesterov)
    return None

  def get_config(self):
    config = super().get_config()
    config['use_nesterov'] = config.pop('nesterov')
    return config


OPTIMIZER_CLS_NAMES = Registry('optimizer', case_insensitive=True)
for _name, _cls in (('Adagrad', keras.optimizers.Adagrad), ('Adam', keras.optimizers.Adam),
                    ('Ftrl', keras.optimizers.Ftrl), ('Momentum', MomentumOptimizer),
                    ('RMSProp', keras.optimizers.RMSprop), ('SGD', keras.optimizers.SGD),
                    ('AdamW', keras.optimizers.AdamW), ('LARS', LARSOptimizer),
                    ('LAMB', LAMB), ('AGN', AGNOptimizer)):
  OPTIMIZER_CLS_NAMES.register(_name, _cls)

OPTIMIZER_SUMMARIES = [
    'learning_rate',
    'gradients',
    'gradient_norm',
    'global_gradient_norm',
    'variables',
    'variable_norm',
    'larc_summaries',
    'loss_scale',
]


def _clip_by_global_norm(t_list, clip_norm, use_norm, name=None):
  """Clips tensors by the ratio clip_norm / max(use_norm, clip_norm), with a precomputed norm.

  Args:
    t_list: tensors (None entries pass through).
    clip_norm: the largest global norm allowed.
    use_norm: the global norm of ``t_list``, already computed.
    name: accepted for compatibility.

  Returns:
    (clipped tensors, use_norm).
  """
  del name
  return stages.clip_by_global_norm(t_list, clip_norm, use_norm)


def _clip_gradients_by_norm(grads_and_vars, clip_gradients):
  """Clips the gradients of (gradient, variable) pairs by their global norm."""
  grads, variables = zip(*grads_and_vars)
  clipped, _ = stages.clip_by_global_norm(list(grads), clip_gradients)
  return list(zip(clipped, variables))


def get_regularization_loss(scope=None, name='total_regularization_loss'):
  """The sum of the regularization losses of a Keras model or layer.

  TF 2 keeps no global collection of regularization losses; they live on the
  layers (``model.losses``), so ``scope`` names where to look.

  Args:
    scope: a Keras layer or model, or a list of them.
    name: the name of the returned tensor.

  Returns:
    A float32 scalar: the sum of their losses (0 when there are none).

  Raises:
    ValueError: when scope is None or not a layer.
  """
  if scope is None:
    raise ValueError('get_regularization_loss: pass the Keras model (or layers) whose '
                     'regularization losses to sum; TF 2 has no global collection')
  layers = scope if isinstance(scope, (list, tuple)) else [scope]
  losses = []
  for layer in layers:
    if not hasattr(layer, 'losses'):
      raise ValueError(f'get_regularization_loss: scope must be a Keras layer or model, got {layer!r}')
    losses.extend(tf.cast(l, tf.float32) for l in layer.losses)
  if not losses:
    return tf.constant(0.0, name=name)
  return tf.add_n(losses, name=name)


def _normalize_dtype(dtype):
  """The Keras policy name of ``dtype``: a tf.DType or a name of ``precision.DTYPE_NAMES``."""
  if isinstance(dtype, tf.DType):
    dtype = dtype.name
  return precision.policy_name(dtype)


def make_optimizer(optimizer, optimizer_params, learning_rate):
  """Creates the optimizer named or given by ``optimizer``.

  Args:
    optimizer: a name in OPTIMIZER_CLS_NAMES, an optimizer class, or an instance.
    optimizer_params: keyword arguments of the class (not ``learning_rate``).
    learning_rate: the initial learning rate.

  Returns:
    A Keras 3 optimizer.
  """
  if isinstance(optimizer, str):
    optimizer = OPTIMIZER_CLS_NAMES[optimizer]
  if _is_instance(optimizer):
    return optimizer
  if getattr(optimizer, 'WRAPS_OPTIMIZER', False):
    raise ValueError(f'{optimizer.__name__} wraps another optimizer: pass an instance, e.g. '
                     'AGNOptimizer(MomentumOptimizer(...)), or in a config use optimizer: AGN '
                     'with agn_params: {optimizer: Momentum}')
  if not callable(optimizer):
    raise ValueError(f'optimizer must be a name ({", ".join(OPTIMIZER_CLS_NAMES)}), a class '
                     f'or an instance, got {optimizer!r}')
  try:
    return optimizer(learning_rate=learning_rate, **optimizer_params)
  except TypeError as exc:
    raise ValueError(f'optimizer_params do not fit {getattr(optimizer, "__name__", optimizer)}: '
                     f'{exc}') from None


def _is_instance(optimizer):
  return isinstance(optimizer, (keras.optimizers.Optimizer, AGNOptimizer))


def _var_name(var):
  return str(getattr(var, 'path', None) or var.name).replace(':', '_')


def larc_and_apply(optimizer, grads, var_list, learning_rate, larc_params, fuse=True):
  """Stages 6-7: LARC (when ``larc_params``), then ``optimizer.apply``.

  When ``fuse`` and the optimizer can (``MomentumOptimizer.fused_larc_applies``)
  both run as one native kernel that reads each variable once; otherwise
  ``stages.larc`` scales the gradients first. ``fuse`` requires that the
  optimizer's learning rate is ``learning_rate``.

  Args:
    optimizer: a Keras optimizer.
    grads: gradients (None entries are left out of the update).
    var_list: the matching variables.
    learning_rate: the current base learning rate.
    larc_params: checked ``larc_params`` or None.
    fuse: whether the fused path may be taken.

  Returns:
    {variable index: LARC factor} for the adapted variables.
  """
  present = [i for i, g in enumerate(grads) if g is not None]
  if (larc_params is not None and fuse and present
      and getattr(optimizer, 'fused_larc_applies', None) is not None
      and optimizer.fused_larc_applies([grads[i] for i in present],
                                       [var_list[i] for i in present])):
    factors = optimizer.apply_with_larc([grads[i] for i in present],
                                        [var_list[i] for i in present], larc_params)
    return {i: factors[k] for k, i in enumerate(present)
            if stages.larc_adapts(var_list[i], larc_params)}
  factors = {}
  if larc_params is not None:
    grads, factors = stages.larc(grads, var_list, learning_rate, larc_params)
  optimizer.apply([grads[i] for i in present], [var_list[i] for i in present])
  return factors


class GradientPipeline(tf.Module):
  """The state and stages of ``optimize_loss`` for one set of variables.

  Args: as ``optimize_loss``, plus
    var_list: the variables to train.
    horovod_params: ``{'compression': 'none' | 'fp16'}`` for the allreduce.
    log_global_norm: compute the global gradient norm every step for logging
      (it is computed anyway when clipping or summarising it).
  """

  def __init__(self, var_list, optimizer, optimizer_params=None, learning_rate_decay_fn=None,
               dtype=tf.float32, clip_gradients=None, summaries=None, larc_params=None,
               loss_scaling=1.0, loss_scaling_params=None, on_horovod=False, iter_size=1,
               horovod_params=None, log_global_norm=False, name='optimize_loss'):
    super().__init__(name=name)
    optimizer_params = dict(optimizer_params or {})
    self.var_list = list(var_list)
    if not self.var_list:
      raise ValueError('optimize_loss: var_list is empty; nothing to train')
    self.dtype = _normalize_dtype(dtype)
    if not isinstance(iter_size, int) or isinstance(iter_size, bool) or iter_size < 1:
      raise ValueError(f'iter_size must be an integer >= 1, got {iter_size!r}')
    self.iter_size = iter_size
    if clip_gradients is not None and not (isinstance(clip_gradients, (int, float))
                                           and clip_gradients > 0):
      raise ValueError(f'clip_gradients must be a number > 0 or None, got {clip_gradients!r}')
    self.clip_gradients = clip_gradients
    self.summaries = list(summaries or [])
    for summary in self.summaries:
      if summary not in OPTIMIZER_SUMMARIES:
        raise ValueError(f'summaries: unknown summary {summary!r}; allowed: '
                         f'{", ".join(OPTIMIZER_SUMMARIES)}')
    self.larc_params = stages.check_larc_params(larc_params) if larc_params is not None else None
    self.on_horovod = bool(on_horovod)
    self.compression = (horovod_params or {}).get('compression', 'none')
    if self.compression not in ('none', 'fp16', None):
      raise ValueError(f"horovod_params.compression: {self.compression!r} is not allowed; "
                       "allowed: 'none', 'fp16'")
    self.log_global_norm = log_global_norm
    if self.on_horovod:
      allreduce.init()

    self.learning_rate_decay_fn = learning_rate_decay_fn
    if learning_rate_decay_fn is None:
      if 'learning_rate' not in optimizer_params and not _is_instance(optimizer):
        raise ValueError('optimize_loss: give learning_rate_decay_fn or '
                         "optimizer_params['learning_rate']")
      self._base_lr = optimizer_params.pop('learning_rate', None)
    else:
      optimizer_params.pop('learning_rate', None)
      self._base_lr = None

    with tf.init_scope():
      self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
      # Micro-batches accumulated since the last applied update.
      self.micro_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='micro_step')
      # Allreduce calls, so tests and logs can confirm one per applied update.
      self.allreduce_count = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name='allreduce_count')
      # The global norm of the last update's gradients, for logs.
      self.last_global_norm = tf.Variable(0.0, trainable=False, name='last_global_norm')
      initial_lr = self._current_lr_value()
      self.optimizer = make_optimizer(optimizer, optimizer_params, initial_lr)
      # The pipeline sets the optimizer's rate each update when it knows it.
      self._owns_lr = learning_rate_decay_fn is not None or self._base_lr is not None
      # AGN communicates by itself, once per period, instead of every update.
      self._allreduce = self.on_horovod and not isinstance(self.optimizer, AGNOptimizer)
      self.loss_scaler = make_loss_scaler(loss_scaling, loss_scaling_params)
      mixed = self.dtype.startswith('mixed_')
      self.masters = stages.MasterWeights(self.var_list) if mixed else None
      self.update_vars = self.masters.masters if self.masters is not None else self.var_list
      self.optimizer.build(list(self.update_vars))
      self.accumulator = stages.GradientAccumulator(self.var_list) if iter_size > 1 else None

  def _current_lr_value(self):
    if self.learning_rate_decay_fn is not None:
      return float(self.learning_rate_decay_fn(tf.constant(0, tf.int64)))
    if self._base_lr is not None:
      return self._base_lr
    return None

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
             'optimizer_variables': [tf1_compat.unwrap(v) for v in self.optimizer.variables],
             'loss_scaler': self.loss_scaler}
    if self.accumulator is not None:
      items['accumulators'] = list(self.accumulator.sums)
    if self.masters is not None and self.masters.has_half:
      items['master_weights'] = [m for m, v in zip(self.masters.masters, self.masters.model_vars)
                                 if m is not v]
    return items

  def state_variables(self):
    """Every variable of the pipeline's state (optimizer slots included), e.g. to broadcast."""
    result = [self.global_step, self.micro_step]
    result += [tf1_compat.unwrap(v) for v in self.optimizer.variables]
    result += list(self.loss_scaler.variables)
    if self.accumulator is not None:
      result += list(self.accumulator.sums)
    if self.masters is not None:
      result += [m for m, v in zip(self.masters.masters, self.masters.model_vars) if m is not v]
    return result

  def __call__(self, loss_fn, skip_update=None):
    """One micro-step: gradients of ``loss_fn``, and an update when one is due.

    Args:
      loss_fn: zero-argument callable returning the loss of one micro-batch.
      skip_update: optional boolean; True accumulates only. When None the
        update happens every ``iter_size`` micro-steps.

    Returns:
      A dict of float32 tensors: ``loss`` (unscaled), ``learning_rate``,
      ``loss_scale`` (as used for this micro-step), ``global_norm`` (when
      computed; of the gradients before clipping) and boolean ``applied``.
    """
    loss_scale = self.loss_scaler.loss_scale
    loss, grads = stages.scaled_gradients(loss_fn, self.var_list, loss_scale)
    metrics = {'loss': loss, 'loss_scale': tf.identity(loss_scale),
               'learning_rate': self.learning_rate()}
    if self.accumulator is None:
      applied, norm = self._update(grads)
    else:
      self.accumulator.add(grads)
      self.micro_step.assign_add(1)
      if skip_update is None:
        due = self.micro_step >= self.iter_size
      else:
        due = tf.logical_not(tf.convert_to_tensor(skip_update))
      applied, norm = tf.cond(due, self._update_accumulated,
                              lambda: (tf.constant(False), tf.constant(0.0)))
    metrics['applied'] = applied
    if norm is not None:
      metrics['global_norm'] = norm
    return metrics

  def _update_accumulated(self):
    grads = self.accumulator.mean(self.micro_step)
    result = self._update(grads)
    self.accumulator.reset()
    self.micro_step.assign(0)
    norm = result[1] if result[1] is not None else tf.constant(0.0)
    return result[0], norm

  def _update(self, grads):
    """Stages 3-7 on one update's gradients; returns (applied, global norm or None)."""
    if self._allreduce:
      grads = allreduce.average(grads, self.compression)
      self.allreduce_count.assign_add(1)
    with_norm = (self.clip_gradients is not None or self.log_global_norm
                 or 'global_gradient_norm' in self.summaries)
    has_nan, amax, norm = stages.gradient_statistics(grads, with_norm)
    self.loss_scaler.update_op(has_nan, amax)
    if norm is not None:
      self.last_global_norm.assign(norm)

    def apply():
      lr = self.learning_rate()
      update = grads
      if self.clip_gradients is not None:
        update, _ = stages.clip_by_global_norm(update, self.clip_gradients, norm)
      if self._owns_lr:
        self.optimizer.learning_rate = lr
      larc_factors = larc_and_apply(self.optimizer, update, self.update_vars, lr,
                                    self.larc_params, fuse=self._owns_lr)
      if self.masters is not None:
        self.masters.copy_back()
      self._write_summaries(lr, grads, norm, larc_factors)
      self.global_step.assign_add(1)

    applied = stages.apply_if(tf.logical_not(has_nan), apply)
    return applied, norm

  def _write_summaries(self, lr, grads, norm, larc_factors):
    if not self.summaries:
      return
    # Written inside the update's tf.cond; reset the name scope so the tags
    # are the plain names ('learning_rate', not 'cond/learning_rate').
    with tf.compat.v1.name_scope(None):
      self._write_summaries_unscoped(lr, grads, norm, larc_factors)

  def _write_summaries_unscoped(self, lr, grads, norm, larc_factors):
    step = self.global_step
    names = [_var_name(v) for v in self.var_list]
    wanted = set(self.summaries)
    if 'learning_rate' in wanted:
      tf.summary.scalar('learning_rate', lr, step=step)
    if 'loss_scale' in wanted:
      tf.summary.scalar('loss_scale', self.loss_scaler.loss_scale, step=step)
    if 'global_gradient_norm' in wanted:
      tf.summary.scalar('global_gradient_norm', norm, step=step)
    for name, g, v in zip(names, grads, self.var_list):
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


_PIPELINES = {}

# The optimize_loss arguments a pipeline is built from (``loss`` and
# ``skip_update_ph`` change every call; ``log_global_norm`` only adds a log).
_PIPELINE_ARGUMENTS = ('optimizer', 'optimizer_params', 'learning_rate_decay_fn', 'var_list',
                       'dtype', 'clip_gradients', 'summaries', 'larc_params', 'loss_scaling',
                       'loss_scaling_params', 'on_horovod', 'iter_size', 'horovod_params')


def _key(model, var_list):
  if model is not None:
    return ('model', id(model))
  return ('vars',) + tuple(id(v) for v in var_list)


def _snapshot(value):
  """``value`` with its dicts, lists and tuples copied, so later edits by the caller show."""
  if isinstance(value, dict):
    return {k: _snapshot(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return type(value)(_snapshot(v) for v in value)
  return value


def _same(a, b, depth=0):
  """Whether two optimize_loss argument values mean the same.

  Containers compare item by item; variables and other objects by identity;
  functions by their code, defaults and closure values, so a lambda or
  ``functools.partial`` re-created on every call with the same content is
  the same argument.
  """
  if a is b:
    return True
  # 5 and 5.0, or a numpy and a Python float, are the same value; True is not 1.
  numeric = (numbers.Number, tf.DType)
  if (isinstance(a, numeric) and isinstance(b, numeric)
      and not isinstance(a, bool) and not isinstance(b, bool)):
    return a == b
  if depth > 8 or type(a) is not type(b):
    return False
  if isinstance(a, dict):
    return a.keys() == b.keys() and all(_same(a[k], b[k], depth + 1) for k in a)
  if isinstance(a, (list, tuple)):
    return len(a) == len(b) and all(_same(x, y, depth + 1) for x, y in zip(a, b))
  if isinstance(a, functools.partial):
    return (_same(a.func, b.func, depth + 1) and _same(a.args, b.args, depth + 1)
            and _same(a.keywords, b.keywords, depth + 1))
  if isinstance(a, types.MethodType):
    return a.__func__ is b.__func__ and a.__self__ is b.__self__
  if isinstance(a, types.FunctionType):
    return (a.__code__ == b.__code__ and _same(a.__defaults__, b.__defaults__, depth + 1)
            and _same(a.__kwdefaults__, b.__kwdefaults__, depth + 1)
            and _same(_closure_values(a), _closure_values(b), depth + 1))
  if isinstance(a, (str, bytes)):
    return a == b
  return False


def _closure_values(function):
  """The values a function closes over, without AutoGraph's own.

  Inside a ``tf.function`` AutoGraph converts a lambda into one that also
  closes over its module and a scope object made anew on every trace (and a
  ``tf.function`` traces twice when the first trace creates variables).
  """
  values = []
  for cell in function.__closure__ or ():
    try:
      value = cell.cell_contents
    except ValueError:  # a cell not assigned yet
      value = cell
    if isinstance(value, types.ModuleType) or type(value).__module__.startswith(
        'tensorflow.python.autograph'):
      continue
    values.append(value)
  return tuple(values)


def _check_same_arguments(created, given):
  """Raises ValueError naming each argument that differs from the pipeline's own."""
  changed = [name for name in _PIPELINE_ARGUMENTS if not _same(created[name], given[name])]
  if changed:
    details = ', '.join(f'{name} (created with {created[name]!r}, now {given[name]!r})'
                        for name in changed)
    raise ValueError(
        f'optimize_loss: called again for the same model with different arguments: {details}. '
        'Its optimizer, slots, global step and loss scaler were built from the first call; pass '
        'the same arguments, or call optimizers.clear_pipelines() to build a new pipeline.')


def get_pipeline(optimizer, optimizer_params, learning_rate_decay_fn, var_list=None,
                 dtype=tf.float32, clip_gradients=None, summaries=None, larc_params=None,
                 loss_scaling=1.0, loss_scaling_params=None, on_horovod=False, iter_size=1,
                 model=None, horovod_params=None, log_global_norm=False):
  """The GradientPipeline ``optimize_loss`` uses for ``model`` (or ``var_list``), created on first use.

  Call it eagerly with the same arguments as ``optimize_loss`` to get the
  pipeline (its ``global_step``, ``optimizer``, ``loss_scaler``, ``learning_rate()``)
  before the first step, e.g. to restore a checkpoint; ``find_pipeline`` looks
  an existing one up by model alone.

  Raises:
    ValueError: when a pipeline exists for ``model`` (or ``var_list``) and was
      created with different arguments; the message names each of them.
  """
  if var_list is None and model is None:
    raise ValueError('optimize_loss: pass var_list or model (TF 2 has no global collection '
                     'of trainable variables)')
  given = {name: value for name, value in locals().items() if name in _PIPELINE_ARGUMENTS}
  given['dtype'] = _normalize_dtype(dtype)
  if var_list is None:
    var_list = model.trainable_variables
  key = _key(model, var_list)
  if key in _PIPELINES:
    _, pipeline, created = _PIPELINES[key]
    _check_same_arguments(created, given)
    return pipeline
  pipeline = GradientPipeline(
      var_list, optimizer, optimizer_params, learning_rate_decay_fn, dtype=dtype,
      clip_gradients=clip_gradients, summaries=summaries, larc_params=larc_params,
      loss_scaling=loss_scaling, loss_scaling_params=loss_scaling_params,
      on_horovod=on_horovod, iter_size=iter_size, horovod_params=horovod_params,
      log_global_norm=log_global_norm)
  # The owner is kept alive with the entry so its id cannot be reused.
  _PIPELINES[key] = (model if model is not None else list(var_list), pipeline,
                     {name: _snapshot(value) for name, value in given.items()})
  return pipeline


def find_pipeline(model=None, var_list=None):
  """The pipeline ``optimize_loss`` created for ``model`` (or ``var_list``), or None."""
  if model is None and var_list is None:
    raise ValueError('find_pipeline: pass model or var_list')
  entry = _PIPELINES.get(_key(model, var_list))
  return entry[1] if entry is not None else None


def clear_pipelines():
  """Forgets every cached pipeline (the next optimize_loss call starts afresh)."""
  _PIPELINES.clear()


def optimize_loss(loss, optimizer, optimizer_params, learning_rate_decay_fn, var_list=None,
                  dtype=tf.float32, clip_gradients=None, summaries=None, larc_params=None,
                  loss_scaling=1.0, loss_scaling_params=None, on_horovod=False, iter_size=1,
                  skip_update_ph=None, model=None, horovod_params=None):
  """Performs one micro-step of training: scaling, accumulation, allreduce, clipping, LARC, update.

  Args:
    loss: zero-argument callable returning the (float32 or half) loss of one micro-batch.
    optimizer: a name in ``OPTIMIZER_CLS_NAMES``, a Keras optimizer class, or an instance.
    optimizer_params: keyword arguments for the optimizer class (``learning_rate``
      only when ``learning_rate_decay_fn`` is None).
    learning_rate_decay_fn: ``f(global_step) -> lr``, e.g. a partial of an lr policy.
    var_list: variables to train; defaults to ``model.trainable_variables``.
    dtype: a tf.DType or a Keras dtype policy name: ``'float32'``, ``'float16'``,
      ``'bfloat16'``, ``'mixed_float16'`` (also called ``'mixed'``) or
      ``'mixed_bfloat16'`` (the mixed ones keep float32 master copies of
      half-precision variables).
    clip_gradients: clip the global gradient norm to this value (None: no clipping).
    summaries: names from ``OPTIMIZER_SUMMARIES`` written with ``tf.summary``.
    larc_params: dict with ``larc_eta`` and optional ``larc_mode`` ('clip' or
      'scale'), ``min_update``, ``epsilon``, ``skip_list`` or its synonym
      ``exclude_from_layer_adaptation``.
    loss_scaling: a number (static), ``'Backoff'``, ``'LogMax'`` or ``'dynamic'``.
    loss_scaling_params: parameters of the automatic loss scaler.
    on_horovod: average gradients over Horovod workers once per applied update.
    iter_size: micro-batches accumulated per update.
    skip_update_ph: optional boolean tensor; True accumulates without updating.
      When None, the micro-step count decides.
    model: the Keras model being trained (keys the pipeline state).
    horovod_params: ``{'compression': 'fp16'}`` to send float16 in the allreduce.

  Returns:
    The loss of this micro-batch (float32, unscaled). The pipeline's state
    (global step, learning rate, loss scale) is read from ``get_pipeline`` /
    ``find_pipeline``; calling the pipeline returns all of it as a dict.

  Raises:
    ValueError: for any invalid hyperparameter, naming it and what is allowed,
      and when called again for the same model (or variables) with different
      arguments, naming each of them (``clear_pipelines`` starts afresh).
  """
  pipeline = get_pipeline(optimizer, optimizer_params, learning_rate_decay_fn, var_list=var_list,
                          dtype=dtype, clip_gradients=clip_gradients, summaries=summaries,
                          larc_params=larc_params, loss_scaling=loss_scaling,
                          loss_scaling_params=loss_scaling_params, on_horovod=on_horovod,
                          iter_size=iter_size, model=model, horovod_params=horovod_params)
  return pipeline(loss, skip_update=skip_update_ph)['loss']
