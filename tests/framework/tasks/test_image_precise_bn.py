"""The image classifier's precise batch norm: plain averages inside the block, and a stop that puts back."""

import keras
import numpy as np
import pytest

from framework.run.stopping import StopRequested
from framework.run.stopping import until_stopped
from framework.tasks import image_precise_bn
from models.batch_norm import BatchNormalization


class StopAfter:
  """A stop request every worker agrees on before item ``n`` (0: never)."""

  def __init__(self, n):
    self.n, self.asked = n, 0

  def agreed(self):
    self.asked += 1
    return 15 if self.asked == self.n else 0


def model_and_batches():
  model = keras.Sequential([keras.Input((2, 2, 2)), BatchNormalization(momentum=0.9)])
  rng = np.random.default_rng(3)
  batches = [rng.normal(loc=[1.0, -2.0], scale=[1.0, 3.0], size=(8, 2, 2, 2)).astype(np.float32)
             for _ in range(3)]
  return model, model.layers[0], batches


def test_inside_the_block_the_statistics_are_the_plain_averages_and_training_ones_come_back():
  model, layer, batches = model_and_batches()
  with image_precise_bn.recomputed_statistics(model, until_stopped(batches, StopAfter(0)), 8,
                                              keep=False):
    np.testing.assert_allclose(layer.moving_mean.numpy(),
                               np.mean([b.mean(axis=(0, 1, 2)) for b in batches], axis=0), rtol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(),
                               np.mean([b.var(axis=(0, 1, 2)) for b in batches], axis=0), rtol=1e-4)
  np.testing.assert_array_equal(layer.moving_mean.numpy(), [0.0, 0.0])
  np.testing.assert_array_equal(layer.moving_variance.numpy(), [1.0, 1.0])


def test_a_stop_between_batches_puts_the_training_statistics_back():
  model, layer, batches = model_and_batches()
  with pytest.raises(StopRequested) as stopped:
    with image_precise_bn.recomputed_statistics(model, until_stopped(batches, StopAfter(2)), 8,
                                                keep=True):
      pass
  assert stopped.value.signum == 15
  np.testing.assert_array_equal(layer.moving_mean.numpy(), [0.0, 0.0])
  np.testing.assert_array_equal(layer.moving_variance.numpy(), [1.0, 1.0])
