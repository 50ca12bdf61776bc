"""Sweeps over a batch policy: a grid of batch_policy_params, and the updates its runs took."""

from framework.config import validation
from framework.sweep import grid
from framework.sweep import report
from framework.sweep import results

from tests.framework.sweep.test_noise_scale_column import LOG
from tests.framework.sweep.test_noise_scale_column import row

GROWN = LOG.replace('TensorBoard:', 'batch policy noise_scale: 12 updates to step 30 (a fixed '
                    'batch of 512 takes 30), global batch 512 -> 2048\nTensorBoard:')


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
  assert results.parse_metrics(GROWN)['updates'] == 12
  assert 'updates' not in results.parse_metrics(LOG)
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
