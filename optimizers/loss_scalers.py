"""The ground of loss scaling: the scaler interface, the fixed and dynamic scalers, gradient statistics.

Every scaler has the same interface:

* ``loss_scale``: the current scale, a float32 scalar tensor;
* ``update_op(has_nan, amax)``: advances the state once and returns the new
  scale, from whether any unscaled gradient was non-finite and their largest
  magnitude (:func:`gradient_stats` computes both).

Here: :class:`StaticLossScaler` (a fixed scale) and :class:`DynamicLossScaler`
(grows the scale after a run of finite steps and shrinks it on overflow, as
``'dynamic'`` loss scaling in Keras mixed precision), and the state helpers
the scalers of ``automatic_loss_scaler.py`` share. Every scaler's parameters
are checked by ``validation.loss_scaler_params``, which needs no TensorFlow.
Scalers are ``tf.Module`` objects whose state lives in non-trainable
variables, so a ``tf.train.Checkpoint`` saves them and ``update_op`` traces
once; the update math is in plain tensor functions (:func:`dynamic_update`).
docs/math.md (loss scaling) states the rules.
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
    self._scale = validation.number('scale', scale, positive=True)

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
