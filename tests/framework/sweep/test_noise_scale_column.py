"""A sweep's results carry the gradient noise scale its runs measured (framework/sweep)."""

import math

from framework.sweep import report
from framework.sweep import results

LOG = """training resnet_cifar for 30 steps (234 steps/epoch), global batch 512 = 256 per worker x 1 worker(s) x iter_size 2; starting at step 0
final test accuracy: 0.8012 (top-5 0.9900, loss 0.5500) at step 30
noise scale (B_simple): 1234 images (global batch 512; the last ~30 of 30 measured updates weigh)
TensorBoard: tensorboard --logdir /runs/a
"""


def row(noise, accuracy=0.8, seed=0, logdir='/runs/a'):
  return {'batch': 256, 'seed': seed, 'status': 'ok', 'best': 0, 'accuracy': accuracy,
          'top5': 0.99, 'loss': 0.5, 'steps': 30, 'noise_scale': noise, 'wall_s': 10.0,
          'logdir': logdir, 'error': '', 'task_metrics': ('accuracy', 'top5', 'loss', 'steps')}


def test_the_run_log_s_noise_scale_line_is_read_into_the_result():
  metrics = results.parse_metrics(LOG)
  assert metrics == {'accuracy': 0.8012, 'top5': 0.99, 'loss': 0.55, 'steps': 30,
                     'noise_scale': 1234.0}
  unbounded = LOG.replace('1234 images', 'unbounded (the |G|² estimate is not positive yet)')
  assert math.isinf(results.parse_metrics(unbounded)['noise_scale'])
  assert 'noise_scale' not in results.parse_metrics(LOG.splitlines()[1])


def test_results_csv_and_md_gain_a_noise_scale_column_when_a_run_measured_it(tmp_path):
  rows = [row(1234.0), row(None, logdir='/runs/b')]
  columns = report.result_columns(rows)
  assert columns.index('noise_scale') == columns.index('steps') + 1
  report.write_csv(rows, columns, tmp_path / 'results.csv')
  lines = (tmp_path / 'results.csv').read_text().splitlines()
  noise_at = lines[0].split(',').index('noise_scale')
  assert [l.split(',')[noise_at] for l in lines[1:]] == ['1234.0', '']
  table = report._run_table(rows, ['batch'])
  assert table[0] == ('| batch | status | accuracy | top-5 | loss | steps | noise scale | wall (s) '
                      '| best |')
  assert table[2].startswith('| 256 | ok | 0.8000 | 0.9900 | 0.5000 | 30 | 1234 | 10.0 |')
  assert table[3].startswith('| 256 | ok | 0.8000 | 0.9900 | 0.5000 | 30 | n/a | 10.0 |')
  # Without any measurement the tables keep their columns of before.
  assert 'noise scale' not in report._run_table([row(None)], ['batch'])[0]
