"""Your code named in a config, of the wrong shape, through run.py: one line, the logdir untouched.

Each extension point (``model``, ``data_layer``, ``optimizer``, ``lr_policy``)
is held against how the run calls it before it is called
(framework/config/extension_points.py); a module that fails as it is imported
says its own error and line; a start refused after the data layer wrote its
files into a new logdir (a weights file that does not load) leaves the logdir
as it found it, so the same command answers the same again. Every answer
comes before training, from run.py's ``main()`` in this process.
"""

import os
import sys

import numpy as np
import pytest
from PIL import Image

USER_CODE = '''
import keras
import tensorflow as tf
from data.synthetic import SyntheticDataLayer

NOT_CALLABLE = 5


def small_cnn(params, image_shape, num_classes):
  inputs = keras.Input(image_shape)
  return keras.Model(inputs, keras.layers.Dense(num_classes)(keras.layers.Flatten()(inputs)))


def two_arguments(params, image_shape):
  return None


class NotAModel:
  def __init__(self, params, image_shape, num_classes):
    pass


class Layer(SyntheticDataLayer):
  pass


def a_layer(params, mode, num_workers=1, worker_index=0):
  return SyntheticDataLayer(params, mode, num_workers, worker_index)


class NotAnOptimizer:
  def __init__(self, learning_rate, momentum=0.0):
    pass


def makes_nothing(learning_rate, momentum=0.0):
  return None


def no_rate(momentum):
  return None


class Policy:
  def __init__(self, global_step, learning_rate):
    pass


def no_step(*, learning_rate):
  return learning_rate
'''

CONFIG = '''
base_params:
  model: shapes_code:small_cnn
  data_layer: synthetic
  data_layer_params: {image_shape: [8, 8, 3], num_classes: 3, num_examples: 64}
  batch_size_per_gpu: 8
  max_steps: 2
  optimizer: Momentum
  optimizer_params: {momentum: 0.9}
  lr_policy: fixed_lr
  lr_policy_params: {learning_rate: 0.01}
  dtype: float32
'''

IMAGE_MODEL = ('a function or a keras.Model subclass called as build(model_params, image_shape, '
               'num_classes)')
DATA_LAYER = ('a subclass of data.base.DataLayer, built as Layer(params, mode, num_workers=, '
              'worker_index=)')
OPTIMIZER = ('a keras.optimizers.Optimizer subclass, or a function returning an instance of one, '
             'called as f(learning_rate=, **optimizer_params)')
LR_POLICY = ('a function called as policy(global_step, learning_rate=, **lr_policy_params) that '
             'returns the rate')


@pytest.fixture
def project(tmp_path, monkeypatch):
  """A config and its module ``shapes_code`` in a directory of their own."""
  (tmp_path / 'shapes_code.py').write_text(USER_CODE)
  (tmp_path / 'run.yaml').write_text(CONFIG)
  for name in ('shapes_code', 'shapes_broken', 'shapes_importer'):
    monkeypatch.delitem(sys.modules, name, raising=False)
  monkeypatch.setattr(sys, 'path', list(sys.path))  # the config's directory goes in for this test
  return tmp_path


def error_line(result):
  assert 'Traceback' not in result.stderr, result.stderr
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  return lines[-1]


@pytest.mark.parametrize('override, line', [
    ('model=shapes_code:NOT_CALLABLE',
     f"model: 'shapes_code:NOT_CALLABLE' is an int (5), not callable; expected {IMAGE_MODEL}"),
    ('model=shapes_code:two_arguments',
     f"model: 'shapes_code:two_arguments' is a function taking (params, image_shape); expected "
     f'{IMAGE_MODEL}'),
    # A class where a function or model class is expected, and the reverse.
    ('model=shapes_code:NotAModel',
     f"model: 'shapes_code:NotAModel' is a class that is not a keras.Model subclass; expected "
     f'{IMAGE_MODEL}'),
    ('model=shapes_code:Layer',
     f"model: 'shapes_code:Layer' is a class that is not a keras.Model subclass; expected "
     f'{IMAGE_MODEL}'),
    ('data_layer=shapes_code:a_layer',
     f"data_layer: 'shapes_code:a_layer' is a function; expected {DATA_LAYER}"),
    ('data_layer=shapes_code:small_cnn',
     f"data_layer: 'shapes_code:small_cnn' is a function; expected {DATA_LAYER}"),
    ('data_layer=shapes_code:NotAModel',
     f"data_layer: 'shapes_code:NotAModel' is a class that is not a data.base.DataLayer "
     f'subclass; expected {DATA_LAYER}'),
    ('data_layer=shapes_code:NOT_CALLABLE',
     f"data_layer: 'shapes_code:NOT_CALLABLE' is an int (5), not callable; expected "
     f'{DATA_LAYER}'),
    ('optimizer=shapes_code:NotAnOptimizer',
     f"optimizer: 'shapes_code:NotAnOptimizer' is a class that is not a keras.optimizers."
     f'Optimizer subclass; expected {OPTIMIZER}'),
    ('optimizer=shapes_code:makes_nothing',
     f"optimizer: 'shapes_code:makes_nothing' is a function that returned None; expected "
     f'{OPTIMIZER}'),
    ('optimizer=shapes_code:no_rate',
     f"optimizer: 'shapes_code:no_rate' is a function taking (momentum), without learning_rate; "
     f'expected {OPTIMIZER}'),
    ('lr_policy=shapes_code:Policy',
     f"lr_policy: 'shapes_code:Policy' is a class; expected {LR_POLICY}"),
    ('lr_policy=shapes_code:no_step',
     f"lr_policy: 'shapes_code:no_step' is a function taking (*, learning_rate), without "
     f'global_step first; expected {LR_POLICY}'),
])
def test_code_of_the_wrong_shape_is_one_line_before_anything_is_built(project, run_main,
                                                                      override, line):
  logdir = project / 'run'
  result = run_main('--config', project / 'run.yaml', '--mode', 'train', '--logdir', logdir,
                    '--set', override)
  assert result.returncode == 2
  assert error_line(result) == f'error: {line}'
  assert not logdir.exists()


def test_the_right_shapes_pass_the_checks(project, run_main):
  # A DataLayer subclass of the user's and a function model: what the table allows.
  result = run_main('--config', project / 'run.yaml', '--mode', 'train', '--print_config',
                    '--set', 'data_layer=shapes_code:Layer')
  assert result.returncode == 0, result.stderr
  assert 'model: shapes_code:small_cnn' in result.stdout


def test_a_module_that_fails_on_import_says_its_own_error(project, run_main):
  (project / 'shapes_broken.py').write_text('import json\n\nSCALE = 1 / 0\n')
  (project / 'shapes_importer.py').write_text('import no_such_package_of_yours\n')
  result = run_main('--config', project / 'run.yaml', '--print_config',
                    '--set', 'model=shapes_broken:build')
  assert result.returncode == 2
  assert error_line(result) == (
      "error: model: model 'shapes_broken:build': module 'shapes_broken' raised "
      f"ZeroDivisionError on import ({project}/shapes_broken.py line 3): division by zero")
  result = run_main('--config', project / 'run.yaml', '--print_config',
                    '--set', 'model=shapes_importer:build')
  assert error_line(result) == (
      "error: model: model 'shapes_importer:build': module 'shapes_importer' raised "
      f"ModuleNotFoundError on import ({project}/shapes_importer.py line 1): No module named "
      "'no_such_package_of_yours'")


def write_images(folder):
  rng = np.random.default_rng(0)
  for label in ('alpha', 'beta'):
    (folder / label).mkdir(parents=True)
    for i in range(6):
      Image.fromarray(rng.integers(0, 255, [8, 8, 3], dtype=np.uint8)).save(
          folder / label / f'{i}.png')


def test_a_refused_start_leaves_the_logdir_as_it_found_it(project, run_main):
  # image_folder writes image_statistics.json into the new logdir, then the model is built:
  # a weights file that does not load is refused there, after that file was written.
  write_images(project / 'images')
  (project / 'bad.weights.h5').write_text('not a weights file\n')
  arguments = ['--config', project / 'run.yaml', '--mode', 'train', '--set', 'model=keras_application',
               '--set', f'model_params={{name: MobileNetV2, weights: {project / "bad.weights.h5"}, '
                        'extra_kwargs: {alpha: 0.35}}',
               '--set', 'data_layer=image_folder', '--set',
               f'data_layer_params={{train_dir: {project / "images"}, image_size: [32, 32], '
               'validation_fraction: 0.2}']
  weights = project / 'bad.weights.h5'
  expected = (f'error: model_params.weights: {weights}: not a readable Keras weights file ('
              'Unable to synchronously open file (file signature not found)); it does not load '
              "into keras.applications.MobileNetV2(include_top=False, input_shape=(32, 32, 3), "
              "{'alpha': 0.35}): give a weights file saved from that model, or null")
  logdir = project / 'run'
  for _ in range(2):  # the same command, the same answer: the first left nothing behind
    result = run_main(*arguments, '--logdir', logdir)
    assert result.returncode == 2
    assert error_line(result) == expected
    assert not logdir.exists()
  # A logdir that was there and empty stays there, empty.
  logdir.mkdir()
  result = run_main(*arguments, '--logdir', logdir)
  assert error_line(result) == expected
  assert os.listdir(logdir) == []
  # One that holds a run keeps what it holds: nothing is removed from a recorded run.
  (logdir / 'config.yaml').write_text('base_params: {}\n')
  (logdir / 'image_statistics.json').write_text('{}\n')
  result = run_main(*arguments, '--logdir', logdir, '--continue_learning')
  assert result.returncode == 2
  assert sorted(os.listdir(logdir)) == ['config.yaml', 'image_statistics.json']
