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
