"""Learning-rate policies against tables computed from the docs/math.md formulas."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from core.registry import Registry
from optimizers import lr_policies
from optimizers.lr_policies import (LR_POLICIES, cosine_decay, exp_decay, fixed_lr, inv_poly_decay,
                                    piecewise_constant, poly_decay, transformer_policy)


# Reference formulas, written from the docs/math.md table with plain Python floats.

def ref_piecewise(s, lr, boundaries, rates, steps_per_epoch=None):
  if steps_per_epoch is not None:
    boundaries = [b * steps_per_epoch for b in boundaries]
  values = [lr] + [lr * d for d in rates]
  for k, b in enumerate(boundaries):
    if s <= b:
      return values[k]
  return values[-1]


def ref_exp(s, lr, D, rate, staircase, b=0, min_lr=0.0):
  if s < b:
    return lr
  e = (s - b) / D
  if staircase:
    e = math.floor(e)
  return max(min_lr, lr * rate ** e)


def ref_start(s, lr, W, b):
  """The warm-up / constant part shared by poly, cosine and inv_poly; None once decaying."""
  if s < W:
    return lr * s / W
  if s < max(W, b):
    return lr
  return None


def ref_warmed(s, lr, W):
  """OpenSeq2Seq's warm-up: the rate the decay starts from, lr·min(1, s/W)."""
  return lr * s / W if W > 0 and s < W else lr


def ref_poly(s, lr, D, power=1.0, b=0, min_lr=0.0, W=0):
  # OpenSeq2Seq's poly_decay: tf.train.polynomial_decay of the warmed-up rate at s − b.
  r = ref_warmed(s, lr, W)
  if s < b:
    return r
  return (r - min_lr) * (1 - min(s - b, D) / D) ** power + min_lr


def ref_cosine(s, lr, D, b=0, min_lr=0.0, W=0):
  # OpenSeq2Seq's cosine_decay: tf.train.cosine_decay(alpha=min_lr) of the warmed-up rate at s − b.
  r = ref_warmed(s, lr, W)
  if s < b:
    return r
  cosine = 0.5 * (1 + math.cos(math.pi * min(s - b, D) / D))
  return r * ((1 - min_lr) * cosine + min_lr)


def ref_inv_poly(s, lr, D, min_lr, power=1.0, b=0, W=0):
  early = ref_start(s, lr, W, b)
  if early is not None:
    return early
  t = s - max(W, b)
  k = ((lr / min_lr) ** (1 / power) - 1) / D
  return max(min_lr, lr / (1 + k * t) ** power)


def ref_transformer(s, lr, d_model, W, max_lr=None, coefficient=1.0):
  value = lr * coefficient * d_model ** -0.5 * min((s + 1) * W ** -1.5, (s + 1) ** -0.5)
  return min(value, max_lr) if max_lr is not None else value


def assert_table(policy, kwargs, table):
  """Checks ``policy(step, **kwargs)`` against (step, expected) pairs, as float32."""
  got = [float(policy(step, **kwargs)) for step, _ in table]
  want = [float(np.float32(value)) for _, value in table]
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12, err_msg=f'{policy.__name__} {kwargs}')


def table(ref, steps, **kwargs):
  return [(s, ref(s, **kwargs)) for s in steps]


STEPS = [0, 1, 5, 9, 10, 11, 19, 20, 21, 35, 50, 99, 100, 119, 120, 121, 150, 1000, 123456]


def test_fixed_lr():
  assert_table(fixed_lr, {'learning_rate': 0.3}, [(0, 0.3), (7, 0.3), (10 ** 9, 0.3)])


@pytest.mark.parametrize('kwargs', [
    {'learning_rate': 0.1, 'boundaries': [10, 20], 'decay_rates': [0.5, 0.1]},
    {'learning_rate': 2.0, 'boundaries': [0, 100], 'decay_rates': [3.0, 0.001]},
    {'learning_rate': 0.1, 'boundaries': [2, 4], 'decay_rates': [0.5, 0.1], 'steps_per_epoch': 5},
    {'learning_rate': 0.1, 'boundaries': [1.5, 3.2], 'decay_rates': [0.5, 0.1], 'steps_per_epoch': 10},
])
def test_piecewise_constant_matches_reference(kwargs):
  ref_kwargs = {'lr': kwargs['learning_rate'], 'boundaries': kwargs['boundaries'],
                'rates': kwargs['decay_rates'], 'steps_per_epoch': kwargs.get('steps_per_epoch')}
  steps = STEPS + [14, 15, 16, 31, 32, 33]
  assert_table(piecewise_constant, kwargs, table(ref_piecewise, steps, **ref_kwargs))


def test_piecewise_constant_boundary_step_keeps_previous_value():
  # TF convention: the value changes on the step after the boundary.
  kwargs = {'learning_rate': 1.0, 'boundaries': [3, 6], 'decay_rates': [0.5, 0.25]}
  assert_table(piecewise_constant, kwargs,
               [(0, 1.0), (3, 1.0), (4, 0.5), (6, 0.5), (7, 0.25), (10 ** 6, 0.25)])
  # Boundaries in epochs: 2 and 4 epochs of 3 steps are steps 6 and 12.
  assert_table(piecewise_constant, dict(kwargs, boundaries=[2, 4], steps_per_epoch=3),
               [(6, 1.0), (7, 0.5), (12, 0.5), (13, 0.25)])


@pytest.mark.parametrize('kwargs', [
    {'learning_rate': 0.1, 'decay_steps': 10, 'decay_rate': 0.5, 'use_staircase_decay': False},
    {'learning_rate': 0.1, 'decay_steps': 10, 'decay_rate': 0.5, 'use_staircase_decay': True},
    {'learning_rate': 0.1, 'decay_steps': 7, 'decay_rate': 0.9, 'use_staircase_decay': True,
     'begin_decay_at': 20},
    {'learning_rate': 0.1, 'decay_steps': 7, 'decay_rate': 0.9, 'use_staircase_decay': False,
     'begin_decay_at': 20, 'min_lr': 0.05},
    {'learning_rate': 1.0, 'decay_steps': 3, 'decay_rate': 0.1, 'use_staircase_decay': True,
     'min_lr': 1e-4},
])
def test_exp_decay_matches_reference(kwargs):
  ref_kwargs = {'lr': kwargs['learning_rate'], 'D': kwargs['decay_steps'], 'rate': kwargs['decay_rate'],
                'staircase': kwargs['use_staircase_decay'], 'b': kwargs.get('begin_decay_at', 0),
                'min_lr': kwargs.get('min_lr', 0.0)}
  assert_table(exp_decay, kwargs, table(ref_exp, STEPS, **ref_kwargs))


def test_exp_decay_hand_checked():
  kwargs = {'learning_rate': 1.0, 'decay_steps': 10, 'decay_rate': 0.5, 'begin_decay_at': 5}
  assert_table(exp_decay, dict(kwargs, use_staircase_decay=True),
               [(0, 1.0), (5, 1.0), (14, 1.0), (15, 0.5), (24, 0.5), (25, 0.25)])
  assert_table(exp_decay, dict(kwargs, use_staircase_decay=False),
               [(4, 1.0), (10, 2 ** -0.5), (15, 0.5), (20, 2 ** -1.5)])
  assert_table(exp_decay, dict(kwargs, use_staircase_decay=True, min_lr=0.3), [(25, 0.3), (10 ** 6, 0.3)])


@pytest.mark.parametrize('kwargs', [
    {'learning_rate': 0.1, 'decay_steps': 100},
    {'learning_rate': 0.1, 'decay_steps': 100, 'power': 2.0, 'min_lr': 1e-4},
    {'learning_rate': 2.0, 'decay_steps': 100, 'power': 2.0, 'warmup_steps': 10},
    # W < b: warm-up, then constant lr until b.
    {'learning_rate': 2.0, 'decay_steps': 80, 'power': 0.5, 'warmup_steps': 10, 'begin_decay_at': 20},
    # W > b: the decay counts from b while the warm-up still multiplies it.
    {'learning_rate': 2.0, 'decay_steps': 80, 'power': 1.5, 'warmup_steps': 20, 'begin_decay_at': 5,
     'min_lr': 0.01},
])
def test_poly_decay_matches_reference(kwargs):
  ref_kwargs = {'lr': kwargs['learning_rate'], 'D': kwargs['decay_steps'], 'power': kwargs.get('power', 1.0),
                'b': kwargs.get('begin_decay_at', 0), 'min_lr': kwargs.get('min_lr', 0.0),
                'W': kwargs.get('warmup_steps', 0)}
  assert_table(poly_decay, kwargs, table(ref_poly, STEPS, **ref_kwargs))


def test_poly_decay_hand_checked():
  kwargs = {'learning_rate': 1.0, 'decay_steps': 100, 'power': 2.0, 'warmup_steps': 10,
            'begin_decay_at': 20, 'min_lr': 0.1}
  assert_table(poly_decay, kwargs,
               [(0, 0.0), (5, 0.5), (10, 1.0), (19, 1.0), (20, 1.0), (30, 0.9 * 0.81 + 0.1),
                (70, 0.9 * 0.25 + 0.1), (120, 0.1), (500, 0.1)])
  # W > b (OpenSeq2Seq's rule): the decay counts from 5 and multiplies the warm-up.
  # At 10: r = 0.5, (0.5 - 0.1)·(1 - 5/100)^2 + 0.1; at 20: r = 1, 0.9·0.85^2 + 0.1.
  assert_table(poly_decay, dict(kwargs, warmup_steps=20, begin_decay_at=5),
               [(0, 0.0), (4, 0.2), (5, 0.25), (10, 0.4 * 0.9025 + 0.1), (20, 0.9 * 0.7225 + 0.1),
                (105, 0.1), (106, 0.1)])
  # No begin_decay_at: the decay runs from step 0, so the rate ends at min_lr at step D.
  assert_table(poly_decay, {'learning_rate': 1.0, 'decay_steps': 10, 'warmup_steps': 4},
               [(0, 0.0), (2, 0.5 * 0.8), (4, 0.6), (5, 0.5), (10, 0.0), (11, 0.0)])


@pytest.mark.parametrize('kwargs', [
    {'learning_rate': 0.1, 'decay_steps': 100},
    {'learning_rate': 0.1, 'decay_steps': 100, 'min_lr': 0.02},
    {'learning_rate': 1.0, 'decay_steps': 90, 'warmup_steps': 10, 'begin_decay_at': 30, 'min_lr': 0.001},
    {'learning_rate': 1.0, 'decay_steps': 90, 'warmup_steps': 30, 'begin_decay_at': 10},
])
def test_cosine_decay_matches_reference(kwargs):
  ref_kwargs = {'lr': kwargs['learning_rate'], 'D': kwargs['decay_steps'],
                'b': kwargs.get('begin_decay_at', 0), 'min_lr': kwargs.get('min_lr', 0.0),
                'W': kwargs.get('warmup_steps', 0)}
  assert_table(cosine_decay, kwargs, table(ref_cosine, STEPS, **ref_kwargs))


def test_cosine_decay_hand_checked():
  kwargs = {'learning_rate': 2.0, 'decay_steps': 100, 'warmup_steps': 10, 'begin_decay_at': 10,
            'min_lr': 0.2}
  # min_lr is a fraction of the rate (tf.train.cosine_decay's alpha): halfway through the
  # decay the rate is 2·(0.8·0.5 + 0.2) = 1.2, and it ends at 2·0.2 = 0.4, not at 0.2.
  assert_table(cosine_decay, kwargs, [(4, 0.8), (10, 2.0), (60, 1.2), (110, 0.4), (10 ** 5, 0.4)])
  # The warm-up multiplies a decay that counts from step 0: at 5, 1.0·(0.8·½(1 + cos(π/20)) + 0.2).
  assert_table(cosine_decay, dict(kwargs, begin_decay_at=0),
               [(0, 0.0), (5, 1.0 * (0.8 * 0.5 * (1 + math.cos(math.pi / 20)) + 0.2)), (100, 0.4)])


def test_cosine_decay_takes_openseq2seqs_power_and_ignores_it():
  for power in (1.0, 2.0, 0.5):
    assert float(cosine_decay(30, 1.0, 100, power)) == float(cosine_decay(30, 1.0, 100))
  assert float(cosine_decay(30, 1.0, 100, power=3.0, begin_decay_at=10)) == float(
      cosine_decay(30, 1.0, 100, begin_decay_at=10))


@pytest.mark.parametrize('kwargs', [
    {'learning_rate': 0.1, 'decay_steps': 100, 'min_lr': 1e-3},
    {'learning_rate': 0.1, 'decay_steps': 100, 'min_lr': 1e-3, 'power': 2.0, 'begin_decay_at': 20},
    {'learning_rate': 1.0, 'decay_steps': 50, 'min_lr': 0.05, 'power': 0.5, 'warmup_steps': 10,
     'begin_decay_at': 20},
    {'learning_rate': 1.0, 'decay_steps': 50, 'min_lr': 0.05, 'warmup_steps': 20, 'begin_decay_at': 10},
    {'learning_rate': 0.5, 'decay_steps': 10, 'min_lr': 0.5},
])
def test_inv_poly_decay_matches_reference(kwargs):
  ref_kwargs = {'lr': kwargs['learning_rate'], 'D': kwargs['decay_steps'], 'min_lr': kwargs['min_lr'],
                'power': kwargs.get('power', 1.0), 'b': kwargs.get('begin_decay_at', 0),
                'W': kwargs.get('warmup_steps', 0)}
  assert_table(inv_poly_decay, kwargs, table(ref_inv_poly, STEPS, **ref_kwargs))


def test_inv_poly_decay_hand_checked():
  # k = (1/0.01 − 1)/99 = 1: the rate is 1/(1 + t) and reaches min_lr at t = D.
  kwargs = {'learning_rate': 1.0, 'decay_steps': 99, 'min_lr': 0.01, 'warmup_steps': 4}
  assert_table(inv_poly_decay, kwargs,
               [(2, 0.5), (4, 1.0), (5, 0.5), (13, 0.1), (103, 0.01), (10 ** 4, 0.01)])


@pytest.mark.parametrize('kwargs', [
    {'learning_rate': 2.0, 'd_model': 512, 'warmup_steps': 4000},
    {'learning_rate': 2.0, 'd_model': 512, 'warmup_steps': 40, 'max_lr': 0.01},
    {'learning_rate': 1.0, 'd_model': 64, 'warmup_steps': 10, 'coefficient': 0.5, 'max_lr': 1e-3},
])
def test_transformer_policy_matches_reference(kwargs):
  ref_kwargs = {'lr': kwargs['learning_rate'], 'd_model': kwargs['d_model'], 'W': kwargs['warmup_steps'],
                'max_lr': kwargs.get('max_lr'), 'coefficient': kwargs.get('coefficient', 1.0)}
  assert_table(transformer_policy, kwargs, table(ref_transformer, STEPS + [3999, 4000, 50000], **ref_kwargs))


def test_transformer_policy_hand_checked():
  # d_model = 4, W = 4: (s+1)/8 / 2 while warming up, 1/(2·sqrt(s+1)) after.
  kwargs = {'learning_rate': 1.0, 'd_model': 4, 'warmup_steps': 4}
  assert_table(transformer_policy, kwargs, [(0, 1 / 16), (3, 0.25), (15, 0.125), (99, 0.05)])
  assert_table(transformer_policy, dict(kwargs, max_lr=0.1), [(0, 1 / 16), (3, 0.1), (15, 0.1), (99, 0.05)])
  value = transformer_policy(3, dtype=tf.float64, **kwargs)
  assert value.dtype == tf.float64
  assert float(value) == 0.25


POLICY_CALLS = {
    'fixed_lr': lambda s: fixed_lr(s, 0.1),
    'piecewise_constant': lambda s: piecewise_constant(s, 0.1, [3, 7], [0.5, 0.1]),
    'exp_decay': lambda s: exp_decay(s, 0.1, 4, 0.5, True, begin_decay_at=2, min_lr=0.01),
    'poly_decay': lambda s: poly_decay(s, 0.1, 6, power=2.0, begin_decay_at=4, warmup_steps=2),
    'cosine_decay': lambda s: cosine_decay(s, 0.1, 6, warmup_steps=3, min_lr=0.01),
    'inv_poly_decay': lambda s: inv_poly_decay(s, 0.1, 6, 0.01, warmup_steps=3),
    'transformer_policy': lambda s: transformer_policy(s, 1.0, 16, 4, max_lr=0.1),
}


def test_registry_holds_all_policies():
  assert isinstance(LR_POLICIES, Registry)
  assert sorted(LR_POLICIES) == sorted(POLICY_CALLS)
  for name in POLICY_CALLS:
    assert LR_POLICIES[name] is getattr(lr_policies, name)
  with pytest.raises(ValueError, match='poly_decay'):
    LR_POLICIES['poly_decy']


@pytest.mark.parametrize('name', sorted(POLICY_CALLS))
def test_step_types_and_tf_function(name):
  call = POLICY_CALLS[name]
  steps = range(12)
  want = [float(call(s)) for s in steps]
  assert len(set(want)) > 1 or name == 'fixed_lr'
  for make in (lambda s: tf.constant(s, tf.int32), lambda s: tf.constant(s, tf.int64),
               lambda s: tf.Variable(s, dtype=tf.int64), lambda s: keras.Variable(s, dtype='int64'),
               np.int64):
    got = [call(make(s)) for s in steps]
    assert all(v.dtype == tf.float32 and v.shape == () for v in got)
    assert [float(v) for v in got] == want

  traced = tf.function(call)
  step = tf.Variable(0, dtype=tf.int64)
  got = []
  for s in steps:
    step.assign(s)
    got.append(float(traced(step)))
  assert got == want
  got = [float(traced(tf.constant(s, tf.int64))) for s in steps]
  assert got == want
  assert traced.experimental_get_tracing_count() == 2  # once for the variable, once for a tensor


def test_piecewise_boundaries_compare_exactly_on_large_steps():
  big = 10 ** 12 + 1
  policy = lambda s: piecewise_constant(s, 1.0, [big], [0.5])
  assert float(policy(big)) == 1.0
  assert float(policy(big + 1)) == 0.5
  assert float(policy(tf.constant(big + 1, tf.int64))) == 0.5


def test_warmup_is_one_shared_helper():
  # The same warm-up through poly, cosine and inv_poly: lr·s/W before W (the decay begins at W).
  for policy in (lambda s: poly_decay(s, 0.8, 10, warmup_steps=8, begin_decay_at=8),
                 lambda s: cosine_decay(s, 0.8, 10, warmup_steps=8, begin_decay_at=8),
                 lambda s: inv_poly_decay(s, 0.8, 10, 0.1, warmup_steps=8)):
    np.testing.assert_allclose([float(policy(s)) for s in range(9)], [0.1 * s for s in range(9)], rtol=1e-6)


@pytest.mark.parametrize('call, match', [
    (lambda: fixed_lr(0, -0.1), 'learning_rate'),
    (lambda: fixed_lr(-1, 0.1), 'global_step'),
    (lambda: fixed_lr(1.5, 0.1), 'global_step'),
    (lambda: fixed_lr(tf.constant(1.0), 0.1), 'global_step'),
    (lambda: fixed_lr(tf.constant([1, 2]), 0.1), 'global_step'),
    (lambda: fixed_lr(True, 0.1), 'global_step'),
    (lambda: fixed_lr(0, '0.1'), 'learning_rate'),
    (lambda: piecewise_constant(0, 0.1, [10, 20], [0.1]), 'decay_rates'),
    (lambda: piecewise_constant(0, 0.1, [], []), 'boundaries'),
    (lambda: piecewise_constant(0, 0.1, [20, 10], [0.1, 0.01]), 'boundaries'),
    (lambda: piecewise_constant(0, 0.1, [10], [-0.1]), r'decay_rates\[0\]'),
    (lambda: piecewise_constant(0, 0.1, [10], [0.1], steps_per_epoch=0), 'steps_per_epoch'),
    (lambda: exp_decay(0, 0.1, 0, 0.5, True), 'decay_steps'),
    (lambda: exp_decay(0, 0.1, 10, 0.0, True), 'decay_rate'),
    (lambda: exp_decay(0, 0.1, 10, 0.5, 'yes'), 'use_staircase_decay'),
    (lambda: exp_decay(0, 0.1, 10, 0.5, True, min_lr=-1.0), 'min_lr'),
    (lambda: exp_decay(0, 0.1, 10, 0.5, True, begin_decay_at=-1), 'begin_decay_at'),
    (lambda: poly_decay(0, 0.1, -5), 'decay_steps'),
    (lambda: poly_decay(0, 0.1, 10, power=0.0), 'power'),
    (lambda: poly_decay(0, 0.1, 10, warmup_steps=-1), 'warmup_steps'),
    (lambda: poly_decay(0, float('nan'), 10), 'learning_rate'),
    (lambda: cosine_decay(0, 0.1, 0), 'decay_steps'),
    (lambda: cosine_decay(0, 0.1, 10, warmup_steps=-2), 'warmup_steps'),
    (lambda: inv_poly_decay(0, 0.1, 10, min_lr=0.0), 'min_lr'),
    (lambda: inv_poly_decay(0, 0.1, 10, min_lr=-1e-3), 'min_lr'),
    (lambda: inv_poly_decay(0, 0.1, 10, min_lr=0.2), 'min_lr'),
    (lambda: inv_poly_decay(0, 0.1, 10, 1e-3, power=0.0), 'power'),
    (lambda: inv_poly_decay(0, 0.1, 10, 1e-3, power=-1.0), 'power'),
    (lambda: transformer_policy(0, 1.0, 0, 10), 'd_model'),
    (lambda: transformer_policy(0, 1.0, 512, -1), 'warmup_steps'),
    (lambda: transformer_policy(0, 1.0, 512, 10, max_lr=0.0), 'max_lr'),
    (lambda: transformer_policy(0, 1.0, 512, 10, dtype=tf.int32), 'dtype'),
])
def test_bad_arguments_raise(call, match):
  with pytest.raises(ValueError, match=match):
    call()
