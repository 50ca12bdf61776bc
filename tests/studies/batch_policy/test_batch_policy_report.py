"""studies/batch_policy/report.py: a run's log read into its archive, and the page's block."""

import json

import pytest

from framework.run import record

from studies.batch_policy import report

def write_record(directory, policy='noise_scale', final=0.9067, updates=1436, changes=((1000, 512),)):
  """A finished train_eval run's metrics.jsonl, as framework.run.record writes it."""
  run = record.Record(directory, True, 0)
  run.add('start', 0, max_steps=1872, steps_per_epoch=234, global_batch=256, start_batch=256,
          batch_size_per_gpu=256, workers=1, iter_size=1, unit='images', batch_policy=policy)
  run.add('train', 20, loss=2.2, global_batch=256)
  run.add('eval', 234, split='test', metrics={'loss': 1.003, 'accuracy': 0.6539})
  for step, new in changes:
    run.add('batch', step, old=256, new=new, iter_size=new // 256, updates=step)
  run.add('eval', 1872, split='test', metrics={'loss': 0.2555, 'accuracy': final})
  run.add('final', 1872, split='test', selected_on=None, metrics={'accuracy': final})
  run.add('end', 1872, updates=updates)
  return directory


def test_a_record_gives_the_run_s_batches_evaluations_and_updates(tmp_path):
  events = record.read(write_record(tmp_path / 'grown'))
  run = report.from_record(events)
  assert run['policy'] == 'noise_scale' and run['start_batch'] == 256 and run['steps'] == 1872
  assert run['batches'] == [[0, 256], [1000, 512]]
  assert run['eval'] == [[234, 0.6539], [1872, 0.9067]]
  assert (run['metric'], run['final'], run['updates']) == ('accuracy', 0.9067, 1436)
  assert run['wall_s'] == pytest.approx(events[-1]['time'] - events[0]['time'], abs=0.05)
  fixed = report.from_record(record.read(write_record(tmp_path / 'fixed', 'fixed', 0.907, 1872,
                                                      ())))
  assert fixed['policy'] == 'fixed' and fixed['updates'] == 1872 and fixed['batches'] == [[0, 256]]
  # A run stopped before its end has no final numbers yet.
  stopped = [e for e in events if e['kind'] not in ('final', 'end')]
  with pytest.raises(ValueError, match='not the record of a finished train_eval run'):
    report.from_record(stopped)


def test_a_run_is_archived_from_its_directory(tmp_path):
  write_record(tmp_path / 'run')
  log = tmp_path / 'run.log'
  log.write_text('final test accuracy: 0.9067 (people read this)\n')
  run = report.archive('mnist.noise_scale', tmp_path / 'run', log, 'a note', root=tmp_path)
  archived = json.loads((tmp_path / report.ARCHIVE / 'mnist.noise_scale.json').read_text())
  assert archived == run and archived['name'] == 'mnist.noise_scale' and archived['final'] == 0.9067
  assert (tmp_path / report.ARCHIVE / 'mnist.noise_scale.log').read_text() == log.read_text()


def test_the_table_holds_each_run_against_its_workload_s_fixed_run(tmp_path):
  grown = dict(report.from_record(record.read(write_record(tmp_path))), name='mnist.noise_scale',
               note='', wall_s=600.0)
  fixed = dict(grown, name='mnist.fixed', policy='fixed', final=0.9069, updates=1872,
               wall_s=None)
  lines = report.block({'mnist': [fixed, grown]}).splitlines()
  assert lines[2] == ('| `mnist.fixed` | fixed | test accuracy 90.69 % |  | 1872 |  | '
                      'not recorded |')
  # 1 - 1436/1872 = 23.3 % fewer updates, 0.02 points below.
  assert lines[3] == ('| `mnist.noise_scale` | noise_scale | test accuracy 90.67 % | -0.02 points '
                      '| 1436 | 23 % | 10.0 min |')


def test_the_page_is_up_to_date_with_the_archive():
  assert report.main(['--check']) == 0
