"""A run directory used from the command line: export, checkpoint choice, warm starts."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf

from data.fashion_mnist import FashionMnistDataLayer
from tests.test_run import SGD_CONFIG, SHORT, run

FINAL_RE = re.compile(r'final test accuracy: (\S+) \(top-5 (\S+), loss (\S+)\) at step (\d+)')


@pytest.fixture(name='trained', scope='module')
def fixture_trained(tmp_path_factory):
  """A 20-step train_eval run and the final eval it printed."""
  logdir = tmp_path_factory.mktemp('run') / 'run'
  result = run('--config', SGD_CONFIG, '--mode', 'train_eval', '--logdir', str(logdir),
               '--set', 'max_steps=20', '--set', 'eval_steps=10', *SHORT)
  accuracy, top5, loss, step = FINAL_RE.search(result.stdout).groups()
  return logdir, {'accuracy': float(accuracy), 'top5': float(top5), 'loss': float(loss),
                  'step': int(step)}


def test_export_serves_raw_pixels_with_the_eval_preprocessing(trained, tmp_path):
  logdir, final = trained
  export_dir = tmp_path / 'export'
  result = run('--config', SGD_CONFIG, '--mode', 'export', '--logdir', str(logdir),
               '--export_dir', str(export_dir))
  assert f'exported {logdir}/ckpt-20 (step 20) to {export_dir}' in result.stdout, result.stdout
  assert "takes uint8 images [None, 28, 28, 1]" in result.stdout
  assert json.loads((export_dir / 'export.json').read_text()) == {
      'checkpoint': f'{logdir}/ckpt-20', 'step': 20}

  served = tf.saved_model.load(str(export_dir)).signatures['serving_default']
  test_set = FashionMnistDataLayer({}, 'eval')
  assert test_set.images.dtype == np.uint8
  outputs = served(images=tf.constant(test_set.images))
  probabilities = outputs['probabilities'].numpy()
  classes = outputs['classes'].numpy()
  assert probabilities.shape == (10000, 10) and classes.dtype == np.int32
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
  np.testing.assert_array_equal(classes, probabilities.argmax(axis=1))
  # The eval at the end of training saw the same 10,000 images through the data pipeline.
  assert np.mean(classes == test_set.labels) == pytest.approx(final['accuracy'], abs=5e-5)
  cross_entropy = -np.log(probabilities[np.arange(10000), test_set.labels]).mean()
  assert cross_entropy == pytest.approx(final['loss'], abs=5e-4)


def test_export_refuses_a_used_directory_and_a_missing_flag(trained, tmp_path):
  logdir, _ = trained
  used = tmp_path / 'used'
  used.mkdir()
  (used / 'keep.txt').write_text('x')
  result = run('--config', SGD_CONFIG, '--mode', 'export', '--logdir', str(logdir),
               '--export_dir', str(used), check=False)
  assert result.returncode == 2 and result.stderr.strip() == (
      f'error: --export_dir {used} is not empty; give a new directory, an export is never '
      'written over another')
  assert (used / 'keep.txt').read_text() == 'x'
  result = run('--config', SGD_CONFIG, '--mode', 'export', '--logdir', str(logdir), check=False)
  assert result.returncode == 2
  assert result.stderr.strip() == 'error: --export_dir: required with --mode=export'
