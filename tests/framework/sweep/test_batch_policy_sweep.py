"""Sweeps over a batch policy: a grid of batch_policy_params, and the updates its runs took."""

import pytest

from framework.config import validation
from framework.sweep import grid
from framework.sweep import report

from tests.framework.sweep.test_noise_scale_column import row
from tests.scripts.test_sweep import read_csv
from tests.scripts.test_sweep import stub_sweep
from tests.scripts.test_sweep import write_result

def test_a_grid_over_batch_policy_params_gives_each_point_its_policy():
  key, values = grid.parse_grid_argument('batch_policy_params.factor=0.5,1,2')
  points = grid.make_points({key: values}, [], seeds=[0])
  assert [p.overrides[0] for p in points] == ['batch_policy_params.factor=0.5',
                                              'batch_policy_params.factor=1',
                                              'batch_policy_params.factor=2']
  factors = []
  for point in points:
    configs = validation.load_configs('configs/fashion_mnist_lars.py', 'train',
                                      ['batch_policy=noise_scale', *point.overrides],
                                      construct=False)
    factors.append(configs['train']['batch_policy_params'])
  assert factors == [{'factor': 0.5}, {'factor': 1}, {'factor': 2}]


def test_the_updates_of_a_grown_batch_are_read_into_the_result_and_its_tables(tmp_path):
  rows = [dict(row(1234.0), updates=12), row(1234.0, logdir='/runs/b')]
  columns = report.result_columns(rows)
  assert columns.index('updates') == columns.index('noise_scale') + 1
  report.write_csv(rows, columns, tmp_path / 'results.csv')
  lines = (tmp_path / 'results.csv').read_text().splitlines()
  at = lines[0].split(',').index('updates')
  assert [l.split(',')[at] for l in lines[1:]] == ['12', '']
  table = report._run_table(rows, ['batch'])
  assert table[0] == ('| batch | status | accuracy | top-5 | loss | steps | noise scale | updates '
                      '| wall (s) | best |')
  assert table[2].startswith('| 256 | ok | 0.8000 | 0.9900 | 0.5000 | 30 | 1234 | 12 | 10.0 |')
  assert table[3].startswith('| 256 | ok | 0.8000 | 0.9900 | 0.5000 | 30 | 1234 | n/a | 10.0 |')
  assert 'updates' not in report._run_table([row(None)], ['batch'])[0]


def test_keys_joined_by_a_plus_pair_a_policy_with_its_own_params():
  key, values = grid.parse_grid_argument(
      'batch_policy+batch_policy_params=[fixed, {}],[noise_scale, {factor: 0.5}]')
  points = grid.make_points({key: values}, [], seeds=[0])
  assert [p.overrides for p in points] == [
      ['batch_policy=fixed', 'batch_policy_params={}', 'random_seed=0'],
      ['batch_policy=noise_scale', 'batch_policy_params={factor: 0.5}', 'random_seed=0']]
  configs = [validation.load_configs('configs/fashion_mnist_lars.py', 'train', p.overrides,
                                     construct=False)['train'] for p in points]
  assert [(c['batch_policy'], c['batch_policy_params']) for c in configs] == [
      ('fixed', {}), ('noise_scale', {'factor': 0.5})]
  # Each key of a pair is a name a derivation may use.
  key, values = grid.parse_grid_argument('iter_size+batch_size_per_gpu=[1, 256],[2, 128]')
  derive = grid.parse_derive_argument('lr_policy_params.learning_rate=iter_size*0.1')
  assert [p.derived for p in grid.make_points({key: values}, [derive], None)] == [
      {'lr_policy_params.learning_rate': 0.1}, {'lr_policy_params.learning_rate': 0.2}]


@pytest.mark.parametrize('grid_values,message', [
    ({'batch_policy+batch_policy_params': [('fixed', 'fixed')]},
     r'^grid batch_policy\+batch_policy_params: value fixed must be a list of 2 values, one for '
     r'each of batch_policy, batch_policy_params$'),
    ({'batch_policy+batch_policy_params': [('[steps, {}]', ['steps', {}])],
      'batch_policy': [('fixed', 'fixed')]},
     r'^grid: batch_policy is set by two grid keys; give it in one$'),
])
def test_a_pair_that_does_not_fit_its_keys_is_one_line(grid_values, message):
  with pytest.raises(grid.SweepError, match=message):
    grid.make_points(grid_values, [], None)


def test_a_fixed_batch_s_updates_are_its_steps_beside_a_grown_batch(tmp_path):
  out = tmp_path / 'sweep'
  stub = stub_sweep(out, ['--grid', 'batch_policy=fixed,noise_scale'])
  write_result(out, stub.points[0], {'accuracy': 0.9, 'top5': 0.99, 'loss': 0.3, 'steps': 30})
  write_result(out, stub.points[1], {'accuracy': 0.9, 'top5': 0.99, 'loss': 0.3, 'steps': 30,
                                     'updates': 12})
  report.write_results(stub)
  assert [r['updates'] for r in read_csv(out / 'results.csv')] == ['30', '12']
  text = (out / 'results.md').read_text()
  assert '| fixed | ok | 0.9000 | 0.9900 | 0.3000 | 30 | 30 |' in text, text
  # A sweep whose batches all stayed fixed keeps the tables of before.
  assert 'updates' not in report._run_table(report.collect_rows(stub)[:1], ['batch_policy'])[0]
