"""The noise scale in a preconditioner's geometry (studies/batch_policy/geometry.py), on gradients of known law."""

import numpy as np
import pytest

from studies.batch_policy import geometry


def test_weighted_estimates_recover_the_noise_scale_of_the_preconditioned_update():
  # Two variables: per-example gradient G_l + noise of variance s_l² per coordinate.
  rng = np.random.default_rng(0)
  means = [np.full(50, 0.2), np.full(30, 0.05)]
  sigmas = [1.0, 0.6]
  micro_batch, count = 8, 4000
  gradients = [[m + s * rng.standard_normal(m.shape) / np.sqrt(micro_batch)
                for m, s in zip(means, sigmas)] for _ in range(count)]
  estimates = geometry.per_variable(gradients, micro_batch)
  gradient_sq = [float((m * m).sum()) for m in means]  # 2.0, 0.075
  trace = [s * s * m.size for m, s in zip(means, sigmas)]  # 50, 10.8
  for (g, t), g_true, t_true in zip(estimates, gradient_sq, trace):
    assert g == pytest.approx(g_true, rel=0.05) and t == pytest.approx(t_true, rel=0.05)
  weights = [1.0, 40.0]
  expected = (50 + 40 * 10.8) / (2.0 + 40 * 0.075)  # 96.4, where the Euclidean one is 29.2
  assert geometry.weighted_noise_scale(estimates, weights) == pytest.approx(expected, rel=0.05)
  assert geometry.weighted_noise_scale(estimates, [1.0, 1.0]) == pytest.approx(60.8 / 2.075,
                                                                                rel=0.05)
  assert geometry.weighted_noise_scale([(-1.0, 3.0)], [1.0]) == float('inf')
