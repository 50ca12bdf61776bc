"""The best checkpoint by eval accuracy: kept on improvement only, its record survives a restart."""

import json

import numpy as np
import tensorflow as tf

from framework import checkpoints


def test_the_best_checkpoint_follows_the_best_accuracy_and_is_read_back(tmp_path):
  weight = tf.Variable(0.0)
  checkpoint = tf.train.Checkpoint(weight=weight)
  directory = tmp_path / checkpoints.BEST_DIR
  best = checkpoints.BestCheckpoint(checkpoint, str(directory))
  assert best.best is None
  for step, accuracy in ((1, 0.50), (2, 0.40), (3, 0.625), (4, 0.625)):
    weight.assign(float(step))
    best.offer(step, accuracy)
  record = json.loads((directory / 'best.json').read_text())
  assert record == {'step': 3, 'accuracy': 0.625, 'checkpoint': str(directory / 'best-3')}
  assert sorted(p.name for p in directory.glob('best-*.index')) == ['best-3.index']
  assert tf.train.load_checkpoint(record['checkpoint']).get_tensor(
      'weight/.ATTRIBUTES/VARIABLE_VALUE') == np.float32(3.0)
  # A resumed run knows the best so far: a lower accuracy is not kept.
  again = checkpoints.BestCheckpoint(checkpoint, str(directory))
  assert again.best == 0.625
  again.offer(5, 0.6)
  assert json.loads((directory / 'best.json').read_text())['step'] == 3


def test_an_unreadable_record_is_replaced_by_the_next_evaluation(tmp_path):
  directory = tmp_path / checkpoints.BEST_DIR
  directory.mkdir()
  (directory / 'best.json').write_text('{"accuracy": ')
  best = checkpoints.BestCheckpoint(tf.train.Checkpoint(weight=tf.Variable(1.0)), str(directory))
  assert best.best is None
  best.offer(7, 0.25)
  assert json.loads((directory / 'best.json').read_text())['step'] == 7
