"""Tests of scripts/study_report.py: sweeps of several arms into one table and plot."""

import csv
import json
import os

import pytest

from tests.scripts.test_plots import check_png
from tests.scripts.test_plots import load_script

study_report = load_script('study_report')


def write_point(sweep_dir, batch, seed, accuracy=None, error=None, wall=100.0):
  """A point directory as scripts/sweep.py leaves it (result.json, or error.txt)."""
  logdir = os.path.join(sweep_dir, f'batch_size_per_gpu={batch}__seed={seed}')
  os.makedirs(logdir)
  if error is not None:
    with open(os.path.join(logdir, 'error.txt'), 'w') as f:
      f.write(error + '\n')
    return
  result = {'point': {'batch_size_per_gpu': batch},
            'derived': {'lr_policy_params.learning_rate': 0.1 * batch / 256},
            'seed': seed, 'overrides': [f'batch_size_per_gpu={batch}', f'random_seed={seed}'],
            'metrics': {'accuracy': accuracy, 'top5': 0.99, 'loss': 0.3,
                        'steps': 12 * 60000 // batch},
            'wall_s': wall}
  with open(os.path.join(logdir, 'result.json'), 'w') as f:
    json.dump(result, f)


@pytest.fixture
def study(tmp_path):
  sgd, lars = tmp_path / 'sgd', tmp_path / 'lars'
  write_point(sgd, 256, 0, 0.91, wall=300.0)
  write_point(sgd, 256, 1, 0.93, wall=500.0)
  write_point(sgd, 8192, 0, 0.70)
  write_point(sgd, 16384, 0, error='diverged: loss is NaN at step 5')
  write_point(lars, 256, 0, 0.90)
  write_point(lars, 8192, 0, 0.88)
  write_point(lars, 8192, 1, 0.86)
  os.makedirs(lars / 'batch_size_per_gpu=16384__seed=0')  # still running: left out
  return tmp_path


def test_report_groups_seeds_and_lists_failures(study, capsys):
  out = study / 'report'
  code = study_report.main(['--arm', f'SGD={study / "sgd"}', '--arm', f'LARS={study / "lars"}',
                            '--key', 'batch_size_per_gpu', '--out', str(out)])
  assert code == 0
  table = (out / 'study.md').read_text()
  rows = {tuple(c.strip() for c in line.strip('|').split('|')[:2]): line
          for line in table.splitlines() if line.startswith('| ') and '---' not in line}
  # mean ± sample std over seeds, the lr read back from the run, wall time per run
  assert '| 256 | SGD | 0.1 | 2/2 | 0.9200 ± 0.0141 | 2812 | 400 ± 141 |' in table
  assert '| 8192 | LARS | 3.2 | 2/2 | 0.8700 ± 0.0141 | 87 |' in rows[('8192', 'LARS')]
  assert '| 16384 | SGD | n/a | 0/1 | n/a |' in rows[('16384', 'SGD')]
  assert 'diverged: loss is NaN at step 5' in table
  assert ('16384', 'LARS') not in rows
  # in key order, SGD before LARS within a key
  order = [key for key in rows if key[0] != 'batch_size_per_gpu']
  assert order == [('256', 'SGD'), ('256', 'LARS'), ('8192', 'SGD'), ('8192', 'LARS'),
                   ('16384', 'SGD')]
  with open(out / 'study.csv') as f:
    runs = list(csv.DictReader(f))
  assert len(runs) == 7
  assert sum(r['status'] == 'failed' for r in runs) == 1
  check_png(out / 'study.png')
  assert 'study.png' in capsys.readouterr().out


def test_report_refuses_a_bad_arm(study, capsys):
  assert study_report.main(['--arm', 'no-equals-sign', '--key', 'k', '--out', str(study)]) == 2
  assert study_report.main(['--arm', f'X={study / "missing"}', '--key', 'k',
                            '--out', str(study)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err[0].startswith("error: --arm 'no-equals-sign': expected LABEL=DIR")
  assert 'is not a directory' in err[1]
