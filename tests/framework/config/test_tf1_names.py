"""TensorFlow 1's names while a Python config is executed (framework/config/openseq2seq.py).

The expected values are what SPEC.md and the framework's keys say each TF 1
name means: an optimizer its registered name (the TF 1 class of that name) or
the import path of the TF 1 class, ``l2`` for ``l2_regularizer``, each
initializer its TF 1 name, each dtype its name.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from core.params import ConfigError
from framework.config import config_file
from framework.config import openseq2seq

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def write(directory, name, text):
  path = directory / name
  path.write_text(textwrap.dedent(text))
  return str(path)


def loaded(tmp_path, body):
  path = write(tmp_path, 'cfg.py', 'import tensorflow as tf\n' + textwrap.dedent(body))
  return config_file.load_config_file(path)['base_params']


@pytest.mark.parametrize('expression, expected', [
    ('tf.train.MomentumOptimizer', 'Momentum'),
    ('tf.train.GradientDescentOptimizer', 'SGD'),
    ('tf.train.AdamOptimizer', 'Adam'),
    ('tf.train.RMSPropOptimizer', 'RMSProp'),
    ('tf.train.AdagradOptimizer', 'Adagrad'),
    ('tf.contrib.opt.LARSOptimizer', 'LARS'),
    # The TF 1 classes themselves: AdamW's decay without the rate, LazyAdam's sparse rows.
    ('tf.contrib.opt.LazyAdamOptimizer', 'optimizers.compat.tf1:LazyAdamOptimizer'),
    ('tf.contrib.opt.AdamWOptimizer', 'optimizers.compat.tf1:AdamWOptimizer'),
    ('tf.train.cosine_decay', 'optimizers.compat.tf1_lr_policies:cosine_decay'),
    ('tf.train.piecewise_constant', 'optimizers.compat.tf1_lr_policies:piecewise_constant'),
    ('tf.contrib.layers.l2_regularizer', 'l2'),
    ('tf.variance_scaling_initializer', 'variance_scaling_initializer'),
    ('tf.contrib.layers.xavier_initializer', 'xavier_initializer'),
    ('tf.contrib.layers.xavier_initializer_conv2d', 'xavier_initializer_conv2d'),
    ('tf.contrib.layers.variance_scaling_initializer',
     'contrib.layers.variance_scaling_initializer'),
    ('tf.truncated_normal_initializer', 'truncated_normal_initializer'),
    ('tf.glorot_uniform_initializer', 'glorot_uniform_initializer'),
    ('tf.compat.v1.train.MomentumOptimizer', 'Momentum'),
])
def test_a_tf1_name_is_what_the_framework_reads_for_it(tmp_path, expression, expected):
  assert loaded(tmp_path, f'base_params = {{"value": {expression}}}')['value'] == expected


def test_from_imports_of_tf1_modules_give_the_same_names(tmp_path):
  params = loaded(tmp_path, '''
      from tensorflow.contrib.layers import l2_regularizer
      from tensorflow.contrib.opt import LazyAdamOptimizer
      from tensorflow.train import MomentumOptimizer
      base_params = {'r': l2_regularizer, 'o': LazyAdamOptimizer, 'm': MomentumOptimizer}
      ''')
  assert params == {'r': 'l2', 'o': 'optimizers.compat.tf1:LazyAdamOptimizer', 'm': 'Momentum'}


def test_names_of_tensorflow_2_are_its_own_and_the_real_module_is_not_changed(tmp_path):
  import tensorflow as real  # pylint: disable=import-outside-toplevel
  params = loaded(tmp_path, '''
      base_params = {'l2': tf.keras.regularizers.l2, 'checkpoint': tf.train.Checkpoint,
                     'float16': tf.float16}
      ''')
  assert params['l2'] is real.keras.regularizers.l2
  assert params['checkpoint'] is real.train.Checkpoint
  # With TensorFlow loaded a dtype is the tf.DType itself; its name otherwise (below).
  assert params['float16'] is real.float16
  assert not hasattr(real, 'contrib') and not hasattr(real.train, 'MomentumOptimizer')


def test_a_config_of_tf1_names_alone_is_read_without_importing_tensorflow(tmp_path):
  path = write(tmp_path, 'cfg.py', '''
      import tensorflow as tf
      base_params = {'dtype': tf.float16, 'optimizer': tf.contrib.opt.LazyAdamOptimizer,
                     'regularizer': tf.contrib.layers.l2_regularizer}
      ''')
  code = (f'import sys; from framework.config import config_file; '
          f'print(config_file.load_config_file({path!r})["base_params"]); '
          "print('tensorflow' in sys.modules)")
  out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                       check=True, timeout=120).stdout.splitlines()
  assert out == ["{'dtype': 'float16', 'optimizer': 'optimizers.compat.tf1:LazyAdamOptimizer', "
                 "'regularizer': 'l2'}", 'False']


@pytest.mark.parametrize('expression, named, allowed', [
    ('tf.contrib.foo', 'tf.contrib.foo', 'tf.contrib.layers.l2_regularizer'),
    ('tf.contrib.opt.NadamOptimizer', 'tf.contrib.opt.NadamOptimizer',
     'tf.contrib.opt.LazyAdamOptimizer'),
    ('tf.train.ProximalAdagradOptimizer', 'tf.train.ProximalAdagradOptimizer',
     'tf.train.MomentumOptimizer'),
])
def test_an_unknown_tf1_name_is_one_line_naming_it_and_what_is_allowed(tmp_path, expression,
                                                                        named, allowed):
  path = write(tmp_path, 'cfg.py', f'import tensorflow as tf\nbase_params = {{"a": {expression}}}\n')
  with pytest.raises(ConfigError) as info:
    config_file.load_config_file(path)
  message = str(info.value)
  assert message.startswith(f'{path}:2: {named}: ') and '; allowed: ' in message
  assert allowed in message.split('; allowed: ')[1] and '\n' not in message


def test_a_module_the_config_imports_from_its_directory_reads_tf1_names_too(tmp_path):
  write(tmp_path, 'port_for_test_tf1_names.py', '''
      import tensorflow as tf
      base_params = {'optimizer': tf.train.MomentumOptimizer}
      ''')
  path = write(tmp_path, 'small.py', '''
      from port_for_test_tf1_names import base_params as port
      base_params = dict(port, num_gpus=1)
      ''')
  config_file.add_import_path(str(tmp_path))
  try:
    assert config_file.load_config_file(path)['base_params'] == {'optimizer': 'Momentum',
                                                                 'num_gpus': 1}
  finally:
    sys.modules.pop('port_for_test_tf1_names', None)


def test_the_namespace_lists_its_tf1_names():
  assert {'train', 'contrib', 'float16', 'variance_scaling_initializer'} <= set(dir(openseq2seq.TF))
  assert set(dir(openseq2seq.TF.contrib)) == {'layers', 'opt'}
