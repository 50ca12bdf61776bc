"""Tests of scripts/sweep.py and framework.sweep: grids, derived values, tables, real sweeps (marked slow)."""

import csv
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

import pytest
import yaml

from tests.processes import Child
from tests.script_modules import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'scripts', 'sweep.py')
SGD_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py')
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


sweep = load_script('sweep')

from framework.sweep import grid  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep import report  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep import results  # noqa: E402  pylint: disable=wrong-import-position
from framework.run import record  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep import runner  # noqa: E402  pylint: disable=wrong-import-position


def tf_global_step(prefix):
  """The global step a checkpoint holds (TensorFlow is imported only by the tests that ask)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return int(tf.train.load_checkpoint(str(prefix)).get_tensor(
      'global_step/.ATTRIBUTES/VARIABLE_VALUE'))


def check_png(path):
  import matplotlib.image  # pylint: disable=import-outside-toplevel
  with open(path, 'rb') as f:
    assert f.read(8) == PNG_SIGNATURE
  assert os.path.getsize(path) > 1000
  image = matplotlib.image.imread(path)
  assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
  return image


# ---------------------------------------------------------------------------
# Derived values

@pytest.mark.parametrize('batch,expected', [(256, 0.1), (1024, 0.4), (4096, 1.6), (32, 0.0125)])
def test_linear_scaling_rule(batch, expected):
  derive = grid.Derivation('lr_policy_params.learning_rate', '0.1*batch_size_per_gpu/256')
  assert derive.evaluate({'batch_size_per_gpu': batch}) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize('expression,expected', [
    ('optimizer_params.momentum * 2 + seed', 0.9 * 2 + 3),
    ('sqrt(batch_size_per_gpu / 256) * 0.1', 0.2),       # square-root scaling
    ('min(2048, batch_size_per_gpu) // 2', 512),
    ('-(2 ** 3) % 5', 2),
    ('max(1, round(log2(batch_size_per_gpu)))', 10),
])
def test_derived_arithmetic(expression, expected):
  values = {'optimizer_params.momentum': 0.9, 'batch_size_per_gpu': 1024, 'seed': 3}
  result = grid.Derivation('x', expression).evaluate(values)
  assert result == pytest.approx(expected, rel=1e-12)
  assert isinstance(result, type(expected))


@pytest.mark.parametrize('expression,message', [
    ("__import__('os').system('true')", 'only calls of'),
    ('open("x")', 'only calls of'),
    ('(lambda: 1)()', 'only calls of'),
    ('[1, 2][0]', 'Subscript is not allowed'),
    ('b if b else 1', 'IfExp is not allowed'),
    ("'a' * 3", 'only numbers are allowed'),
    ('b.__class__', "unknown name 'b.__class__'"),
    ('b.real', "unknown name 'b.real'"),
    ('b[0]', 'Subscript is not allowed'),
    ('10 ** 10 ** 10', 'exponent'),
    ('b / (b - 4)', 'ZeroDivisionError'),
    ('nope * 2', "unknown name 'nope'; known: b, name"),
    ('name * 2', "name is 'LARS', not a number"),
    ('b +', 'cannot parse'),
])
def test_derived_refuses_anything_but_arithmetic_on_numbers(expression, message):
  with pytest.raises(grid.SweepError, match=re.escape(message)):
    grid.Derivation('x', expression).evaluate({'b': 4, 'name': 'LARS'})


# ---------------------------------------------------------------------------
# The grid

def test_points_are_the_product_times_the_seeds_with_overrides_in_order(tmp_path):
  args = sweep.parse_args([
      '--config', SGD_CONFIG, '--out', str(tmp_path), '--grid', 'optimizer=Momentum,LARS',
      '--grid', 'batch_size_per_gpu=256,1024,4096', '--seeds', '0,1',
      '--derive', 'lr_policy_params.learning_rate=0.1*batch_size_per_gpu/256'])
  points = sweep.build_points(args)
  assert len(points) == 2 * 3 * 2
  assert len({p.name for p in points}) == 12
  first = points[0]
  assert first.name == 'optimizer=Momentum__batch_size_per_gpu=256__seed=0'
  assert first.overrides == ['optimizer=Momentum', 'batch_size_per_gpu=256',
                             'lr_policy_params.learning_rate=0.1', 'random_seed=0']
  lars_4096_seed_1 = points[-1]
  assert lars_4096_seed_1.overrides == ['optimizer=LARS', 'batch_size_per_gpu=4096',
                                        'lr_policy_params.learning_rate=1.6', 'random_seed=1']
  assert lars_4096_seed_1.group() == ('LARS', '4096')


def test_grid_values_split_at_top_level_commas_and_read_as_yaml():
  key, values = grid.parse_grid_argument(
      'optimizer_params={momentum: 0.9, eeta: 1e-3},{momentum: 0.95},[1, 2]')
  assert key == 'optimizer_params'
  assert [v for _, v in values] == [{'momentum': 0.9, 'eeta': 0.001}, {'momentum': 0.95}, [1, 2]]
  assert values[0][0] == '{momentum: 0.9, eeta: 1e-3}'  # given to run.py as written
  _, numbers = grid.parse_grid_argument('lr=1e-3,0.5,2,null,true')
  assert [v for _, v in numbers] == [0.001, 0.5, 2, None, True]


def test_grid_file_with_derived_gives_the_same_points_as_the_command_line(tmp_path):
  grid_file = tmp_path / 'grid.yaml'
  grid_file.write_text('optimizer: [Momentum, LARS]\n'
                       'lr_policy_params.min_lr: [1e-4, 0.001]\n'
                       'derived:\n'
                       '  lr_policy_params.learning_rate: 100 * lr_policy_params.min_lr\n')
  from_file = sweep.build_points(sweep.parse_args(
      ['--config', SGD_CONFIG, '--out', str(tmp_path), '--grid-file', str(grid_file)]))
  from_flags = sweep.build_points(sweep.parse_args(
      ['--config', SGD_CONFIG, '--out', str(tmp_path), '--grid', 'optimizer=Momentum,LARS',
       '--grid', 'lr_policy_params.min_lr=0.0001,0.001',
       '--derive', 'lr_policy_params.learning_rate=100*lr_policy_params.min_lr']))
  assert [p.overrides for p in from_file] == [p.overrides for p in from_flags]
  assert from_file[0].overrides == ['optimizer=Momentum', 'lr_policy_params.min_lr=0.0001',
                                    'lr_policy_params.learning_rate=0.01']


def test_a_grid_flag_narrows_the_grid_file_and_keeps_its_derived_values(tmp_path):
  grid_file = tmp_path / 'grid.yaml'
  grid_file.write_text('batch_size_per_gpu: [256, 1024, 8192]\n'
                       'optimizer: [Momentum]\n'
                       'derived:\n'
                       '  lr_policy_params.learning_rate: 0.1 * batch_size_per_gpu / 256\n')
  points = sweep.build_points(sweep.parse_args(
      ['--config', SGD_CONFIG, '--out', str(tmp_path), '--grid-file', str(grid_file),
       '--grid', 'batch_size_per_gpu=8192,256', '--seeds', '1']))
  assert [p.overrides for p in points] == [
      ['batch_size_per_gpu=8192', 'optimizer=Momentum', 'lr_policy_params.learning_rate=3.2',
       'random_seed=1'],
      ['batch_size_per_gpu=256', 'optimizer=Momentum', 'lr_policy_params.learning_rate=0.1',
       'random_seed=1']]
  with pytest.raises(grid.SweepError, match='given twice'):
    sweep.build_points(sweep.parse_args(
        ['--config', SGD_CONFIG, '--out', str(tmp_path), '--grid-file', str(grid_file),
         '--grid', 'optimizer=SGD', '--grid', 'optimizer=LARS']))


@pytest.mark.parametrize('argv,message', [
    (['--grid', 'optimizer=LARS,LARS'], 'value LARS is given twice'),
    # Three spellings of one number were three identical points.
    (['--grid', 'optimizer_params.momentum=0.9,0.90,9e-1'],
     'grid optimizer_params.momentum: value 0.90 is given twice (as 0.9)'),
    (['--grid', 'num_epochs=1,1.0'], 'value 1.0 is given twice (as 1)'),
    (['--grid', 'a=1', '--derive', 'a=2'], 'is also a grid key'),
    (['--grid', 'a=1', '--derive', 'b=c*2'], "unknown name 'c'"),
    (['--grid', 'a'], 'expected key.path=value1,value2'),
    ([], 'nothing to sweep'),
    (['--seeds', '0,x'], 'comma-separated integers'),
    (['--grid', 'random_seed=1,2', '--seeds', '0,1'],
     'grid random_seed and --seeds both set random_seed'),
    (['--grid', 'a=1', '--derive', 'train_params.random_seed=a+1', '--seeds', '0'],
     'derived train_params.random_seed and --seeds both set random_seed'),
])
def test_sweep_argument_mistakes(tmp_path, argv, message):
  args = sweep.parse_args(['--config', SGD_CONFIG, '--out', str(tmp_path), *argv])
  with pytest.raises(grid.SweepError, match=re.escape(message)):
    sweep.build_points(args)


def test_an_archive_that_is_not_a_directory_is_refused_before_anything_runs(tmp_path):
  taken = tmp_path / 'results.json'
  taken.write_text('{}')
  args = sweep.parse_args(['--config', SGD_CONFIG, '--out', str(tmp_path / 'out'), '--seeds', '0',
                           '--archive', str(taken)])
  with pytest.raises(grid.SweepError, match=re.escape(f'--archive {taken}: not a directory')):
    sweep.check_arguments(args)
  args.archive = str(tmp_path / 'new')  # made when the first point finishes
  assert [p.name for p in sweep.check_arguments(args)] == ['seed=0']


def test_a_run_without_a_record_has_no_metrics(tmp_path):
  # A benchmark writes none; its console lines are not read for numbers.
  (tmp_path / results.LOG_FILE).write_text(
      'final test accuracy: 0.0886 (top-5 0.5061, loss 2.3045) at step 3\n')
  assert results.run_metrics(str(tmp_path)) == {'accuracy': None, 'top5': None, 'loss': None,
                                                'steps': None}
  assert results.eval_curve(str(tmp_path)) == [] and results.timed_curve(str(tmp_path)) == []
  assert results.run_curve_metric(str(tmp_path)) == 'accuracy'


# ---------------------------------------------------------------------------
# The best point

def write_result(out, point, metrics, curve_metric='accuracy'):
  """A finished point's result.json as the runner writes it (the fields the choice reads)."""
  logdir = out / point.name
  logdir.mkdir(parents=True)
  (logdir / results.RESULT_FILE).write_text(json.dumps({
      'point': {k: v for k, (_, v) in point.grid.items()}, 'derived': point.derived,
      'seed': point.seed, 'metrics': metrics, 'curve_metric': curve_metric, 'wall_s': 1.0}))
  return str(logdir)


def stub_sweep(out, argv):
  """A runner.Sweep over the points of ``argv`` in ``out``, run by nobody."""
  args = sweep.parse_args(['--config', SGD_CONFIG, '--out', str(out), *argv])
  return runner.Sweep(args, sweep.build_points(args))


def test_the_best_point_is_the_best_mean_over_seeds_then_its_best_seed(tmp_path, capsys):
  out = tmp_path / 'sweep'
  stub = stub_sweep(out, ['--grid', 'batch_size_per_gpu=256,4096,8192', '--seeds', '0,1'])
  # 256: 0.80 and 0.90 (mean 0.85); 4096: 0.95 and 0.70 (mean 0.825, the best single run);
  # 8192: a failed seed and one not run, so its mean is its one finished seed's.
  accuracies = [0.80, 0.90, 0.95, 0.70, 0.84, None]
  for point, accuracy in zip(stub.points, accuracies):
    if accuracy is not None:
      write_result(out, point, {'accuracy': accuracy, 'top5': 0.99, 'loss': 0.3, 'steps': 3})
  (out / stub.points[4].name / results.RESULT_FILE).unlink()  # 8192, seed 0: failed
  (out / stub.points[4].name / results.ERROR_FILE).write_text('error: boom\n')
  best = report.best_of_sweep(stub)
  assert best == report.Best(stub.logdir(stub.points[1]), 'accuracy', True, 0.90,
                             pytest.approx(0.85), 2)
  assert report.best_of_directory(str(out)) == best  # from the directory alone
  report.write_results(stub)
  rows = read_csv(out / 'results.csv')
  assert [(r['batch_size_per_gpu'], r['seed'], r['status'], r['best']) for r in rows] == [
      ('256', '0', 'ok', '0'), ('256', '1', 'ok', '1'), ('4096', '0', 'ok', '0'),
      ('4096', '1', 'ok', '0'), ('8192', '0', 'failed', '0'), ('8192', '1', 'not run', '0')]
  text = (out / 'results.md').read_text()
  assert '| 256 | 2/2 | 0.8500 ± 0.0707 |' in text
  assert [l for l in text.splitlines() if 'best**' in l] == [
      '| 256 | 2/2 | 0.8500 ± 0.0707 | 0.9900 ± 0.0000 | 0.3000 ± 0.0000 | 3 | 1.0 ± 0.0 |  '
      '| **best** (seed 1) |']
  assert ('Best by accuracy (higher is better): `batch_size_per_gpu=256__seed=1`, 0.9000, the '
          'best seed of the configuration with the best mean over its 2 finished seeds (0.8500).'
          ) in text
  capsys.readouterr()
  assert sweep.main(['--best', str(out)]) == 0
  assert capsys.readouterr().out == stub.logdir(stub.points[1]) + '\n'


def test_a_lower_metric_wins_for_a_sequence_sweep_and_ties_go_to_the_first_directory(tmp_path):
  out = tmp_path / 'sweep'
  stub = stub_sweep(out, ['--grid', 'batch_size_per_gpu=64,128,256'])
  for point, wer in zip(stub.points, [0.31, 0.28, 0.28]):
    write_result(out, point, {'wer': wer, 'per': 0.07, 'loss': 1.0, 'steps': 60}, 'wer')
  best = report.best_of_sweep(stub)
  # 128 and 256 tie: batch_size_per_gpu=128 sorts before batch_size_per_gpu=256.
  assert (best.logdir, best.metric, best.higher, best.value) == (
      stub.logdir(stub.points[1]), 'wer', False, 0.28)
  report.write_results(stub)
  rows = read_csv(out / 'results.csv')
  assert [r['best'] for r in rows] == ['0', '1', '0']
  # The task's own metrics get columns of their own, after loss.
  assert list(rows[0])[:10] == ['batch_size_per_gpu', 'seed', 'status', 'best', 'accuracy', 'top5',
                                'loss', 'wer', 'per', 'steps']
  assert [r['wer'] for r in rows] == ['0.31', '0.28', '0.28']
  text = (out / 'results.md').read_text()
  assert '| batch_size_per_gpu | status | accuracy | top-5 | loss | wer | per | steps |' in text
  assert '| 128 | ok | n/a | n/a | 1.0000 | 0.2800 | 0.0700 | 60 | 1.0 | **best** |' in text


def test_best_without_a_finished_point_is_one_line_and_exit_status_1(tmp_path, capsys):
  out = tmp_path / 'sweep'
  assert sweep.main(['--best', str(out)]) == 1
  assert capsys.readouterr().err == f'error: --best {out}: no such directory\n'
  stub = stub_sweep(out, ['--grid', 'batch_size_per_gpu=64,128'])
  write_result(out, stub.points[0], {'accuracy': None, 'top5': None, 'loss': None, 'steps': 3})
  (out / 'notes.txt').write_text('not a point')
  assert sweep.main(['--best', str(out)]) == 1
  assert capsys.readouterr().err == (
      f'error: --best {out}: no finished point with a metric to compare (no run directory with a '
      'result.json holding its accuracy or wer)\n')
  with pytest.raises(SystemExit) as exit_status:
    sweep.parse_args(['--best', str(out), '--config', SGD_CONFIG])
  assert exit_status.value.code == 2
  assert '--best reads a finished sweep and takes no other flag (--config given)' in (
      capsys.readouterr().err)
  with pytest.raises(SystemExit):
    sweep.parse_args(['--grid', 'a=1'])
  assert 'the following arguments are required: --config, --out' in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Tables and plot from known rows

def fake_rows(points, accuracies):
  rows = []
  for point, accuracy in zip(points, accuracies):
    row = {k: text for k, (text, _) in point.grid.items()}
    row.update(point.derived, seed=point.seed, status='ok' if accuracy is not None else 'failed',
               accuracy=accuracy, top5=None if accuracy is None else 0.99, loss=None,
               steps=None if accuracy is None else 100, wall_s=10.0, logdir=f'/x/{point.name}',
               error='' if accuracy is not None else 'error: boom')
    rows.append(row)
  return rows


def test_markdown_gives_mean_and_std_over_seeds_and_lists_failures(tmp_path):
  points = sweep.build_points(sweep.parse_args(
      ['--config', SGD_CONFIG, '--out', str(tmp_path), '--grid', 'batch_size_per_gpu=256,4096',
       '--seeds', '0,1']))
  rows = fake_rows(points, [0.8, 0.9, 0.5, None])
  text = report.markdown(rows, points, ['batch_size_per_gpu'], True, '# sweep')
  std = statistics.stdev([0.8, 0.9])
  assert f'| 256 | 2/2 | 0.8500 ± {std:.4f} |' in text
  assert '| 4096 | 1/2 | 0.5000 |' in text
  assert 'batch_size_per_gpu=4096__seed=1`: failed — error: boom' in text
  plain = report.markdown(rows, points, ['batch_size_per_gpu'], False, '# sweep')
  assert plain.count('| 256 | ok | 0.') == 2 and '| 4096 | failed | n/a |' in plain


@pytest.mark.parametrize('values,scale', [
    ([256, 1024, 4096], 'log'), ([0.9, 0.95], 'linear'), ([1, 10], 'linear'),
    ([-1, 100], 'linear'), (['Momentum', 'LARS'], 'category'), ([1, True], 'category')])
def test_x_scale(values, scale):
  assert report.x_scale(values) == scale


@pytest.mark.parametrize('key,values,scale', [
    ('batch_size_per_gpu', [256, 1024], 'log'), ('iter_size', [1, 2, 4], 'log'),
    ('model_params.ghost_batch_size', [32, 64], 'log'), ('batch_size_per_gpu', [256], 'linear'),
    ('optimizer_params.momentum', [0.8, 0.9], 'linear'), (None, [256, 1024], 'linear')])
def test_batch_like_keys_get_a_log_axis(key, values, scale):
  assert report.x_scale(values, key) == scale


def red_pixels(path):
  image = check_png(path)
  return int(((image[..., 0] > 0.95) & (image[..., 1] < 0.05) & (image[..., 2] < 0.05)).sum())


def test_failed_points_are_marked_on_the_plot_and_in_the_table(tmp_path):
  points = sweep.build_points(sweep.parse_args(
      ['--config', SGD_CONFIG, '--out', str(tmp_path), '--grid', 'batch_size_per_gpu=256,4096',
       '--seeds', '0,1']))
  assert report.plot_accuracy(points, fake_rows(points, [0.8, 0.9, 0.5, 0.6]),
                             str(tmp_path / 'ok.png'), 'test')
  assert report.plot_accuracy(points, fake_rows(points, [0.8, 0.9, 0.5, None]),
                             str(tmp_path / 'failed.png'), 'test')
  assert red_pixels(tmp_path / 'ok.png') == 0 and red_pixels(tmp_path / 'failed.png') > 20
  text = report.markdown(fake_rows(points, [0.8, 0.9, 0.5, None]), points,
                        ['batch_size_per_gpu'], True, '# sweep')
  assert '| batch_size_per_gpu | seeds ok |' in text and text.count('failed seeds') == 1
  assert '| 4096 | 1/2 | 0.5000 | 0.9900 | n/a | 100 | 10.0 | 1 |' in text
  assert '| 256 | 2/2 |' in text and text.split('| 256 | 2/2 |')[1].splitlines()[0].endswith('|  |')


def test_accuracy_plot_from_known_rows(tmp_path):
  points = sweep.build_points(sweep.parse_args(
      ['--config', SGD_CONFIG, '--out', str(tmp_path), '--grid', 'batch_size_per_gpu=256,4096',
       '--grid', 'optimizer=Momentum,LARS', '--seeds', '0,1']))
  rows = fake_rows(points, [0.8, 0.9, 0.85, 0.86, 0.5, None, 0.7, 0.72])
  path = tmp_path / 'accuracy.png'
  assert report.plot_accuracy(points, rows, str(path), 'test')
  check_png(path)
  assert not report.plot_accuracy(points, fake_rows(points, [None] * 8), str(tmp_path / 'n.png'),
                                 'test')
  assert not (tmp_path / 'n.png').exists()


# ---------------------------------------------------------------------------
# A real sweep: two short runs, two runs that fail, and configs checked before any run

# Three steps on a small synthetic set shaped like Fashion-MNIST: each run.py costs a few
# seconds of start-up, and evaluating the real 10,000 test images would add as much again.
SYNTHETIC = '{image_shape: [28, 28, 1], num_classes: 10, num_examples: 500}'
SHORT = ['--set', 'max_steps=3', '--set', 'num_epochs=null', '--set', 'data_layer=synthetic',
         '--set', f'data_layer_params={SYNTHETIC}',
         '--set', 'lr_policy_params={learning_rate: 0.1, power: 1.0, decay_steps: 10}',
         '--set', 'optimizer_params={momentum: 0.9}', '--set', 'eval_params.batch_size_per_gpu=500']


def run_sweep(*args, after=()):
  """Runs scripts/sweep.py on ``args``, then SHORT, then the overrides ``after``."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  return subprocess.run([sys.executable, SCRIPT, '--config', SGD_CONFIG, *args, *SHORT, *after],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def read_csv(path):
  with open(path, newline='', encoding='utf-8') as f:
    return list(csv.DictReader(f))


def test_every_point_is_checked_before_any_runs(tmp_path):
  out = tmp_path / 'sweep'
  result = run_sweep('--grid', 'optimizer=Momentum,Nope', '--grid', 'batch_size_per_gpu=32,-4',
                     '--out', str(out))
  assert result.returncode == 2, result.stdout + result.stderr
  errors = result.stderr.splitlines()
  assert errors[:3] == [
      "error: point optimizer=Momentum__batch_size_per_gpu=-4: batch_size_per_gpu: must be > 0, "
      "got -4",
      "error: point optimizer=Nope__batch_size_per_gpu=32: optimizer: unknown optimizer 'Nope'; "
      "known: AGN, Adagrad, Adam, AdamW, Ftrl, KerasMomentum, LAMB, LARS, Lion, Momentum, Muon, "
      "RMSProp, SGD",
      # The first mistake in the config's key order, as run.py reports it.
      "error: point optimizer=Nope__batch_size_per_gpu=-4: batch_size_per_gpu: must be > 0, "
      "got -4"], errors
  assert errors[3] == 'error: 3 of 4 point(s) have a config error; nothing was run'
  assert not out.exists() or not os.listdir(out)
  assert 'started' not in result.stdout


def test_a_batch_larger_than_the_data_is_refused_before_any_point_runs(tmp_path):
  # The data layer declares its size (500 examples): the check the run would make first.
  result = run_sweep('--grid', 'batch_size_per_gpu=32,1024', '--out', str(tmp_path / 'sweep'))
  assert result.returncode == 2, result.stdout + result.stderr
  assert result.stderr.splitlines() == [
      'error: point batch_size_per_gpu=1024: batch_size_per_gpu: 1024 per worker x 1 worker(s) '
      'is larger than the 500 examples of the train split',
      'error: 1 of 2 point(s) have a config error; nothing was run']
  assert 'started' not in result.stdout


# 2048 examples, so that a batch of 1024 fits; the derived L2 scale is 1e38 at 1024, whose
# loss is then not finite: those runs fail only once they train, and the sweep must say so
# and exit 1.
BIG_L2 = ['--set', 'data_layer_params.num_examples=2048', '--set', 'regularizer=l2']
L2_SCALE = '1e-30 + batch_size_per_gpu // 1024 * 1e38'


@pytest.mark.slow
def test_sweep_runs_points_resumes_and_reports_failures(tmp_path):
  out = tmp_path / 'sweep'
  grid_file = tmp_path / 'grid.yaml'
  grid_file.write_text('batch_size_per_gpu: [32, 1024]\n'
                       'optimizer: [Momentum, LARS]\n'
                       'derived:\n'
                       '  lr_policy_params.learning_rate: 0.025 * batch_size_per_gpu / 16\n'
                       f'  regularizer_params.scale: {L2_SCALE}\n')
  first = run_sweep('--grid-file', str(grid_file), '--out', str(out), '--jobs', '3',
                    after=BIG_L2)
  assert first.returncode == 1, first.stdout + first.stderr
  assert '4 point(s) in' in first.stdout and 'all configs valid' in first.stdout
  # Reading the runs' events loads TensorFlow, without its start-up lines.
  assert 'oneDNN' not in first.stdout + first.stderr and 'absl' not in first.stderr
  for name in ('Momentum', 'LARS'):
    assert re.search(rf'FAILED batch_size_per_gpu=1024__optimizer={name} \(exit status 1\): '
                     r'error: non-finite loss \(loss inf\) at step \d', first.stdout), first.stdout
  assert '4/4 done (0 skipped, 2 failed), 0 running, 0 left' in first.stdout

  rows = {(row['batch_size_per_gpu'], row['optimizer']): row
          for row in read_csv(out / 'results.csv')}
  assert list(rows) == [('32', 'Momentum'), ('32', 'LARS'), ('1024', 'Momentum'),
                        ('1024', 'LARS')]
  for name in ('Momentum', 'LARS'):
    row = rows['32', name]
    logdir = out / f'batch_size_per_gpu=32__optimizer={name}'
    assert row['status'] == 'ok' and row['logdir'] == str(logdir) and row['error'] == ''
    # The synthetic data's eval split is its validation split, and the final line says so.
    final = [l for l in (logdir / 'run.log').read_text().splitlines()
             if l.startswith('final validation accuracy')][-1]
    accuracy, top5, loss, step = re.match(
        r'final validation accuracy: (\S+) \(top-5 (\S+), loss (\S+)\) at step (\d+)$',
        final).groups()
    # The table's numbers are the record's, unrounded: the final line shows them to 4 digits.
    assert round(float(row['accuracy']), 4) == float(accuracy) and 0.0 <= float(accuracy) <= 1.0
    assert round(float(row['top5']), 4) == float(top5)
    assert round(float(row['loss']), 4) == float(loss)
    assert row['steps'] == step == '3'
    assert float(row['wall_s']) > 1.0
    # result.json keeps the curve of the run's evaluations, each with its seconds
    # since the start of training, so that the file alone serves a study's report.
    evals = [re.match(r'eval at step (\d+): loss \S+, top-1 (\S+),', l).groups()
             for l in (logdir / 'run.log').read_text().splitlines() if l.startswith('eval at step')]
    curve = json.loads((logdir / 'result.json').read_text())['curve']
    assert evals and [(c[0], round(c[1], 4)) for c in curve] == [(int(s), float(a))
                                                                 for s, a in evals]
    assert all(0.0 < c[2] <= float(row['wall_s']) for c in curve)
    # ... and the machine it ran on, whose wall times a study compares.
    assert json.loads((logdir / 'result.json').read_text())['machine'] == runner.machine()
    # The derived rate reached the run: 0.025 * 32 / 16, not the 0.1 of --set.
    saved = yaml.safe_load((logdir / 'config.yaml').read_text())
    resolved = {**saved['base_params'], **saved['train_params']}  # the train view
    assert resolved['lr_policy_params']['learning_rate'] == pytest.approx(0.05)
    assert resolved['optimizer'] == name and resolved['batch_size_per_gpu'] == 32
    assert resolved['max_steps'] == 3 and row['lr_policy_params.learning_rate'] == '0.05'
    failed = rows['1024', name]
    assert failed['status'] == 'failed' and failed['accuracy'] == ''
    assert failed['error'].startswith('error: non-finite loss (loss inf) at step ')
    error_txt = out / f'batch_size_per_gpu=1024__optimizer={name}' / 'error.txt'
    assert error_txt.read_text().strip() == failed['error']
  markdown = (out / 'results.md').read_text()
  accuracy = float(rows['32', 'Momentum']['accuracy'])
  assert f'| 32 | Momentum | 0.05 | 1e-30 | ok | {accuracy:.4f} |' in markdown
  assert '| 1024 | LARS | 1.6 | 1e+38 | failed | n/a |' in markdown
  assert '=1024__optimizer=LARS`: failed — error: non-finite loss (loss inf)' in markdown
  check_png(out / 'accuracy.png')
  # The best point: the finished one of higher accuracy (Momentum on a tie, its name sorts first).
  winner = max(['Momentum', 'LARS'],
               key=lambda name: (float(rows['32', name]['accuracy']), name == 'Momentum'))
  assert [key for key, row in rows.items() if row['best'] == '1'] == [('32', winner)]
  best = subprocess.run([sys.executable, SCRIPT, '--best', str(out)], capture_output=True,
                        text=True, check=True)
  assert best.stdout == rows['32', winner]['logdir'] + '\n'

  # Again, from the command line: finished points are skipped, untouched; failed ones rerun.
  logs = {key: out / f'batch_size_per_gpu={key[0]}__optimizer={key[1]}' / 'run.log'
          for key in rows}
  before = {key: (path.stat().st_mtime_ns, path.read_text()) for key, path in logs.items()}
  second = run_sweep('--grid', 'batch_size_per_gpu=32,1024', '--grid', 'optimizer=Momentum,LARS',
                     '--derive', 'lr_policy_params.learning_rate=0.025*batch_size_per_gpu/16',
                     '--derive', f'regularizer_params.scale={L2_SCALE}',
                     '--out', str(out), '--jobs', '3', after=BIG_L2)
  assert second.returncode == 1, second.stdout + second.stderr
  for name in ('Momentum', 'LARS'):
    assert re.search(rf'skipped batch_size_per_gpu=32__optimizer={name}: finished before '
                     rf'\(accuracy {float(rows["32", name]["accuracy"]):.4f}\)', second.stdout)
    assert (logs['32', name].stat().st_mtime_ns, logs['32', name].read_text()) == before['32', name]
    assert f'started batch_size_per_gpu=1024__optimizer={name}' in second.stdout
    assert logs['1024', name].stat().st_mtime_ns != before['1024', name][0]
  assert 'started batch_size_per_gpu=32' not in second.stdout
  assert '4/4 done (2 skipped, 2 failed)' in second.stdout
  again = {(r['batch_size_per_gpu'], r['optimizer']): r for r in read_csv(out / 'results.csv')}
  assert again['32', 'Momentum']['accuracy'] == rows['32', 'Momentum']['accuracy']
  assert again['1024', 'LARS']['status'] == 'failed'


def _ignore_sigint():
  """As ``cmd &`` in a script starts a command: with SIGINT ignored."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_a_finished_point_is_archived_at_once_and_outlives_a_sweep_cut_off(tmp_path, signum):
  """--archive copies each result.json when its point finishes, not when the sweep ends."""
  out, archive = tmp_path / 'sweep', tmp_path / 'kept'
  first, second = ('batch_size_per_gpu=32__optimizer=Momentum',
                   'batch_size_per_gpu=32__optimizer=LARS')
  command = [sys.executable, SCRIPT, '--config', SGD_CONFIG, *SHORT, '--out', str(out),
             '--archive', str(archive), '--grid', 'batch_size_per_gpu=32',
             '--grid', 'optimizer=Momentum,LARS', '--jobs', '1']
  # Started with SIGINT ignored, the sweep still stops on it (a study script's
  # background jobs start so).
  with subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        preexec_fn=_ignore_sigint) as process:
    seen = []
    for line in process.stdout:
      seen.append(line)
      if f'started {second}' in line:
        # The first point is archived before the second starts; the sweep is then
        # cut off (Ctrl-C, or a scheduler's SIGTERM) while the second runs.
        assert sorted(os.listdir(archive)) == [f'{first}.json'], ''.join(seen)
        process.send_signal(signum)
    assert process.wait(timeout=120) == 128 + signum, ''.join(seen)
  # Stopped while it started: it saved nothing, so it starts again next time.
  assert f'interrupted {second}' in ''.join(seen)
  assert sorted(os.listdir(archive)) == [f'{first}.json']
  kept = json.loads((archive / f'{first}.json').read_text())
  assert kept == json.loads((out / first / 'result.json').read_text())
  assert kept['point'] == {'batch_size_per_gpu': 32, 'optimizer': 'Momentum'}
  assert kept['metrics']['steps'] == 3 and 0.0 <= kept['metrics']['accuracy'] <= 1.0
  assert not (out / 'results.csv').exists()  # the sweep never reached its end


def test_a_seed_given_twice_is_one_line_before_anything_runs(tmp_path):
  # A grid seed and --seeds would make 4 points of which 2 repeat others.
  out = tmp_path / 'sweep'
  result = run_sweep('--grid', 'random_seed=1,2', '--seeds', '0,1', '--out', str(out))
  assert result.returncode == 2
  assert result.stderr.strip() == (
      'error: grid random_seed and --seeds both set random_seed, so points would repeat one '
      'another; give the seeds one way: --seeds alone, or the grid key without --seeds')
  assert not out.exists()


def test_attempts_and_their_seconds_are_read_from_run_log(tmp_path):
  log = ('[sweep] attempt 1 started at 1000.00 (...)\n$ run.py ...\n'
         'stopped by SIGINT at step 7 of 40: saved /x/ckpt-7; resume with: ...\n'
         '[sweep] attempt 1 ended after 30.00 s with exit status 130\n'
         '[sweep] attempt 2 started at 5000.00 (...); resuming from ckpt-7\n$ run.py ...\n'
         'TensorBoard: tensorboard --logdir /x\n')
  assert results.attempts(log) == [
      {'start': 1000.0, 'seconds': 30.0, 'status': 130, 'resumed_from': None},
      {'start': 5000.0, 'seconds': None, 'status': None, 'resumed_from': 7}]
  # The sweep did not see attempt 2 end; the run's record says it got to its end, also when
  # a signal came as the process ended. Console lines say nothing.
  logdir = tmp_path / 'point'
  run = record.Record(str(logdir), True, 0)
  run.add('start', 0)
  run.add('stop', 7, signal='SIGINT', checkpoint='/x/ckpt-7')
  assert results.stopped(str(logdir)) == {'kind': 'stop', 'step': 7, 'signal': 'SIGINT',
                                          'checkpoint': '/x/ckpt-7',
                                          'time': results.stopped(str(logdir))['time']}
  run = record.Record(str(logdir), True, 7)  # attempt 2 drops the stop
  run.add('start', 7)
  assert results.stopped(str(logdir)) is None
  assert not results.finished(str(logdir), log, 'train_eval')
  assert not results.finished(str(logdir), log + '[sweep] attempt 2 ended after 9 s with exit '
                                                 'status 1\n', 'train_eval')
  assert results.finished(str(logdir), log + '[sweep] attempt 2 ended after 9 s with exit '
                                             'status 0\n', 'benchmark')
  run.add('end', 40, updates=40)
  assert results.finished(str(logdir), log, 'train_eval')
  assert results.finished(str(logdir), log + '[sweep] attempt 2 ended after 9 s with exit '
                                             'status -15\n', 'train')
  # A critical batch's record ends at each of its run's stages: only its exit status tells.
  assert not results.finished(str(logdir), log, 'critical_batch')
  # Seconds from the first event (1010) to an evaluation (5020) count inside the attempts
  # only: 20 s of attempt 1 and 20 s of attempt 2, not the 4,000 s between them.
  spans = [(1000.0, 1030.0), (5000.0, float('inf'))]
  assert results.running_seconds(spans, 1010.0, 5020.0) == pytest.approx(40.0)


def read_log_until(path, prefix, timeout):
  """Waits until the file at ``path`` has a line starting with ``prefix``; returns its text."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    text = path.read_text(errors='replace') if path.exists() else ''
    if any(line.startswith(prefix) for line in text.splitlines()):
      return text
    time.sleep(0.2)
  raise AssertionError(f'no line {prefix!r} in {path} within {timeout} s:\n{text}')


def start_sweep(*args):
  """Starts a sweep whose ``args`` come after SHORT (so they override it); output on stdout."""
  return Child([sys.executable, SCRIPT, '--config', SGD_CONFIG, *SHORT, *args], cwd=ROOT,
               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'), stderr=subprocess.STDOUT)


def sweep_again(*args):
  """The sweep of :func:`start_sweep`, run to its end."""
  return subprocess.run([sys.executable, SCRIPT, '--config', SGD_CONFIG, *SHORT, *args],
                        cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'),
                        capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_an_interrupted_point_resumes_and_a_finished_one_is_never_run_again(tmp_path):
  out = tmp_path / 'sweep'
  name = 'optimizer_params.momentum=0.9'
  logdir = out / name
  args = ['--set', 'max_steps=40', '--set', 'batch_size_per_gpu=32', '--set',
          'print_loss_steps=1', '--grid', 'optimizer_params.momentum=0.9', '--out', str(out)]
  with start_sweep(*args) as sweep_process:
    sweep_process.wait_for_line(lambda line: f'started {name}' in line, timeout=300)
    read_log_until(logdir / 'run.log', 'step 3 ', timeout=300)
    sweep_process.send_signal(signal.SIGINT)  # Ctrl-C
    output, _ = sweep_process.communicate(timeout=400)
  assert sweep_process.returncode == 130, output
  stopped = re.search(rf'interrupted {re.escape(name)} at step (\d+): saved '
                      rf'{re.escape(str(logdir))}/ckpt-(\d+); it resumes from there next time',
                      output)
  assert stopped and stopped.group(1) == stopped.group(2), output
  step = int(stopped.group(1))
  assert 3 <= step < 40
  # An interrupted point is not done: it is left for next time.
  assert '0/1 done (0 skipped, 0 failed), 0 running, 1 left' in output
  assert tf_global_step(logdir / f'ckpt-{step}') == step
  assert not (logdir / 'result.json').exists() and not (logdir / 'error.txt').exists()

  # Again: the point resumes from its checkpoint, not from step 0.
  second = sweep_again(*args)
  assert second.returncode == 0, second.stdout + second.stderr
  assert f'resumed {name} from {logdir}/ckpt-{step} (attempt 2)' in second.stdout
  assert f'started {name}' not in second.stdout
  log = (logdir / 'run.log').read_text()
  assert f'restored {logdir}/ckpt-{step} (step {step})' in log
  resumed = log[log.index('[sweep] attempt 2 started'):]
  assert f'; starting at step {step}\n' in resumed and 'starting at step 0' not in resumed
  assert tf_global_step(logdir / 'ckpt-40') == 40
  result = json.loads((logdir / 'result.json').read_text())
  assert result['attempts'] == 2 and result['metrics']['steps'] == 40
  final = re.search(r'^final validation accuracy: (\S+) ', log, re.MULTILINE)
  assert round(result['metrics']['accuracy'], 4) == float(final.group(1))
  # The wall time is the two attempts', not the time between them.
  seconds = [float(s) for s in re.findall(r'^\[sweep\] attempt \d ended after (\S+) s', log,
                                          re.MULTILINE)]
  assert len(seconds) == 2 and result['wall_s'] == pytest.approx(sum(seconds), abs=0.02)

  # A point that finished but whose result was never written (the sweep killed before
  # it saw the run end) is recorded from its run.log, without running again.
  (logdir / 'result.json').unlink()
  cut = log[:log.rindex('[sweep] attempt 2 ended')]
  (logdir / 'run.log').write_text(cut)
  third = sweep_again(*args)
  assert third.returncode == 0, third.stdout + third.stderr
  assert (f'recorded {name}: it had finished (accuracy {result["metrics"]["accuracy"]:.4f}) '
          'before its result was written') in third.stdout
  assert 'started' not in third.stdout and 'resumed' not in third.stdout
  assert (logdir / 'run.log').read_text() == cut
  recorded = json.loads((logdir / 'result.json').read_text())
  assert recorded['metrics'] == result['metrics'] and recorded['attempts'] == 2


@pytest.mark.slow
def test_a_point_that_ends_well_as_the_sweep_stops_is_recorded_as_finished(tmp_path):
  out = tmp_path / 'sweep'
  name = 'optimizer_params.momentum=0.9'
  # The only checkpoint is the last one, written just before the last evaluation, which
  # (100,000 synthetic images) takes seconds: the signal lands in it.
  args = ['--set', 'save_checkpoint_steps=1000', '--set', 'data_layer_params.num_examples=100000',
          '--grid', 'optimizer_params.momentum=0.9', '--out', str(out)]
  with start_sweep(*args) as sweep_process:
    sweep_process.wait_for_line(lambda line: f'started {name}' in line, timeout=300)
    read_log_until(out / name / 'checkpoint', 'model_checkpoint_path: "ckpt-3"', timeout=300)
    time.sleep(1)  # past the check for a signal that follows the save
    sweep_process.send_signal(signal.SIGTERM)
    output, _ = sweep_process.communicate(timeout=400)
  assert sweep_process.returncode == 143, output
  assert re.search(rf'finished {re.escape(name)}: accuracy \d\.\d{{4}}, 3 steps', output), output
  assert 'interrupted' not in output
  log = (out / name / 'run.log').read_text()
  assert 'SIGTERM came during the last evaluation, after the last checkpoint' in log
  result = json.loads((out / name / 'result.json').read_text())
  final = re.search(r'^final validation accuracy: (\S+) ', log, re.MULTILINE)
  assert result['metrics']['steps'] == 3
  assert round(result['metrics']['accuracy'], 4) == float(final.group(1))


HOLD_LOCK = '''
import sys, time
sys.path.insert(0, {root!r})
from framework.run import rundir
lock = rundir.RunLock(sys.argv[1], log=lambda message: None, name=sys.argv[2])
lock.acquire()
print('held', flush=True)
time.sleep(120)
'''


def hold_lock(directory, name):
  """A process holding ``directory/name`` as a run (or sweep) holds it, until the block ends."""
  child = Child([sys.executable, '-c', HOLD_LOCK.format(root=ROOT), str(directory), name])
  child.wait_for_line(lambda line: line == 'held\n', timeout=60)
  return child


def test_a_point_whose_run_is_still_going_is_neither_emptied_nor_shared(tmp_path):
  # A sweep killed with SIGKILL leaves its run training; the next sweep found its
  # run.log and no checkpoint yet, and removed the live run's directory.
  out = tmp_path / 'sweep'
  stub = stub_sweep(out, ['--grid', 'batch_size_per_gpu=32'])
  point = stub.points[0]
  logdir = out / point.name
  logdir.mkdir(parents=True)
  (logdir / results.LOG_FILE).write_text('[sweep] attempt 1 started at 1000.00 (...)\n')
  (logdir / 'config.yaml').write_text('base_params: {}\n')
  with hold_lock(logdir, 'run.lock') as orphan:
    with pytest.raises(grid.SweepError, match=(
        rf'^{re.escape(str(logdir))} is in use by a run that is still going \(pid {orphan.pid} '
        r'on .*\), left by an earlier sweep that was stopped without it; let it finish \(the '
        rf'next sweep records it\) or stop it \(kill {orphan.pid}\)$')):
      stub.prepare(point)
    assert sorted(p.name for p in logdir.iterdir()) == ['config.yaml', 'run.lock', 'run.log']
  # Once it has ended, its directory is the sweep's again (nothing saved: started afresh).
  assert stub.prepare(point) is None and not os.listdir(logdir)


def test_a_second_sweep_on_the_same_out_is_refused(tmp_path):
  out = tmp_path / 'sweep'
  out.mkdir()
  with hold_lock(out, runner.SWEEP_LOCK) as first:
    second = sweep_again('--grid', 'optimizer_params.momentum=0.9', '--out', str(out))
  assert second.returncode == 2, second.stdout + second.stderr
  assert second.stderr.splitlines()[-1] == (
      f'error: {out} is in use by another sweep (pid {first.pid} on {socket.gethostname()}); '
      'wait for it to end, or give another --out')
  assert sorted(p.name for p in out.iterdir()) == [runner.SWEEP_LOCK]
