"""An image classifier's evaluation against numpy: mean loss, top-1 and top-5 over every batch."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework.tasks import image_evaluation


def reference(logits, labels):
  """Mean cross-entropy, top-1 and top-k (k = min(5, classes)) accuracy, in float64."""
  logits = logits.astype(np.float64)
  shifted = logits - logits.max(axis=1, keepdims=True)
  log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
  rows = np.arange(len(labels))
  true = logits[rows, labels]
  rank = (logits > true[:, None]).sum(axis=1)  # classes scored above the true one
  k = min(5, logits.shape[1])
  return {'loss': -log_softmax[rows, labels].mean(), 'accuracy': (rank == 0).mean(),
          'top5_accuracy': (rank < k).mean(), 'examples': len(labels)}


@pytest.mark.parametrize('classes', [9, 3])
def test_the_sums_over_uneven_batches_match_numpy(classes):
  rng = np.random.default_rng(classes)
  images = rng.normal(size=(23, 6)).astype(np.float32)
  labels = rng.integers(0, classes, size=23).astype(np.int32)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(classes)])
  model.set_weights([rng.normal(size=(6, classes)).astype(np.float32),
                     rng.normal(size=classes).astype(np.float32)])
  logits = images @ model.get_weights()[0] + model.get_weights()[1]
  dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(5)  # 5+5+5+5+3
  metrics = image_evaluation.evaluate(image_evaluation.make_eval_step(model), dataset)
  expected = reference(logits, labels)
  assert metrics['examples'] == 23
  for key in ('loss', 'accuracy', 'top5_accuracy'):
    assert metrics[key] == pytest.approx(expected[key], rel=1e-5), key
  if classes == 3:
    assert metrics['top5_accuracy'] == 1.0
  else:
    assert 0.0 < metrics['accuracy'] < metrics['top5_accuracy'] < 1.0


def test_batch_statistics_normalize_by_each_batch_and_leave_the_moving_averages():
  rng = np.random.default_rng(3)
  images = (rng.normal(size=(20, 4)) * 3.0 + 5.0).astype(np.float32)
  labels = rng.integers(0, 3, size=20).astype(np.int32)
  inputs = keras.Input((4,))
  model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.BatchNormalization()(inputs)))
  kernel = rng.normal(size=(4, 3)).astype(np.float32)
  model.layers[-1].set_weights([kernel, np.zeros(3, np.float32)])
  assert image_evaluation.has_batch_normalization(model)
  assert not image_evaluation.has_batch_normalization(
      keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
  moving = [v.numpy().copy() for v in model.non_trainable_variables]
  step = image_evaluation.make_eval_step(model, batch_statistics=True)
  dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(10)
  with image_evaluation.keeping_state(model):
    metrics = image_evaluation.evaluate(step, dataset)
  # Each batch of 10 normalized by its own mean and variance (epsilon 1e-3, gamma 1, beta 0).
  logits = []
  for start in (0, 10):
    batch = images[start:start + 10].astype(np.float64)
    normed = (batch - batch.mean(0)) / np.sqrt(batch.var(0) + 1e-3)
    logits.append(normed @ kernel)
  expected = reference(np.concatenate(logits), labels)
  assert metrics['loss'] == pytest.approx(expected['loss'], rel=1e-4)
  # The moving averages are as they were (a call in training mode moves them).
  for before, after in zip(moving, model.non_trainable_variables):
    np.testing.assert_array_equal(before, after.numpy())
  # By the moving averages (mean 0, variance 1 at the start) the loss is another one.
  plain = image_evaluation.evaluate(image_evaluation.make_eval_step(model), dataset)
  assert abs(plain['loss'] - metrics['loss']) > 0.05
