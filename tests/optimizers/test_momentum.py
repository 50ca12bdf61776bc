"""KerasMomentum: Keras' momentum SGD, fused, with TF 1's ``use_nesterov`` beside Keras' ``nesterov``."""

import keras
import numpy as np
import pytest

from optimizers import OPTIMIZER_CLS_NAMES
from optimizers.lars import KerasMomentum


def one_step(optimizer):
  """The variable after two updates of w ← w − lr·g from w = [1, -2] with g = [0.5, 0.25]."""
  var = keras.Variable(np.array([1.0, -2.0], np.float32))
  optimizer.build([var])
  for _ in range(2):
    optimizer.apply([np.array([0.5, 0.25], np.float32)], [var])
  return var.numpy()


@pytest.mark.parametrize('kwargs', [{'use_nesterov': True}, {'nesterov': True},
                                    {'use_nesterov': True, 'nesterov': True}])
def test_nesterov_under_either_name(kwargs):
  optimizer = OPTIMIZER_CLS_NAMES['KerasMomentum'](learning_rate=0.1, momentum=0.9, **kwargs)
  assert optimizer.nesterov and optimizer.get_config()['use_nesterov']
  # Nesterov by hand: v ← m·v − lr·g; w ← w + m·v − lr·g.
  w, v, g = np.array([1.0, -2.0]), np.zeros(2), np.array([0.5, 0.25])
  for _ in range(2):
    v = 0.9 * v - 0.1 * g
    w = w + 0.9 * v - 0.1 * g
  np.testing.assert_allclose(one_step(optimizer), w, rtol=1e-6)
  assert not np.allclose(one_step(KerasMomentum(0.1, momentum=0.9)), w)


def test_the_two_names_cannot_disagree():
  with pytest.raises(ValueError, match='use_nesterov=True and nesterov=False are the same setting'):
    KerasMomentum(0.1, use_nesterov=True, nesterov=False)
