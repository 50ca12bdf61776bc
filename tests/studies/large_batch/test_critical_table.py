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
  lars = measurements / 'fashion_mnist_lars'
  lars.mkdir(parents=True)
  (lars / table.MEASURED_FILE).write_text(json.dumps({
      'critical_batch': 16384, 'unit': 'examples', 'noise_scale': 2500.0,
      'branches': [{'batch': 4096, 'updates': 40, 'heldout_loss': 0.5, 'gap': 0.0, 'wall_s': 100},
                   {'batch': 8192, 'updates': 20, 'heldout_loss': 0.51, 'gap': 0.01,
                    'wall_s': 200},
                   {'batch': 16384, 'updates': 10, 'heldout_loss': 0.52, 'gap': 0.02,
                    'wall_s': 420}],
      'noise_scale_branch': 4096, 'checkpoint_step': 120, 'wall_s': 720.0,
      'config': '/elsewhere/configs/large_batch/lars_8k.py'}))
  (lars / 'run.log').write_text(
      'training resnet_cifar for 400 steps (100 steps/epoch), global batch 4096 = 4096 per '
      'worker x 1 worker(s) x iter_size 1; starting at step 0\n'
      'step 390 epoch 3.90 loss 0.5000 lr 0.1 grad_norm 1 noise_scale 2900 images/sec 100.0\n'
      'step 400 epoch 4.00 loss 0.4900 lr 0.1 grad_norm 1 noise_scale 3000 images/sec 100.0\n'
      'eval at step 400: loss 0.3000, top-1 0.9200, top-5 0.9900 (10000 examples)\n'
      'noise scale (B_simple): 3,000 examples (global batch 4096; the last ~100 of 400 '
      'measured updates weigh)\n')
  (lars / 'result.json').write_text(json.dumps({'wall_s': 1800.0}))
  muon = measurements / 'cmudict_muon'
  muon.mkdir()
  # 11,932.5 tokens are 750 words at 15.91 tokens a word.
  (muon / table.MEASURED_FILE).write_text(json.dumps({
      'critical_batch': 11932.5, 'unit': 'tokens', 'noise_scale': None, 'branches': [],
      'checkpoint_step': 50, 'wall_s': 360.0, 'config': 'configs/large_batch_seq2seq/muon.py'}))
  mine = measurements / 'my_model'
  mine.mkdir()
  (mine / 'run.log').write_text('[sweep] attempt 1 started at 1700000000.0 (pid 7)\n'
                                'training m for 10 steps\nstep 5 epoch 1\n'
                                'noise scale (B_simple): 42 examples at step 8\n'
                                '[sweep] attempt 1 ended after 108 s with exit status 0\n')
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
  measured = rows(text, '### The measurements against the fits')
  lars = measured[('Fashion-MNIST ResNet-8', 'LARS (eeta tuned)')]
  assert lars[2] == '4,000 images (90 % test accuracy)'
  assert lars[3] == ('3,000 examples, at step 400 of 400 (100 %); 2,500 examples, in the '
                     'branch at 4,096 from step 120')
  assert lars[4] == '0.62 (within 2x)'  # 2500 / 4000: the branches' estimate, at their checkpoint
  assert lars[5] == '≥16,384 examples, from step 120'  # the largest branch kept up
  assert lars[6] == '4.10 (**not within 2x**)'  # 16384 / 4000
  # 1800 s and 720 s against the study's seven hours.
  assert lars[7] == '0.50 h (7.1 % of the study)' and lars[8] == '0.20 h (2.9 % of the study)'
  muon = measured[('CMUdict Transformer', 'Muon')]
  assert muon[3] == 'not measured yet' and muon[4] == ''
  assert muon[5] == '11,932 tokens, from step 50' and muon[6] == '1.50 (within 2x)'  # 750 / 500
  assert muon[8] == '0.10 h (5.0 % of the study)'  # 360 s of two hours
  for optimizer in ('SGD (lr tuned)', 'LAMB'):
    row = measured[('Fashion-MNIST ResNet-8', optimizer)]
    assert row[3] == row[5] == 'not measured yet'
  assert measured[('Fashion-MNIST ResNet-8', 'LAMB')][2] == 'no fit (90 % test accuracy)'
  # A directory no row names: its own row, held against no study; its step the line's own.
  mine = measured[('my_model', 'my_model')]
  assert mine[2] == 'no study' and mine[3] == '42 examples, at step 8 of 10 (80 %)'
  assert mine[4] == '' and mine[7] == '0.03 h'  # 108 s from the sweep's line
  assert 'the image study, 7 runs, 7.0 hours; the sequence study, 2 runs, 2.0 hours' in text
  assert ('- `fashion_mnist_lars`: `configs/large_batch/lars_8k.py`; branches 4,096: 40 updates, '
          'held-out loss 0.5000, gap +0.0000; 8,192') in text


def test_check_fails_on_a_stale_table_and_passes_on_a_fresh_one(tree, capsys):
  assert table.main(args(tree, '--check')) == 1
  assert 'is out of date: run ' + table.COMMAND in capsys.readouterr().err
  before = open(tree['page'], encoding='utf-8').read()
  assert before == PAGE  # --check writes nothing
  assert table.main(args(tree)) == 0
  assert table.main(args(tree, '--check')) == 0
  # A measurement arrives: the table is stale again.
  os.makedirs(os.path.join(tree['measurements'], 'fashion_mnist_sgd'))
  with open(os.path.join(tree['measurements'], 'fashion_mnist_sgd', table.MEASURED_FILE), 'w',
            encoding='utf-8') as f:
    json.dump({'critical_batch': None, 'unit': 'examples', 'noise_scale': None,
               'branches': [{'batch': 256, 'updates': 8}, {'batch': 512, 'updates': 4}],
               'checkpoint_step': 10, 'wall_s': 60.0, 'config': 'configs/large_batch/sgd.py'}, f)
  assert table.main(args(tree, '--check')) == 1
  assert table.main(args(tree)) == 0
  text = open(tree['page'], encoding='utf-8').read()
  sgd = rows(text, '### The measurements against the fits')[('Fashion-MNIST ResNet-8',
                                                              'SGD (lr tuned)')]
  assert sgd[5] == 'none measured, from step 10' and sgd[6] == ''


def test_a_page_without_the_markers_is_refused(tree, capsys):
  with open(tree['page'], 'w', encoding='utf-8') as f:
    f.write('# no block\n')
  assert table.main(args(tree, '--check')) == 2
  assert 'no ' + table.BEGIN in capsys.readouterr().err


def test_the_noise_line_of_a_log():
  log = ('training x for 200 steps\nstep 100 epoch 1\nnoise scale (B_simple): 10 words\n'
         'step 200 epoch 2\nfinal test wer: 0.3 (per 0.1) at step 200\n'
         'noise scale (B_simple): 1.5e3 words\n')
  assert table.noise_from_log(log) == {'value': 1500.0, 'unit': 'words', 'text': '1.5e3 words',
                                       'step': 200, 'steps': 200}
  unbounded = ('unbounded (the |G|² estimate is not positive yet) (global batch 8; the last ~3 '
               'of 3 measured updates weigh)')
  assert table.noise_from_log(f'step 3 x\nnoise scale (B_simple): {unbounded}\n') == {
      'value': None, 'unit': None, 'step': 3, 'steps': None,
      'text': 'unbounded (the |G|² estimate is not positive yet)'}
  # In the table its bars are escaped, not cells.
  cell, value = table.noise_cell(table.noise_from_log(f'noise scale (B_simple): {unbounded}'),
                                 None, table.IMAGE)
  assert cell == 'unbounded (the \\|G\\|² estimate is not positive yet), at step ?'
  assert value is None
  assert table.noise_from_log('step 3 epoch 1\n') is None


def test_the_repositorys_page_is_up_to_date():
  assert table.main(['--check']) == 0, f'docs/critical_batch.md is out of date: run {table.COMMAND}'
