"""A sweep point's metrics from its run's record (metrics.jsonl), never from its console lines."""

import json
import math

from framework.run import record
from framework.sweep import results


def events(*added, policy='fixed'):
  found = [{'kind': 'start', 'step': 0, 'batch_policy': policy}]
  found += [dict(kind=kind, step=step, **fields) for kind, step, fields in added]
  return found


def test_the_final_numbers_the_steps_ended_at_and_the_run_facts():
  image = {'loss': 0.2589, 'accuracy': 0.9069, 'top5_accuracy': 0.9979, 'examples': 10000}
  found = events(('eval', 1872, {'metrics': dict(image, accuracy=0.9)}),
                 ('final', 1872, {'metrics': image}), ('end', 1872, {'updates': 1872}))
  assert results.record_metrics(found) == {'accuracy': 0.9069, 'top5': 0.9979, 'loss': 0.2589,
                                           'steps': 1872}
  # The best checkpoint's numbers on the final split: the steps are those the run ended at.
  words = {'wer': 0.281, 'per': 0.068, 'loss': 1.2, 'token_accuracy': 0.91, 'examples': 500}
  found = events(('final', 15, {'metrics': words}),
                 ('end', 60, {'updates': 30, 'noise_scale': 531.25,
                              'noise_scale_status': 'measured'}), policy='noise_scale')
  assert results.record_metrics(found) == {
      'accuracy': None, 'top5': None, 'loss': 1.2, 'steps': 60, 'wer': 0.281, 'per': 0.068,
      'token_accuracy': 0.91, 'noise_scale': 531.25, 'updates': 30}


def test_without_final_numbers_the_last_evaluation_or_only_the_steps():
  found = events(('eval', 20, {'metrics': {'accuracy': 0.5}}), ('end', 30, {'updates': 30}))
  assert results.record_metrics(found)['accuracy'] == 0.5
  trained = results.record_metrics(events(('end', 40, {'updates': 40, 'noise_scale': None,
                                                      'noise_scale_status': 'unbounded'})))
  assert trained['steps'] == 40 and trained['accuracy'] is None
  assert math.isinf(trained['noise_scale']) and 'updates' not in trained
  waiting = results.record_metrics(events(('end', 1, {'noise_scale_status': 'not measured'})))
  assert 'noise_scale' not in waiting
  # No end (a benchmark, or a run stopped in its training): None.
  assert results.record_metrics(events(('train', 10, {'loss': 1.0}))) is None


def test_the_record_wins_over_the_consoles_lines(tmp_path):
  (tmp_path / results.LOG_FILE).write_text(
      'final test accuracy: 0.0886 (top-5 0.5061, loss 2.3045) at step 3\n')
  run = record.Record(str(tmp_path), True, 0)
  for kind, step, fields in (('start', 0, {'batch_policy': 'fixed', 'metric': 'accuracy'}),
                             ('final', 3, {'metrics': {'accuracy': 0.09}}),
                             ('end', 3, {'updates': 3})):
    run.add(kind, step, **fields)
  assert results.run_metrics(str(tmp_path))['accuracy'] == 0.09


def test_the_curve_and_its_seconds_come_from_the_record(tmp_path):
  # Attempt 1 starts at 1000 and evaluates step 10 at 1020; stopped, resumed at 5000 from
  # step 10, it evaluates step 20 at 5030. The record keeps one evaluation per step.
  lines = [{'kind': 'start', 'step': 0, 'time': 1000.0, 'batch_policy': 'fixed'},
           {'kind': 'eval', 'step': 10, 'time': 1020.0,
            'metrics': {'accuracy': 0.5, 'top5_accuracy': 0.9}},
           {'kind': 'start', 'step': 10, 'time': 5000.0, 'batch_policy': 'fixed'},
           {'kind': 'eval', 'step': 20, 'time': 5030.0,
            'metrics': {'accuracy': 0.6, 'top5_accuracy': 0.95}}]
  (tmp_path / record.RECORD_NAME).write_text(''.join(json.dumps(l) + '\n' for l in lines))
  assert results.eval_curve(str(tmp_path)) == [(10, 0.5), (20, 0.6)]
  assert results.eval_curve(str(tmp_path), 'top5') == [(10, 0.9), (20, 0.95)]
  assert results.run_curve_metric(str(tmp_path)) == 'accuracy'
  # Counted inside the attempts only: 20 s of the first (which ended at 1025), 30 of the second.
  spans = [(1000.0, 1025.0), (5000.0, float('inf'))]
  assert results.timed_curve(str(tmp_path), 'accuracy', spans) == [[10, 0.5, 20.0],
                                                                   [20, 0.6, 55.0]]
  words = tmp_path / 'words'
  words.mkdir()
  (words / record.RECORD_NAME).write_text(json.dumps(
      {'kind': 'final', 'step': 5, 'time': 1.0, 'metrics': {'wer': 0.3}}) + '\n')
  assert results.run_curve_metric(str(words)) == 'wer'  # a record without the start's metric


def test_an_attempt_killed_unseen_ends_at_its_last_event_up_to_the_step_resumed_from(tmp_path):
  # Attempt 1 (from 1000) wrote events to step 7 (at 1021) and step 9 (at 1030), was killed
  # with its session; attempt 2 (from 5000) resumed from ckpt-7: its start dropped step 9.
  lines = [{'kind': 'start', 'step': 0, 'time': 1000.0},
           {'kind': 'train', 'step': 7, 'time': 1021.0},
           {'kind': 'start', 'step': 7, 'time': 5001.0},
           {'kind': 'train', 'step': 14, 'time': 5040.0}]
  (tmp_path / record.RECORD_NAME).write_text(''.join(json.dumps(l) + '\n' for l in lines))
  tried = [{'start': 1000.0, 'seconds': None, 'status': None, 'resumed_from': None},
           {'start': 5000.0, 'seconds': 60.0, 'status': 0, 'resumed_from': 7}]
  assert results.attempt_spans(str(tmp_path), tried) == [(1000.0, 1021.0), (5000.0, 5060.0)]
