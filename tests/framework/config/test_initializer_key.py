"""The ``initializer`` and ``initializer_params`` keys: read before TensorFlow, refused in one line, recorded as names.

The distributions the models draw with them are tested in
tests/models/test_initializers.py; here, what run.py makes of the keys.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import yaml

from framework.config import config_file
from framework.config import validation as config_lib
from framework.run import resume

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LARS_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')
SGD_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py')


def test_the_keys_are_checked_before_tensorflow_is_imported():
  code = textwrap.dedent(f'''
      import sys
      from framework.config import validation
      views = validation.load_configs({LARS_CONFIG!r}, 'train', [
          'initializer=variance_scaling_initializer', 'initializer_params={{mode: fan_avg}}'],
          construct=False)
      assert 'tensorflow' not in sys.modules, 'tensorflow imported'
      print(views['train']['initializer'], sorted(views['train']['initializer_params'].items()))
  ''')
  result = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120, check=True)
  assert result.stdout.strip() == (
      "variance_scaling_initializer [('distribution', 'truncated_normal'), ('mode', 'fan_avg'), "
      "('scale', 1.0), ('seed', None)]")


def write_config(tmp_path, text):
  path = tmp_path / 'config.py'
  path.write_text(f"from configs.fashion_mnist_lars import base_params as lars\n{text}")
  return str(path)


@pytest.mark.parametrize('sets, message', [
    (['initializer=xavier'],
     "initializer: 'xavier' is not an initializer here; allowed: TensorFlow 1's "
     'variance_scaling_initializer, xavier_initializer,'),
    (['initializer=variance_scaling_initializer', 'initializer_params={mode: fan_inn}'],
     "initializer_params.mode: 'fan_inn' is not allowed (did you mean 'fan_in'?); allowed: "
     "'fan_in', 'fan_out', 'fan_avg'"),
    (['initializer=xavier_initializer', 'initializer_params={stddev: 0.1}'],
     'initializer_params.stddev: unknown key; allowed keys: seed, uniform'),
    (['initializer=variance_scaling_initializer', 'initializer_params={scale: 0}'],
     'initializer_params.scale: must be > 0, got 0'),
    (['initializer=variance_scaling_initializer', 'initializer_params={factor: 2.0, scale: 1.0}'],
     "initializer_params: factor (tf.contrib.layers.variance_scaling_initializer's) and scale "
     "(tf.variance_scaling_initializer's) are arguments of two functions of that name"),
    (['initializer_params={scale: 2.0}'],
     'initializer_params: given without initializer; give the initializer they are the arguments '
     'of, or drop them'),
    (['initializer=3'],
     "initializer: expected an initializer's name or a Keras initializer, got 3 (int); allowed:"),
])
def test_a_mistake_is_one_line_through_run_py(run_main, sets, message):
  args = ['--config', LARS_CONFIG, '--print_config']
  for value in sets:
    args += ['--set', value]
  result = run_main(*args)
  assert result.returncode == 2, result
  assert result.stderr.startswith(f'error: {message}'), result.stderr
  assert result.stderr.count('\n') == 1


@pytest.mark.parametrize('text, message', [
    ("def my_builder(params, image_shape, num_classes):\n  return None\n"
     "base_params = dict(lars, model=my_builder, initializer='he_normal')\n",
     "error: initializer: model my_builder is a builder of your own, which sets its layers' "
     'initializers itself'),
    ("import keras\nbase_params = dict(lars, initializer=keras.initializers.VarianceScaling(2.0), "
     "initializer_params={'scale': 1.0})\n",
     'error: initializer_params: VarianceScaling(...) holds its arguments already; drop '
     'initializer_params'),
    ("import keras\nbase_params = dict(lars, initializer=keras.initializers.Identity)\n",
     'error: initializer: Identity is a Keras class but not one of the initializers read here; '
     'allowed:'),
])
def test_a_python_configs_mistake_is_one_line(tmp_path, run_main, text, message):
  result = run_main('--config', write_config(tmp_path, text), '--print_config')
  assert result.returncode == 2, result
  assert result.stderr.startswith(message), result.stderr
  assert result.stderr.count('\n') == 1


def test_print_config_names_it_and_says_what_it_is(run_main):
  result = run_main('--config', LARS_CONFIG, '--print_config', '--set',
                    'initializer=xavier_initializer')
  assert result.returncode == 0, result
  printed = yaml.safe_load(result.stdout)
  assert printed['initializer'] == 'xavier_initializer'
  assert printed['initializer_params'] == {'uniform': True, 'seed': None}
  assert ("note: initializer: tf.contrib.layers.xavier_initializer(uniform=True, seed=None), as "
          "keras.initializers.VarianceScaling(scale=1.0, mode='fan_avg', distribution='uniform')"
          in result.stderr)
  plain = run_main('--config', LARS_CONFIG, '--print_config')
  assert yaml.safe_load(plain.stdout)['initializer'] is None
  assert 'initializer' not in plain.stderr


def test_tf_contrib_variance_scaling_has_its_own_defaults(tmp_path, run_main):
  # tf.contrib.layers.variance_scaling_initializer() is factor 2, FAN_IN, a truncated normal
  # of stddev sqrt(1.3 * 2 / n) before truncation: Keras' scale 1.3 * 2 * 0.8796^2 = 2.0117;
  # tf.variance_scaling_initializer() would be scale 1.
  path = write_config(tmp_path, 'import tensorflow as tf\nbase_params = dict(lars, '
                                'initializer=tf.contrib.layers.variance_scaling_initializer)\n')
  result = run_main('--config', path, '--print_config')
  assert result.returncode == 0, result
  printed = yaml.safe_load(result.stdout)
  assert printed['initializer'] == 'contrib.layers.variance_scaling_initializer'
  assert printed['initializer_params'] == {'factor': 2.0, 'mode': 'FAN_IN', 'uniform': False,
                                           'seed': None}
  scale = 1.3 * 2.0 * 0.87962566103423978 ** 2
  assert (f"as keras.initializers.VarianceScaling(scale={scale!r}, mode='fan_in', "
          "distribution='truncated_normal')" in result.stderr), result.stderr


def test_config_yaml_records_a_keras_instance_as_its_name_and_reads_it_back(tmp_path):
  path = write_config(tmp_path, "import keras\nbase_params = dict(lars, initializer="
                                "keras.initializers.VarianceScaling(2.0, mode='fan_out', seed=5))\n")
  views = config_lib.load_configs(path, 'train', [], construct=False)
  recorded, _ = resume.as_recorded(views['train'])
  text = config_file.run_config_yaml(recorded, None)
  saved = yaml.safe_load(text)['base_params']
  assert saved['initializer'] == 'variance_scaling'
  assert saved['initializer_params'] == {'scale': 2.0, 'mode': 'fan_out',
                                         'distribution': 'truncated_normal', 'seed': 5}
  again = tmp_path / 'run' / 'config.yaml'
  again.parent.mkdir()
  again.write_text(text)
  reread = config_lib.load_configs(str(again), 'train', [], construct=False)['train']
  assert (reread['initializer'], reread['initializer_params']) == (
      saved['initializer'], saved['initializer_params'])


@pytest.mark.slow
def test_a_run_starts_from_the_initializer_and_records_it(tmp_path):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  logdir = tmp_path / 'run'
  # A rate so small that the one update leaves every weight as it was drawn.
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'run.py'), '--config', SGD_CONFIG, '--mode', 'train',
       '--logdir', str(logdir), '--set', 'num_epochs=null', '--set', 'max_steps=1',
       '--set', 'batch_size_per_gpu=32', '--set', 'model_params.weight_decay=0',
       '--set', 'lr_policy=fixed_lr', '--set', 'lr_policy_params={learning_rate: 1.0e-30}',
       '--set', 'initializer=variance_scaling_initializer',
       '--set', 'initializer_params={distribution: uniform, seed: 3}'],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT))
  assert result.returncode == 0, result.stdout + result.stderr
  saved = yaml.safe_load((logdir / 'config.yaml').read_text())['base_params']
  assert saved['initializer'] == 'variance_scaling_initializer'
  assert saved['initializer_params'] == {'scale': 1.0, 'mode': 'fan_in',
                                         'distribution': 'uniform', 'seed': 3}
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(logdir)))
  # ResNet-8's one 3x3 convolution of 64 to 64 channels: stage3_block1_conv2.
  names = [n for n, shape in reader.get_variable_to_shape_map().items()
           if n.startswith('model/') and shape == [3, 3, 64, 64]]
  assert len(names) == 1, names
  w = reader.get_tensor(names[0]).astype(np.float64)
  limit = np.sqrt(3.0 / (3 * 3 * 64))  # U(-sqrt(3 scale / fan_in), +sqrt(3 scale / fan_in))
  assert np.abs(w).max() <= limit * (1 + 1e-6) and np.abs(w).max() > 0.99 * limit
  assert w.var() == pytest.approx(limit ** 2 / 3, rel=0.05)


def test_a_builder_of_your_own_that_declares_it_is_given_it(tmp_path, run_main):
  import keras  # pylint: disable=import-outside-toplevel
  from framework.tasks.base import Task  # pylint: disable=import-outside-toplevel

  def builder(params, image_shape, num_classes, **kwargs):
    init = kwargs['kernel_initializer']() if kwargs else 'zeros'
    builder.given = sorted(kwargs)
    return keras.Sequential([keras.Input(image_shape), keras.layers.Flatten(),
                             keras.layers.Dense(num_classes, kernel_initializer=init)])

  builder.TAKES_INITIALIZER = True
  config = {'model': builder, 'model_params': {}, 'initializer': 'ones_initializer',
            'initializer_params': {}}
  model = Task(config).call_builder((2, 2, 1), 3)
  assert builder.given == ['kernel_initializer']
  np.testing.assert_array_equal(model.layers[-1].kernel.numpy(), 1.0)
  # Without the key the builder is called as before: no keyword it does not know.
  model = Task(dict(config, initializer=None, initializer_params=None)).call_builder((2, 2, 1), 3)
  assert builder.given == []
  np.testing.assert_array_equal(model.layers[-1].kernel.numpy(), 0.0)
  # Declared in a Python config, the key passes the checks.
  text = ("def my_builder(params, image_shape, num_classes, kernel_initializer=None):\n"
          "  return None\nmy_builder.TAKES_INITIALIZER = True\n"
          "base_params = dict(lars, model=my_builder, initializer='he_normal')\n")
  result = run_main('--config', write_config(tmp_path, text), '--print_config')
  assert result.returncode == 0, result
  assert yaml.safe_load(result.stdout)['initializer'] == 'he_normal'
