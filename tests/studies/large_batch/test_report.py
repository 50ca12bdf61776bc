"""Tests of studies/large_batch/report.py, study.py and targets.py: sweeps of several arms, one table."""

import csv
import json
import os

import pytest

from studies.large_batch import figures
from studies.large_batch import report as study_report
from studies.large_batch import study as study_lib
from tests.scripts.test_plots import check_png


def write_record(directory, start, evals=()):
  """A run's record (metrics.jsonl) that starts at ``start``, then its evaluations' accuracies."""
  from framework.run import record  # pylint: disable=import-outside-toplevel
  lines = [{'kind': 'start', 'step': 0, 'time': start, 'metric': 'accuracy'}]
  lines += [{'kind': 'eval', 'step': step, 'time': start + seconds,
             'metrics': {'loss': 0.3, 'accuracy': accuracy, 'top5_accuracy': 0.99}}
            for step, accuracy, seconds in evals]
  with open(os.path.join(directory, record.RECORD_NAME), 'w', encoding='utf-8') as f:
    f.write(''.join(json.dumps(line) + '\n' for line in lines))


def write_point(sweep_dir, batch, seed, accuracy=None, error=None, wall=100.0, lr=None,
                curve=(), machine=None, fixed=()):
  """A point directory as scripts/sweep.py leaves it (result.json, or error.txt).

  ``curve``: ``(step, accuracy, seconds since the start)`` of its evaluations,
  written to the run's record as the trainer writes them (a result.json from
  before results kept their curve).
  ``fixed``: the sweep's ``--set`` overrides (``'optimizer_params.eeta=0.004'``),
  recorded first, as scripts/sweep.py records them.
  """
  name = f'batch_size_per_gpu={batch}__seed={seed}'
  if lr is not None:
    name = f'batch_size_per_gpu={batch}__lr_policy_params.learning_rate={lr:g}__seed={seed}'
  logdir = os.path.join(sweep_dir, name)
  os.makedirs(logdir)
  if error is not None:
    with open(os.path.join(logdir, 'error.txt'), 'w') as f:
      f.write(error + '\n')
    return
  lr = 0.1 * batch / 256 if lr is None else lr
  result = {'point': {'batch_size_per_gpu': batch},
            'derived': {'lr_policy_params.learning_rate': lr},
            'seed': seed,
            'overrides': list(fixed) + [f'batch_size_per_gpu={batch}', f'random_seed={seed}'],
            'metrics': {'accuracy': accuracy, 'top5': 0.99, 'loss': 0.3,
                        'steps': 12 * 60000 // batch},
            'wall_s': wall}
  if machine is not None:
    result['machine'] = machine
  with open(os.path.join(logdir, 'result.json'), 'w') as f:
    json.dump(result, f)
  if curve:
    write_record(logdir, 1.7e9 + 1000.0 * seed, curve)


@pytest.fixture
def study(tmp_path):
  sgd, lars = tmp_path / 'sgd', tmp_path / 'lars'
  # SGD at 256: a grid of two learning rates; 0.1 (two seeds) is the better one.
  write_point(sgd, 256, 0, 0.91, wall=300.0, lr=0.1,
              curve=[(250, 0.85, 30.0), (500, 0.905, 61.0), (750, 0.91, 90.0)])
  write_point(sgd, 256, 1, 0.93, wall=500.0, lr=0.1,
              curve=[(350, 0.88, 40.0), (700, 0.92, 79.0)])
  write_point(sgd, 256, 0, 0.90, lr=0.2, curve=[(300, 0.90, 35.0)])
  write_point(sgd, 8192, 0, 0.70, curve=[(40, 0.6, 20.0), (87, 0.70, 44.0)])
  write_point(sgd, 16384, 0, error='diverged: loss is NaN at step 5')
  write_point(lars, 256, 0, 0.90, curve=[(2000, 0.9, 500.0)])
  write_point(lars, 8192, 0, 0.88, curve=[(40, 0.89, 20.0), (87, 0.905, 44.0)])
  write_point(lars, 8192, 1, 0.86, curve=[(87, 0.86, 41.0)])
  os.makedirs(lars / 'batch_size_per_gpu=16384__seed=0')  # still running: left out
  return tmp_path


def test_report_groups_seeds_and_lists_failures(study, capsys):
  out = study / 'report'
  code = study_report.main(['--arm', f'SGD={study / "sgd"}', '--arm', f'LARS={study / "lars"}',
                            '--key', 'batch_size_per_gpu', '--out', str(out)])
  assert code == 0
  table = (out / 'study.md').read_text()
  main_table = table.split('Tuning grids')[0]
  rows = {tuple(c.strip() for c in line.strip('|').split('|')[:2]): line
          for line in main_table.splitlines() if line.startswith('| ') and '---' not in line}
  # The best lr of the grid: mean ± sample std over seeds, gap to the best at 256,
  # updates and seconds to 90 % (first eval at or above it: 500 and 700 steps,
  # 61 and 79 s), wall time per run.
  assert ('| 256 | SGD | 0.1 | 2/2 | 0.9200 ± 0.0141 | +0.00 | 2812 | 600 ± 141 | 70 ± 13 '
          '| 400 ± 141 |') in table
  assert ('| 8192 | LARS | 3.2 | 2/2 | 0.8700 ± 0.0141 | -5.00 | 87 | 87 (1/2 reached) '
          '| 44 (1/2 reached) |') in rows[('8192', 'LARS')]
  assert '| 8192 | SGD | 3.2 | 1/1 | 0.7000 | -22.00 | 87 | not reached |' in rows[('8192', 'SGD')]
  assert '| 16384 | SGD | n/a | 0/1 | n/a |' in rows[('16384', 'SGD')]
  assert 'diverged: loss is NaN at step 5' in table
  assert ('16384', 'LARS') not in rows
  # in key order, SGD before LARS within a key
  order = [key for key in rows if key[0] != 'batch_size_per_gpu']
  assert order == [('256', 'SGD'), ('256', 'LARS'), ('8192', 'SGD'), ('8192', 'LARS'),
                   ('16384', 'SGD')]
  # The grid table lists both learning rates at 256, the chosen one in bold.
  grid = table.split('Tuning grids')[1]
  assert '| 256 | SGD | **0.1** | 2/2 | 0.9200 ± 0.0141 | 600 ± 141 |' in grid
  assert '| 256 | SGD | 0.2 | 1/1 | 0.9000 | 300 |' in grid
  with open(out / 'study.csv') as f:
    runs = list(csv.DictReader(f))
  assert len(runs) == 8
  assert sum(r['status'] == 'failed' for r in runs) == 1
  check_png(out / 'study.png')
  check_png(out / 'steps.png')
  assert 'study.png, steps.png' in capsys.readouterr().out


def test_steps_to_target_takes_the_fewest_over_the_grid(study):
  runs = study_lib.read_runs('SGD', str(study / 'sgd'), 'batch_size_per_gpu')
  at_256 = [r for r in runs if r['batch_size_per_gpu'] == 256]
  # lr 0.1: seeds at 500 and 700 (mean 600); lr 0.2: 300. Shallue et al.'s steps to result.
  assert study_lib.steps_to_target(at_256) == 300
  at_8k = [r for r in study_lib.read_runs('LARS', str(study / 'lars'), 'batch_size_per_gpu')
           if r['batch_size_per_gpu'] == 8192]
  assert study_lib.steps_to_target(at_8k) is None  # one seed never reached 90 %
  assert study_lib.to_target(at_8k[0]['logdir'], 0.9) == (87, 44.0)


def test_a_result_with_its_curve_needs_no_run_directory(study, tmp_path):
  """An archived result.json alone (no record) gives the same row."""
  archived = tmp_path / 'archived'
  for logdir in sorted((study / 'sgd').iterdir()):
    if not (logdir / 'result.json').exists():
      continue
    result = json.loads((logdir / 'result.json').read_text())
    result['curve'] = [list(point) for point in study_lib.timed_curve(str(logdir))]
    os.makedirs(archived / logdir.name)
    (archived / logdir.name / 'result.json').write_text(json.dumps(result))
  # lr 0.1 seed 0 of the fixture: evaluations at 250, 500 (0.905, 61 s after the start), 750.
  first = json.loads((archived / 'batch_size_per_gpu=256__lr_policy_params.learning_rate=0.1'
                      '__seed=0' / 'result.json').read_text())
  assert first['curve'] == [[250, 0.85, 30.0], [500, 0.905, 61.0], [750, 0.91, 90.0]]
  keep = ('batch_size_per_gpu', 'seed', 'lr', 'accuracy', 'steps_to_target', 'seconds_to_target')
  from_dirs = [{k: r[k] for k in keep}
               for r in study_lib.read_runs('SGD', str(study / 'sgd'), 'batch_size_per_gpu')
               if r['status'] == 'ok']
  from_files = [{k: r[k] for k in keep}
                for r in study_lib.read_runs('SGD', str(archived), 'batch_size_per_gpu')]
  assert from_files == from_dirs
  assert [(r['steps_to_target'], r['seconds_to_target']) for r in from_files] == [
      (500, 61.0), (300, 35.0), (700, 79.0), (None, None)]


def test_report_refuses_a_bad_arm(study, capsys):
  assert study_report.main(['--arm', 'no-equals-sign', '--key', 'k', '--out', str(study)]) == 2
  assert study_report.main(['--arm', f'X={study / "missing"}', '--key', 'k',
                            '--out', str(study)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err[0].startswith("error: --arm 'no-equals-sign': expected LABEL=DIR")
  assert 'is not a directory' in err[1]


def test_best_lr_and_global_batch(study, capsys, tmp_path):
  assert study_report.main(['--arm', f'SGD={study / "sgd"}', '--key', 'batch_size_per_gpu',
                            '--out', str(tmp_path), '--best-lr', '256']) == 0
  assert capsys.readouterr().out.strip() == '0.1'
  assert study_report.main(['--arm', f'SGD={study / "sgd"}', '--key', 'batch_size_per_gpu',
                            '--out', str(tmp_path), '--best-lr', '16384']) == 3  # only failed
  # 16K as two micro-batches of 8K: the global batch tells it from 8K.
  sixteen = study / 'lars16'
  logdir = sixteen / 'batch_size_per_gpu=8192__iter_size=2__seed=0'
  os.makedirs(logdir)
  (logdir / 'result.json').write_text(json.dumps({
      'point': {'batch_size_per_gpu': 8192, 'iter_size': 2}, 'seed': 0,
      'overrides': ['batch_size_per_gpu=8192', 'iter_size=2'],
      'metrics': {'accuracy': 0.9, 'steps': 72}, 'wall_s': 10.0}))
  os.makedirs(sixteen / 'batch_size_per_gpu=8192__iter_size=2__seed=1')
  (sixteen / 'batch_size_per_gpu=8192__iter_size=2__seed=1' / 'error.txt').write_text('boom\n')
  runs = study_lib.read_runs('LARS', str(sixteen), study_lib.GLOBAL_BATCH)
  assert [(r['global_batch'], r['status']) for r in runs] == [(16384, 'ok'), (16384, 'failed')]


def test_best_arm_compares_each_arm_at_its_best_learning_rate(study, capsys, tmp_path):
  arms = ['--arm', f'SGD={study / "sgd"}', '--arm', f'LARS={study / "lars"}',
          '--key', 'batch_size_per_gpu', '--out', str(tmp_path)]
  # At 256: SGD's best rate, 0.1, averages 0.92 over its two seeds (its lr 0.2
  # run, 0.90, does not count against it); LARS has 0.90.
  assert study_report.main(arms + ['--best-arm', '256']) == 0
  assert capsys.readouterr().out == 'SGD\n'
  # At 8K: LARS's two seeds average 0.87, SGD's one run has 0.70.
  assert study_report.main(arms + ['--best-arm', '8192']) == 0
  assert capsys.readouterr().out == 'LARS\n'
  # At 16K nothing finished (SGD failed, LARS still running).
  assert study_report.main(arms + ['--best-arm', '16384']) == 3
  assert capsys.readouterr().out == ''


def test_doc_block_and_images_are_written_from_the_runs(study, tmp_path):
  doc = tmp_path / 'page.md'
  doc.write_text('# Study\n\n<!-- study_report: begin -->\nold table\n<!-- study_report: end -->\n'
                 '\nHistory.\n')
  out = tmp_path / 'report'
  assert study_report.main(['--arm', f'SGD={study / "sgd"}', '--key', 'batch_size_per_gpu',
                            '--out', str(out), '--doc', str(doc),
                            '--doc-images', str(tmp_path / 'img')]) == 0
  text = doc.read_text()
  assert 'old table' not in text and text.endswith('<!-- study_report: end -->\n\nHistory.\n')
  assert (out / 'study.md').read_text() in text
  assert '![updates to 90 % test accuracy against batch size](img_steps.png)' in text
  check_png(tmp_path / 'img_accuracy.png')
  check_png(tmp_path / 'img_steps.png')
  doc.write_text('no markers\n')
  assert study_report.main(['--arm', f'SGD={study / "sgd"}', '--key', 'batch_size_per_gpu',
                            '--out', str(out), '--doc', str(doc)]) == 2
  assert doc.read_text() == 'no markers\n'


def test_the_summary_is_a_matrix_of_the_tables_rows_and_the_targets(study, tmp_path, capsys):
  readme = tmp_path / 'README.md'
  readme.write_text('# Project\n\n<!-- study_report: summary begin -->\nold\n'
                    '<!-- study_report: summary end -->\n\nMore.\n')
  out = tmp_path / 'report'
  # An ablation whose only run is still going has no row yet.
  os.makedirs(tmp_path / 'ablation' / 'batch_size_per_gpu=8192__seed=0')
  assert study_report.main(['--arm', f'SGD={study / "sgd"}', '--arm', f'LARS={study / "lars"}',
                            '--arm', f'Ablation={tmp_path / "ablation"}',
                            '--key', 'batch_size_per_gpu', '--out', str(out), '--baseline', '256',
                            '--reference-arm', 'SGD', '--claim', 'LARS@8192<=1.0',
                            '--summary', str(readme)]) == 0
  text = readme.read_text()
  block = text.split('<!-- study_report: summary begin -->\n')[1].split(
      '<!-- study_report: summary end -->')[0]
  # The fixture's chosen settings: SGD at 256, lr 0.1 (91 and 93: 92.00 ± 1.41 %,
  # the reference), at 8192 70 %; LARS at 256 90 %, at 8192 88 and 86 %. SGD at
  # 16384 failed and LARS's is still running: empty cells.
  assert block.splitlines()[:5] == [
      '| arm | 256 | 8192 | 16384 |', '|---|---|---|---|',
      '| SGD | 92.00 ± 1.41 (+0.00) | 70.00 (-22.00) |  |',
      '| LARS | 90.00 (-2.00) | 87.00 ± 1.41 (-5.00) |  |', '']
  assert ('in brackets, the gap in points to the best result at batch_size_per_gpu 256 '
          '(92.00 %).') in block
  # The target lines are the full table's, word for word.
  assert block.endswith(''.join(line + '\n' for line in target_lines(
      (out / 'study.md').read_text())[2:]))
  assert '- LARS at 8192 within 1 point of it: 87.00 % over 2 seeds (lr 3.2), -5.00 points' in block
  assert 'old' not in text and text.startswith('# Project\n') and text.endswith('\n\nMore.\n')
  # A file without the two lines is named in one line and left as it was.
  readme.write_text('no markers\n')
  capsys.readouterr()
  assert study_report.main(['--arm', f'SGD={study / "sgd"}', '--key', 'batch_size_per_gpu',
                            '--out', str(out), '--summary', str(readme)]) == 2
  assert capsys.readouterr().err == (
      f'error: --summary: {readme}: no <!-- study_report: summary begin --> ... '
      '<!-- study_report: summary end --> block to write the table into\n')
  assert readme.read_text() == 'no markers\n'


def test_gaps_are_to_the_named_baseline_and_absent_without_it(study, tmp_path):
  runs = study_lib.read_runs('SGD', str(study / 'sgd'), 'batch_size_per_gpu')
  # The fixture's best at 256 is lr 0.1 (seeds 0.91 and 0.93, mean 0.92); at 8192, 0.70.
  assert study_lib.best_at_smallest(runs, 'batch_size_per_gpu', ['SGD']) == pytest.approx(0.92)
  assert study_lib.best_at_smallest(runs, 'batch_size_per_gpu', ['SGD'], 8192) == pytest.approx(0.70)
  at_8k = [r for r in runs if r['batch_size_per_gpu'] == 8192]
  # Only 8K has run: its row has no gap to a batch 256 that has no result yet.
  assert '| 8192 | SGD | 3.2 | 1/1 | 0.7000 | n/a |' in study_report.markdown(
      at_8k, 'batch_size_per_gpu', ['SGD'], baseline=256)
  assert '| 8192 | SGD | 3.2 | 1/1 | 0.7000 | -22.00 |' in study_report.markdown(
      runs, 'batch_size_per_gpu', ['SGD'], baseline=256)


def test_gaps_are_to_the_reference_arms_only(study, tmp_path, capsys):
  # LARS at 256 (0.95 below) beats SGD's 0.92, but only SGD is the reference.
  write_point(study / 'lars', 256, 0, 0.95, lr=2.0)
  args = ['--arm', f'SGD={study / "sgd"}', '--arm', f'LARS={study / "lars"}',
          '--key', 'batch_size_per_gpu', '--out', str(tmp_path / 'out')]
  assert study_report.main(args + ['--reference-arm', 'SGD']) == 0
  table = (tmp_path / 'out' / 'study.md').read_text()
  assert '| 256 | LARS | 2 | 1/1 | 0.9500 | +3.00 |' in table
  assert '| 256 | SGD | 0.1 | 2/2 | 0.9200 ± 0.0141 | +0.00 |' in table
  assert study_report.main(args) == 0
  assert '| 256 | SGD | 0.1 | 2/2 | 0.9200 ± 0.0141 | -3.00 |' in (
      tmp_path / 'out' / 'study.md').read_text()
  capsys.readouterr()
  assert study_report.main(args + ['--reference-arm', 'LAMB']) == 2
  assert capsys.readouterr().err == ("error: --reference-arm 'LAMB': not an --arm label; labels: "
                                     'SGD, LARS\n')


def target_lines(table):
  return table.split('Targets, checked from the runs above')[1].strip().splitlines()


def test_targets_are_checked_from_the_runs(study, tmp_path, capsys):
  # The budget check: SGD at 256 with half the epochs, lr 0.1, seeds at 0.917 and 0.919.
  write_point(study / 'sgd_half', 256, 0, 0.917, lr=0.1)
  write_point(study / 'sgd_half', 256, 1, 0.919, lr=0.1)
  args = ['--arm', f'SGD={study / "sgd"}', '--arm', f'LARS={study / "lars"}',
          '--arm', f'SGD half={study / "sgd_half"}', '--key', 'batch_size_per_gpu',
          '--out', str(tmp_path / 'out'), '--baseline', '256', '--reference-arm', 'SGD',
          '--reference-arm', 'LARS', '--claim', 'LARS@8192<=1.0', '--claim', 'LARS@8192<=6',
          '--claim', 'SGD@8192<=1.0', '--claim', 'LARS@16384<=2.0',
          '--budget', 'SGD=SGD half', '--budget', 'LARS=SGD half']
  assert study_report.main(args) == 0
  table = (tmp_path / 'out' / 'study.md').read_text()
  head, *lines = table.split('Targets, checked from the runs above')[1].strip().splitlines()
  # The best at 256 is SGD at lr 0.1 (0.91, 0.93: 92.00 %); LARS at 256 has 0.90.
  assert head == '; the best result at batch_size_per_gpu 256 is SGD, 92.00 % over 2 seeds (lr 0.1):'
  # LARS at 8192: 0.88 and 0.86, mean 87.00 %: 5.00 points below.
  assert [line for line in lines if line] == [
      '- LARS at 8192 within 1 point of it: 87.00 % over 2 seeds (lr 3.2), -5.00 points: '
      '**missed**',
      '- LARS at 8192 within 6 points of it: 87.00 % over 2 seeds (lr 3.2), -5.00 points: **met**',
      '- SGD at 8192 within 1 point of it: 70.00 % over 1 seed (lr 3.2), -22.00 points: '
      '**missed** '
      '(provisional: 1 of 2 seeds)',
      '- LARS at 16384 within 2 points of it: not measured yet',
      # 92.00 - 91.80 = 0.20 points, below 0.3: the best arm's budget is enough.
      '- budget: SGD at batch_size_per_gpu 256 against SGD half (lr 0.1): +0.20 points from half the '
      'epochs (2 seeds) to all of them (2 seeds); the best arm gains less than 0.3: the '
      'budget is **large enough**',
      # LARS is not the best arm at 256: its gain is given, with no verdict.
      '- budget: LARS at batch_size_per_gpu 256 against SGD half (lr 0.1): -1.80 points from half the '
      'epochs (2 seeds) to all of them (1 seed)']
  assert study_report.main(args + ['--budget-points', '0.1']) == 0
  assert 'the best arm gains no less than 0.1: the budget is **too small**' in (
      tmp_path / 'out' / 'study.md').read_text()
  # Before batch 256 has a result there is no reference to measure against.
  only_8k = tmp_path / 'only_8k'
  write_point(only_8k, 8192, 0, 0.92, lr=11.31)
  assert study_report.main(['--arm', f'LARS={only_8k}', '--key', 'batch_size_per_gpu',
                            '--out', str(tmp_path / 'o2'), '--baseline', '256',
                            '--claim', 'LARS@8192<=1.0']) == 0
  assert target_lines((tmp_path / 'o2' / 'study.md').read_text()) == [
      '; the best result at batch_size_per_gpu 256: none yet:', '',
      '- LARS at 8192 within 1 point of it: 92.00 % over 1 seed (lr 11.31), no reference yet']
  capsys.readouterr()


@pytest.mark.parametrize('flags, message', [
    (['--claim', 'LARS8192<=1'], "error: --claim 'LARS8192<=1': expected LABEL@VALUE<=POINTS"),
    (['--claim', 'LARS@8192<1'], "error: --claim 'LARS@8192<1': expected LABEL@VALUE<=POINTS"),
    (['--claim', 'LAMB@8192<=1'], "error: --claim 'LAMB': not an --arm label; labels: SGD, LARS"),
    (['--budget', 'SGD'], "error: --budget 'SGD': expected FULL=HALF, two --arm labels"),
    (['--budget', 'SGD=SGD half'], "error: --budget 'SGD half': not an --arm label"),
])
def test_a_malformed_target_is_one_line(study, tmp_path, capsys, flags, message):
  assert study_report.main(['--arm', f'SGD={study / "sgd"}', '--arm', f'LARS={study / "lars"}',
                            '--key', 'batch_size_per_gpu', '--out', str(tmp_path)] + flags) == 2
  err = capsys.readouterr().err
  assert err.startswith(message) and err.count('\n') == 1


def test_wall_times_are_compared_on_one_machine(tmp_path):
  fast, slow = 'CPU A (family 26, model 2), 2 CPUs', 'CPU B (family 25, model 17), 2 CPUs'
  arm = tmp_path / 'lars'
  # 256: one run on each machine; 8192: two on the fast one; 16384: only on the slow one.
  write_point(arm, 256, 0, 0.93, wall=1000.0, lr=2.0, machine=fast, curve=[(500, 0.9, 100.0)])
  write_point(arm, 256, 1, 0.93, wall=5000.0, lr=2.0, machine=slow, curve=[(500, 0.9, 700.0)])
  write_point(arm, 8192, 0, 0.92, wall=900.0, lr=11.31, machine=fast, curve=[(160, 0.9, 400.0)])
  write_point(arm, 8192, 1, 0.92, wall=1100.0, lr=11.31, machine=fast,
              curve=[(150, 0.9, 500.0)])
  write_point(arm, 16384, 0, 0.91, wall=4000.0, lr=16.0, curve=[(100, 0.9, 3000.0)])
  runs = study_lib.read_runs('LARS', str(arm), 'batch_size_per_gpu')
  assert study_lib.timing_machine(runs) == fast  # three runs, against one
  table = study_report.markdown(runs, 'batch_size_per_gpu', ['LARS'])
  rows = {line.split('|')[1].strip(): [c.strip() for c in line.strip('|').split('|')]
          for line in table.splitlines() if line.startswith('| ') and '---' not in line}
  # 256: the accuracy counts both seeds, the wall times only the fast machine's.
  assert rows['256'][3:] == ['2/2', '0.9300 ± 0.0000', '+0.00', '2812', '500 ± 0', '100', '1000']
  assert rows['8192'][7:] == ['155 ± 7', '450 ± 71', '1000 ± 141']
  # 16384 ran only on a machine not recorded: its own times, marked.
  assert rows['16384'][7:] == ['100', '3000 †', '4000 †']
  assert (f'Wall times are seconds on {fast}, from the runs made there; † marks a row timed only '
          'on another machine, or before machines were recorded.') in table


def test_the_machine_names_its_cpu_and_count():
  from framework.sweep import runner  # pylint: disable=import-outside-toplevel
  name = runner.machine()
  assert name.endswith(f', {os.cpu_count()} CPUs') and len(name) > len(', 2 CPUs')
  with open('/proc/cpuinfo') as f:
    model = [l.split(':', 1)[1].strip() for l in f if l.startswith('model name')][0]
  assert name.startswith(model + ' (family ')


def test_the_accuracy_figure_draws_the_tables_rates(study):
  arms, runs = study_report.read_arms([f'SGD={study / "sgd"}', f'LARS={study / "lars"}'],
                                      'batch_size_per_gpu', 0.9)
  series = figures.accuracy_series(runs, 'batch_size_per_gpu', arms)
  # SGD at 256: lr 0.1's two seeds (91 %, 93 %), not lr 0.2's 90 % of the grid;
  # 16K failed, so SGD has no point there, and LARS's 16K run is unfinished.
  assert [(v, round(m, 6), round(s, 6)) for v, m, s in series['SGD']] == [
      (256, 92.0, round(2 ** 0.5, 6)), (8192, 70.0, 0.0)]
  assert [(v, round(m, 6), round(s, 6)) for v, m, s in series['LARS']] == [
      (256, 90.0, 0.0), (8192, 87.0, round(2 ** 0.5, 6))]


def test_an_arm_of_several_sweeps_is_tuned_over_their_overrides(study, tmp_path):
  """One label over the recipe's sweep and two with eeta set: one row per batch, its best setting."""
  eeta4, eeta8 = study / 'lars_eeta0.004', study / 'lars_eeta0.008'
  for directory, eeta in ((eeta4, 0.004), (eeta8, 0.008)):
    os.makedirs(directory)
  # At 8K the recipe's LARS has 0.88 and 0.86 (87.0 %); eeta 0.004: 0.89 and
  # 0.87 (88.0 %, the best); eeta 0.008: 0.95 once, 0.79 once (87.0 %, one
  # more seed does not break the tie in its favour: the first setting keeps it).
  write_point(eeta4, 8192, 0, 0.89, fixed=['optimizer_params.eeta=0.004'],
              curve=[(60, 0.9, 30.0)])
  write_point(eeta4, 8192, 1, 0.87, fixed=['optimizer_params.eeta=0.004'],
              curve=[(80, 0.9, 40.0)])
  write_point(eeta8, 8192, 0, 0.95, fixed=['optimizer_params.eeta=0.008'])
  write_point(eeta8, 8192, 1, 0.79, fixed=['optimizer_params.eeta=0.008'])
  write_point(eeta8, 256, 0, error='diverged')
  # An arm whose every run sets the same override (half the epochs) shows none.
  # Its rate, as every rate, is shown as given (the study's 4 significant digits).
  write_point(study / 'half', 256, 0, 0.90, lr=0.02828, fixed=['num_epochs=6'])
  arms = ['--arm', f'SGD={study / "sgd"}', '--arm', f'LARS={study / "lars"}',
          '--arm', f'LARS={eeta4}', '--arm', f'LARS={eeta8}', '--arm', f'half={study / "half"}']
  out = tmp_path / 'out'
  assert study_report.main(arms + ['--key', 'batch_size_per_gpu', '--out', str(out),
                                   '--claim', 'LARS@8192<=5.0']) == 0
  table = (out / 'study.md').read_text()
  main_table, grids = table.split('Tuning grids')
  # One LARS row per batch size; at 8K eeta 0.004's two seeds, the gap to SGD's
  # 92.0 % at 256. The recipe's sweep, which leaves eeta as configured, shows none.
  assert [line.split(' | ')[:3] for line in main_table.splitlines() if '| LARS |' in line] == [
      ['| 256', 'LARS', '0.1'], ['| 8192', 'LARS', '3.2, eeta=0.004']]
  assert '| 8192 | LARS | 3.2, eeta=0.004 | 2/2 | 0.8800 ± 0.0141 | -4.00 | 87 | 70 ± 14 |' in (
      main_table)
  assert '| 256 | half | 0.02828 | 1/1 | 0.9000 | -2.00 |' in main_table
  assert [line for line in grids.splitlines() if line.startswith('| 8192 | LARS')] == [
      '| 8192 | LARS | 3.2 | 2/2 | 0.8700 ± 0.0141 | 87 (1/2 reached) |',
      '| 8192 | LARS | **3.2, eeta=0.004** | 2/2 | 0.8800 ± 0.0141 | 70 ± 14 |',
      '| 8192 | LARS | 3.2, eeta=0.008 | 2/2 | 0.8700 ± 0.1131 | not reached |']
  assert ('- LARS at 8192 within 5 points of it: 88.00 % over 2 seeds (lr 3.2, eeta=0.004), '
          '-4.00 points: **met**') in grids
  assert 'LARS, `batch_size_per_gpu=256__seed=0`: diverged' in grids
  with open(out / 'study.csv') as f:
    sets = {(r['arm'], r['batch_size_per_gpu'], r['seed'], r['set']) for r in csv.DictReader(f)
            if r['arm'] in ('LARS', 'half') and r['status'] == 'ok'}
  assert sets == {('half', '256', '0', ''), ('LARS', '256', '0', ''), ('LARS', '8192', '0', ''), ('LARS', '8192', '1', ''),
                  ('LARS', '8192', '0', 'eeta=0.004'), ('LARS', '8192', '1', 'eeta=0.004'),
                  ('LARS', '8192', '0', 'eeta=0.008'), ('LARS', '8192', '1', 'eeta=0.008')}
  # The figure has one LARS line, through the chosen setting at each batch size.
  labels, runs = study_report.read_arms([a for a in arms if a != '--arm'],
                                        'batch_size_per_gpu', 0.9)
  assert labels == ['SGD', 'LARS', 'half']
  series = figures.accuracy_series(runs, 'batch_size_per_gpu', labels)
  assert [(v, round(m, 6)) for v, m, _ in series['LARS']] == [(256, 90.0), (8192, 88.0)]
  # Fewest updates to 90 % over LARS's settings at 8K: eeta 0.004's, 70 on average.
  assert study_lib.steps_to_target([r for r in runs if r['arm'] == 'LARS'
                                    and r['batch_size_per_gpu'] == 8192]) == 70


def test_the_steps_figure_draws_the_reference_arms(study, tmp_path, monkeypatch):
  drawn = []
  monkeypatch.setattr(figures, 'plot_steps',
                      lambda runs, key, arms, *rest: drawn.append(list(arms)) or False)
  args = ['--arm', f'SGD={study / "sgd"}', '--arm', f'LARS={study / "lars"}',
          '--key', 'batch_size_per_gpu', '--out', str(tmp_path)]
  assert study_report.main(args) == 0
  assert study_report.main(args + ['--reference-arm', 'LARS']) == 0
  assert drawn == [['SGD', 'LARS'], ['LARS']]


def test_targets_default_to_the_smallest_key_value(study, tmp_path):
  write_point(study / 'sgd_half', 256, 0, 0.915, lr=0.1)
  assert study_report.main(['--arm', f'SGD={study / "sgd"}', '--arm', f'half={study / "sgd_half"}',
                            '--key', 'batch_size_per_gpu', '--out', str(tmp_path),
                            '--reference-arm', 'SGD', '--claim', 'SGD@8192<=1',
                            '--budget', 'SGD=half']) == 0
  lines = target_lines((tmp_path / 'study.md').read_text())
  assert lines[0] == ('; the best result at batch_size_per_gpu 256 is SGD, 92.00 % over '
                      '2 seeds (lr 0.1):')
  assert lines[3].startswith('- budget: SGD at batch_size_per_gpu 256 against half (lr 0.1): +0.50 points')


def test_the_budget_compares_the_full_arms_chosen_setting_at_both_budgets(tmp_path):
  # LARS at 256: the recipe's eeta (91.5 %) and eeta 0.004 (92.5 %, its chosen setting).
  study = tmp_path / 'study'
  for seed, accuracy in ((0, 0.91), (1, 0.92)):
    write_point(study / 'lars', 256, seed, accuracy, lr=2.0)
  for seed, accuracy in ((0, 0.93), (1, 0.92)):
    write_point(study / 'lars_eeta', 256, seed, accuracy, lr=2.0,
                fixed=['optimizer_params.eeta=0.004'])
  # Half the epochs at the recipe's eeta only, 93.0 %: not the chosen setting.
  for seed in (0, 1):
    write_point(study / 'half', 256, seed, 0.93, lr=2.0, fixed=['num_epochs=6'])
  args = ['--arm', f'LARS={study / "lars"}', '--arm', f'LARS={study / "lars_eeta"}',
          '--arm', f'half={study / "half"}', '--key', 'batch_size_per_gpu', '--out',
          str(tmp_path / 'out'), '--reference-arm', 'LARS', '--budget', 'LARS=half']
  assert study_report.main(args) == 0
  assert target_lines((tmp_path / 'out' / 'study.md').read_text())[-1] == (
      '- budget: LARS at batch_size_per_gpu 256 against half: not measured at its chosen '
      'setting (lr 2, eeta=0.004) yet')
  # Half the epochs at eeta 0.004 too, 92.1 %: the line compares that with
  # 92.5 %, +0.40 points (not -0.50 against the recipe's eeta's 93.0 %).
  for seed, accuracy in ((0, 0.92), (1, 0.922)):
    write_point(study / 'half_eeta', 256, seed, accuracy, lr=2.0,
                fixed=['num_epochs=6', 'optimizer_params.eeta=0.004'])
  assert study_report.main(args + ['--arm', f'half={study / "half_eeta"}']) == 0
  assert target_lines((tmp_path / 'out' / 'study.md').read_text())[-1] == (
      '- budget: LARS at batch_size_per_gpu 256 against half (lr 2, eeta=0.004): +0.40 points '
      'from half the epochs (2 seeds) to all of them (2 seeds); the best arm gains no less '
      'than 0.3: the budget is **too small**')


def test_an_arm_that_never_reached_the_target_is_bounded_by_its_shortest_run(tmp_path):
  def run(arm, batch, lr, steps, wall, reached=None, status='ok'):
    return {'arm': arm, 'batch': batch, 'lr': lr, 'status': status, 'steps': steps,
            'wall_s': wall, 'steps_to_target': reached and reached[0],
            'seconds_to_target': reached and reached[1]}
  runs = [
      # At 256 A reaches the target (not bounded); B has a grid of which no rate reached it.
      run('A', '256', 0.1, 400, 80.0, reached=(200, 40.0)), run('A', '256', 0.2, 400, 90.0),
      run('B', '256', 0.1, 400, 85.0), run('B', '256', 0.2, 400, 70.0),
      # At 1024: A's one finished run stopped short of it (a failed one has no length).
      run('A', '1024', 0.4, 100, 60.0), run('A', '1024', 0.8, None, None, status='failed'),
      # B only failed there: nothing is known, no bound.
      run('B', '1024', 0.4, None, None, status='failed')]
  grouped = study_lib.groups(runs, 'batch')
  values = ['256', '1024']
  assert figures.unreached(grouped, ['A', 'B'], values) == {
      'A': [(1024.0, 100)], 'B': [(256.0, 400)]}
  assert figures.unreached(grouped, ['A', 'B'], values, 'seconds_to_target') == {
      'A': [(1024.0, 60.0)], 'B': [(256.0, 70.0)]}
  # The figure draws them beside the arm that reached it.
  path = str(tmp_path / 'steps.png')
  assert figures.plot_steps(runs, 'batch', ['A', 'B'], path, 't', 0.5, bounds=True)
  check_png(path)
