"""The ground of loss scaling: the scaler interface, the fixed and dynamic scalers, gradient statistics.

Every scaler has the same interface:

* ``loss_scale``: the current scale, a float32 scalar tensor;
* ``update_op(has_nan, amax)``: advances the state once and returns the new
  scale, from whether any unscaled gradient was non-finite and their largest
  magnitude (:func:`gradient_stats` computes both).

Here: :class:`StaticLossScaler` (a fixed scale) and :class:`DynamicLossScaler`
(grows the scale after a run of finite steps and shrinks it on overflow, as
``'dynamic'`` loss scaling in Keras mixed precision), and the checks and state
helpers the scalers of ``automatic_loss_scaler.py`` share. Scalers are
``tf.Module`` objects whose state lives in non-trainable variables, so a
``tf.train.Checkpoint`` saves them and ``update_op`` traces once; the update
math is in plain tensor functions (:func:`dynamic_update`). docs/math.md
(loss scaling) states the rules.
"""

import math
import numbers

import tensorflow as tf

from core.params import reject_unknown_keys
from optimizers import checks

STATE_DTYPE = tf.float64

def count(name, value):
  """Returns ``value`` as a positive int; raises ValueError naming ``name``."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
    raise ValueError(f'{name}: expected an integer >= 1, got {value!r}')
  return int(value)


def scale_range(scale_min, scale_max):
  """Returns (scale_min, scale_max) as floats after checking 0 < scale_min <= scale_max."""
  scale_min = checks.number('scale_min', scale_min, positive=True)
  scale_max = checks.number('scale_max', scale_max, positive=True)
  if scale_max < scale_min:
    raise ValueError(f'scale_max: must be >= scale_min ({scale_min!r}), got {scale_max!r}')
  return scale_min, scale_max


def checked_params(params, allowed, path, what):
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
    self.growth_steps = count('growth_steps', growth_steps)
    self.multiplier = checks.number('multiplier', multiplier)
    if self.multiplier <= 1:
      raise ValueError(f'multiplier: must be > 1, got {multiplier!r}')
    self.min_scale = checks.number('min_scale', min_scale, positive=True)
    if self.initial_scale < self.min_scale:
      raise ValueError(f'initial_scale: must be >= min_scale ({self.min_scale!r}), got {initial_scale!r}')
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
