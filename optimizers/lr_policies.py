"""Learning-rate policies: pure functions of the global step.

Every policy has the form ``f(global_step, learning_rate, ...)`` and returns a
scalar float32 tensor (``transformer_policy`` returns its ``dtype``). The math
is the table in docs/math.md; names and signatures follow OpenSeq2Seq so that
configs port unchanged. ``global_step`` may be a Python int or an integer
tensor or variable, so a policy can be called eagerly or inside a
``tf.function`` that is traced once for every step.

Linear warm-up is one helper, :func:`_warmed_up` (lr·min(1, s/W)), composed
with each decay. ``poly_decay`` and ``cosine_decay`` are OpenSeq2Seq's: their
decay counts from ``begin_decay_at`` and multiplies the warmed-up rate, so a
warm-up longer than ``begin_decay_at`` overlaps the decay
(:func:`_warmup_times_decay`). ``inv_poly_decay`` warms up, holds lr, and
decays from max(W, begin_decay_at) (:func:`_warmup_then_decay`). A config's
warm-up given in epochs or as a fraction of the run means "warm up, then
decay": the config layer gives those policies begin_decay_at = max(b, W)
(``framework.config.schedule``).

Values are computed in float64 and cast at the end: integer steps and
boundaries compare exactly, and the result is the correctly rounded float32 of
the formula rather than the sum of float32 rounding errors.

``LR_POLICIES`` (declared in ``optimizers.registry``, so that a config's
policy name is checked without TensorFlow) holds all policies by function
name, so a config can say ``lr_policy: poly_decay``.
"""

import math
import numbers

import tensorflow as tf

from optimizers import validation
from optimizers.registry import LR_POLICIES  # noqa: F401  (names every policy below)

_COMPUTE_DTYPE = tf.float64


def _step(global_step):
  """Converts ``global_step`` to a float64 scalar tensor.

  Python ints become constants; integer tensors and variables (tf or Keras)
  are cast, exactly for any step below 2**53.

  Raises:
    ValueError: for a bool, a float, a negative Python int or a non-scalar or
      non-integer tensor.
  """
  if isinstance(global_step, bool):
    raise ValueError(f'global_step: expected an int or an integer tensor, got {global_step!r}')
  if isinstance(global_step, numbers.Integral):
    if global_step < 0:
      raise ValueError(f'global_step: must be >= 0, got {global_step!r}')
    return tf.constant(int(global_step), dtype=_COMPUTE_DTYPE)
  try:
    step = tf.convert_to_tensor(global_step)
  except (TypeError, ValueError) as error:
    raise ValueError(f'global_step: expected an int or an integer tensor, got {global_step!r}') from error
  if not step.dtype.is_integer:
    raise ValueError(f'global_step: expected an integer tensor, got dtype {step.dtype.name}')
  if step.shape.rank not in (None, 0):
    raise ValueError(f'global_step: expected a scalar, got shape {step.shape}')
  return tf.cast(step, _COMPUTE_DTYPE)


def _warmed_up(step, learning_rate, warmup_steps):
  """lr·s/W for s < W, then lr (lr alone when W = 0): a float64 scalar tensor."""
  lr = tf.constant(learning_rate, _COMPUTE_DTYPE)
  if warmup_steps > 0:
    return tf.where(step < warmup_steps, lr * step / warmup_steps, lr)
  return lr


def _warmup_times_decay(step, learning_rate, warmup_steps, begin_decay_at, decay):
  """OpenSeq2Seq's composition: the warmed-up rate r, decayed from ``begin_decay_at`` on.

  Args:
    step: float64 scalar tensor, the global step s.
    learning_rate: the base rate lr (a Python float).
    warmup_steps: W; r = lr·min(1, s/W) (r = lr when W = 0).
    begin_decay_at: b; r itself for s < b.
    decay: ``f(rate, t) -> float64 tensor``, the rate t >= 0 steps after b
      for the (warmed-up) rate ``rate``; only evaluated on t >= 0.

  Returns:
    A float64 scalar tensor.
  """
  rate = _warmed_up(step, learning_rate, warmup_steps)
  since_start = tf.maximum(step - begin_decay_at, 0.0)
  return tf.where(step < begin_decay_at, rate, decay(rate, since_start))


def _warmup_then_decay(step, learning_rate, warmup_steps, begin_decay_at, decay):
  """Composes linear warm-up, a constant stretch and a decay.

  Args:
    step: float64 scalar tensor, the global step s.
    learning_rate: the base rate lr (a Python float).
    warmup_steps: W; for s < W the rate is lr·s/W (0 disables warm-up).
    begin_decay_at: b; the decay starts at max(W, b) and the rate is lr
      between the end of warm-up and that start.
    decay: ``f(t) -> float64 tensor`` giving the rate t >= 0 steps after the
      decay started; it is only evaluated on t >= 0, so it may assume that.

  Returns:
    A float64 scalar tensor.
  """
  start = max(warmup_steps, begin_decay_at)
  lr = tf.constant(learning_rate, _COMPUTE_DTYPE)
  since_start = tf.maximum(step - start, 0.0)
  value = tf.where(step < start, lr, decay(since_start))
  if warmup_steps > 0:
    value = tf.where(step < warmup_steps, lr * step / warmup_steps, value)
  return value


def _output(value, dtype=tf.float32):
  return tf.cast(value, dtype)


def fixed_lr(global_step, learning_rate):
  """A constant learning rate.

  Args:
    global_step: the step (unused except for validation).
    learning_rate: the rate, >= 0.

  Returns:
    A scalar float32 tensor equal to ``learning_rate``.

  Raises:
    ValueError: for a negative learning_rate or a bad global_step.
  """
  _step(global_step)
  learning_rate = validation.number('learning_rate', learning_rate, minimum=0.0)
  return _output(tf.constant(learning_rate, _COMPUTE_DTYPE))


def piecewise_constant(global_step, learning_rate, boundaries, decay_rates, steps_per_epoch=None):
  """A step function: ``lr`` then ``lr·decay_rates[k]`` after each boundary.

  With boundaries b_0 < b_1 < ... the rate is lr for s <= b_0, lr·d_k for
  b_k < s <= b_{k+1}, and lr·d_last for s > b_last; a boundary step still uses
  the previous value, as in ``tf.compat.v1.train.piecewise_constant``.

  Args:
    global_step: the step s.
    learning_rate: the rate before the first boundary, >= 0.
    boundaries: increasing list of steps, or of epochs when
      ``steps_per_epoch`` is given.
    decay_rates: multipliers of ``learning_rate``, one per boundary.
    steps_per_epoch: when set (> 0), boundaries are in epochs and are
      multiplied by it.

  Returns:
    A scalar float32 tensor.

  Raises:
    ValueError: for lists of different lengths, empty or non-increasing
      boundaries, negative rates or a non-positive steps_per_epoch.
  """
  step = _step(global_step)
  learning_rate = validation.number('learning_rate', learning_rate, minimum=0.0)
  if not isinstance(boundaries, (list, tuple)) or not boundaries:
    raise ValueError(f'boundaries: expected a non-empty list of steps, got {boundaries!r}')
  if not isinstance(decay_rates, (list, tuple)) or len(decay_rates) != len(boundaries):
    raise ValueError(f'decay_rates: expected a list with one rate per boundary '
                     f'({len(boundaries)}), got {decay_rates!r}')
  boundaries = [validation.number(f'boundaries[{i}]', b, minimum=0.0) for i, b in enumerate(boundaries)]
  rates = [validation.number(f'decay_rates[{i}]', d, minimum=0.0) for i, d in enumerate(decay_rates)]
  if steps_per_epoch is not None:
    steps_per_epoch = validation.number('steps_per_epoch', steps_per_epoch, positive=True)
    boundaries = [b * steps_per_epoch for b in boundaries]
  return step_values(step, boundaries, [learning_rate] + [learning_rate * d for d in rates])


def step_values(step, boundaries, values):
  """``values[k]`` where k of the ``boundaries`` lie strictly below the step: a boundary step keeps the earlier value.

  Args:
    step: the step s, a float64 scalar tensor.
    boundaries: numbers, checked here to be strictly increasing.
    values: one more than the boundaries.

  Returns:
    A scalar float32 tensor.

  Raises:
    ValueError: for boundaries that do not increase.
  """
  if any(later <= earlier for earlier, later in zip(boundaries, boundaries[1:])):
    raise ValueError(f'boundaries: must be strictly increasing, got {boundaries!r}')
  # The number of boundaries strictly below s is the index of the value in use.
  passed = step > tf.constant(boundaries, _COMPUTE_DTYPE)
  index = tf.reduce_sum(tf.cast(passed, tf.int32))
  return _output(tf.gather(tf.constant(values, _COMPUTE_DTYPE), index))


def exp_decay(global_step, learning_rate, decay_steps, decay_rate, use_staircase_decay,
              begin_decay_at=0, min_lr=0.0):
  """Exponential decay: ``max(min_lr, lr·decay_rate^((s − b)/D))`` from step b.

  Args:
    global_step: the step s.
    learning_rate: the rate before the decay starts, >= 0.
    decay_steps: D > 0, the steps over which the rate is multiplied by
      ``decay_rate`` once.
    decay_rate: the multiplier per ``decay_steps``, > 0.
    use_staircase_decay: when True the exponent is floored, so the rate drops
      every D steps instead of continuously.
    begin_decay_at: b >= 0, the step where the decay starts.
    min_lr: the floor of the rate, >= 0.

  Returns:
    A scalar float32 tensor.

  Raises:
    ValueError: for an out-of-range argument.
  """
  step = _step(global_step)
  learning_rate = validation.number('learning_rate', learning_rate, minimum=0.0)
  decay_steps = validation.number('decay_steps', decay_steps, positive=True)
  decay_rate = validation.number('decay_rate', decay_rate, positive=True)
  if not isinstance(use_staircase_decay, bool):
    raise ValueError(f'use_staircase_decay: expected a boolean, got {use_staircase_decay!r}')
  begin_decay_at = validation.number('begin_decay_at', begin_decay_at, minimum=0.0)
  min_lr = validation.number('min_lr', min_lr, minimum=0.0)

  def decay(since_start):
    exponent = since_start / decay_steps
    if use_staircase_decay:
      exponent = tf.floor(exponent)
    return tf.maximum(learning_rate * tf.pow(tf.constant(decay_rate, _COMPUTE_DTYPE), exponent), min_lr)

  return _output(_warmup_then_decay(step, learning_rate, 0.0, begin_decay_at, decay))


def poly_decay(global_step, learning_rate, decay_steps, power=1.0, begin_decay_at=0, min_lr=0.0,
               warmup_steps=0):
  """Polynomial decay from ``lr`` to ``min_lr`` over ``decay_steps``, with warm-up, as OpenSeq2Seq's.

  With r = lr·min(1, s/W) (r = lr when W = 0), the rate is r before
  ``begin_decay_at`` b and (r − min_lr)·(1 − min(s − b, D)/D)^power + min_lr
  from b on: the warm-up multiplies the decay, which counts from b whatever W
  is (a warm-up longer than b overlaps it). Power 2 is the schedule of the
  LARS paper.

  Args:
    global_step: the step s.
    learning_rate: the peak rate, >= 0.
    decay_steps: D > 0, the length of the decay; the rate stays at min_lr after.
    power: the exponent, > 0.
    begin_decay_at: b >= 0, the step the decay counts from.
    min_lr: the final rate, >= 0.
    warmup_steps: W >= 0 steps of linear warm-up from 0.

  Returns:
    A scalar float32 tensor.

  Raises:
    ValueError: for an out-of-range argument.

  References:
    You, Gitman, Ginsburg. Large Batch Training of Convolutional Networks. 2017.
  """
  step = _step(global_step)
  learning_rate = validation.number('learning_rate', learning_rate, minimum=0.0)
  decay_steps = validation.number('decay_steps', decay_steps, positive=True)
  power = validation.number('power', power, positive=True)
  begin_decay_at = validation.number('begin_decay_at', begin_decay_at, minimum=0.0)
  min_lr = validation.number('min_lr', min_lr, minimum=0.0)
  warmup_steps = validation.number('warmup_steps', warmup_steps, minimum=0.0)

  def decay(rate, since_start):
    remaining = 1.0 - tf.minimum(since_start, decay_steps) / decay_steps
    return (rate - min_lr) * tf.pow(remaining, power) + min_lr

  return _output(_warmup_times_decay(step, learning_rate, warmup_steps, begin_decay_at, decay))


def cosine_decay(global_step, learning_rate, decay_steps, power=1.0, begin_decay_at=0, min_lr=0.0,
                 warmup_steps=0):
  """Half-cosine decay over ``decay_steps`` to the fraction ``min_lr`` of the rate, as OpenSeq2Seq's.

  With r = lr·min(1, s/W) (r = lr when W = 0), the rate is r before
  ``begin_decay_at`` b and r·((1 − min_lr)·½(1 + cos(π·min(s − b, D)/D)) +
  min_lr) from b on: ``tf.train.cosine_decay`` with ``alpha=min_lr``, so
  ``min_lr`` is a fraction of the rate, not a rate. As in
  :func:`poly_decay`, the decay counts from b and the warm-up multiplies it.

  Args:
    global_step: the step s.
    learning_rate: the peak rate, >= 0.
    decay_steps: D > 0, the length of the decay.
    power: accepted and unused, as in OpenSeq2Seq's signature.
    begin_decay_at: b >= 0, the step the decay counts from.
    min_lr: the final rate as a fraction of the rate (TF's ``alpha``), >= 0.
    warmup_steps: W >= 0 steps of linear warm-up from 0.

  Returns:
    A scalar float32 tensor.

  Raises:
    ValueError: for an out-of-range argument.

  References:
    Loshchilov, Hutter. SGDR: Stochastic Gradient Descent with Warm Restarts. 2017.
  """
  del power  # OpenSeq2Seq's signature has it; its cosine decay does not read it
  step = _step(global_step)
  learning_rate = validation.number('learning_rate', learning_rate, minimum=0.0)
  decay_steps = validation.number('decay_steps', decay_steps, positive=True)
  begin_decay_at = validation.number('begin_decay_at', begin_decay_at, minimum=0.0)
  min_lr = validation.number('min_lr', min_lr, minimum=0.0)
  warmup_steps = validation.number('warmup_steps', warmup_steps, minimum=0.0)

  def decay(rate, since_start):
    fraction = tf.minimum(since_start, decay_steps) / decay_steps
    return rate * ((1.0 - min_lr) * 0.5 * (1.0 + tf.cos(math.pi * fraction)) + min_lr)

  return _output(_warmup_times_decay(step, learning_rate, warmup_steps, begin_decay_at, decay))


def inv_poly_decay(global_step, learning_rate, decay_steps, min_lr, power=1.0, begin_decay_at=0,
                   warmup_steps=0, name='learning_rate'):
  """Inverse polynomial decay reaching ``min_lr`` after ``decay_steps``, with warm-up.

  After the start the rate is max(min_lr, lr/(1 + k·t)^power), t = steps since
  the start, with k = ((lr/min_lr)^(1/power) − 1)/D chosen so that the rate
  equals min_lr at t = D.

  Args:
    global_step: the step s.
    learning_rate: the peak rate, >= min_lr.
    decay_steps: D > 0.
    min_lr: the floor, > 0 (k divides by it).
    power: the exponent, > 0.
    begin_decay_at: b >= 0; the decay starts at max(warmup_steps, b).
    warmup_steps: W >= 0 steps of linear warm-up from 0.
    name: the name scope of the ops.

  Returns:
    A scalar float32 tensor.

  Raises:
    ValueError: for an out-of-range argument, including min_lr > learning_rate
      (k would be negative and the rate would grow without bound).
  """
  step = _step(global_step)
  learning_rate = validation.number('learning_rate', learning_rate, minimum=0.0)
  decay_steps = validation.number('decay_steps', decay_steps, positive=True)
  min_lr = validation.number('min_lr', min_lr, positive=True)
  power = validation.number('power', power, positive=True)
  begin_decay_at = validation.number('begin_decay_at', begin_decay_at, minimum=0.0)
  warmup_steps = validation.number('warmup_steps', warmup_steps, minimum=0.0)
  if min_lr > learning_rate:
    raise ValueError(f'min_lr: must be <= learning_rate ({learning_rate!r}), got {min_lr!r}')
  rate = ((learning_rate / min_lr) ** (1.0 / power) - 1.0) / decay_steps

  def decay(since_start):
    return tf.maximum(learning_rate / tf.pow(1.0 + rate * since_start, power), min_lr)

  with tf.name_scope(name):
    return _output(_warmup_then_decay(step, learning_rate, warmup_steps, begin_decay_at, decay))


def transformer_policy(global_step, learning_rate, d_model, warmup_steps, max_lr=None,
                       coefficient=1.0, dtype=tf.float32):
  """The schedule of "Attention Is All You Need", optionally capped.

  The rate is lr·coefficient·d_model^−0.5·min((s+1)·W^−1.5, (s+1)^−0.5): it
  grows linearly for W steps and then decays as the inverse square root of
  the step. W = 0 leaves only the inverse square root.

  Args:
    global_step: the step s.
    learning_rate: a multiplier, >= 0.
    d_model: the model width, > 0.
    warmup_steps: W >= 0.
    max_lr: when set (> 0), the rate is capped at it.
    coefficient: another multiplier, >= 0.
    dtype: the floating dtype of the result.

  Returns:
    A scalar tensor of ``dtype``.

  Raises:
    ValueError: for an out-of-range argument or a non-floating dtype.

  References:
    Vaswani et al. Attention Is All You Need. 2017, section 5.3.
  """
  step = _step(global_step)
  learning_rate = validation.number('learning_rate', learning_rate, minimum=0.0)
  d_model = validation.number('d_model', d_model, positive=True)
  warmup_steps = validation.number('warmup_steps', warmup_steps, minimum=0.0)
  coefficient = validation.number('coefficient', coefficient, minimum=0.0)
  if max_lr is not None:
    max_lr = validation.number('max_lr', max_lr, positive=True)
  try:
    dtype = tf.as_dtype(dtype)
  except TypeError as error:
    raise ValueError(f'dtype: expected a floating dtype, got {dtype!r}') from error
  if not dtype.is_floating:
    raise ValueError(f'dtype: expected a floating dtype, got {dtype.name}')

  count = step + 1.0
  decay = tf.math.rsqrt(count)
  if warmup_steps > 0:
    decay = tf.minimum(count * warmup_steps ** -1.5, decay)
  value = learning_rate * coefficient * d_model ** -0.5 * decay
  if max_lr is not None:
    value = tf.minimum(value, max_lr)
  return _output(value, dtype)
