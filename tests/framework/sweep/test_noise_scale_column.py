"""A sweep's results carry the gradient noise scale its runs measured (framework/sweep)."""

from framework.sweep import report

def row(noise, accuracy=0.8, seed=0, logdir='/runs/a'):
  return {'batch': 256, 'seed': seed, 'status': 'ok', 'best': 0, 'accuracy': accuracy,
          'top5': 0.99, 'loss': 0.5, 'steps': 30, 'noise_scale': noise, 'wall_s': 10.0,
          'logdir': logdir, 'error': '', 'task_metrics': ('accuracy', 'top5', 'loss', 'steps')}


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
