"""Tests of studies/large_batch/critical_fit.py: the critical-batch fit and the updates it fits."""

import json
import os

import numpy as np
import pytest

from studies.large_batch import critical_fit
from studies.large_batch import study

BATCHES = (256, 512, 1024, 2048, 4096, 8192, 16384)


def model(s_min, b_crit, batches=BATCHES):
  """``{B: S_min·(1 + B_crit/B)}``."""
  return {b: s_min * (1.0 + b_crit / b) for b in batches}


def test_exact_points_give_back_s_min_and_b_crit():
  for s_min, b_crit in ((137.5, 3000.0), (92.0, 1410.0), (1.0, 1e5)):
    fitted = critical_fit.critical_fit(model(s_min, b_crit))
    assert fitted[0] == pytest.approx(s_min, abs=1e-9, rel=0)
    assert fitted[1] == pytest.approx(b_crit, abs=1e-9 * b_crit / 1000, rel=0)
  # Two batches determine the line: S(256) = 100·(1 + 1000/256), S(1024) = 100·(1 + 1000/1024).
  assert critical_fit.critical_fit({256: 490.625, 1024: 197.65625}) == pytest.approx((100, 1000),
                                                                                     abs=1e-9)


def test_noisy_points_are_least_squares_of_s_on_one_over_b_and_near_the_model():
  rng = np.random.default_rng(0)
  # 5 % multiplicative noise on each S(B) of S_min 137.5 and B_crit 3000.
  noisy = {b: s * float(np.exp(rng.normal(0.0, 0.05))) for b, s in model(137.5, 3000.0).items()}
  slope, intercept = np.polyfit([1.0 / b for b in noisy], list(noisy.values()), 1)
  s_min, b_crit = critical_fit.critical_fit(noisy)
  assert (s_min, b_crit) == pytest.approx((intercept, slope / intercept), rel=1e-12)
  # With this noise both are within 10 % here; over many draws the median error of
  # B_crit stays under 15 % (about 9 % in a simulation of 2,000 draws).
  assert s_min == pytest.approx(137.5, rel=0.10) and b_crit == pytest.approx(3000, rel=0.10)
  errors = []
  for seed in range(200):
    rng = np.random.default_rng(seed)
    draw = {b: s * float(np.exp(rng.normal(0.0, 0.05))) for b, s in model(137.5, 3000.0).items()}
    errors.append(abs(critical_fit.critical_fit(draw)[1] / 3000 - 1))
  assert np.median(errors) < 0.15


def test_no_fit_for_one_batch_or_updates_that_do_not_fall():
  assert critical_fit.critical_fit({}) is None
  assert critical_fit.critical_fit({256: 592}) is None
  assert critical_fit.critical_fit({256: 500, 1024: 600}) is None  # grows with the batch
  # Falls faster than 1/B: the line meets S = 0 before 1/B = 0, so S_min < 0.
  assert critical_fit.critical_fit({256: 1000, 1024: 100}) is None


def test_the_crossing_of_a_curve_by_hand():
  rising = [[100, 0.5, 1.0], [200, 0.8, 2.0], [300, 0.95, 3.0], [400, 0.97, 4.0]]
  # Between (200, 0.8) and (300, 0.95): 200 + 100·(0.9 − 0.8)/(0.95 − 0.8) = 266.67.
  assert critical_fit.crossing(rising, 0.9) == pytest.approx(200 + 100 / 1.5)
  assert critical_fit.crossing(rising, 0.9, interpolate=False) == 300
  # Exactly at an evaluation: its step either way.
  assert critical_fit.crossing(rising, 0.8) == pytest.approx(200)
  # The first evaluation already past it: nothing before it, so its own step.
  assert critical_fit.crossing(rising, 0.4) == 100
  assert critical_fit.crossing(rising, 0.99) is None
  assert critical_fit.crossing([], 0.9) is None
  # A WER falls: the first evaluation at or below 0.6, between (20, 0.7) and (30, 0.5): 25.
  falling = [[10, 0.9], [20, 0.7], [30, 0.5], [40, 0.65]]
  assert critical_fit.crossing(falling, 0.6, study.WER) == pytest.approx(25)
  assert critical_fit.crossing(falling, 0.6, study.WER, interpolate=False) == 30
  # A curve that dips past the target and back counts its first crossing.
  bumpy = [[1, 0.85], [2, 0.91], [3, 0.88], [4, 0.95]]
  assert critical_fit.crossing(bumpy, 0.9) == pytest.approx(1 + 0.05 / 0.06)


def write_point(directory, batch, lr, seed, curve, steps, sets=()):
  """One archived point, as scripts/sweep.py --archive keeps it; ``curve``: (step, top-1) pairs."""
  os.makedirs(directory, exist_ok=True)
  curve = [[step, value, 2.0 * step] for step, value in curve]
  name = (f'batch_size_per_gpu={batch}__iter_size=1__lr_policy_params.learning_rate={lr:g}'
          f'__seed={seed}')
  with open(os.path.join(directory, name + '.json'), 'w', encoding='utf-8') as f:
    json.dump({'point': {'batch_size_per_gpu': batch, 'iter_size': 1,
                         'lr_policy_params.learning_rate': lr},
               'derived': {}, 'seed': seed,
               'overrides': list(sets) + [f'batch_size_per_gpu={batch}', 'iter_size=1',
                                          f'lr_policy_params.learning_rate={lr:g}',
                                          f'random_seed={seed}'],
               'metrics': {'accuracy': curve[-1][1], 'steps': steps}, 'wall_s': 10.0,
               'curve': curve}, f)


@pytest.fixture(name='runs')
def fixture_runs(tmp_path):
  """A tuned arm in two sweeps (a second eeta), at three batches."""
  main, other = tmp_path / 'lars', tmp_path / 'lars_eeta0.004'
  # 256: lr 1 reaches 90 % at 150 (seed 0) and 250 (seed 1), mean 200; lr 2 at 300
  # with seed 0 and never with seed 1, so it does not count; the eeta sweep's lr 1
  # (same rate, another setting) at 180 with its one seed: S(256) = 180.
  write_point(main, 256, 1.0, 0, [[100, 0.8], [200, 1.0]], 1000)  # 100 + 100·0.1/0.2 = 150
  write_point(main, 256, 1.0, 1, [[200, 0.85], [300, 0.95]], 1000)  # 200 + 100·0.05/0.1 = 250
  write_point(main, 256, 2.0, 0, [[300, 0.9]], 1000)
  write_point(main, 256, 2.0, 1, [[300, 0.7], [400, 0.89]], 1000)
  write_point(other, 256, 1.0, 0, [[160, 0.86], [200, 0.94]], 1000,
              ('optimizer_params.eeta=0.004',))
  # 4096: reached at the first evaluation, at update 40: an upper bound.
  write_point(main, 4096, 8.0, 0, [[40, 0.92], [80, 0.95]], 80)
  # 16384: never reached in its 20 updates.
  write_point(main, 16384, 16.0, 0, [[10, 0.5], [20, 0.88]], 20)
  runs = []
  for directory in (main, other):
    runs += study.read_runs('LARS', str(directory), study.GLOBAL_BATCH)
  return study.mark_settings(runs)


def test_an_arms_updates_by_batch_from_a_hand_made_archive(runs):
  steps, missed, bounded = critical_fit.updates_by_batch(runs, 'LARS', study.GLOBAL_BATCH, 0.9)
  assert steps == pytest.approx({256: 180.0, 4096: 40.0})
  assert missed == {16384: 20}
  assert bounded == (4096,)
  # At the evaluations: lr 1 of the first sweep reaches it at 200 and 300 (mean 250), the
  # eeta sweep at 200, lr 2 not with both seeds: 200.
  steps, _, _ = critical_fit.updates_by_batch(runs, 'LARS', study.GLOBAL_BATCH, 0.9,
                                              interpolate=False)
  assert steps == {256: 200.0, 4096: 40.0}


def test_the_fit_of_an_arm_is_the_line_through_its_batches(runs):
  fit = critical_fit.fit_arm(runs, 'LARS', study.GLOBAL_BATCH, 0.9)
  # Through (1/256, 180) and (1/4096, 40): slope 140/(1/256 − 1/4096) = 38229.33,
  # S_min = 40 − slope/4096 = 30.667, B_crit = slope/S_min = 1246.6.
  slope = 140 / (1 / 256 - 1 / 4096)
  s_min = 40 - slope / 4096
  assert fit.s_min == pytest.approx(s_min) and fit.b_crit == pytest.approx(slope / s_min)
  assert fit.fitted and fit.missed == {16384: 20} and fit.bounded == (4096,)
  none = critical_fit.fit_arm(runs, 'SGD', study.GLOBAL_BATCH, 0.9)
  assert not none.fitted and none.steps == {} and none.s_min is None
