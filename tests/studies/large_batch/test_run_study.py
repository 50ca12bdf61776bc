"""Tests of studies/large_batch/run_study.sh: which runs the study makes, in which order."""

import json
import os
import re
import subprocess
import sys

import pytest

from framework.sweep import results

# The study script runs scripts/sweep.py and its report script dozens of times a test.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def study(out, archive='', **env):
  """Runs the study script on ``out`` with ``archive`` as ARCHIVE (none by default)."""
  return subprocess.run(['bash', os.path.join(ROOT, 'studies', 'large_batch', 'run_study.sh'), str(out)],
                        cwd=ROOT, env=dict(os.environ, ARCHIVE=str(archive), **env),
                        capture_output=True, text=True, timeout=300, check=True)


def dry_run(out, archive='', with_lines=False):
  """The runs the study would make on ``out``: ``(arm, config, global batch, lr, seed, epochs)``.

  With ``with_lines``, also the run.py command lines they come from.
  """
  lines = study(out, archive, DRY_RUN='1').stdout.splitlines()
  runs = []
  for line in lines:
    config = re.search(r'configs/large_batch/(\w+)\.py', line).group(1)
    sets = dict(s.split('=', 1) for s in re.findall(r'--set (\S+)', line))
    runs.append((os.path.basename(os.path.dirname(re.search(r'--logdir (\S+)', line).group(1))),
                 config, int(sets['batch_size_per_gpu']) * int(sets['iter_size']),
                 float(sets['lr_policy_params.learning_rate']), int(sets['random_seed']),
                 sets.get('num_epochs')))
  return (runs, lines) if with_lines else runs


BATCHES = (256, 1024, 4096, 8192, 16384)


def rounded(value):
  """A rate as the study script writes it: 4 significant digits."""
  return float(f'{value:.4g}')


def without_seed(line):
  """A dry run's command line with its seed taken out: the point it runs, whatever the seed."""
  return re.sub(r'__seed=\d+', '', re.sub(r' --set random_seed=\d+', '', line))


def logdir_of(line):
  return re.search(r'--logdir (\S+)', line).group(1)


@pytest.fixture(name='fresh', scope='module')
def fixture_fresh(tmp_path_factory):
  """The dry run of a study with no results yet: ``(runs, lines)`` as ``dry_run`` gives them."""
  return dry_run(tmp_path_factory.mktemp('fresh') / 'study', with_lines=True)


def test_every_arm_runs_at_every_batch_size_on_its_rule(fresh):
  runs, lines = fresh
  for arm in ('sgd', 'lars', 'lamb'):
    assert sorted({g for d, _, g, *_ in runs if d == arm}) == list(BATCHES), arm
  # LARS and LAMB: square-root scaling of the rate at every batch; LARS is also
  # tuned on SGD's grid (x 0.5, x 2) at 16K and 8K.
  for arm, base in (('lars', 2.0), ('lamb', 0.005)):
    for g in BATCHES:
      rates = {lr for d, _, b, lr, seed, _ in runs if d == arm and b == g and seed == 0}
      grid = (0.5, 1, 2) if arm == 'lars' and g in (8192, 16384) else (1,)
      rule = rounded(base * (g / 256) ** 0.5)
      assert rates == {rounded(m * rule) for m in grid}, (arm, g)
  # SGD: the three-point grid around 0.1*sqrt(G/256) at every batch.
  for g in BATCHES:
    rule = rounded(0.1 * (g / 256) ** 0.5)
    assert {lr for d, _, b, lr, *_ in runs if d == 'sgd' and b == g} == {
        rounded(m * rule) for m in (0.5, 1, 2)}
  assert ('sgd', 'sgd', 16384, 0.8, 0, None) in runs
  # Past 8K a global batch is micro-batches of 8K (the memory of one worker here).
  for line in lines:
    sets = dict(s.split('=', 1) for s in re.findall(r'--set (\S+)', line))
    batch, iter_size = int(sets['batch_size_per_gpu']), int(sets['iter_size'])
    assert batch <= 8192 and iter_size == max(1, batch * iter_size // 8192), line
  # docs/large_batch.md: about 50 runs before any result. The 16K and 8K rate
  # grids list LARS's lr 16 and 11.31, seed 0, again (one run each).
  assert len(runs) == 8 + 6 + 15 + 2 + 3 + 3 + 6 + 3 + 4
  assert len({logdir_of(line) for line in lines}) == len(runs) - 2


def test_each_arm_runs_its_config_with_the_settings_its_name_says(fresh):
  runs, lines = fresh
  # Beyond the point's batch, iter_size, rate and seed. The ablations and the
  # steps past the recipe run at LARS's setting at 8K: the recipe's eeta until
  # the eeta grid has results.
  at_8k = ['optimizer_params.eeta=0.002']
  expected = {
      'sgd': [], 'lars': [], 'lamb': [],
      'lars_eeta0.004': ['optimizer_params.eeta=0.004'],
      'lars_half': ['num_epochs=24.0'],
      'lars_no_ghost_bn': at_8k + ['model_params.ghost_batch_size=null'],
      'lars_no_precise_bn': at_8k + ['precise_bn=null'],
      'lars_no_smoothing': at_8k + ['label_smoothing=0.0'],
      'lars_warmup0.3': at_8k + ['lr_policy_params.warmup_fraction=0.3',
                                 'lr_policy_params.decay_fraction=0.7'],
      'lars_nesterov': at_8k + ['optimizer_params.use_nesterov=true'],
  }
  assert {r[0] for r in runs} == set(expected)
  point = ('batch_size_per_gpu=', 'iter_size=', 'lr_policy_params.learning_rate=', 'random_seed=')
  for (arm, config, *_), line in zip(runs, lines):
    assert config == arm.split('_')[0], line  # sgd_half runs sgd.py
    assert [s for s in re.findall(r'--set (\S+)', line) if not s.startswith(point)] == \
        expected[arm], line
  for arm in ('lars_no_ghost_bn', 'lars_no_precise_bn', 'lars_no_smoothing', 'lars_warmup0.3',
              'lars_nesterov'):
    assert {(g, lr) for d, _, g, lr, *_ in runs if d == arm} == {(8192, 11.31)}, arm


def test_seeds_pair_up(fresh):
  runs, lines = fresh
  # A point runs with seed 1 only after the same point with seed 0, in the same arm.
  first_seed = set()
  second_seed = []
  for (arm, _, g, _, seed, _), line in zip(runs, lines):
    if seed == 0:
      first_seed.add(without_seed(line))
    else:
      assert seed == 1 and without_seed(line) in first_seed, line
      second_seed.append((arm, g))
  # Where a target is measured, both seeds from the start: LARS at 8K, 256 and
  # 16K (at twice the recipe's eeta too), LAMB at 8K, the budget check and the
  # two steps past the recipe at 8K. A grid's best rate (SGD's) waits for results.
  assert sorted(second_seed) == sorted(
      [('lars', g) for g in (8192, 256, 16384)]
      + [('lars_eeta0.004', g) for g in (16384, 8192, 256)]
      + [('lamb', 8192), ('lars_half', 256), ('lars_warmup0.3', 8192), ('lars_nesterov', 8192)])
  assert all(seed == 0 for d, *_, seed, _ in runs if d == 'sgd')


def test_the_targets_points_run_first_and_the_steps_past_the_recipe_last(fresh):
  runs, _ = fresh
  # A partial study already answers the main questions: LARS at 8K first, and
  # every arm's points at 8K, 16K and 256 before those at 1K and 4K, which no
  # target needs.
  assert [r[:5] for r in runs[:2]] == [('lars', 'lars', 8192, 11.31, s) for s in (0, 1)]
  small = [i for i, r in enumerate(runs) if r[2] in (1024, 4096)]
  assert small == list(range(small[0], small[-1] + 1))
  assert all(r[2] not in (1024, 4096) for r in runs[:small[0]])
  arms = ('sgd', 'lars', 'lamb')
  assert {(d, g) for d, _, g, *_ in runs[:small[0]] if d in arms} == {
      (d, g) for d in arms for g in (256, 8192, 16384)}
  # The two steps past the recipe, after everything else.
  assert {r[0] for r in runs[small[-1] + 1:]} == {'lars_warmup0.3', 'lars_nesterov'}


def test_finished_points_are_skipped_and_only_they(tmp_path, fresh):
  out = tmp_path / 'study'
  # LARS's target points have finished, both seeds at 8K, 256 and 16K.
  write_results(out, 8192, {(11.31, 0): 0.92, (11.31, 1): 0.921}, arm='lars')
  write_results(out, 256, {(2.0, 0): 0.925, (2.0, 1): 0.924}, steps=11232, arm='lars')
  write_results(out, 16384, {(16.0, 0): 0.91, (16.0, 1): 0.909}, steps=168, arm='lars')
  written = {('lars', 'lars', g, lr, seed) for g, lr in ((8192, 11.31), (256, 2.0), (16384, 16.0))
             for seed in (0, 1)}
  runs, lines = dry_run(out, with_lines=True)
  # The sweep skips a point whose result.json it finds in the point's logdir
  # (framework.sweep.results.read_result): each finished point is listed where
  # its result lies, every time it is listed, and no other point is.
  finished = [r[:5] for r, line in zip(runs, lines) if results.read_result(logdir_of(line))]
  assert set(finished) == written
  assert all(results.read_result(logdir_of(line)) for r, line in zip(runs, lines)
             if r[:5] in written)
  # These results move no grid (each is its grid's middle rate, or alone): the
  # rest of the study is what a fresh one runs.
  assert [r for r in runs if r[:5] not in written] == [r for r in fresh[0] if r[:5] not in written]


def test_a_fresh_checkout_is_set_up_before_the_study_asks_its_python(tmp_path):
  """With no .venv yet, the study runs scripts/setup.sh before anything needs .venv/bin/python.

  The checkout is this one seen through links, but for its own scripts/setup.sh,
  a stand-in that makes .venv/bin/python (this interpreter) and says so.
  """
  checkout = tmp_path / 'checkout'
  (checkout / 'scripts').mkdir(parents=True)
  for name in os.listdir(ROOT):
    if name not in ('scripts', '.venv', '.git', 'runs'):
      os.symlink(os.path.join(ROOT, name), checkout / name)
  for name in os.listdir(os.path.join(ROOT, 'scripts')):
    if name != 'setup.sh':
      os.symlink(os.path.join(ROOT, 'scripts', name), checkout / 'scripts' / name)
  (checkout / 'scripts' / 'setup.sh').write_text(
      '#!/usr/bin/env bash\necho "setup ran"\nmkdir -p .venv/bin\n'
      f'printf \'#!/bin/sh\\nexec {sys.executable} "$@"\\n\' > .venv/bin/python\n'
      'chmod +x .venv/bin/python\n')

  def dry_run_lines():
    result = subprocess.run(['bash', str(checkout / 'studies' / 'large_batch' / 'run_study.sh'),
                             str(tmp_path / 'out')], cwd=tmp_path,
                            env=dict(os.environ, ARCHIVE='', DRY_RUN='1'),
                            capture_output=True, text=True, timeout=300, check=True)
    return result.stdout.splitlines()

  lines = dry_run_lines()
  assert lines[0] == 'setup ran'
  assert '/configs/large_batch/lars.py' in lines[1] and '--logdir ' in lines[1]
  # Set up already: a dry run (or a report) leaves the environment as it is.
  lines = dry_run_lines()
  assert 'setup ran' not in lines and '/configs/large_batch/lars.py' in lines[0]


def test_lars_8k_config_is_the_study_point(fresh):
  """configs/large_batch/lars_8k.py resolves to the study's LARS 8K point, seed 0, to the key.

  That point is the one the table's LARS row chose at 8K: eeta 0.004 (the
  eeta grid's winner there, docs/large_batch.md).
  """
  from framework.config import config_file  # pylint: disable=import-outside-toplevel
  from framework.config import config_resolve  # pylint: disable=import-outside-toplevel
  line, = [line for line in fresh[1]
           if '/lars_eeta0.004/batch_size_per_gpu=8192__iter_size=1__' in line
           and 'random_seed=0' in line]
  assert 'configs/large_batch/lars.py' in line
  overrides = re.findall(r'--set (\S+)', line)
  # iter_size=1 is the default, which lars_8k.py leaves as it is.
  from framework.config.schema import SCHEMA  # pylint: disable=import-outside-toplevel
  assert 'iter_size=1' in overrides and SCHEMA['iter_size'].default == 1
  overrides.remove('iter_size=1')
  # The training config is the same to the key. (The study's --set also makes
  # its evaluation batch 8192, lars_8k.py's is 1000: the same 10,000 test images.)
  point = config_resolve.resolve(
      config_file.load_config_file(os.path.join(ROOT, 'configs/large_batch/lars.py')), 'train',
      overrides)
  one = config_resolve.resolve(
      config_file.load_config_file(os.path.join(ROOT, 'configs/large_batch/lars_8k.py')), 'train')
  assert one == point
  assert one['lr_policy_params']['learning_rate'] == 11.31 and one['batch_size_per_gpu'] == 8192
  assert one['optimizer_params']['eeta'] == 0.004


def write_results(out, batch, accuracies, steps=336, arm='sgd'):
  """Finished points of ``arm`` (SGD by default) at ``batch``: ``{(lr, seed): accuracy}``.

  Each keeps the curve of its evaluations, as the study's results do, here
  the last one alone, and its overrides first, as scripts/sweep.py records
  them: a half-budget arm's (``*_half*``) ``--set num_epochs=24.0``, an eeta
  arm's (``*_eeta<EETA>``) ``--set optimizer_params.eeta=<EETA>``, the
  warm-up step's (``*_warmup*``) its warm-up and decay fractions.
  """
  # Above 8K the study accumulates micro-batches of 8K, as the script does.
  per_gpu, iter_size = min(batch, 8192), max(1, batch // 8192)
  eeta = re.search(r'_eeta([0-9.]+)$', arm)
  fixed = (['num_epochs=24.0'] if '_half' in arm else []) + (
      [f'optimizer_params.eeta={eeta.group(1)}'] if eeta else []) + (
      ['lr_policy_params.warmup_fraction=0.3', 'lr_policy_params.decay_fraction=0.7']
      if '_warmup' in arm else [])
  for (lr, seed), accuracy in accuracies.items():
    name = (f'batch_size_per_gpu={per_gpu}__iter_size={iter_size}'
            f'__lr_policy_params.learning_rate={lr:g}__seed={seed}')
    os.makedirs(out / arm / name, exist_ok=True)
    (out / arm / name / 'result.json').write_text(json.dumps({
        'point': {'batch_size_per_gpu': per_gpu, 'iter_size': iter_size,
                  'lr_policy_params.learning_rate': lr},
        'seed': seed, 'metrics': {'accuracy': accuracy, 'steps': steps},
        'overrides': fixed + [f'batch_size_per_gpu={per_gpu}', f'iter_size={iter_size}',
                              f'lr_policy_params.learning_rate={lr:g}', f'random_seed={seed}'],
        'wall_s': 600.0, 'curve': [[steps, accuracy, 590.0]]}))


def test_the_best_sgd_rate_gets_the_second_seed_and_the_budget_check(tmp_path):
  out = tmp_path / 'study'
  write_results(out, 256, {(0.05, 0): 0.90, (0.1, 0): 0.92, (0.2, 0): 0.91}, steps=5616)
  runs = dry_run(out)
  sgd_256 = [(lr, seed) for d, _, g, lr, seed, _ in runs if d == 'sgd' and g == 256]
  # The grid (listed by the dry run, skipped by a real one), then its best rate with seed 1.
  assert sgd_256 == [(0.05, 0), (0.1, 0), (0.2, 0), (0.1, 1)]
  # Elsewhere the second seed is only run at 8K (the grid there has no results yet).
  assert [seed for d, _, g, _, seed, _ in runs if d == 'sgd' and g not in (256, 8192)] == [0] * 9
  assert [(d, lr, seed, e) for d, _, _, lr, seed, e in runs if d == 'sgd_half'] == [
      ('sgd_half', 0.1, 0, '24.0'), ('sgd_half', 0.1, 1, '24.0')]


def test_a_best_rate_at_the_edge_of_the_grid_grows_it(tmp_path):
  out = tmp_path / 'study'
  # At 8K the grid is 0.2828, 0.5657, 1.131; its largest rate is the best.
  write_results(out, 8192, {(0.2828, 0): 0.89, (0.5657, 0): 0.91, (1.131, 0): 0.915})
  sgd_8k = [(lr, seed) for d, _, g, lr, seed, _ in dry_run(out) if d == 'sgd' and g == 8192]
  # One more rate past the edge (twice the rounded 1.131); with no result yet
  # the best is still 1.131, which then gets seed 1.
  assert sgd_8k == [(0.2828, 0), (0.5657, 0), (1.131, 0), (2.262, 0), (1.131, 1)]
  # 2.262 better again: the grid grows once more, to 4.524; that one's worse,
  # so 2.262 is inside the grid, its best, and gets seed 1.
  write_results(out, 8192, {(2.262, 0): 0.92, (4.524, 0): 0.80})
  sgd_8k = [(lr, seed) for d, _, g, lr, seed, _ in dry_run(out) if d == 'sgd' and g == 8192]
  assert sgd_8k == [(0.2828, 0), (0.5657, 0), (1.131, 0), (2.262, 0), (4.524, 0), (2.262, 1)]
  # At the low edge it grows downward while each new rate wins, never more than
  # six times: the best rate then gets seed 1 though it is still an edge. Each
  # rate is half the rounded one before (4 significant digits).
  lows = [0.2828]
  for _ in range(6):
    lows.append(float(f'{0.5 * lows[-1]:.4g}'))
  low = tmp_path / 'low'
  write_results(low, 8192, {(0.2828, 0): 0.92, (0.5657, 0): 0.91, (1.131, 0): 0.90,
                                **{(lr, 0): 0.93 + 0.001 * i for i, lr in enumerate(lows[1:])}})
  sgd_8k = [(lr, seed) for d, _, g, lr, seed, _ in dry_run(low) if d == 'sgd' and g == 8192]
  assert lows[1:4] == [0.1414, 0.0707, 0.03535]
  assert sgd_8k == [(0.2828, 0), (0.5657, 0), (1.131, 0)] + [(lr, 0) for lr in lows[1:]] + [
      (lows[-1], 1)]


def test_lars_eeta_grows_while_the_largest_eeta_wins(tmp_path):
  out = tmp_path / 'study'

  def eeta_8k():  # LARS at 8K up to LAMB at 16K (the rate grid and the ablations come later)
    runs = dry_run(out)
    runs = runs[:runs.index(('lamb', 'lamb', 16384, 0.04, 0, None))]
    return [(d, lr, seed) for d, _, g, lr, seed, _ in runs if d.startswith('lars') and g == 8192][2:]

  # Twice the recipe's eeta (0.004) loses to the recipe's at 8K: no larger eeta.
  write_results(out, 8192, {(11.31, 0): 0.920, (11.31, 1): 0.922}, arm='lars')
  write_results(out, 8192, {(11.31, 0): 0.918, (11.31, 1): 0.920}, arm='lars_eeta0.004')
  assert eeta_8k() == [('lars_eeta0.004', 11.31, 0), ('lars_eeta0.004', 11.31, 1)]
  # It wins (0.922 against 0.921 on average): eeta doubles to 0.008, seed 0.
  write_results(out, 8192, {(11.31, 0): 0.925, (11.31, 1): 0.919}, arm='lars_eeta0.004')
  assert eeta_8k()[2:] == [('lars_eeta0.008', 11.31, 0)]
  # 0.008 wins again: 0.016; with 0.016 worse, 0.008 is the best and gets seed 1.
  write_results(out, 8192, {(11.31, 0): 0.930}, arm='lars_eeta0.008')
  assert eeta_8k()[2:] == [('lars_eeta0.008', 11.31, 0), ('lars_eeta0.016', 11.31, 0),
                           ('lars_eeta0.008', 11.31, 1)]
  # 0.016 best too: the grid has grown twice, its limit, and 0.016 gets seed 1.
  write_results(out, 8192, {(11.31, 0): 0.935}, arm='lars_eeta0.016')
  assert eeta_8k()[2:] == [('lars_eeta0.008', 11.31, 0), ('lars_eeta0.016', 11.31, 0),
                           ('lars_eeta0.016', 11.31, 1)]
  # The eetas are one arm, LARS, tuned over them as SGD over its rates: its
  # row at 8K is the best eeta (0.016), the grid below lists each in order
  # of eeta (the recipe's first), and its target lines are those of that row.
  write_results(out, 256, {(0.1, 0): 0.93, (0.1, 1): 0.93}, steps=11232)
  study(out, REPORT_ONLY='1')
  main_table, grids = (out / 'study.md').read_text().split('Tuning grids')
  assert [line.split(' | ')[1:4] for line in main_table.splitlines()
          if line.startswith('| 8192 |')] == [['LARS (eeta tuned)', '11.31, eeta=0.016', '1/1']]
  assert [line.split(' | ')[1:5] for line in grids.splitlines() if line.startswith('| 8192 |')] == [
      ['LARS (eeta tuned)', '11.31', '2/2', '0.9210 ± 0.0014'],
      ['LARS (eeta tuned)', '11.31, eeta=0.004', '2/2', '0.9220 ± 0.0042'],
      ['LARS (eeta tuned)', '11.31, eeta=0.008', '1/1', '0.9300'],
      ['LARS (eeta tuned)', '**11.31, eeta=0.016**', '1/1', '0.9350']]
  assert [line.split(' within ')[0] for line in grids.splitlines() if ' within ' in line] == [
      '- SGD (lr tuned) at 8192', '- LARS (eeta tuned) at 8192', '- LARS (eeta tuned) at 16384',
      '- LAMB at 8192']
  assert ('- LARS (eeta tuned) at 8192 within 1 point of it: 93.50 % over 1 seed '
          '(lr 11.31, eeta=0.016), +0.50 points: ') in grids


def test_lars_row_is_its_best_eeta_and_counts_for_the_baseline(tmp_path):
  out = tmp_path / 'study'
  write_results(out, 256, {(0.1, 0): 0.93, (0.1, 1): 0.92}, steps=11232)
  write_results(out, 16384, {(16, 0): 0.90, (16, 1): 0.902}, steps=168, arm='lars')
  write_results(out, 16384, {(16, 0): 0.91, (16, 1): 0.906}, steps=168, arm='lars_eeta0.004')
  study(out, REPORT_ONLY='1')
  table = (out / 'study.md').read_text()
  # At 16K, eeta 0.004 (90.80 %) beats the recipe's (90.10 %): the LARS row and
  # its target are eeta 0.004's, the gap to batch 256's best (SGD, 92.5 %).
  assert ('| 16384 | LARS (eeta tuned) | 16, eeta=0.004 | 2/2 | 0.9080 ± 0.0028 | -1.70 | 168 |'
          in table)
  assert '| 16384 | LARS (eeta tuned) | 16 | 2/2 | 0.9010 ± 0.0014 | 168 ± 0 |' in table  # the grid
  assert ('- LARS (eeta tuned) at 16384 within 2 points of it: 90.80 % over 2 seeds '
          '(lr 16, eeta=0.004), -1.70 points: **met**\n' in table)
  assert '- LARS (eeta tuned) at 8192 within 1 point of it: not measured yet\n' in table
  # LARS with any eeta is tuned LARS, and counts for the best batch-256 result.
  write_results(out, 256, {(2, 0): 0.94, (2, 1): 0.93}, steps=11232, arm='lars_eeta0.004')
  study(out, REPORT_ONLY='1')
  table = (out / 'study.md').read_text()
  assert ('the best result at global_batch 256 is LARS (eeta tuned), 93.50 % over 2 seeds '
          '(lr 2, eeta=0.004)') in table
  assert ('| 16384 | LARS (eeta tuned) | 16, eeta=0.004 | 2/2 | 0.9080 ± 0.0028 | -2.70 | 168 |'
          in table)


def test_lars_runs_its_best_eeta_where_it_is_not_tuned_and_in_the_budget_check(tmp_path):
  out = tmp_path / 'study'
  # At 8K eeta 0.004 beats the recipe's and 0.008: LARS runs it at 1K and 4K,
  # and the ablations at 8K take one feature out of that setting.
  write_results(out, 8192, {(11.31, 0): 0.92, (11.31, 1): 0.92}, arm='lars')
  write_results(out, 8192, {(11.31, 0): 0.925, (11.31, 1): 0.925}, arm='lars_eeta0.004')
  write_results(out, 8192, {(11.31, 0): 0.91}, arm='lars_eeta0.008')
  # At 256 eeta 0.008 wins (93.4 %; 0.016 loses): the budget check runs LARS
  # at eeta 0.008 with half the epochs too, seeds 0 and 1, after that grid.
  write_results(out, 256, {(2, 0): 0.925, (2, 1): 0.925}, steps=11232, arm='lars')
  write_results(out, 256, {(2, 0): 0.93, (2, 1): 0.93}, steps=11232, arm='lars_eeta0.004')
  write_results(out, 256, {(2, 0): 0.935, (2, 1): 0.933}, steps=11232, arm='lars_eeta0.008')
  write_results(out, 256, {(2, 0): 0.92}, steps=11232, arm='lars_eeta0.016')
  runs, lines = dry_run(out, with_lines=True)
  assert [(d, g, lr, seed) for d, c, g, lr, seed, _ in runs if c == 'lars' and g in (1024, 4096)] == [
      ('lars_eeta0.004', 1024, 4.0, 0), ('lars_eeta0.004', 4096, 8.0, 0)]
  half = [(i, d, g, lr, seed, e) for i, (d, _, g, lr, seed, e) in enumerate(runs)
          if d.startswith('lars_half_')]
  last_256_eeta = max(i for i, r in enumerate(runs) if r[0].startswith('lars_eeta') and r[2] == 256)
  assert half == [(last_256_eeta + 1, 'lars_half_eeta0.008', 256, 2.0, 0, '24.0'),
                  (last_256_eeta + 2, 'lars_half_eeta0.008', 256, 2.0, 1, '24.0')]
  assert all('--set optimizer_params.eeta=0.008 ' in lines[i] for i, *_ in half)
  ablations = [i for i, r in enumerate(runs) if r[0].startswith('lars_no_')]
  assert [re.findall(r'--set ((?:optimizer_params.eeta|model_params|precise_bn|label_smoothing)\S*)',
                     lines[i]) for i in ablations] == [
      ['optimizer_params.eeta=0.004', setting] for setting in (
          'model_params.ghost_batch_size=null', 'precise_bn=null', 'label_smoothing=0.0')]
  # The budget line compares eeta 0.008 at both budgets (93.4 % against 93.0 %),
  # not the recipe's eeta with half the epochs (93.5 %).
  write_results(out, 256, {(2, 0): 0.935, (2, 1): 0.935}, steps=5616, arm='lars_half')
  write_results(out, 256, {(2, 0): 0.93, (2, 1): 0.93}, steps=5616, arm='lars_half_eeta0.008')
  study(out, REPORT_ONLY='1')
  table = (out / 'study.md').read_text()
  assert ('- budget: LARS (eeta tuned) at global_batch 256 against LARS, half the epochs '
          '(lr 2, eeta=0.008): +0.40 points from half the epochs (2 seeds) to all of them '
          '(2 seeds); the best arm gains no less than 0.3: the budget is **too small**\n') in table
  # The half-budget runs are one arm too, its row at its best setting.
  assert '| 256 | LARS, half the epochs | 2 | 2/2 | 0.9350 ± 0.0000 |' in table


def test_lars_rate_at_8k_is_tuned_at_its_best_eeta_and_the_ablations_take_the_best(tmp_path):
  out = tmp_path / 'study'
  # At 8K eeta 0.004 beats the recipe's; at that eeta the rule's rate (11.31)
  # loses to twice it, the grid's upper edge.
  write_results(out, 8192, {(11.31, 0): 0.92, (11.31, 1): 0.92}, arm='lars')
  write_results(out, 8192, {(11.31, 0): 0.925, (11.31, 1): 0.925, (5.655, 0): 0.91,
                            (22.62, 0): 0.93}, arm='lars_eeta0.004')

  def rate_grid(runs):
    """The runs after LAMB at 16K, up to the ablations; and the ablations, next."""
    first = runs.index(('lamb', 'lamb', 16384, 0.04, 0, None)) + 1
    ablations = min(i for i, r in enumerate(runs) if r[0].startswith('lars_no_'))
    return ([(d, lr, seed) for d, _, g, lr, seed, _ in runs[first:ablations]],
            runs[ablations:ablations + 3])

  # The grid grows past that edge (45.25, seed 0); with no result there yet,
  # 22.62 is the best rate and runs with seed 1; the ablations take it.
  runs, lines = dry_run(out, with_lines=True)
  grid, ablations = rate_grid(runs)
  assert grid == [('lars_eeta0.004', lr, 0) for lr in (5.655, 11.31, 22.62, 45.24)] + [
      ('lars_eeta0.004', 22.62, 1)]
  assert [(d, lr, seed) for d, _, _, lr, seed, _ in ablations] == [
      (d, 22.62, 0) for d in ('lars_no_ghost_bn', 'lars_no_precise_bn', 'lars_no_smoothing')]
  first = runs.index(('lamb', 'lamb', 16384, 0.04, 0, None)) + 1
  assert all('--set optimizer_params.eeta=0.004 ' in line for line in lines[first:first + 8])
  # 45.24 worse: 22.62 is inside the grid; its two seeds make the LARS row at 8K.
  write_results(out, 8192, {(45.24, 0): 0.80, (22.62, 1): 0.928}, arm='lars_eeta0.004')
  assert rate_grid(dry_run(out))[0][-2:] == [('lars_eeta0.004', 45.24, 0),
                                             ('lars_eeta0.004', 22.62, 1)]
  write_results(out, 256, {(0.1, 0): 0.93, (0.1, 1): 0.93}, steps=11232)
  study(out, REPORT_ONLY='1')
  assert ('- LARS (eeta tuned) at 8192 within 1 point of it: 92.90 % over 2 seeds '
          '(lr 22.62, eeta=0.004), -0.10 points: **met**\n') in (out / 'study.md').read_text()
  # The steps past the recipe take that setting too, with seeds 0 and 1; each
  # is a row of its own with its own line under the 8K target, and no reference.
  runs, lines = dry_run(out, with_lines=True)
  assert [(d, lr, seed) for d, _, _, lr, seed, _ in runs[-4:]] == [
      (d, 22.62, seed) for d in ('lars_warmup0.3', 'lars_nesterov') for seed in (0, 1)]
  assert all('--set optimizer_params.eeta=0.004 --set lr_policy_params.warmup_fraction=0.3 '
             in line for line in lines[-4:-2])
  assert all('--set optimizer_params.eeta=0.004 --set optimizer_params.use_nesterov=true '
             in line for line in lines[-2:])
  write_results(out, 8192, {(22.62, 0): 0.918, (22.62, 1): 0.926}, arm='lars_warmup0.3')
  write_results(out, 256, {(2, 0): 0.95}, steps=11232, arm='lars_warmup0.3')
  study(out, REPORT_ONLY='1')
  table = (out / 'study.md').read_text()
  assert '| 8192 | LARS, 30 % warm-up | 22.62 | 2/2 | 0.9220 ± 0.0057 | -0.80 | 336 |' in table
  assert ('- LARS, 30 % warm-up at 8192 within 1 point of it: 92.20 % over 2 seeds '
          '(lr 22.62), -0.80 points: **met**\n') in table
  write_results(out, 8192, {(22.62, 0): 0.91}, arm='lars_nesterov')
  study(out, REPORT_ONLY='1')
  assert ('- LARS, Nesterov momentum at 8192 within 1 point of it: 91.00 % over 1 seed '
          '(lr 22.62), -2.00 points: **missed** (provisional: 1 of 2 seeds)\n') in (
              out / 'study.md').read_text()


def test_every_target_has_its_line_before_its_arm_has_run(tmp_path):
  # Only the batch-256 SGD grid has run: the other arms' targets are listed as
  # not measured, not left out of the list.
  out = tmp_path / 'study'
  write_results(out, 256, {(0.1, 0): 0.93, (0.1, 1): 0.92}, steps=11232)
  study(out, REPORT_ONLY='1')
  lines = [line for line in (out / 'study.md').read_text().splitlines() if ' within ' in line]
  assert lines == [
      '- SGD (lr tuned) at 8192 within 1 point of it: not measured yet',
      '- LARS (eeta tuned) at 8192 within 1 point of it: not measured yet',
      '- LARS (eeta tuned) at 16384 within 2 points of it: not measured yet',
      '- LAMB at 8192 within 1 point of it: not measured yet']


def test_finished_points_are_archived_and_put_back_into_a_fresh_output(tmp_path):
  """What a study finished outlives its run directories: ARCHIVE holds each result.json."""
  out, archive = tmp_path / 'study', tmp_path / 'archive'
  name = 'batch_size_per_gpu=8192__iter_size=1__lr_policy_params.learning_rate=11.31__seed=0'
  logdir = out / 'lars' / name
  os.makedirs(logdir)
  result = {'point': {'batch_size_per_gpu': 8192, 'iter_size': 1,
                      'lr_policy_params.learning_rate': 11.31},
            'seed': 0, 'overrides': [], 'metrics': {'accuracy': 0.9201, 'steps': 336},
            'wall_s': 1800.0, 'curve': [[329, 0.9195, 1700.0], [336, 0.9201, 1790.0]]}
  (logdir / 'result.json').write_text(json.dumps(result))
  (logdir / 'ckpt-336.index').write_text('a checkpoint is not archived')
  # The budget check at 256 is in the table but is no reference for the gaps.
  half_name = 'batch_size_per_gpu=256__iter_size=1__lr_policy_params.learning_rate=2__seed=0'
  os.makedirs(out / 'lars_half' / half_name)
  (out / 'lars_half' / half_name / 'result.json').write_text(json.dumps({
      'point': {'batch_size_per_gpu': 256, 'iter_size': 1, 'lr_policy_params.learning_rate': 2},
      'seed': 0, 'overrides': [], 'metrics': {'accuracy': 0.91, 'steps': 5616}, 'wall_s': 900.0,
      'curve': [[5616, 0.91, 890.0]]}))
  study(out, archive, REPORT_ONLY='1')
  assert sorted(p.relative_to(archive).as_posix() for p in archive.rglob('*') if p.is_file()) == [
      f'lars/{name}.json', f'lars_half/{half_name}.json']
  assert json.loads((archive / 'lars' / f'{name}.json').read_text()) == result
  table = (out / 'study.md').read_text()
  assert '| 8192 | LARS (eeta tuned) | 11.31 | 1/1 | 0.9201 | n/a |' in table
  assert '| 256 | LARS, half the epochs | 2 | 1/1 | 0.9100 | n/a |' in table
  # The targets under the table wait for batch 256 at the full budget.
  assert table.endswith(
      'Targets, checked from the runs above; the best result at global_batch 256: none yet:\n\n'
      '- SGD (lr tuned) at 8192 within 1 point of it: not measured yet\n'
      '- LARS (eeta tuned) at 8192 within 1 point of it: 92.01 % over 1 seed (lr 11.31), '
      'no reference yet\n'
      '- LARS (eeta tuned) at 16384 within 2 points of it: not measured yet\n'
      '- LAMB at 8192 within 1 point of it: not measured yet\n'
      '- budget: LARS (eeta tuned) at global_batch 256 against LARS, half the epochs: '
      'not measured yet\n')

  # A fresh checkout: no run directories. The archived point is put back, so the
  # report has its row and the study does not run it again.
  fresh = tmp_path / 'fresh'
  study(fresh, archive, REPORT_ONLY='1')
  assert json.loads((fresh / 'lars' / name / 'result.json').read_text()) == result
  assert '| 8192 | LARS (eeta tuned) | 11.31 | 1/1 | 0.9201 |' in (fresh / 'study.md').read_text()
  # A run of that point cut off half-way gives way to the archived result.
  os.remove(fresh / 'lars' / name / 'result.json')
  (fresh / 'lars' / name / 'run.log').write_text('training cut off\n')
  study(fresh, archive, REPORT_ONLY='1')
  assert sorted(os.listdir(fresh / 'lars' / name)) == ['result.json']
