"""TensorFlow 1's schedules a config names (optimizers/compat/tf1_lr_policies.py), against their TF 1 formulas.

cosine_decay: lr·((1 − alpha)·½(1 + cos(π·min(s, D)/D)) + alpha);
piecewise_constant: values[k] while b_{k-1} < s ≤ b_k. Both written here from
TensorFlow 1's documentation, in float64, then rounded to float32.
"""

import math

import numpy as np
import pytest

from optimizers.compat import tf1_lr_policies


def tf1_cosine(s, lr, decay_steps, alpha):
  return lr * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * min(s, decay_steps) / decay_steps))
               + alpha)


@pytest.mark.parametrize('step', [0, 1, 25, 50, 99, 100, 150])
@pytest.mark.parametrize('alpha', [0.0, 0.1])
def test_cosine_decay_is_tf1s(step, alpha):
  value = tf1_lr_policies.cosine_decay(step, learning_rate=0.002, decay_steps=100, alpha=alpha)
  assert value.dtype.name == 'float32'
  assert float(value) == np.float32(tf1_cosine(step, 0.002, 100, alpha))


def test_cosine_decay_ends_at_alpha_times_the_rate_and_stays():
  for step in (100, 1000):
    assert float(tf1_lr_policies.cosine_decay(step, 2.0, 100, alpha=0.25)) == 0.5


@pytest.mark.parametrize('step, expected', [
    (0, 1.0), (10, 1.0),   # up to the first boundary, the boundary itself included
    (11, 0.5), (20, 0.5),
    (21, 0.125), (10 ** 6, 0.125),
])
def test_piecewise_constant_is_tf1s(step, expected):
  value = tf1_lr_policies.piecewise_constant(step, boundaries=[10, 20], values=[1.0, 0.5, 0.125])
  assert value.dtype.name == 'float32' and float(value) == expected


@pytest.mark.parametrize('boundaries, values, message', [
    ([10, 20], [1.0, 0.5], 'values: expected one value more than the boundaries (3)'),
    ([], [1.0], 'boundaries: expected a non-empty list of steps'),
    ([20, 10], [1.0, 0.5, 0.1], 'boundaries: must be strictly increasing'),
])
def test_piecewise_constant_refuses_lists_that_do_not_fit(boundaries, values, message):
  with pytest.raises(ValueError, match=message.replace('(', r'\(').replace(')', r'\)')):
    tf1_lr_policies.piecewise_constant(0, boundaries, values)
