"""The package's Keras optimizers survive ``model.save`` -> ``keras.models.load_model`` -> ``fit``."""

import keras
import numpy as np
import pytest

import optimizers

FACTORIES = {
    'LARS': lambda: optimizers.LARSOptimizer(0.1, momentum=0.9, weight_decay=1e-3, eeta=0.01,
                                             exclude_from_weight_decay=['bias']),
    'LAMB': lambda: optimizers.LAMB(0.01, weight_decay=0.01, exclude_from_layer_adaptation=['bias']),
    'Momentum': lambda: optimizers.MomentumOptimizer(0.05, momentum=0.9, use_nesterov=True),
    'Backoff': lambda: optimizers.LossScaleOptimizer(
        optimizers.LARSOptimizer(0.1, weight_decay=1e-3), 'Backoff', {'step_window': 3}),
    'LogMax': lambda: optimizers.LossScaleOptimizer(optimizers.LAMB(0.01), 'LogMax'),
}
STEPS = 4  # batches per epoch: 64 examples, batch 16


def data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 5)).astype(np.float32)
  y = (x @ rng.normal(size=(5, 1))).astype(np.float32)
  return x, y


def compiled(name, keras_loss_scale):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation='relu'),
                            keras.layers.Dense(1)])
  optimizer = FACTORIES[name]()
  if keras_loss_scale:
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=2.0 ** 10)
  model.compile(optimizer=optimizer, loss='mse')
  return model


def weights(model):
  return [v.numpy() for v in model.weights]


def optimizer_state(model):
  return [np.asarray(v.numpy()) for v in model.optimizer.variables]


# Each optimizer alone and inside Keras' LossScaleOptimizer; the package's own
# loss-scale optimizers (Backoff, LogMax) are not wrapped in another one.
CASES = [(name, False) for name in sorted(FACTORIES)] + [
    (name, True) for name in ('LAMB', 'LARS', 'Momentum')]


@pytest.mark.parametrize('name, keras_loss_scale', CASES)
def test_save_load_fit_continues_as_an_uninterrupted_run(name, keras_loss_scale, tmp_path):
  x, y = data()
  model = compiled(name, keras_loss_scale)
  model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
  path = str(tmp_path / 'model.keras')
  model.save(path)
  saved_state, saved_weights = optimizer_state(model), weights(model)
  model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
  uninterrupted = weights(model)

  # Plain Keras: no custom_objects, the classes are found by their registered names.
  restored = keras.models.load_model(path)
  assert type(restored.optimizer) is type(model.optimizer)
  assert int(restored.optimizer.iterations.numpy()) == STEPS
  for got, want in zip(optimizer_state(restored), saved_state):
    np.testing.assert_array_equal(got, want)
  restored.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
  assert int(restored.optimizer.iterations.numpy()) == 3 * STEPS
  for got, want in zip(weights(restored), uninterrupted):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  assert not np.allclose(uninterrupted[0], saved_weights[0])  # the continued fit trained
