"""Loss scaling for reduced-precision training.

The loss is multiplied by a scale before differentiation so that small float16
gradients do not flush to zero, and the gradients are divided by it again. A
scaler holds the current scale and updates it once per step from two facts
about the unscaled gradients: whether any was non-finite (``has_nan``) and
their largest magnitude (``amax``); :func:`gradient_stats` computes both.

Every scaler has the same interface:

* ``loss_scale``: the current scale, a float32 scalar tensor;
* ``update_op(has_nan, amax)``: advances the state once and returns the new
  scale.

Scalers:

* :class:`StaticLossScaler`: a fixed scale.
* :class:`DynamicLossScaler`: grows the scale after a run of finite steps and
  shrinks it on overflow, as ``'dynamic'`` loss scaling in
  ``tf.train.experimental`` / Keras mixed precision.
* :class:`AutomaticLossScaler` with the ``Backoff`` (:class:`BackoffScaler`) or
  ``LogMax`` (:class:`LogMaxScaler`) algorithm of OpenSeq2Seq; the math is in
  docs/math.md (loss scaling).

:func:`make_loss_scaler` builds one from the ``loss_scaling`` config value.

Scalers are ``tf.Module`` objects whose state lives in non-trainable variables
created when the scaler is built, so a ``tf.train.Checkpoint`` saves and
restores them and ``update_op`` may be traced once in a ``tf.function`` and
called every step. The update math is in plain tensor functions
(:func:`backoff_update`, :func:`logmax_update`, :func:`dynamic_update`); the
classes only hold the variables.
"""

import math
import numbers

import tensorflow as tf

from core.params import reject_unknown_keys
from optimizers import checks

_STATE_DTYPE = tf.float64

_LOSS_SCALING_ALLOWED = "allowed: a positive number, 'Backoff', 'LogMax', 'dynamic'"


def _count(name, value):
  """Returns ``value`` as a positive int; raises ValueError naming ``name``."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
    raise ValueError(f'{name}: expected an integer >= 1, got {value!r}')
  return int(value)


def _scale_range(scale_min, scale_max):
  """Returns (scale_min, scale_max) as floats after checking 0 < scale_min <= scale_max."""
  scale_min = checks.number('scale_min', scale_min, positive=True)
  scale_max = checks.number('scale_max', scale_max, positive=True)
  if scale_max < scale_min:
    raise ValueError(f'scale_max: must be >= scale_min ({scale_min!r}), got {scale_max!r}')
  return scale_min, scale_max


def _checked_params(params, allowed, path, what):
  """Returns a copy of ``params`` after checking its keys against ``allowed``.

  Raises:
    ValueError: when ``params`` is not a mapping or holds a key not in
      ``allowed``; the message names the key, the closest allowed key and all
      allowed keys.
  """
  if params is None:
    return {}
  if not isinstance(params, dict):
    raise ValueError(f'{path}: expected a mapping, got {params!r}')
  reject_unknown_keys(params, allowed, path, error=ValueError, what=what)
  return dict(params)


def _state_variable(value, dtype, name):
  # init_scope lifts creation out of a tf.function being traced, so a scaler
  # built during tracing owns ordinary eager variables.
  with tf.init_scope():
    return tf.Variable(value, dtype=dtype, trainable=False, name=name)


def _overflow(has_nan, amax):
  """Returns (overflow, amax as float64): overflow is has_nan or a non-finite amax."""
  has_nan = tf.cast(has_nan, tf.bool)
  amax = tf.cast(amax, _STATE_DTYPE)
  return tf.logical_or(has_nan, tf.logical_not(tf.math.is_finite(amax))), amax


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


class LossScaler(tf.Module):
  """The interface of every loss scaler."""

  @property
  def loss_scale(self):
    """The current scale, a float32 scalar tensor."""
    raise NotImplementedError

  def update_op(self, has_nan, amax):
    """Advances the state by one step and returns the new scale (float32).

    Args:
      has_nan: bool scalar, True when a gradient was non-finite.
      amax: the largest |g| of the unscaled gradients.
    """
    raise NotImplementedError


class StaticLossScaler(LossScaler):
  """A loss scale that never changes.

  Args:
    scale: the scale, a finite number > 0.

  Raises:
    ValueError: for a non-positive or non-finite scale.
  """

  def __init__(self, scale, name=None):
    super().__init__(name=name)
    self._scale = checks.number('scale', scale, positive=True)

  @property
  def loss_scale(self):
    return tf.constant(self._scale, tf.float32)

  def update_op(self, has_nan, amax):
    del has_nan, amax  # A static scale ignores the gradients.
    return self.loss_scale


def dynamic_update(scale, count, overflow, growth_steps, multiplier, min_scale):
  """One step of dynamic loss scaling.

  A finite step increments ``count``; when it reaches ``growth_steps`` the
  scale is multiplied (unless that would not fit in float32) and the count
  restarts. An overflow divides the scale, never below ``min_scale``, and
  restarts the count.

  Args:
    scale: float64 scalar tensor.
    count: int64 scalar tensor, consecutive finite steps so far.
    overflow: bool scalar tensor.
    growth_steps: int >= 1.
    multiplier: float > 1.
    min_scale: float > 0.

  Returns:
    ``(scale, count)`` after the step.
  """
  count = tf.where(overflow, tf.zeros_like(count), count + 1)
  grow = count >= growth_steps
  grown = scale * multiplier
  grown = tf.where(tf.math.is_finite(tf.cast(grown, tf.float32)), grown, scale)
  shrunk = tf.maximum(scale / multiplier, min_scale)
  new_scale = tf.where(overflow, shrunk, tf.where(grow, grown, scale))
  count = tf.where(grow, tf.zeros_like(count), count)
  return new_scale, count


class DynamicLossScaler(LossScaler):
  """Grows the scale after ``growth_steps`` finite steps, shrinks it on overflow.

  Args:
    initial_scale: the starting scale, >= min_scale.
    growth_steps: consecutive finite steps before the scale is multiplied, >= 1.
    multiplier: the factor of growth and shrinkage, > 1.
    min_scale: the scale never goes below this, > 0.

  Raises:
    ValueError: for an out-of-range argument.
  """

  PARAM_NAMES = ('initial_scale', 'growth_steps', 'multiplier', 'min_scale')

  def __init__(self, initial_scale=2.0 ** 15, growth_steps=2000, multiplier=2.0, min_scale=1.0,
               name=None):
    super().__init__(name=name)
    self.initial_scale = checks.number('initial_scale', initial_scale, positive=True)
    self.growth_steps = _count('growth_steps', growth_steps)
    self.multiplier = checks.number('multiplier', multiplier)
    if self.multiplier <= 1:
      raise ValueError(f'multiplier: must be > 1, got {multiplier!r}')
    self.min_scale = checks.number('min_scale', min_scale, positive=True)
    if self.initial_scale < self.min_scale:
      raise ValueError(f'initial_scale: must be >= min_scale ({self.min_scale!r}), got {initial_scale!r}')
    self.scale = _state_variable(self.initial_scale, _STATE_DTYPE, 'scale')
    self.count = _state_variable(0, tf.int64, 'count')

  @property
  def loss_scale(self):
    return tf.cast(self.scale, tf.float32)

  def update_op(self, has_nan, amax):
    overflow, _ = _overflow(has_nan, amax)
    scale, count = dynamic_update(self.scale.read_value(), self.count.read_value(), overflow,
                                  self.growth_steps, self.multiplier, self.min_scale)
    self.scale.assign(scale)
    self.count.assign(count)
    return tf.cast(scale, tf.float32)


def backoff_update(scale, iteration, last_overflow, overflow, scale_min, scale_max, step_factor,
                   step_window):
  """One step of the Backoff algorithm.

  On overflow the scale is divided by ``step_factor`` and ``last_overflow``
  becomes ``iteration``; otherwise, when ``(iteration − last_overflow)`` is a
  multiple of ``step_window``, the scale is multiplied by it. The scale is
  clipped to [scale_min, scale_max] and the iteration advances.

  Args:
    scale: float64 scalar tensor.
    iteration: int64 scalar tensor, i.
    last_overflow: int64 scalar tensor, the iteration of the last overflow (−1
      at the start).
    overflow: bool scalar tensor.
    scale_min, scale_max, step_factor, step_window: the algorithm's parameters.

  Returns:
    ``(scale, iteration, last_overflow)`` after the step.
  """
  grow = tf.equal(tf.math.floormod(iteration - last_overflow, step_window), 0)
  new_scale = tf.where(overflow, scale / step_factor,
                       tf.where(grow, scale * step_factor, scale))
  new_scale = tf.clip_by_value(new_scale, scale_min, scale_max)
  last_overflow = tf.where(overflow, iteration, last_overflow)
  return new_scale, iteration + 1, last_overflow


class BackoffScaler(LossScaler):
  """Halve on overflow, double after ``step_window`` steps without one.

  Starts at ``scale_max`` with iteration 0 and last overflow −1 (docs/math.md).

  Args:
    scale_min: the lowest scale, > 0.
    scale_max: the highest and the starting scale, >= scale_min.
    step_factor: the factor of each change, > 1.
    step_window: steps between increases, an integer >= 1.

  Raises:
    ValueError: for an out-of-range argument.
  """

  PARAM_NAMES = ('scale_min', 'scale_max', 'step_factor', 'step_window')

  def __init__(self, scale_min=1.0, scale_max=2.0 ** 14, step_factor=2.0, step_window=2000,
               name=None):
    super().__init__(name=name)
    self.scale_min, self.scale_max = _scale_range(scale_min, scale_max)
    self.step_factor = checks.number('step_factor', step_factor)
    if self.step_factor <= 1:
      raise ValueError(f'step_factor: must be > 1, got {step_factor!r}')
    self.step_window = _count('step_window', step_window)
    self.scale = _state_variable(self.scale_max, _STATE_DTYPE, 'scale')
    self.iteration = _state_variable(0, tf.int64, 'iteration')
    self.last_overflow = _state_variable(-1, tf.int64, 'last_overflow')

  @property
  def loss_scale(self):
    return tf.cast(self.scale, tf.float32)

  def update_op(self, has_nan, amax):
    overflow, _ = _overflow(has_nan, amax)
    scale, iteration, last_overflow = backoff_update(
        self.scale.read_value(), self.iteration.read_value(), self.last_overflow.read_value(),
        overflow, self.scale_min, self.scale_max, self.step_factor, self.step_window)
    self.scale.assign(scale)
    self.iteration.assign(iteration)
    self.last_overflow.assign(last_overflow)
    return tf.cast(scale, tf.float32)


def logmax_update(state, overflow, amax, scale_min, scale_max, log_max, beta1, beta2,
                  overflow_std_dev):
  """One step of the LogMax algorithm.

  With x = log_max on overflow and log2(amax) otherwise, it keeps bias-corrected
  moving averages of x: the mean μ (rate β1) and the standard deviation σ
  (rate β2), and sets the scale so that amax times the scale stays
  ``overflow_std_dev`` deviations below 2^log_max:
  scale = clip(2^(log_max − (μ + overflow_std_dev·σ))).

  A finite step with amax <= 0 (all gradients zero) carries no information
  about their magnitude, and log2 of it is −inf, so the state is left as is.

  Args:
    state: dict of float64 scalar tensors: ``scale``, ``t`` (the number of
      updates), ``x_hat`` (moving average of x with β1), ``s_hat`` (moving
      average of x with β2) and ``q`` (moving average of x² with β2).
    overflow: bool scalar tensor.
    amax: float64 scalar tensor.
    scale_min, scale_max, log_max, beta1, beta2, overflow_std_dev: the
      algorithm's parameters.

  Returns:
    The state dict after the step.
  """
  informative = tf.logical_or(overflow, amax > 0)
  safe_amax = tf.where(informative & tf.logical_not(overflow), amax, tf.ones_like(amax))
  x = tf.where(overflow, tf.constant(log_max, _STATE_DTYPE), tf.math.log(safe_amax) / math.log(2.0))
  t = state['t'] + 1.0
  x_hat = beta1 * state['x_hat'] + (1.0 - beta1) * x
  mean = x_hat / (1.0 - tf.pow(tf.constant(beta1, _STATE_DTYPE), t))
  correction2 = 1.0 - tf.pow(tf.constant(beta2, _STATE_DTYPE), t)
  s_hat = beta2 * state['s_hat'] + (1.0 - beta2) * x
  q = beta2 * state['q'] + (1.0 - beta2) * tf.square(x)
  # The two terms nearly cancel when x barely varies; float64 keeps the
  # difference meaningful and the max() removes a negative rounding residue.
  variance = tf.maximum(q / correction2 - tf.square(s_hat / correction2), 0.0)
  std_dev = tf.sqrt(variance)
  exponent = log_max - (mean + overflow_std_dev * std_dev)
  scale = tf.clip_by_value(tf.pow(tf.constant(2.0, _STATE_DTYPE), exponent), scale_min, scale_max)
  new_state = {'scale': scale, 't': t, 'x_hat': x_hat, 's_hat': s_hat, 'q': q}
  return {key: tf.where(informative, value, state[key]) for key, value in new_state.items()}


class LogMaxScaler(LossScaler):
  """Sets the scale from running statistics of log2(amax).

  Starts at scale 1.0 with t = 0 and zero averages (docs/math.md). The state is
  kept in float64 variables; ``loss_scale`` is float32. A finite step with
  amax <= 0 leaves the state unchanged (see :func:`logmax_update`).

  Args:
    scale_min: the lowest scale, > 0.
    scale_max: the highest scale, >= scale_min.
    log_max: log2 of the largest gradient magnitude to allow after scaling;
      also the value of log2(amax) assumed on overflow.
    beta1: decay of the moving mean, in [0, 1).
    beta2: decay of the moving variance, in [0, 1).
    overflow_std_dev: how many standard deviations of log2(amax) to keep
      below ``log_max``, >= 0.

  Raises:
    ValueError: for an out-of-range argument.
  """

  PARAM_NAMES = ('scale_min', 'scale_max', 'log_max', 'beta1', 'beta2', 'overflow_std_dev')

  def __init__(self, scale_min=1.0, scale_max=2.0 ** 14, log_max=16.0, beta1=0.99, beta2=0.999,
               overflow_std_dev=3.09, name=None):
    super().__init__(name=name)
    self.scale_min, self.scale_max = _scale_range(scale_min, scale_max)
    self.log_max = checks.number('log_max', log_max)
    self.beta1 = checks.number('beta1', beta1, minimum=0.0, below=1.0)
    self.beta2 = checks.number('beta2', beta2, minimum=0.0, below=1.0)
    self.overflow_std_dev = checks.number('overflow_std_dev', overflow_std_dev, minimum=0.0)
    self.scale = _state_variable(1.0, _STATE_DTYPE, 'scale')
    self.t = _state_variable(0.0, _STATE_DTYPE, 't')
    self.x_hat = _state_variable(0.0, _STATE_DTYPE, 'x_hat')
    self.s_hat = _state_variable(0.0, _STATE_DTYPE, 's_hat')
    self.q = _state_variable(0.0, _STATE_DTYPE, 'q')

  def _variables(self):
    return {'scale': self.scale, 't': self.t, 'x_hat': self.x_hat, 's_hat': self.s_hat, 'q': self.q}

  @property
  def loss_scale(self):
    return tf.cast(self.scale, tf.float32)

  def update_op(self, has_nan, amax):
    overflow, amax = _overflow(has_nan, amax)
    variables = self._variables()
    state = {key: variable.read_value() for key, variable in variables.items()}
    state = logmax_update(state, overflow, amax, self.scale_min, self.scale_max, self.log_max,
                          self.beta1, self.beta2, self.overflow_std_dev)
    for key, variable in variables.items():
      variable.assign(state[key])
    return tf.cast(state['scale'], tf.float32)


class AutomaticLossScaler(LossScaler):
  """OpenSeq2Seq's automatic loss scaling: the ``Backoff`` or ``LogMax`` algorithm.

  Args:
    algorithm: 'Backoff' or 'LogMax', in any case.
    params: optional dict of the algorithm's parameters (see
      :class:`BackoffScaler` and :class:`LogMaxScaler`).

  Raises:
    ValueError: for an unknown algorithm, an unknown parameter name or an
      out-of-range value.
  """

  SUPPORTED_ALGOS = ['backoff', 'logmax']

  _CLASSES = {'backoff': BackoffScaler, 'logmax': LogMaxScaler}

  def __init__(self, algorithm='Backoff', params=None, name=None):
    key = algorithm.lower() if isinstance(algorithm, str) else None
    if key not in self.SUPPORTED_ALGOS:
      raise ValueError(f'algorithm: unknown loss scaling algorithm {algorithm!r}; '
                       f'allowed (any case): {", ".join(self.SUPPORTED_ALGOS)}')
    cls = self._CLASSES[key]
    kwargs = _checked_params(params, cls.PARAM_NAMES, 'params', f'the {algorithm!r} algorithm')
    super().__init__(name=name)
    self.algorithm = key
    self.scaler = cls(**kwargs)

  @property
  def loss_scale(self):
    return self.scaler.loss_scale

  def update_op(self, has_nan, amax):
    return self.scaler.update_op(has_nan, amax)


def _is_scaler(value):
  return isinstance(value, LossScaler) or (
      hasattr(value, 'loss_scale') and callable(getattr(value, 'update_op', None)))


def _reject_params(params, loss_scaling):
  if params:
    raise ValueError(f'loss_scaling_params: only used with Backoff, LogMax or dynamic loss scaling, '
                     f'got {params!r} with loss_scaling={loss_scaling!r}')


def make_loss_scaler(loss_scaling, params=None):
  """Builds a loss scaler from the ``loss_scaling`` config value.

  Args:
    loss_scaling: a positive number (a static scale), 'Backoff' or 'LogMax'
      (:class:`AutomaticLossScaler`), 'dynamic' (:class:`DynamicLossScaler`),
      all names in any case, or an object with ``loss_scale`` and
      ``update_op``, which is returned as is.
    params: optional dict of parameters for 'Backoff', 'LogMax' or 'dynamic'
      (for 'dynamic' the keys are the arguments of
      :class:`DynamicLossScaler`).

  Returns:
    A loss scaler.

  Raises:
    ValueError: for any other ``loss_scaling``, for ``params`` given with a
      static scale or an existing scaler, and for bad parameters.
  """
  if _is_scaler(loss_scaling):
    _reject_params(params, loss_scaling)
    return loss_scaling
  if (isinstance(loss_scaling, numbers.Real) and not isinstance(loss_scaling, bool)
      and math.isfinite(loss_scaling) and loss_scaling > 0):
    _reject_params(params, loss_scaling)
    return StaticLossScaler(loss_scaling)
  if isinstance(loss_scaling, str):
    key = loss_scaling.lower()
    if key in AutomaticLossScaler.SUPPORTED_ALGOS:
      return AutomaticLossScaler(loss_scaling, params)
    if key == 'dynamic':
      kwargs = _checked_params(params, DynamicLossScaler.PARAM_NAMES, 'loss_scaling_params',
                               'dynamic loss scaling')
      return DynamicLossScaler(**kwargs)
  raise ValueError(f'loss_scaling: unknown value {loss_scaling!r}; {_LOSS_SCALING_ALLOWED}')
