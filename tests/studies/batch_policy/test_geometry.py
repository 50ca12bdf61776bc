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


class _Quadratic:
  """A 'trainer' whose loss is ½ wᵀHw + cᵀw over two variables, with one statistic it must keep."""

  def __init__(self, curvature):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    self.curvature = curvature
    self.variables = [tf.Variable([1.0, -2.0]), tf.Variable([0.5])]
    self.statistic = tf.Variable(3.0)
    self.model = type('Model', (), {'non_trainable_variables': [self.statistic]})()

  def _loss(self, batch):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    w = tf.concat(self.variables, 0)
    self.statistic.assign_add(1.0)  # as batch norm's moving averages move in training
    return 0.5 * tf.tensordot(w, tf.linalg.matvec(self.curvature, w), 1) + tf.reduce_sum(w), {}


def test_the_second_difference_is_the_curvature_along_a_direction_and_keeps_the_state():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  curvature = tf.constant([[2.0, 0.5, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 4.0]])
  trainer = _Quadratic(curvature)
  second = geometry.SecondDifference(trainer, trainer.variables, epsilon=0.25)
  direction = [np.array([1.0, 2.0]), np.array([-1.0])]
  u = np.array([1.0, 2.0, -1.0])
  # uᵀHu = 2 + 2·0.5·2 + 4·1 + 4·1 = 12, exact for a quadratic whatever ε
  assert second(None, direction) == pytest.approx(float(u @ curvature.numpy() @ u), rel=1e-5)
  assert [v.numpy().tolist() for v in trainer.variables] == [[1.0, -2.0], [0.5]]
  assert float(trainer.statistic.numpy()) == 3.0
  assert geometry.noise_scale_of(12.0, 10.0, 1, 2) == pytest.approx((12 - 10) / (1 - 0.5) / (
      (2 * 10 - 12) / 1.0))
