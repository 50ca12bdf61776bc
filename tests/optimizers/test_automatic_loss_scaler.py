"""Loss scalers against pure-Python simulations of the docs/math.md text."""

import math

import numpy as np
import pytest
import tensorflow as tf

from optimizers import validation
from optimizers.automatic_loss_scaler import (AutomaticLossScaler, BackoffScaler, DynamicLossScaler,
                                              LogMaxScaler, StaticLossScaler, make_loss_scaler)
from optimizers.stages import gradient_stats

ALLOWED = "allowed: a positive number, 'Backoff', 'LogMax', 'dynamic'"


# Simulations written from docs/math.md with Python floats; each returns the scale after every step.

def simulate_backoff(inputs, scale_min=1.0, scale_max=2.0 ** 14, step_factor=2.0, step_window=2000):
  scale, i, last_overflow = scale_max, 0, -1
  scales = []
  for has_nan, amax in inputs:
    if has_nan or math.isinf(amax):
      scale = min(max(scale / step_factor, scale_min), scale_max)
      last_overflow = i
    elif (i - last_overflow) % step_window == 0:
      scale = min(max(scale * step_factor, scale_min), scale_max)
    i += 1
    scales.append(scale)
  return scales


def simulate_logmax(inputs, scale_min=1.0, scale_max=2.0 ** 14, log_max=16.0, beta1=0.99, beta2=0.999,
                    overflow_std_dev=3.09):
  t, x_hat, s_hat, q = 0, 0.0, 0.0, 0.0
  scales = []
  for has_nan, amax in inputs:
    t += 1
    x = log_max if (has_nan or math.isinf(amax)) else math.log2(amax)
    x_hat = beta1 * x_hat + (1 - beta1) * x
    mu = x_hat / (1 - beta1 ** t)
    s_hat = beta2 * s_hat + (1 - beta2) * x
    q = beta2 * q + (1 - beta2) * x * x
    sigma = math.sqrt(max(q / (1 - beta2 ** t) - (s_hat / (1 - beta2 ** t)) ** 2, 0.0))
    scale = min(max(2.0 ** (log_max - (mu + overflow_std_dev * sigma)), scale_min), scale_max)
    scales.append(scale)
  return scales


def simulate_dynamic(inputs, initial_scale=2.0 ** 15, growth_steps=2000, multiplier=2.0, min_scale=1.0):
  scale, count = initial_scale, 0
  scales = []
  for has_nan, amax in inputs:
    if has_nan or math.isinf(amax):
      scale = max(scale / multiplier, min_scale)
      count = 0
    else:
      count += 1
      if count == growth_steps:
        scale *= multiplier
        count = 0
    scales.append(scale)
  return scales


def random_inputs(seed, steps, overflow_rate=0.1, low=-20.0, high=4.0):
  rng = np.random.RandomState(seed)
  inputs = []
  for _ in range(steps):
    has_nan = bool(rng.rand() < overflow_rate)
    amax = math.inf if has_nan and rng.rand() < 0.5 else float(np.float32(2.0 ** rng.uniform(low, high)))
    inputs.append((has_nan, amax))
  return inputs


def run(scaler, inputs, update=None):
  update = update or scaler.update_op
  scales = []
  for has_nan, amax in inputs:
    value = update(tf.constant(has_nan), tf.constant(amax, tf.float32))
    assert value.dtype == tf.float32
    scales.append(float(value))
    assert float(scaler.loss_scale) == scales[-1]
  return scales


def assert_scales(got, want, rtol=1e-6):
  np.testing.assert_allclose(got, np.float32(want), rtol=rtol, atol=0)


# Backoff

def test_backoff_hand_checked_window_3():
  scaler = AutomaticLossScaler('Backoff', {'step_window': 3, 'scale_max': 8.0, 'scale_min': 2.0})
  assert float(scaler.loss_scale) == 8.0
  finite, overflow = (False, 1.0), (True, math.inf)
  inputs = [finite, finite, finite, overflow, finite, finite, finite, overflow, overflow, overflow,
            finite, finite, finite, finite, finite, finite]
  # Growth when (i − last_overflow) % 3 == 0: i = 2 (capped at 8), 6; then overflows at 7, 8, 9
  # (floored at 2) and growth at i = 12 and 15.
  assert run(scaler, inputs) == [8, 8, 8, 4, 4, 4, 8, 4, 2, 2, 2, 2, 4, 4, 4, 8]


def test_backoff_defaults_start_at_scale_max():
  scaler = AutomaticLossScaler()
  assert scaler.algorithm == 'backoff'
  assert isinstance(scaler.scaler, BackoffScaler)
  assert float(scaler.loss_scale) == 2.0 ** 14
  # Growth is clipped at scale_max until the first overflow, so the starting counters are only visible
  # in the state.
  assert (int(scaler.scaler.iteration), int(scaler.scaler.last_overflow)) == (0, -1)
  assert float(scaler.update_op(True, 0.5)) == 2.0 ** 13
  assert (int(scaler.scaler.iteration), int(scaler.scaler.last_overflow)) == (1, 0)
  # A non-finite amax is an overflow even when has_nan is False.
  assert float(scaler.update_op(False, math.inf)) == 2.0 ** 12


@pytest.mark.parametrize('params', [
    {},
    {'step_window': 5},
    {'step_window': 4, 'step_factor': 3.0, 'scale_min': 0.5, 'scale_max': 1000.0},
    {'step_window': 1, 'step_factor': 1.5, 'scale_max': 2.0 ** 20},
])
def test_backoff_matches_simulation(params):
  inputs = random_inputs(seed=len(params), steps=60, overflow_rate=0.2)
  assert_scales(run(AutomaticLossScaler('backoff', params), inputs), simulate_backoff(inputs, **params))


# LogMax

def test_logmax_hand_checked():
  params = {'scale_max': 2.0 ** 30}
  scaler = AutomaticLossScaler('LogMax', params)
  assert float(scaler.loss_scale) == 1.0
  # One step with amax = 2^-4: μ = -4, σ = 0, scale = 2^(16 + 4).
  assert_scales([float(scaler.update_op(False, 2.0 ** -4))], [2.0 ** 20])
  # Then amax = 2^-2: μ = (0.99·0.01·(-4) + 0.01·(-2))/(1 − 0.99²); the β2 weights of the two
  # observations are 0.999/1.999 and 1/1.999.
  mu = (0.99 * 0.01 * -4 + 0.01 * -2) / (1 - 0.99 ** 2)
  w1, w2 = 0.999 / 1.999, 1 / 1.999
  sigma = math.sqrt(w1 * 16 + w2 * 4 - (w1 * -4 + w2 * -2) ** 2)
  assert_scales([float(scaler.update_op(False, 0.25))], [2.0 ** (16 - (mu + 3.09 * sigma))])
  # Overflow on the first step: x = log_max, so the scale is 2^0 whatever log_max is.
  for log_max in (16.0, 10.0):
    scaler = AutomaticLossScaler('logmax', {'log_max': log_max, 'scale_min': 2.0 ** -40})
    assert float(scaler.update_op(True, 1.0)) == 1.0
    # A finite amax of 1 afterwards: μ = log_max·0.99/1.99, and the β2 statistics of {log_max, 0}.
    mu = log_max * 0.99 * 0.01 / (1 - 0.99 ** 2)
    sigma = math.sqrt(w1 * log_max ** 2 - (w1 * log_max) ** 2)
    assert_scales([float(scaler.update_op(False, 1.0))], [2.0 ** (log_max - (mu + 3.09 * sigma))])


@pytest.mark.parametrize('params', [
    {},
    {'scale_max': 2.0 ** 40},
    {'log_max': 10.0, 'scale_max': 2.0 ** 24, 'beta1': 0.9, 'beta2': 0.99},
    {'log_max': 20.0, 'overflow_std_dev': 1.0, 'scale_min': 4.0, 'scale_max': 2.0 ** 30},
])
def test_logmax_matches_simulation(params):
  inputs = random_inputs(seed=7 + len(params), steps=80, overflow_rate=0.05)
  assert_scales(run(AutomaticLossScaler('LOGMAX', params), inputs), simulate_logmax(inputs, **params))


def test_logmax_constant_amax_keeps_variance_at_zero():
  # Identical observations: the variance is a difference of two equal terms, which must not turn into
  # noise; the scale is then exactly 2^(log_max − x).
  inputs = [(False, 2.0 ** -3)] * 300
  scales = run(AutomaticLossScaler('logmax', {'scale_max': 2.0 ** 30}), inputs)
  assert_scales(scales, [2.0 ** 19] * 300, rtol=1e-6)


def test_logmax_keeps_state_in_float64():
  scaler = LogMaxScaler()
  assert {v.dtype for v in (scaler.x_hat, scaler.s_hat, scaler.q, scaler.t)} == {tf.float64}
  assert scaler.loss_scale.dtype == tf.float32


def test_logmax_all_zero_gradients_leave_state_unchanged():
  scaler = LogMaxScaler(scale_max=2.0 ** 30)
  scaler.update_op(False, 2.0 ** -4)
  before = [v.numpy() for v in scaler.variables]
  assert float(scaler.update_op(False, 0.0)) == 2.0 ** 20
  assert [v.numpy() for v in scaler.variables] == before


# Dynamic and static

def test_dynamic_hand_checked():
  scaler = make_loss_scaler('dynamic', {'initial_scale': 4.0, 'growth_steps': 2})
  assert isinstance(scaler, DynamicLossScaler)
  finite, overflow = (False, 1.0), (True, 1.0)
  inputs = [finite, finite, finite, overflow, finite, finite, overflow, overflow, overflow, overflow]
  assert run(scaler, inputs) == [4, 8, 8, 4, 4, 8, 4, 2, 1, 1]


def test_dynamic_defaults_match_keras():
  scaler = DynamicLossScaler()
  assert float(scaler.loss_scale) == 2.0 ** 15
  assert (scaler.growth_steps, scaler.multiplier, scaler.min_scale) == (2000, 2.0, 1.0)


@pytest.mark.parametrize('params', [
    {'growth_steps': 3},
    {'growth_steps': 5, 'multiplier': 3.0, 'min_scale': 2.0, 'initial_scale': 1000.0},
    {'growth_steps': 1, 'initial_scale': 1.0},
])
def test_dynamic_matches_simulation(params):
  inputs = random_inputs(seed=3 * len(params), steps=60, overflow_rate=0.25)
  assert_scales(run(make_loss_scaler('Dynamic', params), inputs), simulate_dynamic(inputs, **params))


def test_dynamic_does_not_grow_past_float32():
  scaler = DynamicLossScaler(initial_scale=2.0 ** 126, growth_steps=1)
  assert run(scaler, [(False, 1.0)] * 3) == [2.0 ** 127] * 3


def test_static_never_changes():
  scaler = make_loss_scaler(128)
  assert isinstance(scaler, StaticLossScaler)
  assert run(scaler, [(True, math.inf), (False, 1.0), (False, 1e-8)]) == [128.0] * 3
  assert scaler.loss_scale.dtype == tf.float32
  assert float(make_loss_scaler(0.5).loss_scale) == 0.5


# Construction

def test_make_loss_scaler_dispatch():
  backoff = make_loss_scaler('BACKOFF', {'step_window': 7})
  assert isinstance(backoff, AutomaticLossScaler) and backoff.algorithm == 'backoff'
  assert backoff.scaler.step_window == 7
  logmax = make_loss_scaler('logMax')
  assert isinstance(logmax.scaler, LogMaxScaler)
  assert make_loss_scaler(backoff) is backoff
  assert AutomaticLossScaler.SUPPORTED_ALGOS == ['backoff', 'logmax']


@pytest.mark.parametrize('value', [0, -1.0, math.nan, math.inf, True, None, 'static', 'back_off', [2.0]])
def test_make_loss_scaler_rejects(value):
  with pytest.raises(ValueError, match=r"^loss_scaling: .*" + ALLOWED.replace('(', r'\(')):
    make_loss_scaler(value)


def test_make_loss_scaler_rejects_params_it_cannot_use():
  with pytest.raises(ValueError, match='loss_scaling_params'):
    make_loss_scaler(8.0, {'scale_max': 16})
  with pytest.raises(ValueError, match=r'loss_scaling_params\.growth_step: .*did you mean .*growth_steps'):
    make_loss_scaler('dynamic', {'growth_step': 10})


def test_unknown_algorithm_lists_allowed():
  with pytest.raises(ValueError, match=r'^algorithm: .*adam.*backoff, logmax'):
    AutomaticLossScaler('adam')


def test_unknown_param_names_key_and_allowed_keys():
  with pytest.raises(ValueError, match=r'params\.log_max: .*allowed keys: scale_max, scale_min, step_factor, '
                                       r'step_window$'):
    AutomaticLossScaler('Backoff', {'log_max': 10.0})
  with pytest.raises(ValueError, match=r'params\.step_window: .*overflow_std_dev'):
    AutomaticLossScaler('LogMax', {'step_window': 10})


@pytest.mark.parametrize('build, match', [
    (lambda: BackoffScaler(scale_min=0.0), 'scale_min'),
    (lambda: BackoffScaler(scale_min=4.0, scale_max=2.0), 'scale_max'),
    (lambda: BackoffScaler(step_factor=1.0), 'step_factor'),
    (lambda: BackoffScaler(step_window=0), 'step_window'),
    (lambda: BackoffScaler(step_window=2.5), 'step_window'),
    (lambda: LogMaxScaler(beta1=1.0), 'beta1'),
    (lambda: LogMaxScaler(beta2=-0.1), 'beta2'),
    (lambda: LogMaxScaler(overflow_std_dev=-1.0), 'overflow_std_dev'),
    (lambda: LogMaxScaler(log_max=math.inf), 'log_max'),
    (lambda: LogMaxScaler(scale_max='big'), 'scale_max'),
    (lambda: DynamicLossScaler(growth_steps=0), 'growth_steps'),
    (lambda: DynamicLossScaler(multiplier=1.0), 'multiplier'),
    (lambda: DynamicLossScaler(min_scale=0.0), 'min_scale'),
    (lambda: DynamicLossScaler(initial_scale=0.5, min_scale=1.0), 'initial_scale'),
    (lambda: StaticLossScaler(0.0), 'scale'),
    (lambda: AutomaticLossScaler('backoff', [('step_window', 3)]), 'params'),
])
def test_bad_values_raise(build, match):
  with pytest.raises(ValueError, match=f'^{match}: '):
    build()


@pytest.mark.parametrize('loss_scaling, params', [
    ('Backoff', {'scale_min': 4.0, 'scale_max': 2.0}),
    ('Backoff', {'step_window': 2.5}),
    ('LogMax', {'beta2': 1.0}),
    ('LogMax', {'step_factor': 2.0}),
    ('dynamic', {'multiplier': 0.5}),
    ('dynamic', {'growth_step': 3}),
    (2.0, {'step_window': 3}),
])
def test_the_config_check_is_the_scalers_own(loss_scaling, params):
  # validation.check_loss_scaling (no TensorFlow, run by the config layer)
  # refuses what building the scaler refuses, with the same words.
  with pytest.raises(ValueError) as built:
    make_loss_scaler(loss_scaling, params)
  with pytest.raises(ValueError) as checked:
    validation.check_loss_scaling(loss_scaling, params)
  assert str(checked.value) == str(built.value)


# Graph mode, tracing and checkpoints

SCALER_BUILDERS = {
    'backoff': lambda: AutomaticLossScaler('Backoff', {'step_window': 3}),
    'logmax': lambda: AutomaticLossScaler('LogMax'),
    'dynamic': lambda: DynamicLossScaler(initial_scale=8.0, growth_steps=2),
    'static': lambda: StaticLossScaler(4.0),
}


@pytest.mark.parametrize('name', sorted(SCALER_BUILDERS))
def test_update_in_tf_function_traced_once(name):
  inputs = random_inputs(seed=11, steps=20, overflow_rate=0.3)
  eager = run(SCALER_BUILDERS[name](), inputs)
  scaler = SCALER_BUILDERS[name]()
  update = tf.function(scaler.update_op)
  assert run(scaler, inputs, update) == eager
  assert update.experimental_get_tracing_count() == 1


def test_scaler_built_while_tracing():
  holder = []

  @tf.function
  def step(has_nan, amax):
    if not holder:
      holder.append(AutomaticLossScaler('LogMax'))
    return holder[0].update_op(has_nan, amax)

  inputs = random_inputs(seed=5, steps=6)
  eager = run(AutomaticLossScaler('LogMax'), inputs)
  got = [float(step(tf.constant(h), tf.constant(a, tf.float32))) for h, a in inputs[:1]]
  # tf.function traces again after a first call that created variables; later calls reuse that trace.
  traces = step.experimental_get_tracing_count()
  got += [float(step(tf.constant(h), tf.constant(a, tf.float32))) for h, a in inputs[1:]]
  assert got == eager
  assert len(holder) == 1
  assert step.experimental_get_tracing_count() == traces


@pytest.mark.parametrize('name', ['backoff', 'logmax', 'dynamic'])
def test_checkpoint_round_trip(name, tmp_path):
  inputs = random_inputs(seed=13, steps=12, overflow_rate=0.3)
  first, rest = inputs[:7], inputs[7:]
  original = SCALER_BUILDERS[name]()
  run(original, first)
  assert original.variables and not original.trainable_variables
  path = tf.train.Checkpoint(scaler=original).save(str(tmp_path / 'ckpt'))

  restored = SCALER_BUILDERS[name]()
  tf.train.Checkpoint(scaler=restored).restore(path).assert_consumed()
  assert [v.numpy() for v in restored.variables] == [v.numpy() for v in original.variables]
  assert run(restored, rest) == run(original, rest)


# gradient_stats

def test_gradient_stats_finite():
  grads = [tf.constant([[1.0, -3.5]]), None, tf.constant([0.25], tf.float16),
           tf.IndexedSlices(tf.constant([[-7.0, 2.0]]), tf.constant([4]), tf.constant([10, 2])),
           tf.zeros([0, 3])]
  has_nan, amax = gradient_stats(grads)
  assert has_nan.dtype == tf.bool and amax.dtype == tf.float32
  assert not bool(has_nan) and float(amax) == 7.0


@pytest.mark.parametrize('bad', [math.nan, math.inf, -math.inf])
def test_gradient_stats_non_finite(bad):
  grads = [tf.constant([1.0, 2.0]), tf.IndexedSlices(tf.constant([[bad]]), tf.constant([0]))]
  has_nan, amax = gradient_stats(grads)
  assert bool(has_nan) and math.isinf(float(amax)) and float(amax) > 0
  # float16 overflow is caught after the cast as well.
  has_nan, _ = gradient_stats([tf.constant([bad, 1.0], tf.float16)])
  assert bool(has_nan)


def test_gradient_stats_empty_and_in_tf_function():
  has_nan, amax = gradient_stats([None])
  assert not bool(has_nan) and float(amax) == 0.0
  stats = tf.function(lambda a, b: gradient_stats([a, None, b]))
  has_nan, amax = stats(tf.constant([1.0, -9.0]), tf.constant([[2.0]]))
  assert not bool(has_nan) and float(amax) == 9.0
  has_nan, amax = stats(tf.constant([1.0, math.nan]), tf.constant([[2.0]]))
  assert bool(has_nan) and float(amax) == math.inf
  with pytest.raises(ValueError, match='^grads: '):
    gradient_stats(tf.constant([1.0]))
