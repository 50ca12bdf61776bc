"""A three-class image classifier whose logits are known in closed form, for export and infer tests."""

import keras
import numpy as np


def tiny_model():
  """Logits ``[5 - 10 m, 0, 10 m - 5]`` of a 4x4x1 image of mean pixel ``m``: dark -> 0, bright -> 2."""
  model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.GlobalAveragePooling2D(),
                            keras.layers.Dense(3)])
  model.set_weights([np.array([[-10.0, 0.0, 10.0]], np.float32),
                     np.array([5.0, 0.0, -5.0], np.float32)])
  return model
