"""A sweep point's metrics from its run's record (metrics.jsonl), the log only where there is none."""

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


def test_a_run_directory_without_a_record_is_read_from_its_log(tmp_path):
  log = 'final test accuracy: 0.0886 (top-5 0.5061, loss 2.3045) at step 3\n'
  assert results.run_metrics(str(tmp_path), log)['accuracy'] == 0.0886
  run = record.Record(str(tmp_path), True, 0)
  for kind, step, fields in (('start', 0, {'batch_policy': 'fixed'}),
                             ('final', 3, {'metrics': {'accuracy': 0.09}}),
                             ('end', 3, {'updates': 3})):
    run.add(kind, step, **fields)
  # The record wins over the console's rounded, rewordable lines.
  assert results.run_metrics(str(tmp_path), log)['accuracy'] == 0.09
