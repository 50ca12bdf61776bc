"""Tests of studies/large_batch/critical_table.py on a temporary tree: the table is the files'."""

import json
import os

import pytest

from studies.large_batch import critical_table as table
from studies.large_batch import seq2seq_plan

PAGE = """# The critical batch

Text before the table.

{begin}
an old table
{end}

Text after it.
""".format(begin=table.BEGIN, end=table.END)


def write_point(directory, batch, lr, seed, metric, curve, steps):
  """One archived point; ``curve``: (step, value) pairs; an hour of wall time."""
  os.makedirs(directory, exist_ok=True)
  name = (f'batch_size_per_gpu={batch}__iter_size=1__lr_policy_params.learning_rate={lr:g}'
          f'__seed={seed}')
  with open(os.path.join(directory, name + '.json'), 'w', encoding='utf-8') as f:
    json.dump({'point': {'batch_size_per_gpu': batch, 'iter_size': 1,
                         'lr_policy_params.learning_rate': lr},
               'derived': {}, 'seed': seed,
               'overrides': [f'batch_size_per_gpu={batch}', 'iter_size=1',
                             f'lr_policy_params.learning_rate={lr:g}', f'random_seed={seed}'],
               'metrics': {metric: curve[-1][1], 'steps': steps}, 'wall_s': 3600.0,
               'curve': [[step, value, step * 1.0] for step, value in curve]}, f)


def write_measured(directory, summary):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, table.MEASURED_FILE), 'w', encoding='utf-8') as f:
    json.dump(summary, f)


def s_of(s_min, b_crit, batch):
  return s_min * (1 + b_crit / batch)


@pytest.fixture(name='tree')
def fixture_tree(tmp_path):
  """Archives of both studies, measurements of two rows and of one other config, and a page.

  The image study's LARS reaches 90 % exactly at S(B) = 100·(1 + 4000/B) at
  256, 1024 and 4096 (an evaluation at the target, so no interpolation moves
  it); SGD reaches it at 256 only (no fit); LAMB has no run. The sequence
  study's Muon reaches 60 % WER at S(B) = 50·(1 + 500/B) at 256 and 1024.
  Seven runs of an hour each in the image study, two in the sequence study.
  """
  image = tmp_path / table.IMAGE.archive
  for batch, lr in ((256, 2.0), (1024, 4.0), (4096, 8.0)):
    s = s_of(100, 4000, batch)
    write_point(image / 'lars', batch, lr, 0, 'accuracy', [[s / 2, 0.5], [s, 0.9], [2 * s, 0.95]],
                int(4 * s))
  write_point(image / 'lars', 16384, 16.0, 0, 'accuracy', [[10, 0.5], [20, 0.8]], 20)
  write_point(image / 'sgd', 256, 0.1, 0, 'accuracy', [[300, 0.85], [400, 0.95]], 2000)
  write_point(image / 'sgd', 4096, 0.4, 0, 'accuracy', [[30, 0.7], [60, 0.85]], 60)
  write_point(image / 'sgd_half', 256, 0.1, 0, 'accuracy', [[300, 0.85], [400, 0.95]], 1000)
  seq = tmp_path / seq2seq_plan.DEFAULT_ARCHIVE
  for batch in (256, 1024):
    s = s_of(50, 500, batch)
    write_point(seq / 'muon', batch, 0.004, 0, 'wer', [[s / 2, 0.8], [s, 0.6], [2 * s, 0.4]],
                int(4 * s))
  measurements = tmp_path / 'measurements'
  point = {'step': 100, 'share_of_run': 0.25, 'measured': True, 'b_crit': 3000.0,
           'interval': [2000.0, 4500.0], 'b_simple': 1500.0,
           'updates': {'256': 180.0, '512': 95.5, '1024': None}}
  unmeasured = {'step': 300, 'share_of_run': 0.75, 'measured': False, 'b_crit': None,
                'interval': None, 'b_simple': None, 'why': 'the 1x branch diverged',
                'updates': {'256': None, '512': None, '1024': None}}
  write_measured(measurements / 'fashion_mnist_lars', {
      'critical_batch': 5000.0, 'interval': [3000.0, 9000.0], 'unit': 'images',
      'batches': [256, 512, 1024], 'points': [point, unmeasured], 'branch_loss': 'online',
      'noise_scale_setting': True, 'compute': {'runs': 1.5}, 'wall_s': 720.0,
      'schedule': {'batches': [256, 512], 'boundaries': [100]},
      'config': '/elsewhere/configs/large_batch/lars_8k.py'})
  # Another seed of the same row; no interval.
  write_measured(measurements / 'fashion_mnist_lars_seed1', {
      'critical_batch': 1500.0, 'interval': None, 'unit': 'images', 'batches': [256, 512],
      'points': [dict(point, b_crit=1500.0, interval=None, b_simple=None)],
      'branch_loss': 'online', 'noise_scale_setting': False, 'compute': {'runs': 2.0},
      'wall_s': 36.0, 'config': 'configs/fashion_mnist_lars.py'})
  # 11,932.5 tokens are 750 words at 15.91 tokens a word; the interval is open above.
  write_measured(measurements / 'cmudict_muon', {
      'critical_batch': 11932.5, 'interval': [5000.0, None], 'unit': 'tokens',
      'batches': [4096, 8192, 16384], 'points': [], 'branch_loss': 'heldout',
      'noise_scale_setting': False, 'compute': {'runs': 1.25}, 'wall_s': 360.0,
      'config': 'configs/large_batch_seq2seq/muon.py'})
  write_measured(measurements / 'my_model', {
      'critical_batch': None, 'interval': None, 'unit': 'examples', 'batches': [8, 16],
      'points': [unmeasured], 'compute': {'runs': 1.0}, 'wall_s': 108.0, 'config': 'my.yaml'})
  page = tmp_path / 'critical_batch.md'
  page.write_text(PAGE)
  return {'root': str(tmp_path), 'measurements': str(measurements), 'page': str(page)}


def args(tree, *more):
  return ['--root', tree['root'], '--measurements', tree['measurements'], '--page', tree['page'],
          *more]


def rows(text, header):
  """``{(first cell, second cell): [cells]}`` of the markdown table under ``header``."""
  part = text.split(header, 1)[1].split('\n\n', 2)[1]
  found = {}
  for line in part.splitlines()[2:]:
    cells = [c.strip() for c in line.strip().strip('|').split(' | ')]
    found[(cells[0], cells[1])] = cells
  return found


def measured_rows(text):
  """``{measurement directory: [cells]}`` of the measurements' table."""
  part = text.split('### The measurements against the fits', 1)[1].split('\n\n', 2)[1]
  found = {}
  for line in part.splitlines()[2:]:
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    found[cells[2].strip('`')] = cells
  return found


def test_the_table_fills_the_measured_rows_and_flags_the_ratios(tree):
  assert table.main(args(tree)) == 0
  text = open(tree['page'], encoding='utf-8').read()
  assert text.startswith('# The critical batch\n\nText before the table.\n\n' + table.BEGIN + '\n')
  assert text.endswith(table.END + '\n\nText after it.\n') and 'an old table' not in text
  fits = rows(text, "### The studies' fits")
  lars = fits[('Fashion-MNIST ResNet-8', 'LARS (eeta tuned)')]
  # S(256) = 1662.5, S(1024) = 490.6, S(4096) = 197.7; 16384 not reached in its 20 updates.
  assert lars[3] == '256: 1662, 1024: 491, 4096: 198' and lars[4] == '16384 (20)'
  assert lars[5:8] == ['100', '4,000 images', '4,000']
  sgd = fits[('Fashion-MNIST ResNet-8', 'SGD (lr tuned)')]
  assert sgd[3] == '256: 350' and sgd[4] == '4096 (60)' and sgd[5:8] == ['n/a', 'no fit', 'no fit']
  assert fits[('CMUdict Transformer', 'Muon')][5:7] == ['50', '500 words']
  measured = measured_rows(text)
  lars = measured['fashion_mnist_lars']
  assert lars[:4] == ['Fashion-MNIST ResNet-8', 'LARS (eeta tuned)', '`fashion_mnist_lars`',
                      '4,000 images (90 % test accuracy)']
  assert lars[4] == '5,000 images (3,000-9,000)'
  assert lars[5] == '1.25 (within 2x)'  # 5000 / 4000
  assert lars[6] == '3.0x wide, holds the fit'
  assert lars[7] == '25 %: 3,000 (2,000-4,500); 75 %: not measured'
  assert lars[8] == '25 %: 1,500 (0.50)'  # B_simple / B_crit at the point: 1500 / 3000
  # 720 s against the study's seven hours.
  assert lars[9] == '1.50' and lars[10] == '0.20 h (2.9 % of the study)'
  seed = measured['fashion_mnist_lars_seed1']
  assert seed[:2] == ['Fashion-MNIST ResNet-8', 'LARS (eeta tuned)']
  assert seed[4] == '1,500 images (no interval)' and seed[5] == '0.38 (**not within 2x**)'
  assert seed[6] == '' and seed[8] == 'not measured (noise_scale: false)'
  muon = measured['cmudict_muon']
  assert muon[4] == '11,932 tokens (5,000 to more than 16,384)'
  assert muon[5] == '1.50 (within 2x)'  # 750 / 500
  assert muon[6] == 'open above, holds the fit'  # 5,000 tokens are 314 words
  assert muon[7] == 'no points' and muon[10] == '0.10 h (5.0 % of the study)'  # 360 s of 2 h
  for name in ('fashion_mnist_sgd', 'fashion_mnist_lamb'):
    assert measured[name][4] == 'not measured yet'
  assert measured['fashion_mnist_lamb'][3] == 'no fit (90 % test accuracy)'
  # A directory no row names: its own row, held against no study.
  mine = measured['my_model']
  assert mine[:4] == ['my.yaml', 'my_model', '`my_model`', 'no study']
  assert mine[4] == 'none measured' and mine[5] == '' and mine[10] == '0.03 h'
  assert 'the image study, 7 runs, 7.0 hours; the sequence study, 2 runs, 2.0 hours' in text
  assert ('- `fashion_mnist_lars`: `configs/large_batch/lars_8k.py`, online loss; updates to '
          'the target by batch at step 100: 256: 180.0, 512: 95.5; step 300: the 1x branch '
          'diverged; proposed schedule: batches [256, 512] at steps [100].') in text


def test_check_fails_on_a_stale_table_and_passes_on_a_fresh_one(tree, capsys):
  assert table.main(args(tree, '--check')) == 1
  assert 'is out of date: run ' + table.COMMAND in capsys.readouterr().err
  before = open(tree['page'], encoding='utf-8').read()
  assert before == PAGE  # --check writes nothing
  assert table.main(args(tree)) == 0
  assert table.main(args(tree, '--check')) == 0
  # A measurement arrives: the table is stale again.
  write_measured(os.path.join(tree['measurements'], 'fashion_mnist_sgd'), {
      'critical_batch': None, 'interval': None, 'unit': 'images', 'batches': [256, 512],
      'points': [], 'wall_s': 60.0, 'config': 'configs/large_batch/sgd.py'})
  assert table.main(args(tree, '--check')) == 1
  assert table.main(args(tree)) == 0
  text = open(tree['page'], encoding='utf-8').read()
  assert measured_rows(text)['fashion_mnist_sgd'][4] == 'none measured'


def test_a_page_without_the_markers_is_refused(tree, capsys):
  with open(tree['page'], 'w', encoding='utf-8') as f:
    f.write('# no block\n')
  assert table.main(args(tree, '--check')) == 2
  assert 'no ' + table.BEGIN in capsys.readouterr().err


def test_the_repositorys_page_is_up_to_date():
  assert table.main(['--check']) == 0, f'docs/critical_batch.md is out of date: run {table.COMMAND}'
