"""Tests of core/critical_batch.py: the branches' crossings, the fit, its interval, the whole run.

The last test is a known answer: SGD on a quadratic whose per-example
gradient noise is set so that McCandlish et al.'s B_noise = tr(HΣ)/(GᵀHG) is
the same number at every step, each update at the step size their model
takes as best; the branches' fit must find B_noise.
"""

import math

import numpy as np
import pytest

from core import critical_batch as cb


def test_monotone_fit_pools_adjacent_violators():
  # Known answers of pool-adjacent-violators for a non-increasing fit.
  assert cb.monotone_fit([3.0, 2.0, 1.0]) == [3.0, 2.0, 1.0]
  assert cb.monotone_fit([1.0, 2.0]) == [1.5, 1.5]
  assert cb.monotone_fit([4.0, 1.0, 3.0, 0.0]) == [4.0, 2.0, 2.0, 0.0]
  assert cb.monotone_fit([1.0, 2.0, 3.0]) == [2.0, 2.0, 2.0]
  noisy = [5.0, 4.2, 4.4, 3.1, 3.3, 3.2, 2.0]
  fitted = cb.monotone_fit(noisy)
  assert all(a >= b for a, b in zip(fitted, fitted[1:]))
  assert sum(fitted) == pytest.approx(sum(noisy))  # the pooled means keep the sum


def test_crossing_interpolates_between_the_evaluations_around_the_target():
  xs, ys = [0, 100, 200, 300], [1.0, 0.8, 0.6, 0.5]
  assert cb.crossing(xs, ys, 0.7) == pytest.approx(150.0)
  assert cb.crossing(xs, ys, 0.6) == pytest.approx(200.0)
  assert cb.crossing(xs, ys, 0.55) == pytest.approx(250.0)
  assert cb.crossing(xs, ys, 0.4) is None
  assert cb.crossing(xs, ys, 1.2) == 0.0


def test_the_fit_gives_back_exact_points_plain_and_relative():
  steps = {b: 100.0 * (1 + 1000.0 / b) for b in (256, 512, 1024, 2048, 4096)}
  for relative in (False, True):
    s_min, b_crit = cb.critical_fit(steps, relative=relative)
    assert s_min == pytest.approx(100.0, rel=1e-12)
    assert b_crit == pytest.approx(1000.0, rel=1e-12)
  assert cb.critical_fit({256: 500.0}) is None
  # Updates that halve at every doubling never level off; updates that do not fall gain nothing.
  faster = {b: 1e6 / b - 1 for b in (256, 512, 1024)}  # better than halving: S_min < 0
  assert cb.critical_fit(faster, relative=True) is None
  assert cb.fit_shape(faster, relative=True) == 'no_level'
  assert cb.fit_shape({256: 100.0, 512: 110.0}) == 'no_gain'
  assert cb.fit_shape({256: 100.0}) == 'few'


def test_relative_weights_are_least_squares_of_the_relative_residuals():
  steps = {256: 2000.0, 512: 1100.0, 1024: 520.0, 2048: 330.0, 4096: 200.0}
  xs = np.array([1.0 / b for b in steps])
  ys = np.array(list(steps.values()))
  # numpy's weighted polyfit minimises sum((w·(y - fit))²): w = 1/y is the relative residual.
  slope, intercept = np.polyfit(xs, ys, 1, w=1.0 / ys)
  s_min, b_crit = cb.critical_fit(steps, relative=True)
  assert s_min == pytest.approx(intercept, rel=1e-10)
  assert b_crit == pytest.approx(slope / intercept, rel=1e-10)


def model_updates(b_crit, batches, n=100.0):
  """{batch: S(B)} of McCandlish's model with S_min = n, exactly."""
  return {b: n * (1 + b_crit / b) for b in batches}


def test_whole_run_fits_the_sum_of_its_parts_updates():
  base, batches = 256, (256, 512, 1024, 2048, 4096)
  points = [{'share': 0.5, 'updates': model_updates(1000.0, batches)},
            {'share': 0.5, 'updates': {str(b): u for b, u in
                                       model_updates(4000.0, batches, n=7.0).items()}}]
  # By hand: each part's S_i(B)/S_i(B0) follows (1 + Bc_i/B)/(1 + Bc_i/B0), so the sum is
  # S_min·(1 + Bc/B) with S_min = Σ a_i/(1 + Bc_i/B0), S_min·Bc = Σ a_i·B0/(1 + B0/Bc_i).
  s_min = 0.5 / (1 + 1000 / 256) + 0.5 / (1 + 4000 / 256)
  e_min = 0.5 * 256 / (1 + 256 / 1000) + 0.5 * 256 / (1 + 256 / 4000)
  assert cb.run_updates(points, base)[1024] == pytest.approx(
      0.5 * (1 + 1000 / 1024) / (1 + 1000 / 256) + 0.5 * (1 + 4000 / 1024) / (1 + 4000 / 256))
  run = cb.whole_run(points, base)
  assert run['b_crit'] == pytest.approx(e_min / s_min, rel=1e-9)
  assert run['s_min'] == pytest.approx(s_min, rel=1e-9)
  assert 1000 < run['b_crit'] < 4000  # between the parts', nearer the smaller
  assert run['interval'] is None  # no draws given
  # One part alone gives its own B_crit back.
  assert cb.whole_run(points[:1], base)['b_crit'] == pytest.approx(1000.0)
  # A part that did not reach its target at a batch leaves that batch out of the run's fit.
  missing = dict(points[1], updates=dict(points[1]['updates'], **{'4096': None}))
  assert sorted(cb.run_updates([points[0], missing], base)) == [256, 512, 1024, 2048]
  assert cb.whole_run([points[0], missing], base)['b_crit'] == pytest.approx(e_min / s_min)


def test_a_part_whose_updates_still_halve_weighs_by_its_share_of_the_runs_updates():
  base, batches = 256, (256, 512, 1024, 2048)
  halving = {'share': 0.25, 'updates': {b: 4096.0 / b for b in batches}}  # no fit of its own
  assert cb.critical_fit(halving['updates'], relative=True) is None
  levelling = {'share': 0.75, 'updates': model_updates(1000.0, batches)}
  run = cb.whole_run([halving, levelling], base)
  steps = {b: 0.25 * base / b + 0.75 * (1 + 1000 / b) / (1 + 1000 / 256) for b in batches}
  assert run['updates'] == pytest.approx(steps)
  assert run['b_crit'] == pytest.approx(cb.critical_fit(steps, relative=True)[1])
  assert run['b_crit'] > 1000  # the halving part raises the run's
  # Updates that halve in every part: a lower bound at the largest batch every part reached.
  alone = cb.whole_run([dict(halving, share=1.0)], base)
  assert alone['b_crit'] is None and alone['shape'] == 'no_level' and alone['at_least'] == 2048


def test_whole_run_interval_comes_from_the_points_draws_summed():
  base, batches = 256, (256, 512, 1024, 2048)
  rng = np.random.default_rng(3)
  points = []
  for share, b_crit in ((0.5, 800.0), (0.5, 3000.0)):
    exact = model_updates(b_crit, batches)
    draws = [{b: u * (1 + 0.05 * rng.normal()) for b, u in exact.items()} for _ in range(400)]
    points.append({'share': share, 'updates': exact, 'drawn_updates': draws})
  run = cb.whole_run(points, base)
  low, high = run['interval']
  assert low < run['b_crit'] < high
  assert run['fitted_draws'] >= 200
  # The interval is the draws' own: summed by hand and fitted, draw by draw, its quantiles.
  values = []
  for i in range(400):
    summed = {b: sum(p['share'] * p['drawn_updates'][i][b] / p['drawn_updates'][i][base]
                     for p in points) for b in batches}
    fitted = cb.critical_fit(summed, relative=True)
    values.append(math.inf if fitted is None else fitted[1])
  # With exact parts the fit's own residuals are zero, so the scatter adds nothing.
  assert run['interval'][0] == pytest.approx(float(np.quantile(values, 0.05)), rel=1e-9)
  assert run['interval'][1] == pytest.approx(float(np.quantile(values, 0.95)), rel=1e-9)


def test_branches_that_did_not_reach_their_target_close_the_interval_above():
  base, reached, ran = 256, (256, 512, 1024), (256, 512, 1024, 2048, 4096)
  rng = np.random.default_rng(5)
  exact = model_updates(2000.0, ran)

  def noisy(batches):
    return [{b: exact[b] * (1 + 0.3 * rng.normal()) for b in batches} for _ in range(400)]

  # Point a reached its target at every batch; point b not past 1,024: at 2,048 and 4,096
  # it made 0.9x the updates the model says it needed, and stopped.
  a = {'share': 0.5, 'updates': dict(exact), 'drawn_updates': noisy(ran)}
  b = {'share': 0.5, 'updates': {k: (exact[k] if k in reached else None) for k in ran},
       'drawn_updates': noisy(reached)}
  open_run = cb.whole_run([a, b], base)
  assert sorted(open_run['updates']) == list(reached)
  assert math.isinf(open_run['interval'][1]) and not open_run['high_censored']
  read = {k: (exact[k] if k in reached else 0.9 * exact[k]) for k in ran}
  a['updates_read'], b['updates_read'] = dict(exact), read
  run = cb.whole_run([a, b], base)
  assert run['b_crit'] == open_run['b_crit']  # the estimate is the reached batches' alone
  assert run['high_censored'] and run['interval'][0] == open_run['interval'][0]
  low, high = run['interval']
  assert low < run['b_crit'] < high < math.inf
  # By hand: each draw with b's branches at the updates they made where they did not cross.
  values = []
  for i in range(400):
    summed = {k: 0.5 * a['drawn_updates'][i][k] / a['drawn_updates'][i][base]
              + 0.5 * b['drawn_updates'][i].get(k, read[k]) / b['drawn_updates'][i][base]
              for k in ran}
    fitted = cb.critical_fit(summed, relative=True)
    if fitted is None:  # no levelling off: past the batches; no fall: below them
      values.append(0.0 if cb.fit_shape(summed, relative=True) == 'no_gain' else math.inf)
    else:
      values.append(fitted[1])
  assert high == pytest.approx(float(np.quantile(values, 0.95)), rel=1e-6)


def test_point_shares_cut_the_run_halfway_between_points():
  assert cb.point_shares([0.25, 0.5, 0.75]) == pytest.approx([0.375, 0.25, 0.375])
  assert cb.point_shares([0.5]) == [1.0]


def test_growing_schedule_takes_the_lower_end_of_each_interval():
  points = [{'step': 468, 'b_crit': 900.0, 'interval': [600.0, 1300.0]},
            {'step': 936, 'b_crit': 3000.0, 'interval': [2100.0, 5000.0]},
            {'step': 1404, 'b_crit': 2500.0, 'interval': [1900.0, 4000.0]}]
  # 600 -> 512; 2100 -> 2048; 1900 -> 1024, below the batch before it: kept at 2048.
  assert cb.growing_schedule(points, 256, 4096) == ([256, 512, 2048], [468, 936])
  assert cb.growing_schedule(points, 256, 1024) == ([256, 512, 1024], [468, 936])
  assert cb.growing_schedule([{'step': 10, 'b_crit': 300.0, 'interval': [100.0, 400.0]}],
                             256, 4096) is None


def test_a_flat_one_x_branch_measures_nothing_and_says_why():
  flat = {'curve': [[100 * k, 1.0 + 0.01 * (-1) ** k] for k in range(1, 9)]}
  result = cb.measure_point({64: flat, 128: flat}, 1.0, 64, 800)
  assert result['measured'] is False
  assert 'did not' not in result['why'] and 'noise' in result['why']
  assert result['b_crit'] is None


def quadratic_branches(b_noise, base, factors, window_steps, seed):
  """Branches of SGD on ½·wᵀHw from one point, at McCandlish's best step for each batch.

  Each example's gradient is G + ξ with Cov(ξ) = s·I and s = b_noise·GᵀHG / tr(H), so
  B_noise = tr(HΣ)/(GᵀHG) = b_noise at every step; the update with a batch of B takes
  the step ε = |G|²/(GᵀHG·(1 + B_noise/B)), which their model says is best. The
  held-out loss is the loss itself (no evaluation noise), evaluated every eighth of
  the 1x branch's window.
  """
  dim = 40
  curvature = np.logspace(0, -1, dim)
  start_w = np.random.default_rng(seed).normal(size=dim) * 3.0
  window = window_steps * base

  def loss(w):
    return 0.5 * float(np.sum(curvature * w * w))

  def branch(batch, cap, target=None):
    w, rng, curve = start_w.copy(), np.random.default_rng(1000 * seed + batch), []
    every = max(1, window // 8 // batch)
    for update in range(1, cap // batch + 1):
      g = curvature * w
      ghg = float(np.sum(curvature * g * g))
      noise = b_noise * ghg / float(np.sum(curvature))
      step = float(np.dot(g, g)) / (ghg * (1 + b_noise / batch))
      w = w - step * (g + math.sqrt(noise / batch) * rng.normal(size=dim))
      if update % every == 0:
        curve.append([update * batch, loss(w)])
        if target is not None and curve[-1][1] <= 0.98 * target:
          break
    return {'curve': curve}

  start = loss(start_w)
  branches = {base: branch(base, window)}
  target, _ = cb.window_target(branches[base]['curve'], start, window)
  for factor in factors[1:]:
    branches[base * factor] = branch(base * factor, 4 * window, target)
  return branches, start, window


@pytest.mark.parametrize('b_noise', [512, 4096])
def test_the_branch_fit_recovers_a_known_critical_batch(b_noise):
  answers, covered = [], 0
  seeds = range(8)
  for seed in seeds:
    base = b_noise // 16
    branches, start, window = quadratic_branches(b_noise, base, (1, 2, 4, 8, 16, 32), 400, seed)
    result = cb.measure_point(branches, start, base, window)
    assert result['measured'] and result['b_crit'] is not None
    answers.append(result['b_crit'] / b_noise)
    low, high = result['interval']
    covered += low <= b_noise <= high
    assert 0.5 < result['b_crit'] / b_noise < 2.0, (seed, result['b_crit'])
  # The median of eight independent measurements within 25 % of the known answer.
  assert abs(float(np.median(answers)) - 1) < 0.25, answers
  # The 90 % interval holds the scatter of the measurement, not the model's own error
  # (McCandlish's S(B) is approximate here: the fits read about 15 % high on average).
  assert covered >= 4


def test_a_branch_thrown_up_and_never_back_does_not_swamp_the_draws():
  base = 32
  branches, start, window = quadratic_branches(512, base, (1, 2, 4, 8, 16), 400, 0)
  clean = cb.measure_point(branches, start, base, window)
  # A 32x branch whose loss a jumped rate threw up to 20x the start and that came back only
  # part of the way: it never reaches the target, and its departures from a falling trend
  # are no noise of the looks.
  looks = [[k * window / 8, start * (20.0 if k < 12 else 3.0)] for k in range(1, 25)]
  thrown = cb.measure_point({**branches, 32 * base: {"curve": looks}}, start, base, window)
  assert thrown['updates'][32 * base] is None
  assert thrown['b_crit'] == clean['b_crit']
  assert thrown['fitted_draws'] >= 0.9 * clean['draws'] and thrown['interval'] is not None
  assert thrown['noise'] == clean['noise']


def test_a_slow_fall_over_many_looks_is_progress_and_noise_alone_is_not():
  rng = np.random.default_rng(7)
  looks = 64
  noise = rng.normal(scale=0.02, size=looks)
  xs = [256.0 * 7 * (k + 1) for k in range(looks)]
  # A fall of 0.04 over the window: 2σ of one look, less than the 4σ the monotone test needs.
  slow = [[x, 0.25 - 0.04 * k / (looks - 1) + e] for k, (x, e) in enumerate(zip(xs, noise))]
  monotone, sigma, fall, error = cb.progress_of(slow)
  assert sigma == pytest.approx(0.02, rel=0.25)
  assert monotone < 4 * sigma
  # The trend's standard error is σ·√(12/n) for n evenly spaced looks.
  assert error == pytest.approx(sigma * math.sqrt(12.0 * (looks - 1) ** 2 / (looks * (looks ** 2 - 1))))
  assert fall >= 3 * error and cb.made_progress(slow)
  flat = [[x, 0.25 + e] for x, e in zip(xs, noise)]
  assert not cb.made_progress(flat)
  # The window ends at the first look (from the fewest examples on) where the fall is shown.
  end = cb.window_end(slow, fewest=xs[7], most=xs[-1])
  assert end is not None and xs[7] <= end <= xs[-1] and cb.made_progress(
      [p for p in slow if p[0] <= end])
  assert cb.window_end(flat, fewest=xs[7], most=xs[-1]) == 0
