"""Evaluation's sums against a numpy reference: mean loss, top-1 and top-5 over every batch."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework import evaluation
from framework import summaries
from framework.tasks.image_classification import ImageClassificationTask


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
  metrics = evaluation.evaluate(evaluation.make_eval_step(model), dataset)
  expected = reference(logits, labels)
  assert metrics['examples'] == 23
  for key in ('loss', 'accuracy', 'top5_accuracy'):
    assert metrics[key] == pytest.approx(expected[key], rel=1e-5), key
  if classes == 3:
    assert metrics['top5_accuracy'] == 1.0
  else:
    assert 0.0 < metrics['accuracy'] < metrics['top5_accuracy'] < 1.0


# --- the lines name the split their numbers come from ------------------------------------

IMAGE_METRICS = {'loss': 0.2345, 'accuracy': 0.9069, 'top5_accuracy': 0.9979, 'examples': 500}


def image_task():
  return ImageClassificationTask({'label_smoothing': 0.0})


@pytest.mark.parametrize('split, suffix', [
    ('test', ' on the test split'), (None, ''), ('validation', ' on the validation split'),
    ('dev', ' on the dev split')])
def test_an_eval_line_names_any_split_it_knows(split, suffix, capsys, monkeypatch):
  written = []
  monkeypatch.setattr(summaries, 'write_eval_metrics', lambda *args: written.append(args))
  evaluation.report(40, IMAGE_METRICS, 'writer', image_task(), split=split)
  assert written == [('writer', 40, IMAGE_METRICS, ('accuracy', 'top5_accuracy', 'loss'))]
  assert capsys.readouterr().out == (
      'eval at step 40: loss 0.2345, top-1 0.9069, top-5 0.9979 (500 examples)' + suffix + '\n')


def test_the_final_line_names_its_split_and_the_step_of_its_numbers():
  task = image_task()
  text = 'accuracy: 0.9069 (top-5 0.9979, loss 0.2345)'
  # The README's line: the last evaluation, on the test split (or a layer that does not say).
  for split in ('test', None):
    assert evaluation.final_line(task, dict(IMAGE_METRICS, step=1872, split=split), 1872) == (
        f'final test {text} at step 1872')
  assert evaluation.final_line(task, IMAGE_METRICS, 1872) == f'final test {text} at step 1872'
  assert evaluation.final_line(task, dict(IMAGE_METRICS, step=60, split='validation'), 60) == (
      f'final validation {text} at step 60')
  # The best checkpoint (chosen on validation) evaluated on another split after training.
  best = dict(IMAGE_METRICS, step=40, split='eval', selected_on='validation')
  assert evaluation.final_line(task, best, 60) == (
      f'final eval {text} at step 40 (best checkpoint by validation accuracy; the run ended at '
      'step 60)')
  assert evaluation.final_line(task, dict(best, step=60), 60) == (
      f'final eval {text} at step 60 (best checkpoint by validation accuracy)')
