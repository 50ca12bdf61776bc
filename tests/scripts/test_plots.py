"""Tests of scripts/plot_lr.py and scripts/plot_runs.py."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.script_modules import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SGD_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py')
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


plot_lr = load_script('plot_lr')
plot_runs = load_script('plot_runs')


def check_png(path):
  import matplotlib.image  # pylint: disable=import-outside-toplevel
  with open(path, 'rb') as f:
    assert f.read(8) == PNG_SIGNATURE
  assert os.path.getsize(path) > 1000
  image = matplotlib.image.imread(path)
  assert image.ndim == 3 and image.shape[2] in (3, 4)
  assert image.shape[0] > 100 and image.shape[1] > 100


def poly_with_warmup(steps, lr, warmup, decay, power):
  """The schedule written out independently of optimizers/lr_policies.py."""
  steps = np.asarray(steps, np.float64)
  since = np.clip(steps - warmup, 0, decay)
  return np.where(steps < warmup, lr * steps / warmup, lr * (1 - since / decay) ** power)


# ---------------------------------------------------------------------------
# plot_lr

def table(printed):
  """{step: lr} from the printed table."""
  rows = {}
  for line in printed.splitlines():
    parts = line.split()
    if len(parts) == 3 and parts[0].isdigit():
      rows[int(parts[0])] = float(parts[2])
  return rows


def test_plot_lr_draws_the_schedule_with_warmup_and_epochs_converted(tmp_path, capsys):
  out = tmp_path / 'lr.png'
  assert plot_lr.main(['--config', SGD_CONFIG, '--out', str(out)]) == 0
  printed = capsys.readouterr().out
  # Batch 256 of 60,000 images: 234 steps per epoch; 8 epochs; warm-up 1 epoch, then
  # poly decay of power 2 over decay_epochs = 8 epochs, lr 0.1 * 256 / 256.
  assert '1872 steps = 8 epochs of 234 steps, global batch 256' in printed
  rates = table(printed)
  assert sorted(rates) == [0, 234, 468, 936, 1404, 1872]
  expected = poly_with_warmup(sorted(rates), 0.1, 234, 1872, 2.0)
  np.testing.assert_allclose([rates[s] for s in sorted(rates)], expected, rtol=1e-5)
  assert rates[1872] == pytest.approx(0.1 * (1 - 1638 / 1872) ** 2, rel=1e-5)  # 0.0015625
  check_png(out)

  cfg = plot_lr.load_train_config(SGD_CONFIG, [])
  steps, values = plot_lr.learning_rates(cfg, 234, 1872)
  assert steps[0] == 0 and steps[-1] == 1872 and len(values) == 1873
  np.testing.assert_allclose(values, poly_with_warmup(steps, 0.1, 234, 1872, 2.0),
                             rtol=1e-6, atol=1e-9)


def test_plot_lr_counts_workers_and_iter_size_and_plots_past_the_end(tmp_path, capsys):
  out = tmp_path / 'sub' / 'lr.png'
  assert plot_lr.main(['--config', SGD_CONFIG, '--set', 'iter_size=2', '--workers', '2',
                       '--set', 'lr_policy_params.learning_rate=0.4', '--steps', '600',
                       '--out', str(out)]) == 0
  printed = capsys.readouterr().out
  # 60,000 / 2 workers // 256 = 117 micro-batches per worker, / iter_size 2 = 58.5 updates
  # an epoch (the stream of micro-batches runs on across epochs): 8 epochs are 468
  # updates, and the 1-epoch warm-up 59 (58.5 rounded half up).
  assert '468 steps = 8 epochs of 58.5 steps, global batch 1024' in printed
  rates = table(printed)
  assert sorted(rates) == [0, 59, 150, 300, 450, 600]
  np.testing.assert_allclose([rates[s] for s in sorted(rates)],
                             poly_with_warmup(sorted(rates), 0.4, 59, 468, 2.0), rtol=1e-5,
                             atol=1e-9)
  assert rates[600] == 0.0  # past max_steps the poly decay stays at min_lr
  check_png(out)


def test_plot_lr_reports_a_config_mistake_in_one_line(tmp_path, capsys):
  status = plot_lr.main(['--config', SGD_CONFIG, '--set', 'lr_policy_params.power=-1',
                         '--out', str(tmp_path / 'lr.png')])
  assert status == 2
  assert capsys.readouterr().err.strip() == 'error: lr_policy_params: power: must be > 0, got -1.0'
  assert not (tmp_path / 'lr.png').exists()


# ---------------------------------------------------------------------------
# plot_runs

def write_scalars(logdir, tag_values):
  """Writes ``{tag: [(step, value)]}`` with tf.summary, as the trainer does."""
  writer = tf.summary.create_file_writer(str(logdir))
  with writer.as_default():
    for tag, points in tag_values.items():
      for step, value in points:
        tf.summary.scalar(tag, value, step=step)
  writer.close()


@pytest.fixture(name='runs')
def fixture_runs(tmp_path):
  first = tmp_path / 'a' / 'run'
  second = tmp_path / 'b' / 'run'
  write_scalars(first, {'loss': [(0, 2.5), (10, 1.5), (20, 1.25)],
                        'accuracy': [(0, 0.125), (10, 0.5), (20, 0.75)],
                        'learning_rate': [(0, 0.0), (10, 0.1), (20, 0.05)]})
  write_scalars(first / 'eval', {'accuracy': [(10, 0.5), (20, 0.625)], 'loss': [(20, 1.5)]})
  # The second run was resumed: step 20 is written twice, the later value counts.
  write_scalars(second, {'loss': [(0, 3.0), (10, 2.0), (20, 1.75)]})
  write_scalars(second, {'loss': [(20, 1.0), (30, 0.5)]})
  return first, second


def test_plot_runs_reads_train_and_eval_scalars(runs):
  first, second = runs
  run = plot_runs.read_run(str(first))
  assert run['train']['loss'] == ([0, 10, 20], [2.5, 1.5, 1.25])
  assert run['train']['accuracy'] == ([0, 10, 20], [0.125, 0.5, 0.75])
  assert run['eval']['accuracy'] == ([10, 20], [0.5, 0.625])
  assert set(run['eval']) == {'accuracy', 'loss'}
  assert plot_runs.read_run(str(second))['train']['loss'] == ([0, 10, 20, 30],
                                                              [3.0, 2.0, 1.0, 0.5])
  assert plot_runs.run_labels([str(first), str(second)]) == ['a/run', 'b/run']
  assert plot_runs.run_labels([str(first), str(first.parent)]) == ['run', 'a']


def test_plot_runs_draws_one_subplot_per_tag(runs, tmp_path, capsys):
  first, second = runs
  out = tmp_path / 'curves.png'
  assert plot_runs.main([str(first), str(second), '--tags', 'loss,accuracy,top5_accuracy',
                         '--out', str(out)]) == 0
  captured = capsys.readouterr()
  assert 'a/run train loss: 1.25 at step 20 (3 points)' in captured.out
  assert 'a/run eval accuracy: 0.625 at step 20 (2 points)' in captured.out
  assert 'b/run train loss: 0.5 at step 30 (4 points)' in captured.out
  assert "warning: no run wrote 'top5_accuracy'" in captured.err
  check_png(out)


def test_plot_runs_refuses_a_directory_without_events(runs, tmp_path, capsys):
  (tmp_path / 'empty').mkdir()
  assert plot_runs.main([str(tmp_path / 'empty'), '--out', str(tmp_path / 'x.png')]) == 2
  assert 'no TensorBoard scalars' in capsys.readouterr().err
  assert plot_runs.main([str(runs[0]), '--tags', 'nope', '--out', str(tmp_path / 'x.png')]) == 2
  assert 'none of nope was written; available: accuracy, learning_rate, loss' in (
      capsys.readouterr().err)
  assert not (tmp_path / 'x.png').exists()


def test_plot_runs_puts_runs_of_different_batches_on_epochs_and_images(tmp_path, capsys):
  # Batch 100 and batch 400 over a 1,000-image epoch: 10 and 2.5 steps per epoch.
  small, large = tmp_path / 'sweep' / 'bs100', tmp_path / 'sweep' / 'bs400'
  write_scalars(small, {'loss': [(10, 1.0), (20, 0.5)], 'epoch': [(10, 1.0), (20, 2.0)],
                        'images': [(10, 1000.0), (20, 2000.0)]})
  write_scalars(small / 'eval', {'accuracy': [(15, 0.5), (25, 0.75)]})
  write_scalars(large, {'loss': [(5, 0.75)], 'epoch': [(5, 2.0)], 'images': [(5, 2000.0)]})
  runs = [plot_runs.read_run(str(d)) for d in (small, large)]
  epochs = plot_runs.step_mapping(runs[0], 'epochs')
  # Interpolated between summaries, extrapolated past the last one, 0 at step 0.
  assert epochs([0, 5, 15, 25]) == pytest.approx([0.0, 0.5, 1.5, 2.5])
  assert plot_runs.step_mapping(runs[1], 'images')([1, 5, 6]) == pytest.approx([400, 2000, 2400])
  assert plot_runs.step_mapping(runs[0], 'steps')([3, 7]) == [3, 7]

  figure = plot_runs.draw(runs, ['bs100', 'bs400'], ['loss', 'accuracy'], 'images')
  loss_axes, accuracy_axes = figure.axes[:2]
  assert [list(line.get_xdata()) for line in loss_axes.lines] == [[1000.0, 2000.0], [2000.0]]
  assert list(accuracy_axes.lines[0].get_xdata()) == pytest.approx([1500.0, 2500.0])
  assert loss_axes.get_xlabel() == 'training images seen' and loss_axes.get_ylabel() == 'loss'
  assert accuracy_axes.get_ylabel() == 'accuracy'
  steps_figure = plot_runs.draw(runs[1:], ['bs400'], ['loss'], 'steps')
  ticks = steps_figure.axes[0].get_xticks()
  assert len(ticks) > 1 and all(float(t).is_integer() for t in ticks), ticks

  # A glob over a sweep directory also matches its tables and plot: noted and skipped.
  (tmp_path / 'sweep' / 'results.csv').write_text('a,b\n')
  (tmp_path / 'sweep' / 'empty').mkdir()
  out = tmp_path / 'curves.png'
  paths = sorted(str(p) for p in (tmp_path / 'sweep').iterdir())
  assert plot_runs.main([*paths, '--x', 'epochs', '--out', str(out)]) == 0
  captured = capsys.readouterr()
  assert f'note: skipping {tmp_path / "sweep" / "results.csv"}: a file, not a run directory' in (
      captured.err)
  assert f'note: skipping {tmp_path / "sweep" / "empty"}: no TensorBoard scalars' in captured.err
  assert 'bs400 train loss: 0.75 at step 5 (1 points)' in captured.out
  check_png(out)


def test_plot_runs_needs_the_epoch_scalar_for_an_epoch_axis(runs, tmp_path, capsys):
  assert plot_runs.main([str(runs[0]), '--x', 'epochs', '--out', str(tmp_path / 'x.png')]) == 2
  assert capsys.readouterr().err.strip() == (
      f"error: --x epochs: {runs[0]} has no 'epoch' train scalar (written by run.py with the "
      'other train scalars); plot it with --x steps')
