"""Loss scaling for reduced-precision training: every loss scaler, and ``make_loss_scaler``.

The loss is multiplied by a scale before differentiation so that small float16
gradients do not flush to zero, and the gradients are divided by it again. A
scaler holds the current scale and updates it once per step from two facts
about the unscaled gradients: whether any was non-finite (``has_nan``) and
their largest magnitude (``amax``); the update's finite check computes both
(``stages.gradient_statistics``).

Every scaler has the interface of :class:`LossScaler`:

* ``loss_scale``: the current scale, a float32 scalar tensor;
* ``update_op(has_nan, amax)``: advances the state once and returns the new
  scale.

Scalers:

* :class:`StaticLossScaler`: a fixed scale;
* :class:`DynamicLossScaler`: grows the scale after a run of finite steps and
  shrinks it on overflow, as ``'dynamic'`` loss scaling in Keras mixed precision;
* :class:`AutomaticLossScaler` with the ``Backoff`` (:class:`BackoffScaler`) or
  ``LogMax`` (:class:`LogMaxScaler`) algorithm of OpenSeq2Seq.

docs/math.md (loss scaling) states the rules; :func:`make_loss_scaler` builds
a scaler from the ``loss_scaling`` config value.

Scalers are ``tf.Module`` objects whose state lives in non-trainable variables
created when the scaler is built, so a ``tf.train.Checkpoint`` saves and
restores them and ``update_op`` may be traced once in a ``tf.function`` and
called every step. The update math is in plain tensor functions
(:func:`dynamic_update`, :func:`backoff_update`, :func:`logmax_update`); the
classes only hold the variables. Their parameters are checked by
``validation.loss_scaler_params`` (defaults in
``validation.LOSS_SCALER_DEFAULTS``), which the config layer runs too, before
TensorFlow is imported.
"""

import math

import tensorflow as tf

from optimizers import validation

STATE_DTYPE = tf.float64


def state_variable(value, dtype, name):
  # init_scope lifts creation out of a tf.function being traced, so a scaler
  # built during tracing owns ordinary eager variables.
  with tf.init_scope():
    return tf.Variable(value, dtype=dtype, trainable=False, name=name)


def overflow_of(has_nan, amax):
  """Returns (overflow, amax as float64): overflow is has_nan or a non-finite amax."""
  has_nan = tf.cast(has_nan, tf.bool)
  amax = tf.cast(amax, STATE_DTYPE)
  return tf.logical_or(has_nan, tf.logical_not(tf.math.is_finite(amax))), amax


class LossScaler(tf.Module):
  """The interface of every loss scaler."""

  # Its name in an update chain's description (``describe``).
  label = 'loss scale'

  def describe(self):
    """The loss scaling as an update chain's description names it (``backoff``, ``static(128)``)."""
    return self.label

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
    self._scale = validation.number('scale', scale, positive=True)

  def describe(self):
    # A scale of 1 scales nothing: the stage is the finite check alone.
    return 'finite check' if self._scale == 1 else f'static({self._scale:g})'

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
    **params: ``initial_scale``, the starting scale, >= min_scale;
      ``growth_steps``, consecutive finite steps before the scale is
      multiplied, >= 1; ``multiplier``, the factor of growth and shrinkage,
      > 1; ``min_scale``, the scale never goes below this, > 0. Defaults in
      ``validation.LOSS_SCALER_DEFAULTS['dynamic']`` (Keras' values).
    name: the module's name.

  Raises:
    ValueError: for an unknown parameter or an out-of-range value.
  """

  label = 'dynamic'

  def __init__(self, name=None, **params):
    super().__init__(name=name)
    params = validation.loss_scaler_params('dynamic', params)
    self.initial_scale = params['initial_scale']
    self.growth_steps = params['growth_steps']
    self.multiplier = params['multiplier']
    self.min_scale = params['min_scale']
    self.scale = state_variable(self.initial_scale, STATE_DTYPE, 'scale')
    self.count = state_variable(0, tf.int64, 'count')

  @property
  def loss_scale(self):
    return tf.cast(self.scale, tf.float32)

  def update_op(self, has_nan, amax):
    overflow, _ = overflow_of(has_nan, amax)
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
    **params: ``scale_min``, the lowest scale, > 0; ``scale_max``, the
      highest and the starting scale, >= scale_min; ``step_factor``, the
      factor of each change, > 1; ``step_window``, steps between increases,
      an integer >= 1. Defaults in ``validation.LOSS_SCALER_DEFAULTS['backoff']``.
    name: the module's name.

  Raises:
    ValueError: for an unknown parameter or an out-of-range value.
  """

  def __init__(self, name=None, **params):
    super().__init__(name=name)
    params = validation.loss_scaler_params('backoff', params)
    self.scale_min, self.scale_max = params['scale_min'], params['scale_max']
    self.step_factor = params['step_factor']
    self.step_window = params['step_window']
    self.scale = state_variable(self.scale_max, STATE_DTYPE, 'scale')
    self.iteration = state_variable(0, tf.int64, 'iteration')
    self.last_overflow = state_variable(-1, tf.int64, 'last_overflow')

  @property
  def loss_scale(self):
    return tf.cast(self.scale, tf.float32)

  def update_op(self, has_nan, amax):
    overflow, _ = overflow_of(has_nan, amax)
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
  x = tf.where(overflow, tf.constant(log_max, STATE_DTYPE), tf.math.log(safe_amax) / math.log(2.0))
  t = state['t'] + 1.0
  x_hat = beta1 * state['x_hat'] + (1.0 - beta1) * x
  mean = x_hat / (1.0 - tf.pow(tf.constant(beta1, STATE_DTYPE), t))
  correction2 = 1.0 - tf.pow(tf.constant(beta2, STATE_DTYPE), t)
  s_hat = beta2 * state['s_hat'] + (1.0 - beta2) * x
  q = beta2 * state['q'] + (1.0 - beta2) * tf.square(x)
  # The two terms nearly cancel when x barely varies; float64 keeps the
  # difference meaningful and the max() removes a negative rounding residue.
  variance = tf.maximum(q / correction2 - tf.square(s_hat / correction2), 0.0)
  std_dev = tf.sqrt(variance)
  exponent = log_max - (mean + overflow_std_dev * std_dev)
  scale = tf.clip_by_value(tf.pow(tf.constant(2.0, STATE_DTYPE), exponent), scale_min, scale_max)
  new_state = {'scale': scale, 't': t, 'x_hat': x_hat, 's_hat': s_hat, 'q': q}
  return {key: tf.where(informative, value, state[key]) for key, value in new_state.items()}


class LogMaxScaler(LossScaler):
  """Sets the scale from running statistics of log2(amax).

  Starts at scale 1.0 with t = 0 and zero averages (docs/math.md). The state is
  kept in float64 variables; ``loss_scale`` is float32. A finite step with
  amax <= 0 leaves the state unchanged (see :func:`logmax_update`).

  Args:
    **params: ``scale_min``, the lowest scale, > 0; ``scale_max``, the
      highest scale, >= scale_min; ``log_max``, log2 of the largest gradient
      magnitude to allow after scaling, also the value of log2(amax) assumed
      on overflow; ``beta1`` and ``beta2``, the decays of the moving mean and
      variance, in [0, 1); ``overflow_std_dev``, how many standard deviations
      of log2(amax) to keep below ``log_max``, >= 0. Defaults in
      ``validation.LOSS_SCALER_DEFAULTS['logmax']``.
    name: the module's name.

  Raises:
    ValueError: for an unknown parameter or an out-of-range value.
  """

  def __init__(self, name=None, **params):
    super().__init__(name=name)
    params = validation.loss_scaler_params('logmax', params)
    self.scale_min, self.scale_max = params['scale_min'], params['scale_max']
    self.log_max = params['log_max']
    self.beta1, self.beta2 = params['beta1'], params['beta2']
    self.overflow_std_dev = params['overflow_std_dev']
    self.scale = state_variable(1.0, STATE_DTYPE, 'scale')
    self.t = state_variable(0.0, STATE_DTYPE, 't')
    self.x_hat = state_variable(0.0, STATE_DTYPE, 'x_hat')
    self.s_hat = state_variable(0.0, STATE_DTYPE, 's_hat')
    self.q = state_variable(0.0, STATE_DTYPE, 'q')

  def _variables(self):
    return {'scale': self.scale, 't': self.t, 'x_hat': self.x_hat, 's_hat': self.s_hat, 'q': self.q}

  @property
  def loss_scale(self):
    return tf.cast(self.scale, tf.float32)

  def update_op(self, has_nan, amax):
    overflow, amax = overflow_of(has_nan, amax)
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

  SUPPORTED_ALGOS = list(validation.AUTOMATIC_ALGOS)

  _CLASSES = {'backoff': BackoffScaler, 'logmax': LogMaxScaler}

  def describe(self):
    return self.algorithm

  def __init__(self, algorithm='Backoff', params=None, name=None):
    key = validation.algorithm_key(algorithm, validation.AUTOMATIC_ALGOS)
    params = validation.loss_scaler_params(algorithm, params)
    super().__init__(name=name)
    self.algorithm = key
    self.scaler = self._CLASSES[key](**params)

  @property
  def loss_scale(self):
    return self.scaler.loss_scale

  def update_op(self, has_nan, amax):
    return self.scaler.update_op(has_nan, amax)


def _is_scaler(value):
  return isinstance(value, LossScaler) or (
      hasattr(value, 'loss_scale') and callable(getattr(value, 'update_op', None)))


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
    validation.reject_params(params, loss_scaling)
    return loss_scaling
  params = validation.check_loss_scaling(loss_scaling, params)
  if validation.is_fixed_scale(loss_scaling):
    return StaticLossScaler(loss_scaling)
  if loss_scaling.lower() == 'dynamic':
    return DynamicLossScaler(**params)
  return AutomaticLossScaler(loss_scaling, params)
