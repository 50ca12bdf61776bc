"""The best checkpoint by eval accuracy: kept on improvement only, its record survives a restart."""

import json

import numpy as np
import tensorflow as tf

from framework.run import checkpoints


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


def test_an_unreadable_record_with_no_checkpoint_beside_it_is_replaced(tmp_path):
  directory = tmp_path / checkpoints.BEST_DIR
  directory.mkdir()
  (directory / 'best.json').write_text('{"accuracy": ')
  best = checkpoints.BestCheckpoint(tf.train.Checkpoint(weight=tf.Variable(1.0)), str(directory))
  assert best.best is None
  best.offer(7, 0.25)
  assert json.loads((directory / 'best.json').read_text())['step'] == 7


def write_eval_accuracy(eval_dir, step, accuracy):
  """An eval event as the train loop writes it (framework.run.summaries.write_eval_metrics)."""
  writer = tf.summary.create_file_writer(str(eval_dir))
  with writer.as_default():
    tf.summary.scalar('accuracy', accuracy, step=step)
  writer.close()


def kept_best(tmp_path, accuracy=0.625, step=3):
  """A best directory holding best-<step> with ``accuracy``, beside an empty eval directory."""
  weight = tf.Variable(float(step))
  directory = tmp_path / checkpoints.BEST_DIR
  best = checkpoints.BestCheckpoint(tf.train.Checkpoint(weight=weight), str(directory))
  best.offer(step, accuracy)
  return weight, directory


def test_a_garbled_record_is_read_back_from_the_eval_events(tmp_path):
  weight, directory = kept_best(tmp_path)
  write_eval_accuracy(tmp_path / 'eval', 2, 0.5)
  write_eval_accuracy(tmp_path / 'eval', 3, 0.625)
  (directory / 'best.json').write_text('{"step": 3, "accur')
  logs = []
  best = checkpoints.BestCheckpoint(tf.train.Checkpoint(weight=weight), str(directory),
                                    log=logs.append)
  assert best.best == 0.625
  assert len(logs) == 1 and logs[0].startswith(f'warning: {directory}/best.json cannot be read (')
  assert logs[0].endswith(f'the accuracy of {directory}/best-3, 0.6250, was read back from the '
                          f'eval events in {tmp_path}/eval, and the record rewritten')
  assert json.loads((directory / 'best.json').read_text()) == {
      'step': 3, 'accuracy': 0.625, 'checkpoint': str(directory / 'best-3')}
  # A worse evaluation does not replace it; a better one does.
  weight.assign(4.0)
  best.offer(4, 0.6)
  assert sorted(p.name for p in directory.glob('best-*.index')) == ['best-3.index']
  best.offer(5, 0.7)
  assert sorted(p.name for p in directory.glob('best-*.index')) == ['best-5.index']


def test_a_record_of_another_checkpoint_is_not_trusted(tmp_path):
  # A run killed between saving best-3 and writing its record leaves the older record.
  weight, directory = kept_best(tmp_path)
  write_eval_accuracy(tmp_path / 'eval', 3, 0.625)
  (directory / 'best.json').write_text('{"step": 1, "accuracy": 0.25}')
  logs = []
  best = checkpoints.BestCheckpoint(tf.train.Checkpoint(weight=weight), str(directory),
                                    log=logs.append)
  assert best.best == 0.625
  assert logs[0].startswith(f'warning: {directory}/best.json names step 1, not best-3;')


def test_without_a_record_nor_events_the_best_is_never_replaced(tmp_path):
  weight, directory = kept_best(tmp_path)
  (directory / 'best.json').write_text('\xff garbled')
  logs = []
  best = checkpoints.BestCheckpoint(tf.train.Checkpoint(weight=weight), str(directory),
                                    log=logs.append)
  assert logs[0].endswith(f'and no eval event in {tmp_path}/eval gives the accuracy of '
                          f'{directory}/best-3: it is kept and this run will not replace it '
                          f'(move {directory} away to let it)')
  best.offer(9, 1.0)
  assert sorted(p.name for p in directory.glob('best-*.index')) == ['best-3.index']
  assert tf.train.load_checkpoint(str(directory / 'best-3')).get_tensor(
      'weight/.ATTRIBUTES/VARIABLE_VALUE') == np.float32(3.0)
  assert (directory / 'best.json').read_text() == '\xff garbled'


def test_the_data_layout_is_read_back_and_an_older_checkpoint_records_none(tmp_path):
  position = tf.Variable(7, dtype=tf.int64)
  layout = tf.Variable([2, 32], dtype=tf.int64)
  new = tf.train.Checkpoint(data_position=position, **{checkpoints.DATA_LAYOUT: layout})
  old = tf.train.Checkpoint(data_position=position)  # as checkpoints were written before
  assert checkpoints.data_layout(new.write(str(tmp_path / 'new' / 'ckpt-7'))) == (2, 32)
  assert checkpoints.data_layout(old.write(str(tmp_path / 'old' / 'ckpt-7'))) is None


def test_a_resume_with_other_workers_or_batch_is_one_line_naming_both_and_the_way_out():
  prefix = '/runs/a/ckpt-20'
  assert checkpoints.layout_change(prefix, (2, 32), 2, 32) is None
  assert checkpoints.layout_change(prefix, None, 1, 16) is None  # nothing known: no check
  assert checkpoints.layout_change(prefix, (None, 32), 3, 32) is None  # only the batch known
  line = checkpoints.layout_change(prefix, (2, 32), 1, 32)
  assert line.startswith('--continue_learning: /runs/a/ckpt-20 was trained with 2 worker(s) and '
                         'batch_size_per_gpu=32, and this run has 1 worker(s) and '
                         'batch_size_per_gpu=32: ')
  assert line.endswith('nothing was changed. Resume with 2 worker(s) and batch_size_per_gpu=32, '
                       'or start a new run in another --logdir from its weights with '
                       '--init_checkpoint /runs/a/ckpt-20')
  assert '\n' not in line
  assert 'this run has 1 worker(s) and batch_size_per_gpu=16' in checkpoints.layout_change(
      prefix, (1, 32), 1, 16)
  line = checkpoints.layout_change(prefix, (None, 32), 1, 16)
  assert 'was trained with batch_size_per_gpu=32, and this run has' in line
  assert 'Resume with batch_size_per_gpu=32, or' in line


def test_the_newest_readable_checkpoint_gives_the_layout(tmp_path):
  layout = tf.Variable([4, 16], dtype=tf.int64)
  checkpoint = tf.train.Checkpoint(**{checkpoints.DATA_LAYOUT: layout})
  assert checkpoints.newest_data_layout(str(tmp_path)) == (None, None)
  checkpoint.write(str(tmp_path / 'ckpt-2'))
  (tmp_path / 'ckpt-5.index').write_bytes(b'not a checkpoint')  # passed over
  assert checkpoints.newest_data_layout(str(tmp_path)) == (str(tmp_path / 'ckpt-2'), (4, 16))
