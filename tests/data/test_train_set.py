"""Tests of data.train_set: a training set's record in the run directory and the check at resume.

The layers' own cases (each holding its files to the record) are in their test files and in
tests/data/test_data_runs.py, through run.py.
"""

import json

import pytest

from data import train_set
from data.base import DataError

NOW = train_set.TrainSet('tfrecord', 'the training files d/train-*', 8, 'f00d', unit='records',
                         parts='files (names or sizes)')
PATH = 'run/train_set.json'


def test_the_fingerprint_of_a_tree_is_the_one_image_statistics_files_hold():
  # Recorded by image_folder runs before the record was shared: it must still match.
  assert train_set.fingerprint(['0:alpha/a0.png', '1:beta/b0.png']) == '20ce0a0e503e7e21'
  assert train_set.fingerprint(['1:beta/b0.png', '0:alpha/a0.png']) != '20ce0a0e503e7e21'


def test_files_are_told_by_base_name_and_size():
  moved = train_set.fingerprint(train_set.file_lines(['/a/train-0', '/a/train-1'], [10, 20]))
  assert moved == train_set.fingerprint(train_set.file_lines(['/b/train-0', '/b/train-1'], [10, 20]))
  assert moved != train_set.fingerprint(train_set.file_lines(['/a/train-0', '/a/train-1'], [10, 21]))


@pytest.mark.parametrize('saved, change', [
    ({'train_examples': 8, 'fingerprint': 'f00d'}, None),
    ({'train_examples': 8}, None),  # no fingerprint kept: held to its count
    ({'fingerprint': 'beef'}, None),  # no count: a record from before, nothing to hold to
    ({'train_examples': 6, 'fingerprint': 'beef'},
     '8 training records now, 6 when the checkpoints beside run/train_set.json were trained'),
    ({'train_examples': 8, 'fingerprint': 'beef'},
     '8 training records then and now, but other files (names or sizes)'),
])
def test_a_change_is_said_with_both_counts(saved, change):
  assert NOW.change(saved, PATH) == change


def test_a_change_is_refused_or_accepted_in_one_line():
  saved = {'train_examples': 6, 'fingerprint': 'beef'}
  with pytest.raises(DataError) as refused:
    NOW.check(saved, PATH, accepted=False, also=' (and validation split)')
  assert str(refused.value) == (
      'tfrecord: the training files d/train-* changed since this run directory was trained: 8 '
      'training records now, 6 when the checkpoints beside run/train_set.json were trained; '
      'resuming would read another training set (and validation split) from the same data '
      'position. Put the files back, train in a new logdir, or go on with them: --set '
      'data_layer_params.accept_changed_train_dir=true')
  assert NOW.check(saved, PATH, accepted=True) == (
      'tfrecord: the training files d/train-* changed: 8 training records now, 6 when the '
      'checkpoints beside run/train_set.json were trained; going on with it '
      '(accept_changed_train_dir)')
  assert NOW.check(NOW.record(), PATH, accepted=False) is None


class Layer:
  """What hold and record read of a data layer."""

  def __init__(self, run_dir, accept=False, worker=0):
    self.run_dir, self.worker_index = str(run_dir), worker
    self.params = {'accept_changed_train_dir': accept}


def test_a_first_start_records_and_a_resume_holds_to_the_record(tmp_path, capsys):
  assert train_set.hold(Layer(tmp_path), NOW)  # no checkpoints: recorded on a first start
  train_set.record(Layer(tmp_path, worker=1), NOW)
  assert not (tmp_path / train_set.FILE).exists()  # worker 0 alone writes
  train_set.record(Layer(tmp_path), NOW)
  assert json.loads((tmp_path / train_set.FILE).read_text()) == {
      'train_examples': 8, 'fingerprint': 'f00d', 'source': 'the training files d/train-*'}
  (tmp_path / 'ckpt-2.index').write_bytes(b'')
  assert not train_set.hold(Layer(tmp_path), NOW)  # the same set: nothing to record, nothing said
  other = train_set.TrainSet('tfrecord', 'the training files d/train-*', 9, 'beef')
  with pytest.raises(DataError, match=r': 9 training examples now, 8 when the checkpoints'):
    train_set.hold(Layer(tmp_path), other)
  capsys.readouterr()
  assert train_set.hold(Layer(tmp_path, accept=True, worker=1), other)
  assert capsys.readouterr().err == ''  # worker 1 accepts silently (worker 0 says it)
  assert train_set.hold(Layer(tmp_path, accept=True), other, ', the statistics kept')
  assert capsys.readouterr().err.endswith('going on with it (accept_changed_train_dir), the '
                                          'statistics kept\n')


def test_a_garbled_record_is_named(tmp_path):
  (tmp_path / 'ckpt-2.index').write_bytes(b'')
  (tmp_path / train_set.FILE).write_text('{"train_examples": ')
  with pytest.raises(DataError, match=rf'^{tmp_path}/train_set.json: unreadable \(.*\); it '
                                      'records the training set the checkpoints beside it were '
                                      "trained on: put it back, or delete it to record today's$"):
    train_set.hold(Layer(tmp_path), NOW)
