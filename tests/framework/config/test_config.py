"""framework/config/validation.py and its room: loading, overlays, overrides, validation, YAML."""

import copy
import os
import sys
import textwrap

import keras
import pytest
import tensorflow as tf

from core.params import ConfigError
from core.params import Param
from core.params import REQUIRED
from core.params import positive
from core.registry import Registry
from core.registry import load_attribute
from data.base import DataLayer
from framework import tasks
from framework.config import config_file
from framework.config import config_resolve
from framework.config import schedule
from framework.config import schema
from framework.config import validation as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


# ---------------------------------------------------------------------------
# Fake registries, independent of the real models, data layers and policies.

def fake_model(params):
  return params


fake_model.PARAMS = {
    'width': Param(int, REQUIRED, check=positive, doc='channels of the first block'),
    'depth': Param(int, 20, check=positive),
    'initializer': Param(object, None),
    'block': Param(object, None),
}


class FakeData:
  PARAMS = {
      'image_shape': Param(list, [28, 28, 1]),
      'augment': Param(bool, False),
  }


def fixed_lr(global_step, learning_rate):
  return learning_rate


def poly_decay(global_step, learning_rate, decay_steps, power=1.0, begin_decay_at=0, min_lr=0.0,
               warmup_steps=0):
  return learning_rate


def piecewise_constant(global_step, learning_rate, boundaries, decay_rates, steps_per_epoch=None):
  return learning_rate


class NeedsBeta:
  def __init__(self, learning_rate, beta):
    pass


class BaseOpt:
  def __init__(self, learning_rate, decay=0.0, name=None):
    pass


class ChildOpt(BaseOpt):
  def __init__(self, learning_rate=0.1, beta=0.5, **kwargs):
    super().__init__(learning_rate, **kwargs)


class KeepsKwargs:
  def __init__(self, learning_rate=0.1, **kwargs):
    self.kwargs = kwargs


def make_registries():
  models = Registry('model')
  models.register('resnet50', fake_model)
  models.register('resnet_cifar', lambda params: params)
  data = Registry('data_layer')
  data.register('fake', FakeData)
  optimizers = Registry('optimizer', case_insensitive=True)
  optimizers.register('SGD', keras.optimizers.SGD)
  optimizers.register('Momentum', keras.optimizers.SGD)
  optimizers.register('NeedsBeta', NeedsBeta)
  optimizers.register('ChildOpt', ChildOpt)
  optimizers.register('KeepsKwargs', KeepsKwargs)
  policies = Registry('lr_policy')
  for policy in (fixed_lr, poly_decay, piecewise_constant):
    policies.register(policy.__name__, policy)
  return {'model': models, 'data_layer': data, 'optimizer': optimizers, 'lr_policy': policies}


REGISTRIES = make_registries()


def base_config(**changes):
  config = {
      'model': 'resnet50',
      'model_params': {'width': 16},
      'data_layer': 'fake',
      'batch_size_per_gpu': 32,
      'num_epochs': 2,
      'optimizer': 'Momentum',
      'optimizer_params': {'momentum': 0.9},
      'lr_policy_params': {'learning_rate': 0.1},
  }
  config.update(changes)
  return config


def check(config):
  return config_lib.validate(config, REGISTRIES)


def error_of(function, *args):
  with pytest.raises(ConfigError) as info:
    function(*args)
  return str(info.value)


def write(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(textwrap.dedent(text))
  return str(path)


# ---------------------------------------------------------------------------
# load_config_file

def test_load_python_config_keeps_objects_and_computed_values(tmp_path):
  path = write(tmp_path, 'c.py', """
      import tensorflow as tf
      batch = 64
      base_params = {'batch_size_per_gpu': batch, 'dtype': tf.float16,
                     'lr_policy_params': {'learning_rate': 0.1 * batch / 256}}
      train_params = {'num_epochs': 3}
      helper = 'ignored'
      """)
  raw = config_file.load_config_file(path)
  assert raw == {'base_params': {'batch_size_per_gpu': 64, 'dtype': tf.float16,
                                 'lr_policy_params': {'learning_rate': 0.025}},
                 'train_params': {'num_epochs': 3}, 'eval_params': {}}
  assert raw['base_params']['dtype'] is tf.float16


def test_load_yaml_config_reads_exponents_as_floats(tmp_path):
  path = write(tmp_path, 'c.yml', """
      base_params:
        lr_policy_params: {learning_rate: 1e-3, min_lr: 5e4, power: 2.0e-1}
      eval_params:
        batch_size_per_gpu: 8
      """)
  raw = config_file.load_config_file(path)
  assert raw == {'base_params': {'lr_policy_params': {'learning_rate': 0.001, 'min_lr': 50000.0,
                                                      'power': 0.2}},
                 'train_params': {}, 'eval_params': {'batch_size_per_gpu': 8}}
  assert isinstance(raw['base_params']['lr_policy_params']['min_lr'], float)


def test_load_missing_file(tmp_path):
  path = str(tmp_path / 'nope.yaml')
  assert error_of(config_file.load_config_file, path) == f'{path}: config file not found'


def test_load_other_extension(tmp_path):
  path = write(tmp_path, 'c.json', '{}')
  assert error_of(config_file.load_config_file, path) == (
      f"{path}: unsupported config file extension '.json'; allowed: .py, .yaml, .yml")


def test_load_yaml_syntax_error_gives_file_and_line(tmp_path):
  path = write(tmp_path, 'c.yaml', """
      base_params:
        model: resnet50
        model_params: width: 16
      """)
  assert error_of(config_file.load_config_file, path) == f'{path}:4: mapping values are not allowed here'


def test_load_yaml_refuses_python_tags(tmp_path):
  path = write(tmp_path, 'c.yaml', """
      base_params:
        model: !!python/name:os.system
      """)
  message = error_of(config_file.load_config_file, path)
  assert message.startswith(f'{path}:3: could not determine a constructor for the tag')


def test_load_yaml_unknown_top_level_key(tmp_path):
  path = write(tmp_path, 'c.yaml', """
      base_params: {model: resnet50}
      trian_params: {num_epochs: 1}
      """)
  assert error_of(config_file.load_config_file, path) == (
      f"{path}: unknown top-level key 'trian_params' (did you mean train_params?); "
      f"allowed: base_params, train_params, eval_params, infer_params")


def test_load_without_base_params(tmp_path):
  py = write(tmp_path, 'c.py', 'train_params = {}\n')
  assert error_of(config_file.load_config_file, py) == f'{py}: defines no base_params dict'
  yml = write(tmp_path, 'c.yaml', 'train_params: {}\n')
  assert error_of(config_file.load_config_file, yml) == f'{yml}: defines no base_params dict'
  wrong = write(tmp_path, 'w.py', 'base_params = [1]\n')
  assert error_of(config_file.load_config_file, wrong) == f'{wrong}: base_params must be a dict, got list'
  scalar = write(tmp_path, 's.yaml', '3\n')
  assert error_of(config_file.load_config_file, scalar) == (
      f'{scalar}: expected a mapping with base_params, got int')


def test_load_python_exception_points_at_the_config_line(tmp_path):
  path = write(tmp_path, 'c.py', """
      import json
      base_params = {}
      settings = json.loads('{')
      """)
  assert error_of(config_file.load_config_file, path) == (
      f'{path}:4: JSONDecodeError: Expecting property name enclosed in double quotes: '
      f'line 1 column 2 (char 1)')


def test_load_python_exception_in_config_function(tmp_path):
  path = write(tmp_path, 'c.py', """
      def scaled(lr):
        return lr / 0

      base_params = {'lr': scaled(0.1)}
      """)
  # The innermost line of the config, where the error happened.
  assert error_of(config_file.load_config_file, path) == (
      f'{path}:3: ZeroDivisionError: float division by zero')


def test_load_python_syntax_error(tmp_path):
  path = write(tmp_path, 'c.py', """
      base_params = {
          'model': 'resnet50',,
      }
      """)
  assert error_of(config_file.load_config_file, path) == f'{path}:3: SyntaxError: invalid syntax'


def test_python_config_functions_get_an_importable_module_name(tmp_path, monkeypatch):
  (tmp_path / 'configs').mkdir()
  write(tmp_path, 'configs/small.py', """
      def my_policy(global_step, learning_rate):
        return learning_rate * 3

      base_params = {'lr_policy': my_policy}
      """)
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(sys, 'path', list(sys.path))
  raw = config_file.load_config_file('configs/small.py')
  # Outside the checkout a config's module is its file's name, its directory on the path.
  assert raw['base_params']['lr_policy'].__module__ == 'small'
  assert config_file.to_yaml(raw['base_params']) == 'lr_policy: small:my_policy\n'
  assert str(tmp_path / 'configs') in sys.path
  monkeypatch.delitem(sys.modules, 'small', raising=False)
  assert load_attribute('small:my_policy')(0, 2.0) == 6.0


def test_a_checkout_config_module_is_named_from_the_checkout(monkeypatch, tmp_path):
  monkeypatch.chdir(tmp_path)
  path = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')
  assert config_file._module_name(path) == 'configs.fashion_mnist_lars'  # pylint: disable=protected-access


def test_a_local_function_cannot_be_named():
  def local(step):
    return step
  assert error_of(config_file.to_yaml, {'lr_policy': local}) == (
      'lr_policy: test_a_local_function_cannot_be_named.<locals>.local (test_config) cannot be '
      'named in a config file; define it at the top level of a module')


# ---------------------------------------------------------------------------
# resolve

RAW = {
    'base_params': {
        'model': 'resnet50',
        'model_params': {'width': 16, 'depth': 50},
        'data_layer_params': {'image_shape': [224, 224, 3], 'augment': True},
        'batch_size_per_gpu': 32,
        'larc_params': None,
    },
    'train_params': {'model_params': {'depth': 18}, 'data_layer_params': {'image_shape': [32, 32]}},
    'eval_params': {'batch_size_per_gpu': 8, 'data_layer_params': {'augment': False}},
}


def test_resolve_overlays_train_params_key_by_key():
  config = config_resolve.resolve(RAW, 'train')
  assert config == {
      'model': 'resnet50',
      'model_params': {'width': 16, 'depth': 18},
      'data_layer_params': {'image_shape': [32, 32], 'augment': True},
      'batch_size_per_gpu': 32,
      'larc_params': None,
  }
  assert config_resolve.resolve(RAW, 'train_eval') == config
  assert config_resolve.resolve(RAW, 'benchmark') == config


def test_resolve_overlays_eval_params_in_eval_mode():
  assert config_resolve.resolve(RAW, 'eval') == {
      'model': 'resnet50',
      'model_params': {'width': 16, 'depth': 50},
      'data_layer_params': {'image_shape': [224, 224, 3], 'augment': False},
      'batch_size_per_gpu': 8,
      'larc_params': None,
  }


def test_resolve_without_overlays():
  assert config_resolve.resolve({'base_params': {'a': 1}}, 'eval') == {'a': 1}


def test_resolve_unknown_mode():
  assert error_of(config_resolve.resolve, RAW, 'trian') == (
      "mode: unknown mode 'trian' (did you mean 'train'?); "
      "allowed: train, eval, train_eval, benchmark, export, infer, critical_batch")


def test_resolve_does_not_mutate_or_share_raw():
  before = copy.deepcopy(RAW)
  config = config_resolve.resolve(RAW, 'train', ['model_params.depth=34', 'data_layer_params.image_shape.0=8',
                                      'larc_params.larc_eta=0.001'])
  assert RAW == before
  config['data_layer_params']['image_shape'].append(1)
  config['model_params']['width'] = 1
  assert RAW == before
  evaluation = config_resolve.resolve(RAW, 'eval')
  evaluation['data_layer_params']['image_shape'][0] = 1
  assert RAW == before


@pytest.mark.parametrize('override, key, expected', [
    ('lr=1e-3', 'lr', 0.001),
    ('lr=5e4', 'lr', 50000.0),
    ('lr=-2.5E-2', 'lr', -0.025),
    ('lr=0.1', 'lr', 0.1),
    ('steps=100', 'steps', 100),
    ('name=resnet50', 'name', 'resnet50'),
    ('name="007"', 'name', '007'),
    ('flag=true', 'flag', True),
    ('flag=null', 'flag', None),
    ('flag=', 'flag', None),
    ('shape=[1, 2]', 'shape', [1, 2]),
    ('text=a=b', 'text', 'a=b'),
])
def test_override_values_are_yaml(override, key, expected):
  value = config_resolve.resolve({'base_params': {}}, 'train', [override])[key]
  assert value == expected
  assert type(value) is type(expected)


def test_overrides_of_nested_keys_lists_and_dicts():
  config = config_resolve.resolve(RAW, 'train', [
      'model_params.depth=101',
      'data_layer_params.image_shape.1=64',
      'larc_params={larc_eta: 0.002}',
      'larc_params.larc_mode=scale',
      'optimizer_params.momentum=0.95',
      'batch_size_per_gpu=16',
  ])
  assert config['model_params'] == {'width': 16, 'depth': 101}
  assert config['data_layer_params']['image_shape'] == [32, 64]
  assert config['larc_params'] == {'larc_eta': 0.002, 'larc_mode': 'scale'}
  assert config['optimizer_params'] == {'momentum': 0.95}
  assert config['batch_size_per_gpu'] == 16


def test_override_with_a_dict_replaces_the_dict():
  config = config_resolve.resolve(RAW, 'train', ['model_params={width: 8}'])
  assert config['model_params'] == {'width': 8}


def test_overrides_apply_in_order():
  config = config_resolve.resolve(RAW, 'train', ['batch_size_per_gpu=1', 'batch_size_per_gpu=2'])
  assert config['batch_size_per_gpu'] == 2


def test_override_creates_a_null_mapping_on_the_way():
  config = config_resolve.resolve(RAW, 'train', ['larc_params.larc_eta=0.001'])
  assert config['larc_params'] == {'larc_eta': 0.001}


def test_override_of_a_list_of_dicts():
  raw = {'base_params': {'layers': [{'units': 4}, {'units': 8}]}}
  config = config_resolve.resolve(raw, 'train', ['layers.1.units=16'])
  assert config['layers'] == [{'units': 4}, {'units': 16}]


@pytest.mark.parametrize('override, message', [
    ('batch_size_per_gpu', "override 'batch_size_per_gpu': expected key.path=value"),
    ('=3', "override '=3': empty key in ''"),
    ('model_params..depth=3', "override 'model_params..depth=3': empty key in 'model_params..depth'"),
    ('data_layer_params.image_shape.2=1',
     "override 'data_layer_params.image_shape.2=1': index 2 out of range for "
     "data_layer_params.image_shape (length 2)"),
    ('data_layer_params.image_shape.x=1',
     "override 'data_layer_params.image_shape.x=1': data_layer_params.image_shape is a list, "
     "'x' is not an index"),
    ('data_layer_params.image_shape.-1=1',
     "override 'data_layer_params.image_shape.-1=1': data_layer_params.image_shape is a list, "
     "'-1' is not an index"),
    ('batch_size_per_gpu.x=1',
     "override 'batch_size_per_gpu.x=1': batch_size_per_gpu is 32 (int), it has no key 'x'"),
    ('data_layer_params.image_shape.0.x=1',
     "override 'data_layer_params.image_shape.0.x=1': data_layer_params.image_shape.0 is 32 (int), "
     "it has no key 'x'"),
    ('lr=[1, 2',
     "override 'lr=[1, 2': cannot read value '[1, 2': expected ',' or ']', but got '<stream end>'"),
])
def test_malformed_overrides(override, message):
  assert error_of(config_resolve.resolve, RAW, 'train', [override]) == message


def test_resolve_modes():
  overrides = ['model_params.width=8']
  both = config_resolve.resolve_modes(RAW, 'train_eval', overrides)
  assert both == {'train': config_resolve.resolve(RAW, 'train', overrides),
                  'eval': config_resolve.resolve(RAW, 'eval', overrides)}
  assert both['eval']['model_params'] == {'width': 8, 'depth': 50}
  assert both['eval']['batch_size_per_gpu'] == 8
  train, evaluation = config_resolve.resolve(RAW, 'train'), config_resolve.resolve(RAW, 'eval')
  assert config_resolve.resolve_modes(RAW, 'train') == {'train': train, 'eval': None}
  assert config_resolve.resolve_modes(RAW, 'benchmark') == {'train': train, 'eval': None}
  assert config_resolve.resolve_modes(RAW, 'eval') == {'train': None, 'eval': evaluation}
  # A model is exported as it is evaluated.
  assert config_resolve.resolve_modes(RAW, 'export') == {'train': None, 'eval': evaluation}
  assert config_resolve.resolve(RAW, 'export') == config_resolve.resolve(RAW, 'eval')
  # Branches train from a run's checkpoint and are evaluated, as train_eval.
  assert config_resolve.resolve_modes(RAW, 'critical_batch', overrides) == both
  assert error_of(config_resolve.resolve_modes, RAW, 'test') == (
      "mode: unknown mode 'test'; allowed: train, eval, train_eval, benchmark, export, infer, "
      'critical_batch')


def test_one_tuple_of_modes_for_the_command_line_and_the_config_layer():
  from framework.config import config_file  # pylint: disable=import-outside-toplevel
  from framework.run import launch  # pylint: disable=import-outside-toplevel
  assert launch.MODES is config_file.MODES
  assert launch.READING_MODES is config_file.READING_MODES
  assert launch.TRAINING_MODES is config_file.TRAINING_MODES
  assert set(config_file.READING_MODES) | set(config_file.TRAINING_MODES) < set(config_file.MODES)


# ---------------------------------------------------------------------------
# validate: top level

def test_validate_fills_defaults():
  config = base_config()
  result = check(config)
  assert list(result) == list(schema.top_level_keys())
  assert result == {
      'model': 'resnet50',
      'model_params': {'width': 16, 'depth': 20, 'initializer': None, 'block': None},
      'data_layer': 'fake',
      'data_layer_params': {'image_shape': [28, 28, 1], 'augment': False},
      'batch_size_per_gpu': 32,
      'num_epochs': 2,
      'max_steps': None,
      'optimizer': 'Momentum',
      'optimizer_params': {'momentum': 0.9},
      'lr_policy': 'fixed_lr',
      'lr_policy_params': {'learning_rate': 0.1},
      'lr_scaling': None,
      'larc_params': None,
      'loss_scaling': 1.0,
      'loss_scaling_params': None,
      'dtype': 'float32',
      'max_grad_norm': None,
      'iter_size': 1,
      'noise_scale': 'auto',
      'noise_scale_params': {'decay': 0.99},
      'batch_policy': 'fixed', 'batch_policy_params': {},
      'regularizer': None,
      'regularizer_params': None,
      'initializer': None,
      'initializer_params': None,
      'summaries': ['learning_rate', 'global_gradient_norm', 'loss_scale'],
      'save_checkpoint_steps': 1000,
      'num_checkpoints': 5,
      'eval_steps': None,
      'print_loss_steps': 100,
      'print_samples_steps': None,
      'save_summaries_steps': 100,
      'logdir': None,
      'auto_resume': False,
      'import_paths': [],
      'random_seed': 0,
      'distribution': 'auto',
      'distribution_params': {'timeout_seconds': 600, 'implementation': 'auto',
                              'port_base': 8888, 'compression': 'none'},
      'use_horovod': False,
      'num_gpus': None,
      'horovod_params': {'compression': 'none'},
      'agn_params': None,
      'label_smoothing': 0.0,
      'precise_bn': None,
      'deterministic': False,
      'jit_compile': False,
      'bench_warmup_steps': 5,
  }
  assert config == base_config()


def test_validate_does_not_share_values_with_the_input():
  config = base_config(summaries=['learning_rate'], data_layer_params={'image_shape': [8, 8, 1]})
  before = copy.deepcopy(config)
  result = check(config)
  result['summaries'].append('gradients')
  result['data_layer_params']['image_shape'][0] = 1
  result['optimizer_params']['momentum'] = 0.0
  assert config == before


def test_schema_documents_every_key():
  assert all(isinstance(spec, Param) and spec.doc for spec in schema.top_level_keys().values())


def test_unknown_top_level_key_suggests_the_closest():
  assert error_of(check, base_config(optimzer_params={})) == (
      f"optimzer_params: unknown key (did you mean optimizer_params?); "
      f"allowed keys: {', '.join(sorted(schema.top_level_keys()))}")


def test_wrong_type():
  assert error_of(check, base_config(batch_size_per_gpu='256')) == (
      "batch_size_per_gpu: expected an integer, got '256' (str)")
  assert error_of(check, base_config(batch_size_per_gpu=True)) == (
      'batch_size_per_gpu: expected an integer, got True (bool)')
  assert error_of(check, base_config(use_horovod='yes')) == (
      "use_horovod: expected a boolean, got 'yes' (str)")
  assert error_of(check, base_config(model=3)) == (
      'model: expected a registered name or a callable, got 3 (int)')
  assert error_of(check, base_config(optimizer=fixed_lr)) == (
      f'optimizer: expected a registered name or a class, got {fixed_lr!r} (function)')


def test_bad_values():
  assert error_of(check, base_config(batch_size_per_gpu=0)) == 'batch_size_per_gpu: must be > 0, got 0'
  assert error_of(check, base_config(iter_size=0)) == 'iter_size: must be >= 1, got 0'
  assert error_of(check, base_config(label_smoothing=1.0)) == (
      'label_smoothing: must be in [0, 1), got 1.0')
  assert error_of(check, base_config(save_checkpoint_steps=0)) == (
      'save_checkpoint_steps: must be > 0, got 0')
  assert error_of(check, base_config(bench_warmup_steps=-1)) == (
      'bench_warmup_steps: must be >= 0, got -1')
  assert error_of(check, base_config(max_grad_norm=0.0)) == 'max_grad_norm: must be > 0, got 0.0'


def test_bad_choice_suggests_the_closest():
  assert error_of(check, base_config(dtype='flaot16')) == (
      "dtype: 'flaot16' is not allowed (did you mean 'float16'?); "
      "allowed: 'float32', 'float16', 'bfloat16', 'mixed_float16', 'mixed_bfloat16', 'mixed', "
      "'auto'")
  assert error_of(check, base_config(regularizer='L2')) == (
      "regularizer: 'L2' is not allowed (did you mean 'l2'?); allowed: 'l2'")
  assert error_of(check, base_config(regularizer='l1')) == "regularizer: 'l1' is not allowed; allowed: 'l2'"


def test_missing_required_key():
  config = base_config()
  del config['batch_size_per_gpu']
  assert error_of(check, config) == (
      'batch_size_per_gpu: required key is missing (examples per replica per micro-batch)')
  assert error_of(check, base_config(model=None)) == (
      'model: expected a registered name or a callable, got None (NoneType)')


def test_exactly_one_of_num_epochs_and_max_steps():
  assert error_of(check, base_config(max_steps=100)) == (
      'num_epochs, max_steps: give exactly one of them, got both')
  assert error_of(check, base_config(num_epochs=None)) == (
      'num_epochs, max_steps: give exactly one of them, got neither')
  result = check(base_config(num_epochs=None, max_steps=100))
  assert (result['num_epochs'], result['max_steps']) == (None, 100)
  assert check(base_config(num_epochs=0.5))['num_epochs'] == 0.5


def test_optional_step_counts_accept_none():
  result = check(base_config(save_checkpoint_steps=None, save_summaries_steps=None, eval_steps=50))
  assert (result['save_checkpoint_steps'], result['save_summaries_steps'], result['eval_steps']) == (
      None, None, 50)


def test_dtype_from_a_python_config_becomes_its_name():
  assert check(base_config(dtype=tf.float16))['dtype'] == 'float16'
  assert check(base_config(dtype='mixed_bfloat16'))['dtype'] == 'mixed_bfloat16'
  assert check(base_config(dtype=tf.bfloat16))['dtype'] == 'bfloat16'
  assert error_of(check, base_config(dtype=tf.int32)) == (
      "dtype: 'int32' is not allowed; "
      "allowed: 'float32', 'float16', 'bfloat16', 'mixed_float16', 'mixed_bfloat16', 'mixed', "
      "'auto'")


@pytest.mark.parametrize('value', [1024, 0.5, 'Backoff', 'logmax', 'DYNAMIC'])
def test_loss_scaling_accepts_numbers_and_algorithms(value):
  assert check(base_config(loss_scaling=value))['loss_scaling'] == value


def test_loss_scaling_errors():
  assert error_of(check, base_config(loss_scaling='Backof')) == (
      "loss_scaling: 'Backof' is not allowed (did you mean 'Backoff'?); "
      "allowed: 'Backoff', 'LogMax', 'dynamic'")
  assert error_of(check, base_config(loss_scaling=0)) == 'loss_scaling: must be > 0, got 0'
  assert error_of(check, base_config(loss_scaling=None)) == (
      'loss_scaling: expected a number or a string, got None (NoneType)')


def test_summaries_must_be_known_names():
  assert config_lib.SUMMARY_NAMES == ['learning_rate', 'gradients', 'gradient_norm',
                               'global_gradient_norm', 'variables', 'variable_norm',
                               'larc_summaries', 'loss_scale']
  result = check(base_config(summaries=('gradients', 'loss_scale')))
  assert result['summaries'] == ['gradients', 'loss_scale']
  allowed = ', '.join(repr(name) for name in config_lib.SUMMARY_NAMES)
  assert error_of(check, base_config(summaries=['learning_rate', 'gradient_norms'])) == (
      f"summaries.1: 'gradient_norms' is not allowed (did you mean 'gradient_norm'?); "
      f"allowed: {allowed}")
  assert error_of(check, base_config(summaries='learning_rate')) == (
      "summaries: expected a list or tuple, got 'learning_rate' (str)")


def test_larc_params():
  result = check(base_config(larc_params={'larc_eta': 0.002}))
  assert result['larc_params'] == {'larc_eta': 0.002, 'larc_mode': 'clip', 'min_update': 1e-7,
                                   'epsilon': 1e-7, 'skip_list': None,
                                   'exclude_from_layer_adaptation': None}
  result = check(base_config(larc_params={'larc_eta': 1e-3, 'larc_mode': 'scale',
                                          'skip_list': ['bias', 'batch_normalization']}))
  assert result['larc_params']['skip_list'] == ['bias', 'batch_normalization']
  assert error_of(check, base_config(larc_params={'larc_mode': 'clip'})) == (
      'larc_params.larc_eta: required key is missing (trust coefficient eta)')
  assert error_of(check, base_config(larc_params={'larc_eta': 0})) == (
      'larc_params.larc_eta: must be > 0, got 0')
  assert error_of(check, base_config(larc_params={'larc_eta': 1e-3, 'larc_mode': 'scal'})) == (
      "larc_params.larc_mode: 'scal' is not allowed (did you mean 'scale'?); allowed: 'clip', 'scale'")
  assert error_of(check, base_config(larc_params={'larc_eta': 1e-3, 'min_update': -1.0})) == (
      'larc_params.min_update: must be >= 0, got -1.0')
  assert error_of(check, base_config(larc_params={'larc_eta': 1e-3, 'skip_list': ['bias', 3]})) == (
      'larc_params.skip_list.1: expected a string, got 3 (int)')
  assert error_of(check, base_config(larc_params={'larc_eta': 1e-3, 'larc_eda': 1.0})) == (
      'larc_params.larc_eda: unknown key (did you mean larc_params.larc_eta?); '
      'allowed keys: epsilon, exclude_from_layer_adaptation, larc_eta, larc_mode, min_update, '
      'skip_list')


def test_regularizer():
  result = check(base_config(regularizer='l2', regularizer_params={'scale': 5e-4}))
  assert (result['regularizer'], result['regularizer_params']) == ('l2', {'scale': 5e-4})
  assert error_of(check, base_config(regularizer='l2')) == (
      "regularizer_params: required when regularizer is 'l2' (give regularizer_params.scale)")
  assert error_of(check, base_config(regularizer='l2', regularizer_params={'scale': -1})) == (
      'regularizer_params.scale: must be >= 0, got -1')


def test_horovod_params():
  result = check(base_config(use_horovod=True, horovod_params={'compression': 'fp16'}))
  assert result['horovod_params'] == {'compression': 'fp16'}
  assert error_of(check, base_config(horovod_params={'compression': 'FP16'})) == (
      "horovod_params.compression: 'FP16' is not allowed (did you mean 'fp16'?); "
      "allowed: 'none', 'fp16'")


def test_compression_is_a_distribution_param_and_its_old_place_is_still_read():
  assert check(base_config())['distribution_params']['compression'] == 'none'
  given = check(base_config(distribution_params={'compression': 'fp16'}))
  assert given['distribution_params']['compression'] == 'fp16'
  old = check(base_config(horovod_params={'compression': 'fp16'}))
  assert old['distribution_params']['compression'] == 'fp16'
  both = check(base_config(horovod_params={'compression': 'fp16'},
                           distribution_params={'compression': 'fp16'}))
  assert both['distribution_params']['compression'] == 'fp16'
  # A run directory's config.yaml holds the old key at its default beside the new one.
  saved = check(base_config(horovod_params={'compression': 'none'},
                            distribution_params={'compression': 'fp16'}))
  assert saved['distribution_params']['compression'] == 'fp16'
  assert error_of(check, base_config(horovod_params={'compression': 'fp16'},
                                     distribution_params={'compression': 'none'})) == (
      "distribution_params.compression: 'none', but horovod_params.compression (its old place) "
      "says 'fp16'; give it once, in distribution_params")
  assert error_of(check, base_config(distribution_params={'compression': 'FP16'})) == (
      "distribution_params.compression: 'FP16' is not allowed (did you mean 'fp16'?); "
      "allowed: 'none', 'fp16'")


def test_free_form_dicts_pass_through():
  result = check(base_config(loss_scaling='Backoff', loss_scaling_params={'scale_max': 2.0 ** 14}))
  assert result['loss_scaling_params'] == {'scale_max': 16384.0}


class FakeWrapper:
  """Stands for AGN: a registered optimizer that wraps another one."""
  WRAPS_OPTIMIZER = True

  def __init__(self, optimizer, communication_period=10):
    pass


def test_wrapper_optimizer_checks_agn_params_and_the_wrapped_optimizer_params():
  registries = dict(REGISTRIES)
  optimizers = Registry('optimizer', case_insensitive=True)
  for name in REGISTRIES['optimizer']:
    optimizers.register(name, REGISTRIES['optimizer'][name])
  optimizers.register('AGN', FakeWrapper)
  registries['optimizer'] = optimizers
  config = base_config(optimizer='AGN', agn_params={'optimizer': 'Momentum'},
                       optimizer_params={'momentum': 0.9})
  result = config_lib.validate(config, registries)
  assert result['agn_params'] == {'optimizer': 'Momentum', 'communication_period': 10}
  assert error_of(config_lib.validate, base_config(optimizer='AGN', optimizer_params={'momentum': 0.9}),
                  registries).startswith('agn_params.optimizer: required key is missing')
  bad = base_config(optimizer='AGN', agn_params={'optimizer': 'Momentum'},
                    optimizer_params={'momentun': 0.9})
  assert error_of(config_lib.validate, bad, registries).startswith(
      'optimizer_params.momentun: unknown argument')
  assert error_of(check, base_config(agn_params={'optimizer': 'Momentum'})) == (
      'agn_params: only used with optimizer: AGN')


# ---------------------------------------------------------------------------
# validate: names and nested params

def test_unknown_registry_name():
  assert error_of(check, base_config(model='resnt50')) == (
      "model: unknown model 'resnt50' (did you mean 'resnet50'?); known: resnet50, resnet_cifar")
  assert error_of(check, base_config(data_layer='imagenet')) == (
      "data_layer: unknown data_layer 'imagenet'; known: fake")
  assert error_of(check, base_config(optimizer='Momentun')) == (
      "optimizer: unknown optimizer 'Momentun' (did you mean 'Momentum'?); "
      "known: ChildOpt, KeepsKwargs, Momentum, NeedsBeta, SGD")
  assert error_of(check, base_config(lr_policy='poly')) == (
      "lr_policy: unknown lr_policy 'poly'; known: fixed_lr, piecewise_constant, poly_decay")


def test_optimizer_names_are_case_insensitive():
  assert check(base_config(optimizer='momentum'))['optimizer'] == 'momentum'


def test_missing_registry_is_a_programming_error():
  registries = dict(REGISTRIES)
  del registries['lr_policy']
  with pytest.raises(ValueError, match="validate: no 'lr_policy' registry given"):
    config_lib.validate(base_config(), registries)


def test_model_params_checked_against_model_params_declaration():
  assert error_of(check, base_config(model_params={'width': 16, 'dept': 50})) == (
      'model_params.dept: unknown key (did you mean model_params.depth?); '
      'allowed keys: block, depth, initializer, width')
  assert error_of(check, base_config(model_params={})) == (
      'model_params.width: required key is missing (channels of the first block)')
  assert error_of(check, base_config(model_params={'width': '16'})) == (
      "model_params.width: expected an integer, got '16' (str)")


def test_data_layer_params_checked_against_the_class_params():
  result = check(base_config(data_layer_params={'augment': True}))
  assert result['data_layer_params'] == {'image_shape': [28, 28, 1], 'augment': True}
  assert error_of(check, base_config(data_layer_params={'augmnet': True})) == (
      'data_layer_params.augmnet: unknown key (did you mean data_layer_params.augment?); '
      'allowed keys: augment, image_shape')


def test_objects_from_a_python_config_skip_the_lookup():
  class OwnData(DataLayer):  # no PARAMS of its own: its params are not checked
    PARAMS = None

  def own_model(params, image_shape, num_classes):
    return params

  result = check(base_config(model=own_model, model_params={'anything': 1}, data_layer=OwnData,
                             data_layer_params={'whatever': [1]}, optimizer=keras.optimizers.SGD,
                             lr_policy=poly_decay,
                             lr_policy_params={'learning_rate': 0.1, 'decay_steps': 10}))
  assert result['model'] is own_model
  assert result['model_params'] == {'anything': 1}
  assert result['data_layer'] is OwnData
  assert result['data_layer_params'] == {'whatever': [1]}
  assert result['optimizer'] is keras.optimizers.SGD
  assert result['lr_policy'] is poly_decay
  # An object with PARAMS is checked like a registered one.
  assert error_of(check, base_config(model=fake_model, model_params={'width': 1, 'x': 2})) == (
      'model_params.x: unknown key; allowed keys: block, depth, initializer, width')


def test_optimizer_params_unknown_argument():
  message = error_of(check, base_config(optimizer_params={'momentun': 0.9}))
  prefix = ('optimizer_params.momentun: unknown argument of SGD '
            '(did you mean optimizer_params.momentum?); accepted: ')
  assert message.startswith(prefix)
  accepted = message[len(prefix):].split(', ')
  assert accepted == sorted(accepted)
  assert {'momentum', 'nesterov', 'weight_decay', 'clipnorm', 'global_clipnorm'} <= set(accepted)
  assert 'learning_rate' not in accepted


def test_optimizer_params_may_name_base_class_arguments():
  result = check(base_config(optimizer='ChildOpt', optimizer_params={'beta': 0.1, 'decay': 0.5}))
  assert result['optimizer_params'] == {'beta': 0.1, 'decay': 0.5}
  assert error_of(check, base_config(optimizer='ChildOpt', optimizer_params={'decy': 0.5})) == (
      'optimizer_params.decy: unknown argument of ChildOpt (did you mean optimizer_params.decay?); '
      'accepted: beta, decay, name')
  # With no base __init__ to pass **kwargs on to, the class takes any name.
  result = check(base_config(optimizer='KeepsKwargs', optimizer_params={'anything': 1}))
  assert result['optimizer_params'] == {'anything': 1}


def test_optimizer_params_learning_rate_comes_from_the_policy():
  assert error_of(check, base_config(optimizer_params={'learning_rate': 0.1})) == (
      'optimizer_params.learning_rate: not allowed, the learning rate comes from the lr policy; '
      'set lr_policy_params.learning_rate')


def test_optimizer_params_missing_required_argument():
  assert error_of(check, base_config(optimizer='NeedsBeta', optimizer_params={})) == (
      'optimizer_params.beta: required argument of NeedsBeta is missing')
  assert check(base_config(optimizer='NeedsBeta', optimizer_params={'beta': 2}))['optimizer'] == (
      'NeedsBeta')


def test_lr_policy_params_learning_rate():
  assert error_of(check, base_config(lr_policy_params={})) == (
      'lr_policy_params.learning_rate: required key is missing (base learning rate)')
  assert error_of(check, base_config(lr_policy_params={'learning_rate': '1e-3'})) == (
      "lr_policy_params.learning_rate: expected a number, got '1e-3' (str)")
  assert error_of(check, base_config(lr_policy_params={'learning_rate': 0})) == (
      'lr_policy_params.learning_rate: must be > 0, got 0')

  def constant(global_step):  # a user's policy need not take a learning rate
    return 0.1

  assert check(base_config(lr_policy=constant, lr_policy_params={}))['lr_policy_params'] == {}


def test_lr_policy_params_checked_against_the_policy_signature():
  assert error_of(check, base_config(lr_policy='poly_decay',
                                     lr_policy_params={'learning_rate': 0.1, 'decay_steps': 10,
                                                       'powr': 2.0})) == (
      'lr_policy_params.powr: unknown argument of poly_decay (did you mean lr_policy_params.power?); '
      'accepted: begin_decay_at, begin_decay_at_epochs, begin_decay_at_fraction, decay_epochs, '
      'decay_fraction, decay_steps, learning_rate, min_lr, power, warmup_epochs, warmup_fraction, '
      'warmup_steps')
  # decay_steps is the run's to fill in, as OpenSeq2Seq fills it (tests/framework/config/test_openseq2seq.py).
  assert check(base_config(lr_policy='poly_decay', lr_policy_params={'learning_rate': 0.1}))[
      'lr_policy_params'] == {'learning_rate': 0.1}
  assert error_of(check, base_config(lr_policy='piecewise_constant',
                                     lr_policy_params={'learning_rate': 0.1, 'boundaries': [1]})) == (
      'lr_policy_params.decay_rates: required argument of piecewise_constant is missing')
  assert error_of(check, base_config(lr_policy_params={'learning_rate': 0.1, 'global_step': 0})) == (
      'lr_policy_params.global_step: not allowed, the trainer passes the global step')


def test_lr_policy_params_in_epochs():
  params = {'learning_rate': 0.1, 'decay_epochs': 88, 'warmup_epochs': 2.5, 'power': 2.0}
  result = check(base_config(lr_policy='poly_decay', lr_policy_params=params))
  assert result['lr_policy_params'] == params  # converted later, by the trainer
  result = check(base_config(lr_policy='piecewise_constant',
                             lr_policy_params={'learning_rate': 0.1, 'boundary_epochs': [30, 60],
                                               'decay_rates': [0.1, 0.01]}))
  assert result['lr_policy_params']['boundary_epochs'] == [30, 60]
  assert error_of(check, base_config(lr_policy='poly_decay',
                                     lr_policy_params={'learning_rate': 0.1, 'decay_steps': 10,
                                                       'decay_epochs': 2})) == (
      'lr_policy_params: give decay_steps or decay_epochs, not both')
  assert error_of(check, base_config(lr_policy_params={'learning_rate': 0.1,
                                                       'warmup_epochs': 1})) == (
      'lr_policy_params.warmup_epochs: unknown argument of fixed_lr; accepted: learning_rate')
  assert error_of(check, base_config(lr_policy='poly_decay',
                                     lr_policy_params={'learning_rate': 0.1,
                                                       'decay_epochs': 'ten'})) == (
      "lr_policy_params.decay_epochs: expected a number >= 0 or a list of them, got 'ten'")


def test_lr_policy_with_kwargs_takes_any_key():
  def custom(global_step, learning_rate, **kwargs):
    return learning_rate

  params = {'learning_rate': 0.1, 'anything': 3}
  assert check(base_config(lr_policy=custom, lr_policy_params=params))['lr_policy_params'] == params


# ---------------------------------------------------------------------------
# epochs_to_steps

@pytest.mark.parametrize('params, steps_per_epoch, expected', [
    ({'learning_rate': 0.1, 'decay_epochs': 90}, 100, {'learning_rate': 0.1, 'decay_steps': 9000}),
    ({'warmup_epochs': 0.5}, 3, {'warmup_steps': 2}),  # 1.5 rounds up
    ({'warmup_epochs': 0.4}, 3, {'warmup_steps': 1}),
    ({'begin_decay_at_epochs': 2.5}, 1, {'begin_decay_at': 3}),  # halves round up, not to even
    ({'boundary_epochs': [30, 60, 80], 'decay_rates': [0.1, 0.01, 0.001]}, 10,
     {'boundaries': [300, 600, 800], 'decay_rates': [0.1, 0.01, 0.001]}),
    ({'warmup_steps': 5, 'power': 2.0}, 10, {'warmup_steps': 5, 'power': 2.0}),
])
def test_epochs_to_steps(params, steps_per_epoch, expected):
  before = copy.deepcopy(params)
  result = schedule.epochs_to_steps(params, steps_per_epoch)
  assert result == expected
  assert list(result) == list(expected)
  assert params == before


def test_epochs_to_steps_keeps_key_positions():
  result = schedule.epochs_to_steps({'a': 1, 'warmup_epochs': 1, 'b': 2}, 4)
  assert list(result.items()) == [('a', 1), ('warmup_steps', 4), ('b', 2)]


def test_epochs_to_steps_errors():
  assert error_of(schedule.epochs_to_steps, {'warmup_epochs': 1, 'warmup_steps': 3}, 10) == (
      'lr_policy_params: give warmup_epochs or warmup_steps, not both')
  assert error_of(schedule.epochs_to_steps, {'boundary_epochs': [1, None]}, 10) == (
      'lr_policy_params.boundary_epochs: expected a number >= 0 or a list of them, got [1, None]')
  with pytest.raises(ValueError, match='steps_per_epoch must be a positive number, got 0'):
    schedule.epochs_to_steps({'warmup_epochs': 1}, 0)


def test_fractions_of_the_run_become_steps():
  params = {'learning_rate': 0.1, 'warmup_fraction': 0.15, 'decay_fraction': 0.85,
            'boundary_fractions': [0.5, 0.75]}
  assert schedule.epochs_to_steps(params, 7, total_steps=224) == {
      'learning_rate': 0.1, 'warmup_steps': 34, 'decay_steps': 190,  # 33.6 and 190.4
      'boundaries': [112, 168]}
  assert schedule.epochs_to_steps({'begin_decay_at_fraction': 0.5}, 3, total_steps=5) == {
      'begin_decay_at': 3}  # 2.5 rounds up


def test_fraction_errors():
  assert error_of(schedule.epochs_to_steps, {'warmup_epochs': 1, 'warmup_fraction': 0.1}, 10, 100) == (
      'lr_policy_params: give warmup_epochs or warmup_fraction, not both')
  assert error_of(schedule.epochs_to_steps, {'warmup_fraction': 1.5}, 10, 100) == (
      'lr_policy_params.warmup_fraction: expected a fraction in [0, 1] or a list of them, got 1.5')
  with pytest.raises(ValueError, match='needs total_steps'):
    schedule.epochs_to_steps({'warmup_fraction': 0.1}, 10)
  assert error_of(check, base_config(
      lr_policy='poly_decay', lr_policy_params={'learning_rate': 0.1, 'decay_fraction': 2})) == (
          'lr_policy_params.decay_fraction: expected a fraction in [0, 1] or a list of them, got 2')
  assert error_of(check, base_config(
      lr_policy='poly_decay', lr_policy_params={'learning_rate': 0.1, 'decay_steps': 9,
                                                'decay_fraction': 0.5})) == (
          'lr_policy_params: give decay_steps or decay_fraction, not both')


def test_learning_rate_fn_converts_fractions_with_the_run_length():
  from framework.config import schedule  # pylint: disable=import-outside-toplevel
  config = check(base_config(lr_policy='poly_decay', max_steps=100, num_epochs=None,
                             lr_policy_params={'learning_rate': 2.0, 'power': 1.0,
                                               'warmup_fraction': 0.1, 'decay_fraction': 0.9}))
  rate = schedule.learning_rate_fn(config, per_epoch=7)
  # Linear warm-up over 10 steps, then linear decay over the other 90 to 0 at the last step.
  for step, expected in [(0, 0.0), (5, 1.0), (10, 2.0), (55, 1.0), (100, 0.0)]:
    assert float(rate(step)) == pytest.approx(expected, abs=1e-6), step


def test_ghost_batch_size_must_divide_the_batches():
  def model(params, image_shape, num_classes):  # no PARAMS: model_params passed as they are
    return None

  model_params = {'ghost_batch_size': 12}
  assert error_of(check, base_config(model=model, model_params=model_params)) == (
      'model_params.ghost_batch_size: 12 must divide batch_size_per_gpu (32)')
  # An eval view normalises with the moving statistics: its batches need not divide.
  assert config_lib.validate(base_config(model=model, model_params=model_params), REGISTRIES,
                      'eval')['model_params'] == {'ghost_batch_size': 12}
  model_params['ghost_batch_size'] = 8
  assert error_of(check, base_config(model=model, model_params=model_params,
                                     precise_bn={'batch_size': 20})) == (
      'model_params.ghost_batch_size: 8 must divide precise_bn.batch_size (20)')
  result = check(base_config(model=model, model_params=model_params,
                             precise_bn={'num_batches': 4}))
  assert result['precise_bn'] == {'num_batches': 4, 'batch_size': None, 'before_each_eval': True}


# ---------------------------------------------------------------------------
# to_yaml, write_config

PY_CONFIG = """
    import collections
    import math

    import tensorflow as tf

    batch = 128
    base_params = {
        'model': 'resnet50',
        'model_params': {'width': 16, 'initializer': math.sqrt, 'block': collections.OrderedDict},
        'data_layer': 'fake',
        'data_layer_params': {'image_shape': [32, 32, 3]},
        'batch_size_per_gpu': batch,
        'num_epochs': 2,
        'optimizer': 'Momentum',
        'optimizer_params': {'momentum': 0.9, 'nesterov': True},
        'lr_policy': 'poly_decay',
        # Linear scaling from 0.1 at batch 256.
        'lr_policy_params': {'learning_rate': 0.1 * batch / 256, 'decay_epochs': 2, 'power': 2.0},
        'dtype': tf.float32,
        'larc_params': {'larc_eta': 1e-3, 'skip_list': ['bias']},
        'summaries': ['learning_rate', 'loss_scale'],
    }
    train_params = {'data_layer_params': {'augment': True}}
    eval_params = {'batch_size_per_gpu': 64}
    """

YAML_CONFIG = """
    base_params:
      model: resnet50
      model_params: {width: 16, initializer: "math:sqrt", block: "collections:OrderedDict"}
      data_layer: fake
      data_layer_params:
        image_shape: [32, 32, 3]
      batch_size_per_gpu: 128
      num_epochs: 2
      optimizer: Momentum
      optimizer_params: {momentum: 0.9, nesterov: true}
      lr_policy: poly_decay
      lr_policy_params: {learning_rate: 0.05, decay_epochs: 2, power: 2.0}
      dtype: float32
      larc_params: {larc_eta: 1e-3, skip_list: [bias]}
      summaries: [learning_rate, loss_scale]
    train_params:
      data_layer_params: {augment: true}
    eval_params:
      batch_size_per_gpu: 64
    """


@pytest.mark.parametrize('mode', ['train', 'eval'])
def test_python_and_yaml_configs_give_identical_yaml(tmp_path, mode):
  outputs = {}
  for name, text in (('c.py', PY_CONFIG), ('c.yaml', YAML_CONFIG)):
    raw = config_file.load_config_file(write(tmp_path, name, text))
    config = config_resolve.resolve(raw, mode, ['optimizer_params.momentum=0.95'])
    outputs[name] = (config_file.to_yaml(config), config_file.to_yaml(check(config)))
  assert outputs['c.py'] == outputs['c.yaml']
  resolved, validated = outputs['c.py']
  assert 'dtype: float32\n' in resolved
  assert 'initializer: math:sqrt\n' in validated
  assert 'block: collections:OrderedDict\n' in validated
  assert '  momentum: 0.95\n' in validated


def test_to_yaml_text():
  config = {'b': [1, (2, 3)], 'a': {'lr': 1e-3, 'fn': len, 'dtype': tf.float16, 'off': None}}
  assert config_file.to_yaml(config) == textwrap.dedent("""\
      a:
        dtype: float16
        fn: builtins:len
        lr: 0.001
        'off': null
      b:
      - 1
      - - 2
        - 3
      """)


def test_to_yaml_refuses_instances():
  assert error_of(config_file.to_yaml, {'model_params': {'init': object()}}).startswith(
      'model_params.init: cannot write <object object at ')
  assert error_of(config_file.to_yaml, {'a': [1, object()]}).endswith(
      '(object) as YAML; use a name, number, string, list or mapping')


def test_write_config_reads_back_to_the_same_config(tmp_path):
  config = check(base_config(larc_params={'larc_eta': 1e-3}, regularizer='l2',
                             regularizer_params={'scale': 1e-4}, loss_scaling=2.0 ** 14))
  path = tmp_path / 'run' / 'logs' / 'config.yaml'
  config_file.write_config(config, str(path))
  assert path.read_text() == config_file.to_yaml(config)
  again = write(tmp_path, 'again.yaml', 'base_params:\n' + textwrap.indent(path.read_text(), '  '))
  assert check(config_resolve.resolve(config_file.load_config_file(again), 'train')) == config


def test_run_config_splits_two_views_into_a_file_that_resolves_back_to_them(tmp_path):
  train = check(base_config(batch_size_per_gpu=256, model_params={'width': 16, 'depth': 2},
                            label_smoothing=0.1))
  evaluation = check(base_config(batch_size_per_gpu=1000, model_params={'width': 16}))
  layout = config_file.run_config(train, evaluation)
  assert list(layout) == ['base_params', 'train_params', 'eval_params']
  # Differing keys go whole into both overlays; equal ones into base_params.
  assert train['model_params']['depth'] == 2 != evaluation['model_params']['depth']
  assert layout['train_params'] == {'batch_size_per_gpu': 256, 'label_smoothing': 0.1,
                                    'model_params': train['model_params']}
  assert layout['eval_params'] == {'batch_size_per_gpu': 1000, 'label_smoothing': 0.0,
                                   'model_params': evaluation['model_params']}
  assert layout['base_params']['optimizer'] == train['optimizer'] == evaluation['optimizer']
  assert not set(layout['base_params']) & set(layout['train_params'])
  path = tmp_path / 'config.yaml'
  config_file.write_run_config(train, evaluation, str(path))
  raw = config_file.load_config_file(str(path))
  assert check(config_resolve.resolve(raw, 'train')) == train
  assert check(config_resolve.resolve(raw, 'eval')) == evaluation
  # Without an eval view, both views are the train view.
  alone = config_file.run_config(train)
  assert alone == {'base_params': config_file.run_config(train, train)['base_params'],
                   'train_params': {}, 'eval_params': {}}


# ---------------------------------------------------------------------------
# format_error

def test_format_error():
  assert config_file.format_error(ConfigError("model: unknown model 'x'")) == (
      "error: model: unknown model 'x'")
  assert config_file.format_error(ValueError('bad\nvalue')) == 'error: ValueError: bad value'
  assert config_file.format_error(KeyError()) == 'error: KeyError'


# ---------------------------------------------------------------------------
# load_configs: a run.py mode's views in one call

def test_load_configs_gives_the_validated_views_of_a_mode(tmp_path):
  base = '\n'.join(f'  {key}: {value!r}' for key, value in base_config().items())
  path = write(tmp_path, 'run.yaml', f'base_params:\n{base}\neval_params:\n  batch_size_per_gpu: 64\n')
  both = config_lib.load_configs(path, 'train_eval', ['num_epochs=3'], REGISTRIES)
  assert (both['train']['batch_size_per_gpu'], both['eval']['batch_size_per_gpu']) == (32, 64)
  assert both['train']['num_epochs'] == both['eval']['num_epochs'] == 3
  raw = config_file.load_config_file(path)
  assert both['train'] == check(config_resolve.resolve(raw, 'train', ['num_epochs=3']))
  # An export serves the model as it is evaluated.
  export = config_lib.load_configs(path, 'export', (), REGISTRIES)
  assert export['train'] is None and export['eval']['batch_size_per_gpu'] == 64
  # Without construct, only the owners' checks are left out.
  typo = ['optimizer_params.momentun=0.9']
  assert config_lib.load_configs(path, 'train', typo, REGISTRIES, construct=False)['train'][
      'optimizer_params'] == {'momentum': 0.9, 'momentun': 0.9}
  with pytest.raises(ConfigError, match='^optimizer_params.momentun: unknown argument of SGD'):
    config_lib.load_configs(path, 'train', typo, REGISTRIES)
  with pytest.raises(ConfigError, match='^optimizer_params.learning_rate: not allowed'):
    config_lib.load_configs(path, 'train', ['optimizer_params.learning_rate=1'], REGISTRIES,
                     construct=False)


def test_a_lazy_entry_declares_its_params_or_is_checked_once_loaded():
  registries = dict(REGISTRIES)
  models = Registry('model')
  models.register_lazy('declared', 'tests.framework.config.test_config:fake_model',
                       PARAMS=fake_model.PARAMS)
  models.register_lazy('undeclared', 'tests.framework.config.test_config:fake_model')
  registries['model'] = models
  bad = {'width': 16, 'dept': 50}
  message = ('model_params.dept: unknown key (did you mean model_params.depth?); '
             'allowed keys: block, depth, initializer, width')
  for construct in (False, True):
    assert error_of(config_lib.validate, base_config(model='declared', model_params=bad), registries,
                    'train', construct) == message
  assert not models.is_loaded('declared')
  unchecked = config_lib.validate(base_config(model='undeclared', model_params=bad), registries,
                           construct=False)
  assert unchecked['model_params'] == bad and not models.is_loaded('undeclared')
  assert error_of(config_lib.validate, base_config(model='undeclared', model_params=bad),
                  registries) == message
  assert models.is_loaded('undeclared')


# --- the learning rate as a rule of the global batch (lr_scaling) -----------------------------

def test_lr_scaling_resolves_the_rate_from_the_global_batch():
  linear = check(base_config(lr_policy_params={}, lr_scaling={'base_learning_rate': 0.1},
                             batch_size_per_gpu=128, iter_size=2))
  # One worker at validation: B = 128 x 1 x 2 = 256, the reference batch.
  assert linear['lr_policy_params']['learning_rate'] == pytest.approx(0.1)
  assert linear['lr_scaling'] == {'rule': 'linear', 'base_learning_rate': 0.1,
                                  'reference_batch': 256}
  # Four workers: B = 1024, 0.1 x 1024/256.
  scaled, how = config_lib.scale_learning_rates({'train': linear, 'eval': None}, 4)
  assert scaled['train']['lr_policy_params']['learning_rate'] == pytest.approx(0.4)
  assert scaled['eval'] is None
  assert 'global batch 1024 = 128 x 4 worker(s) x iter_size 2' in how
  # The square-root rule of the LAMB/LARS recipes: 2.0 x sqrt(8192/256) = 11.3137...
  sqrt = check(base_config(lr_policy_params={}, batch_size_per_gpu=8192,
                           lr_scaling={'rule': 'sqrt', 'base_learning_rate': 2.0}))
  assert sqrt['lr_policy_params']['learning_rate'] == pytest.approx(2.0 * 32 ** 0.5)
  assert linear == check(base_config(lr_policy_params={}, lr_scaling={'base_learning_rate': 0.1},
                                     batch_size_per_gpu=128, iter_size=2))  # inputs untouched


def test_lr_scaling_and_a_rate_in_the_same_config_is_one_error():
  with pytest.raises(ConfigError, match=r'^lr_policy_params.learning_rate: lr_scaling gives'):
    check(base_config(lr_scaling={'base_learning_rate': 0.1}))
  with pytest.raises(ConfigError, match=r'^lr_scaling.rule: '):
    check(base_config(lr_policy_params={},
                      lr_scaling={'base_learning_rate': 0.1, 'rule': 'cubic'}))


def test_a_rate_given_on_the_command_line_replaces_the_rule():
  raw = {'base_params': base_config(lr_policy_params={}, lr_scaling={'base_learning_rate': 0.1})}
  for override in ('lr_policy_params.learning_rate=0.03', 'lr_policy_params={learning_rate: 0.03}'):
    resolved = config_resolve.resolve(raw, 'train', [override])
    assert resolved['lr_scaling'] is None
    assert check(resolved)['lr_policy_params']['learning_rate'] == 0.03
  # A rule given beside it is kept, and the two together are refused.
  both = config_resolve.resolve(raw, 'train', ['lr_policy_params.learning_rate=0.03',
                                    'lr_scaling.base_learning_rate=0.2'])
  with pytest.raises(ConfigError, match='give one of them'):
    check(both)


# ---------------------------------------------------------------------------
# The user's own code: "package.module:name", the config's directory, import_paths

USER_CODE = """
    from core.params import Param
    from data.base import DataLayer

    class FolderData(DataLayer):
      TASK = 'image_classification'
      PARAMS = {'root': Param(str, 'here')}

    def net(params, image_shape, num_classes):
      return params
    net.PARAMS = {'width': Param(int, 8)}

    def flat_lr(global_step, learning_rate):
      return learning_rate
    """


@pytest.fixture
def fresh_path(monkeypatch):
  """sys.path and the user's modules restored after the test."""
  monkeypatch.setattr(sys, 'path', list(sys.path))
  for name in ('user_code', 'exp_config'):
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_a_yaml_config_names_code_beside_it(tmp_path, fresh_path):  # pylint: disable=unused-argument
  write(tmp_path, 'user_code.py', USER_CODE)
  path = write(tmp_path, 'c.yaml', """
      base_params:
        model: user_code:net
        data_layer: user_code:FolderData
        batch_size_per_gpu: 8
        max_steps: 3
        optimizer: Momentum
        lr_policy: user_code:flat_lr
        lr_policy_params: {learning_rate: 0.1}
      """)
  config = config_lib.load_configs(path, 'train', registries=REGISTRIES)['train']
  # The declared PARAMS of the user's objects fill their defaults.
  assert config['model_params'] == {'width': 8}
  assert config['data_layer_params'] == {'root': 'here'}
  assert config['model'] == 'user_code:net' and config['import_paths'] == []
  assert tasks.task_of(config, REGISTRIES) == 'image_classification'
  # The run directory records where the code is imported from.
  assert config_file.code_roots(config) == [str(tmp_path)]
  assert config_file.with_code_roots(config)['import_paths'] == [str(tmp_path)]


def test_a_name_that_does_not_import_is_one_line(tmp_path, fresh_path):  # pylint: disable=unused-argument
  write(tmp_path, 'user_code.py', USER_CODE)
  path = write(tmp_path, 'c.yaml', """
      base_params: {model: resnet50, model_params: {width: 1}, data_layer: user_code:Folder,
                    batch_size_per_gpu: 8, max_steps: 3, optimizer: Momentum,
                    lr_policy_params: {learning_rate: 0.1}}
      """)
  assert error_of(config_lib.load_configs, path, 'train', (), REGISTRIES) == (
      f"data_layer: data_layer 'user_code:Folder': module 'user_code' ({tmp_path}/user_code.py) "
      "has no attribute 'Folder'")


def test_import_paths_are_relative_to_the_config_file(tmp_path, fresh_path):  # pylint: disable=unused-argument
  (tmp_path / 'src').mkdir()
  write(tmp_path, 'src/user_code.py', USER_CODE)
  (tmp_path / 'configs').mkdir()
  path = write(tmp_path, 'configs/c.yaml', """
      base_params:
        import_paths: [../src]
        model: user_code:net
        data_layer: fake
        batch_size_per_gpu: 8
        max_steps: 3
        optimizer: Momentum
        lr_policy_params: {learning_rate: 0.1}
      """)
  config = config_lib.load_configs(path, 'train', registries=REGISTRIES)['train']
  assert config['import_paths'] == [str(tmp_path / 'src')]
  assert str(tmp_path / 'configs') in sys.path and str(tmp_path / 'src') in sys.path
  assert config_file.with_code_roots(config)['import_paths'] == [str(tmp_path / 'src')]
  bad = write(tmp_path, 'configs/bad.yaml', """
      base_params: {import_paths: [../nowhere]}
      """)
  assert error_of(config_file.load_config_file, bad) == (
      f"base_params.import_paths.0: '../nowhere' is not a directory ({tmp_path}/nowhere); "
      'import_paths lists directories to import your own modules from')


def test_a_python_config_imports_modules_beside_it(tmp_path, fresh_path):  # pylint: disable=unused-argument
  write(tmp_path, 'user_code.py', USER_CODE)
  path = write(tmp_path, 'exp_config.py', """
      import user_code

      class OwnData(user_code.FolderData):
        pass

      base_params = {'model': user_code.net, 'data_layer': OwnData, 'batch_size_per_gpu': 8,
                     'max_steps': 3, 'optimizer': 'Momentum',
                     'lr_policy_params': {'learning_rate': 0.1}}
      """)
  config = config_lib.load_configs(path, 'train', registries=REGISTRIES)['train']
  recorded = config_file.with_code_roots(config_file.plain(config))
  # Written as import paths that import again, from the directory recorded beside them.
  assert (recorded['model'], recorded['data_layer']) == ('user_code:net', 'exp_config:OwnData')
  assert recorded['import_paths'] == [str(tmp_path)]
  reloaded = load_attribute('exp_config:OwnData')
  assert reloaded.__mro__[1].__name__ == 'FolderData' and list(reloaded.PARAMS) == ['root']


def test_the_framework_and_installed_packages_are_no_code_roots():
  config = {'model': 'models.resnet:build_resnet50', 'lr_policy': 'math:sqrt',
            'model_params': {'initializer': 'keras.initializers:HeNormal'}}
  assert config_file.code_roots(config) == []


def test_an_unreadable_yaml_config_is_one_line(tmp_path, monkeypatch):
  path = write(tmp_path, 'c.yaml', 'base_params: {}\n')

  def refuse(name, *args, **kwargs):
    raise PermissionError(13, 'Permission denied', name)

  # Root reads any file whatever its mode, so the refusal is the file system's answer made by hand.
  monkeypatch.setattr(config_file, 'open', refuse, raising=False)
  assert error_of(config_file.load_config_file, path) == f'{path}: cannot be read (Permission denied)'


@pytest.mark.parametrize('rate', [float('inf'), float('nan'), 0.0])
def test_an_lr_scaling_base_rate_must_be_a_finite_positive_number(rate):
  # .inf passed --print_config and failed later, far from the key.
  message = error_of(check, base_config(lr_policy_params={},
                                        lr_scaling={'base_learning_rate': rate}))
  assert message == (f'lr_scaling.base_learning_rate: must be a finite number > 0, got {rate!r}')
