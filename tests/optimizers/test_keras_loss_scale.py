"""optimizers.LossScaleOptimizer in model.fit: a float16 model whose gradients underflow unscaled."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import optimizers

N, BATCH, EPOCHS = 64, 16, 2
LR, EETA = 1.0, 0.1
# The second head's loss weight: its gradient (about 1e-8) flushes to zero in
# float16 unless the loss is scaled; the first head's never does.
SMALL = 1e-8
WEIGHTS = np.array([1.0, SMALL])


def data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(N, 3)).astype(np.float32)
  y = (x @ rng.normal(size=(3, 2))).astype(np.float32)
  return x, y


def weighted_mse(y, p):
  return tf.reduce_mean(tf.square(y - p) * tf.constant(WEIGHTS, tf.float32), axis=-1)


def two_heads():
  """Two float16 linear heads with their own kernels, so LARS adapts each on its own."""
  keras.utils.set_random_seed(0)
  inputs = keras.Input((3,))
  heads = [keras.layers.Dense(1, use_bias=False, dtype='mixed_float16', name=f'head{i}')(inputs)
           for i in range(2)]
  return keras.Model(inputs, keras.layers.Concatenate(dtype='mixed_float16')(heads))


def numpy_fit(kernels, x, y, underflow_steps=(), skipped_steps=()):
  """LARS (momentum 0, no weight decay) on the two heads in float64.

  The steps in ``underflow_steps`` see a zero gradient for the second head, as
  float16 computes it at a loss scale of 1; those in ``skipped_steps`` change
  nothing (an overflow).
  """
  kernels = [k.astype(np.float64) for k in kernels]
  step = 0
  for _ in range(EPOCHS):
    for start in range(0, N, BATCH):
      xb, yb = x[start:start + BATCH].astype(np.float64), y[start:start + BATCH]
      for h in range(0 if step in skipped_steps else 2):
        d_pred = 2.0 * WEIGHTS[h] * (xb @ kernels[h] - yb[:, h:h + 1]) / (2 * BATCH)
        g = xb.T @ d_pred
        if h == 1 and step in underflow_steps:
          g = np.zeros_like(g)
        gn, wn = np.linalg.norm(g), np.linalg.norm(kernels[h])
        trust = EETA * wn / gn if gn > 0 and wn > 0 else 1.0
        kernels[h] = kernels[h] - LR * trust * g
      step += 1
  return kernels


def fit(optimizer):
  x, y = data()
  model = two_heads()
  initial = [v.numpy() for v in model.trainable_variables]
  model.compile(optimizer=optimizer, loss=weighted_mse, auto_scale_loss=False)
  model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
  return initial, [v.numpy() for v in model.trainable_variables], x, y


def lars():
  return optimizers.LARSOptimizer(LR, momentum=0.0, weight_decay=0.0, eeta=EETA)


def test_without_loss_scaling_the_small_head_never_learns():
  initial, final, x, y = fit(lars())
  np.testing.assert_array_equal(final[1], initial[1])  # every gradient flushed to zero
  assert not np.allclose(final[0], initial[0])
  np.testing.assert_allclose(final[0], numpy_fit(initial, x, y)[0], rtol=2e-2)


@pytest.mark.parametrize('loss_scaling, underflow, skipped, final_scale', [
    ('Backoff', (), (), 2.0 ** 14),
    # Dynamic scaling starts at 2**15, where the first head's gradient of the
    # fourth batch overflows float16: that step is skipped and the scale halved.
    ('dynamic', (), (3,), 2.0 ** 14),
    (2.0 ** 14, (), (), 2.0 ** 14),
    # LogMax starts at scale 1: its first step still underflows, then amax sets the scale.
    ('LogMax', (0,), (), None),
])
def test_each_scaler_lets_the_small_head_learn(loss_scaling, underflow, skipped, final_scale):
  optimizer = optimizers.LossScaleOptimizer(lars(), loss_scaling)
  initial, final, x, y = fit(optimizer)
  want = numpy_fit(initial, x, y, underflow_steps=underflow, skipped_steps=skipped)
  for got, expected in zip(final, want):
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=1e-4)
  assert not np.allclose(final[1], initial[1])
  assert int(optimizer.iterations.numpy()) == EPOCHS * N // BATCH - len(skipped)
  scale = float(optimizer.loss_scale.numpy())
  if final_scale is not None:
    assert scale == final_scale
  else:
    assert 2.0 ** 13 < scale < 2.0 ** 14


@pytest.mark.parametrize('loss_scaling, scale_after', [('Backoff', 2.0 ** 13),
                                                       ('dynamic', 2.0 ** 14), (8.0, 8.0)])
def test_a_non_finite_step_is_skipped_as_keras_skips_it(loss_scaling, scale_after):
  var = keras.Variable(np.array([1.0, 2.0], np.float32), name='w')
  optimizer = optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), loss_scaling)
  optimizer.apply([tf.constant([math.inf, 1.0])], [var])
  np.testing.assert_array_equal(var.numpy(), [1.0, 2.0])
  assert int(optimizer.iterations.numpy()) == 0
  assert float(optimizer.loss_scale.numpy()) == scale_after
  # A finite step divides by the scale in use and applies.
  scale = float(optimizer.loss_scale.numpy())
  optimizer.apply([tf.constant([scale, 2 * scale])], [var])
  np.testing.assert_allclose(var.numpy(), [0.9, 1.8], rtol=1e-6)
  assert int(optimizer.iterations.numpy()) == 1


def test_compile_under_mixed_float16_does_not_wrap_it_again():
  previous = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_dtype_policy('mixed_float16')
  try:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = optimizers.LossScaleOptimizer(lars(), 'Backoff')
    model.compile(optimizer=optimizer, loss='mse')
    assert model.optimizer is optimizer
  finally:
    keras.mixed_precision.set_dtype_policy(previous)


def test_bad_loss_scaling_is_a_clear_error():
  with pytest.raises(ValueError, match="loss_scaling: unknown value 'Bakoff'"):
    optimizers.LossScaleOptimizer(lars(), 'Bakoff')
  with pytest.raises(ValueError, match='step_windw'):
    optimizers.LossScaleOptimizer(lars(), 'Backoff', {'step_windw': 10})
