"""A run directory used from the command line: export, checkpoint choice, warm starts."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf
import yaml

from data import fashion_mnist
from data.fashion_mnist import FashionMnistDataLayer
from tests.test_run import SGD_CONFIG, SHORT, checkpoint_values, run

# Each test runs run.py end to end.
pytestmark = pytest.mark.slow

FINAL_RE = re.compile(r'final test accuracy: (\S+) \(top-5 (\S+), loss (\S+)\) at step (\d+)')
EVAL_RE = re.compile(r'^eval at step (\d+): loss \S+, top-1 (\S+),', re.MULTILINE)


@pytest.fixture(name='trained', scope='module')
def fixture_trained(tmp_path_factory):
  """A 20-step train_eval run (checkpoints and evals at steps 10 and 20) and what it printed."""
  logdir = tmp_path_factory.mktemp('run') / 'run'
  result = run('--config', SGD_CONFIG, '--mode', 'train_eval', '--logdir', str(logdir),
               '--set', 'max_steps=20', '--set', 'eval_steps=10',
               '--set', 'save_checkpoint_steps=10', *SHORT)
  accuracy, top5, loss, step = FINAL_RE.search(result.stdout).groups()
  evals = {int(step): float(top1) for step, top1 in EVAL_RE.findall(result.stdout)}
  assert sorted(evals) == [10, 20], result.stdout
  return logdir, {'accuracy': float(accuracy), 'top5': float(top5), 'loss': float(loss),
                  'step': int(step), 'evals': evals}


@pytest.fixture(name='exported', scope='module')
def fixture_exported(trained, tmp_path_factory):
  """The trained run's latest checkpoint exported, and what run.py printed."""
  logdir, _ = trained
  export_dir = tmp_path_factory.mktemp('export') / 'export'
  result = run('--config', SGD_CONFIG, '--mode', 'export', '--logdir', str(logdir),
               '--export_dir', str(export_dir))
  return export_dir, result.stdout


def test_export_serves_raw_pixels_with_the_eval_preprocessing(trained, exported):
  logdir, final = trained
  export_dir, stdout = exported
  assert f'exported {logdir}/ckpt-20 (step 20) to {export_dir}' in stdout, stdout
  assert "takes uint8 images [None, 28, 28, 1]" in stdout
  assert ('returns probabilities, classes and class_names (the 10 names also in '
          'assets/class_names.txt and export.json)') in stdout
  names = list(fashion_mnist.CLASS_NAMES)
  assert json.loads((export_dir / 'export.json').read_text()) == {
      'checkpoint': f'{logdir}/ckpt-20', 'step': 20, 'task': 'image_classification',
      'class_names': names}
  assert (export_dir / 'assets' / 'class_names.txt').read_text().splitlines() == names

  served = tf.saved_model.load(str(export_dir)).signatures['serving_default']
  test_set = FashionMnistDataLayer({}, 'eval')
  assert test_set.images.dtype == np.uint8
  outputs = served(images=tf.constant(test_set.images))
  probabilities = outputs['probabilities'].numpy()
  classes = outputs['classes'].numpy()
  assert probabilities.shape == (10000, 10) and classes.dtype == np.int32
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
  np.testing.assert_array_equal(classes, probabilities.argmax(axis=1))
  assert outputs['class_names'].numpy().tolist() == [names[c].encode() for c in classes]
  # The eval at the end of training saw the same 10,000 images through the data pipeline.
  assert np.mean(classes == test_set.labels) == pytest.approx(final['accuracy'], abs=5e-5)
  cross_entropy = -np.log(probabilities[np.arange(10000), test_set.labels]).mean()
  assert cross_entropy == pytest.approx(final['loss'], abs=5e-4)


def test_infer_classifies_image_files_as_the_export_serves_their_pixels(
    trained, exported, tmp_path):
  logdir, _ = trained
  test_set = FashionMnistDataLayer({}, 'eval')
  images = tmp_path / 'images'
  images.mkdir()
  for i in (3, 0):  # two test images as PNG files
    (images / f'{i}.png').write_bytes(tf.io.encode_png(test_set.images[i]).numpy())
  (images / 'broken.png').write_bytes(b'not a png')
  result = run('--config', SGD_CONFIG, '--mode', 'infer', '--logdir', str(logdir),
               '--infer_input', str(images))
  lines = result.stdout.splitlines()
  assert [l.split('\t')[0] for l in lines] == [f'{images}/{n}' for n in ('0.png', '3.png',
                                                                         'broken.png')]
  assert lines[2] == f'{images}/broken.png\terror: not a JPEG, PNG, BMP or GIF image'
  assert 'warning: 1 of 3 image(s) could not be read or decoded' in result.stderr
  # The top three classes and their probabilities, as the SavedModel gives them for the pixels.
  served = tf.saved_model.load(str(exported[0])).signatures['serving_default']
  probabilities = served(images=tf.constant(test_set.images[[0, 3]]))['probabilities'].numpy()
  names = fashion_mnist.CLASS_NAMES
  for line, p in zip(lines[:2], probabilities):
    top = np.argsort(-p)[:3]
    fields = line.split('\t')
    assert [fields[1]] + [f.rsplit(':', 1)[0] for f in fields[3:]] == [names[c] for c in top]
    given = [float(fields[2])] + [float(f.rsplit(':', 1)[1]) for f in fields[3:]]
    np.testing.assert_allclose(given, p[top], atol=1.5e-4)


def test_export_refuses_a_used_directory_and_a_missing_flag(trained, tmp_path, run_main):
  # Both refused before anything is built: run.py's main() answers in this process.
  logdir, _ = trained
  used = tmp_path / 'used'
  used.mkdir()
  (used / 'keep.txt').write_text('x')
  result = run_main('--config', SGD_CONFIG, '--mode', 'export', '--logdir', logdir,
                    '--export_dir', used)
  assert result.returncode == 2 and result.stderr.strip() == (
      f'error: --export_dir {used} is not empty; give a new directory, an export is never '
      'written over another')
  assert (used / 'keep.txt').read_text() == 'x'
  result = run_main('--config', SGD_CONFIG, '--mode', 'export', '--logdir', logdir)
  assert result.returncode == 2
  assert result.stderr.strip() == 'error: --export_dir: required with --mode=export'


def test_eval_reads_the_latest_the_best_or_a_named_checkpoint(trained):
  logdir, final = trained
  evals = final['evals']
  best_step = max(evals, key=lambda step: (evals[step], -step))  # the first of equals is kept
  assert json.loads((logdir / 'best' / 'best.json').read_text())['step'] == best_step
  for choice, step, path in [('best', best_step, f'{logdir}/best/best-{best_step}'),
                             (f'{logdir}/ckpt-10', 10, f'{logdir}/ckpt-10')]:
    result = run('--config', SGD_CONFIG, '--mode', 'eval', '--logdir', str(logdir),
                 '--checkpoint', choice, *SHORT, '--set', 'max_steps=20')
    assert f'restored {path} (step {step})' in result.stdout, result.stdout
    assert f'eval at step {step}: ' in result.stdout
    assert f'top-1 {evals[step]:.4f}' in result.stdout, (choice, result.stdout)


def test_checkpoint_choice_mistakes_are_one_line(trained, tmp_path, run_main):
  logdir, _ = trained
  result = run('--config', SGD_CONFIG, '--mode', 'eval', '--logdir', str(logdir),
               '--checkpoint', str(tmp_path / 'nope'), check=False)
  assert result.returncode == 2 and result.stderr.strip() == (
      f'error: --checkpoint={tmp_path / "nope"}: not a checkpoint nor a directory holding one; '
      'allowed: latest, best or a checkpoint path')
  # A flag refused before anything is built: run.py's main() answers in this process.
  result = run_main('--config', SGD_CONFIG, '--mode', 'train', '--logdir', tmp_path / 'new',
                    '--checkpoint', 'best')
  assert result.returncode == 2 and result.stderr.strip() == (
      'error: --checkpoint: only used with --mode=eval, export, infer or critical_batch, not '
      '--mode=train (to start from another run, use --init_checkpoint)')
  assert not (tmp_path / 'new').exists()


def kernels(values):
  """The convolution and dense kernels of a checkpoint (what a tiny learning rate leaves as is)."""
  return {k: v for k, v in values.items() if k.startswith('model/') and '_kernel' in k}


@pytest.mark.parametrize('optimizer_state', [False, True])
def test_a_new_run_starts_from_another_runs_weights(trained, tmp_path, optimizer_state):
  logdir, _ = trained
  new = tmp_path / 'new'
  # A learning rate so small that one update leaves every weight as it was in float32.
  result = run('--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(new),
               '--init_checkpoint', str(logdir), *SHORT, '--set', 'max_steps=1',
               '--set', 'lr_policy_params.learning_rate=1e-30',
               *(['--init_optimizer_state'] if optimizer_state else []))
  what = 'model weights and optimizer state' if optimizer_state else 'model weights'
  assert f'initialized from {logdir}/ckpt-20 ({what}); starting at step 0' in result.stdout
  assert 'starting at step 0' in result.stdout and 'best by eval accuracy' not in result.stdout
  source = checkpoint_values(str(logdir / 'ckpt-20'))
  started = checkpoint_values(str(new / 'ckpt-1'))
  assert kernels(source) and kernels(source).keys() == kernels(started).keys()
  # Momentum SGD: v <- 0.9 v - lr g; w <- w + v. With lr ~ 0 the update is 0.9 times the
  # velocity the run starts with: none for weights only, the source run's with its state.
  velocities = [v for k, v in source.items() if k.startswith('optimizer_variables/')]
  for key, value in kernels(source).items():
    delta = started[key] - value
    if not optimizer_state:
      np.testing.assert_array_equal(delta, 0.0, err_msg=key)
    else:
      assert np.abs(delta).max() > 0, key
      assert any(v.shape == delta.shape and np.allclose(delta, 0.9 * v, rtol=1e-4, atol=1e-7)
                 for v in velocities), key
  assert int(started['global_step/.ATTRIBUTES/VARIABLE_VALUE']) == 1
  assert int(started['data_position/.ATTRIBUTES/VARIABLE_VALUE']) == 1
  # The optimizer's own update counter comes with its state: 20 updates, then one more.
  iterations = [v for k, v in started.items() if k.startswith('optimizer_variables/0/')]
  assert [int(v) for v in iterations] == [21 if optimizer_state else 1]


def test_a_warm_start_that_does_not_fit_names_the_mismatch(trained, tmp_path):
  logdir, _ = trained
  result = run('--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(tmp_path / 'new'),
               '--init_checkpoint', str(logdir / 'ckpt-20'), *SHORT, '--set', 'max_steps=1',
               '--set', 'model_params.depth=14', check=False)
  assert result.returncode == 2, result.stdout + result.stderr
  line = result.stderr.strip()
  assert '\n' not in line and 'Traceback' not in result.stderr
  assert line.startswith(f'error: --init_checkpoint {logdir}/ckpt-20: does not fit this config '
                         '(missing from the checkpoint: model/'), line
  assert re.search(r'\.\.\. \(\d+ in all\)', line), line


# A small synthetic data set: these runs are about what is written, not what is learnt.
SYNTHETIC = ['--set', 'data_layer=synthetic', '--set', 'num_epochs=null',
             '--set', 'data_layer_params={image_shape: [28, 28, 1], num_classes: 10, '
                      'num_examples: 256}',
             '--set', 'batch_size_per_gpu=16', '--set', 'eval_params.batch_size_per_gpu=256',
             '--set', 'lr_policy_params={learning_rate: 0.01, power: 1.0, decay_steps: 100}',
             '--set', 'print_loss_steps=100']


def event_files(logdir):
  return sorted(str(p) for p in logdir.rglob('events.out.tfevents.*'))


def scalar_steps(directory, tag):
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=C0415
  accumulator = event_accumulator.EventAccumulator(str(directory), size_guidance={'tensors': 0})
  accumulator.Reload()
  if tag not in accumulator.Tags()['tensors']:
    return [], []
  events = accumulator.Tensors(tag)
  return [e.step for e in events], [float(tf.make_ndarray(e.tensor_proto)) for e in events]


def test_tensorboard_gets_the_last_step_no_duplicates_eval_mode_and_the_config(tmp_path):
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=C0415
  from tensorboard.plugins.hparams import metadata as hparams_metadata  # pylint: disable=C0415
  logdir = tmp_path / 'run'
  # Two micro-batches per update: the step stays the same over a micro-step, which must
  # not write a step twice, nor must the first micro-step of the resumed run.
  common = ['--config', SGD_CONFIG, '--mode', 'train_eval', '--logdir', str(logdir), *SYNTHETIC,
            '--set', 'iter_size=2', '--set', 'save_summaries_steps=3', '--set', 'eval_steps=3',
            '--set', 'summaries=[variable_norm]', '--set', 'optimizer_params.momentum=0.8']
  run(*common, '--set', 'max_steps=6')
  run(*common, '--set', 'max_steps=8', '--continue_learning')

  # TensorBoard's own reader: every 3 updates and the last one, each step once.
  assert scalar_steps(logdir, 'loss')[0] == [3, 6, 8]
  assert scalar_steps(logdir / 'eval', 'accuracy')[0] == [3, 6, 8]
  # In-graph summaries carry the step before the update: 0, 3, the last of each run.
  norms = scalar_steps(logdir, 'variable_norm/logits/kernel')
  assert norms[0] == [0, 3, 5, 6, 7], norms

  # The config as text (step 0), and the hyperparameters for the HParams tab.
  accumulator = event_accumulator.EventAccumulator(str(logdir), size_guidance={'tensors': 0})
  accumulator.Reload()
  [text] = accumulator.Tensors('config')
  config = tf.make_ndarray(text.tensor_proto).item().decode()
  assert '    optimizer: KerasMomentum' in config.splitlines() and '    iter_size: 2' in config
  content = accumulator.PluginTagToContent(hparams_metadata.PLUGIN_NAME)
  start = hparams_metadata.parse_session_start_info_plugin_data(
      content[hparams_metadata.SESSION_START_INFO_TAG])
  values = {name: value.WhichOneof('kind') and getattr(value, value.WhichOneof('kind'))
            for name, value in start.hparams.items()}
  assert values['optimizer_params.momentum'] == pytest.approx(0.8)
  assert values['optimizer'] == 'KerasMomentum' and values['iter_size'] == 2
  assert values['batch_size_per_gpu'] == 16 and values['global_batch'] == 32
  assert values['max_steps'] == 8  # the resumed run's, not its first start's 6
  experiment = hparams_metadata.parse_experiment_plugin_data(
      content[hparams_metadata.EXPERIMENT_TAG])
  assert {m.name.group + '/' + m.name.tag for m in experiment.metric_infos} == {
      'eval/accuracy', 'eval/top5_accuracy', 'eval/loss'}

  # --mode=eval writes its metrics; a run that trains nothing writes no event file.
  files = event_files(logdir)
  evaluated = run('--config', SGD_CONFIG, '--mode', 'eval', '--logdir', str(logdir), *SYNTHETIC,
                  '--set', 'max_steps=8')
  top1 = float(re.search(r'eval at step 8: .*top-1 (\S+),', evaluated.stdout).group(1))
  steps, accuracies = scalar_steps(logdir / 'eval', 'accuracy')
  assert steps[-1] == 8 and accuracies[-1] == pytest.approx(top1, abs=5e-5)
  assert len(event_files(logdir)) == len(files) + 1
  files = event_files(logdir)
  run('--config', SGD_CONFIG, '--mode', 'train', '--logdir', str(logdir), *SYNTHETIC,
      '--set', 'iter_size=2', '--set', 'max_steps=8', '--continue_learning')
  assert event_files(logdir) == files
  for path in files:
    assert sum(1 for _ in tf.data.TFRecordDataset(path)) > 1, path


def resolved_views(config, overrides=()):
  """run.py's train and eval views of a config file, resolved and validated in this process."""
  from framework.config import config_file  # pylint: disable=import-outside-toplevel
  from framework.config import validation  # pylint: disable=import-outside-toplevel
  views = {}
  for mode in ('train', 'eval'):
    cfg = validation.load_configs(str(config), mode, list(overrides))[mode]
    views[mode] = config_file.to_yaml(cfg)
  return views


def test_the_saved_config_re_evaluates_and_re_runs_the_run(trained, tmp_path):
  logdir, final = trained
  saved = logdir / 'config.yaml'
  layout = yaml.safe_load(saved.read_text())
  assert list(layout) == ['base_params', 'train_params', 'eval_params']
  # Both views of the saved config are the run's, fully resolved (defaults filled in).
  overrides = [SHORT[i + 1] for i in range(0, len(SHORT), 2)]
  overrides += ['max_steps=20', 'eval_steps=10', 'save_checkpoint_steps=10']
  original = resolved_views(SGD_CONFIG, overrides)
  assert resolved_views(saved) == original
  # --set batch_size_per_gpu applies to both views, after the eval overlay.
  assert layout['base_params']['batch_size_per_gpu'] == 128
  assert layout['base_params']['regularizer'] is None  # a default, written out

  evaluated = run('--config', str(saved), '--mode', 'eval', '--logdir', str(logdir))
  assert f'eval at step 20: loss {final["loss"]:.4f}, top-1 {final["accuracy"]:.4f}' in (
      evaluated.stdout), evaluated.stdout

  again = tmp_path / 'again'
  rerun = run('--config', str(saved), '--mode', 'train_eval', '--logdir', str(again))
  assert FINAL_RE.search(rerun.stdout).group(4) == '20'
  assert (again / 'config.yaml').read_text() == saved.read_text()


def test_epochs_count_micro_batches_when_iter_size_does_not_divide_an_epoch(tmp_path):
  """5 micro-batches an epoch at iter_size 2: 2.5 updates an epoch, so 2 epochs are 5 updates.

  The micro-batches are one stream across epochs: the run reads all 10 of its
  2 epochs (none dropped), and is evaluated every 2 updates (2.5 rounded down)
  and at the end.
  """
  logdir = tmp_path / 'run'
  result = run('--config', SGD_CONFIG, '--mode', 'train_eval', '--logdir', str(logdir),
               *SYNTHETIC, '--set', 'data_layer_params.num_examples=80', '--set', 'num_epochs=2',
               '--set', 'iter_size=2')
  assert 'for 5 steps (2.5 steps/epoch), global batch 32' in result.stdout, result.stdout
  assert [int(step) for step, _ in EVAL_RE.findall(result.stdout)] == [2, 4, 5]
  values = checkpoint_values(str(logdir / 'ckpt-5'))
  position = [v for name, v in values.items() if name.startswith('data_position')]
  assert position == [10]
