"""``dtype: auto`` for a run: the GPUs TensorFlow reports, the line, config.yaml, and a resume elsewhere."""

import argparse

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml

from core import precision
from framework.config import config_file
from framework.config import config_resolve
from framework.engines import hardware
from framework.run import launch
from framework.run import resume
from framework.run import rundir
from optimizers.pipeline import GradientPipeline
from optimizers.settings import UpdateSettings
from tests.framework.config.test_config import base_config
from tests.framework.config.test_config import check

NO_BF16 = ('Intel(R) Xeon(R) CPU @ 2.20GHz', {'avx2', 'avx512f'})
BF16 = ('AMD EPYC 9B14', {'avx2', 'avx512f', 'avx512_bf16'})
NO_BF16_LINE = ('dtype auto: float32 (this CPU has no avx512_bf16/amx_bf16; mixed_bfloat16 would '
                'run about 2.6x slower here)')


class FakeDevice:
  def __init__(self, name):
    self.name = name


def fake_machine(monkeypatch, cpu, gpu_details=()):
  """This process sees ``cpu`` (model, flags) and GPUs whose get_device_details are ``gpu_details``."""
  devices = [FakeDevice(f'/physical_device:GPU:{i}') for i in range(len(gpu_details))]
  details = dict(zip((d.name for d in devices), gpu_details))

  def list_physical_devices(kind=None):
    return list(devices) if kind == 'GPU' else []

  def get_device_details(device):
    if details[device.name] is None:
      raise ValueError('no details')
    return details[device.name]

  monkeypatch.setattr(tf.config, 'list_physical_devices', list_physical_devices)
  monkeypatch.setattr(tf.config.experimental, 'get_device_details', get_device_details)
  monkeypatch.setattr(precision, 'cpu_info', lambda: cpu)


def test_gpus_are_named_with_their_compute_capability(monkeypatch):
  fake_machine(monkeypatch, BF16, [
      {'device_name': 'NVIDIA A100-SXM4-40GB', 'compute_capability': (8, 0)},
      {},  # a device that reports nothing
      None])  # one whose details cannot be read
  assert hardware.gpus() == [('NVIDIA A100-SXM4-40GB', (8, 0)), ('/physical_device:GPU:1', None),
                             ('/physical_device:GPU:2', None)]


@pytest.mark.parametrize('cpu, gpu_details, dtype', [
    (NO_BF16, [], 'float32'),
    (BF16, [], 'mixed_bfloat16'),
    (NO_BF16, [{'device_name': 'NVIDIA A100', 'compute_capability': (8, 0)}], 'mixed_bfloat16'),
    (BF16, [{'device_name': 'Tesla V100', 'compute_capability': (7, 0)}], 'float32'),
])
def test_auto_resolves_for_the_machine_and_other_names_stay(monkeypatch, cpu, gpu_details,
                                                            dtype):
  fake_machine(monkeypatch, cpu, gpu_details)
  chosen, line = hardware.resolve_dtype('auto')
  assert chosen == dtype and line.startswith(f'dtype auto: {dtype} (')
  for name in ('float32', 'mixed_bfloat16', 'mixed'):
    assert hardware.resolve_dtype(name) == (name, None)


def test_set_precision_resolves_auto_for_a_scripts_trainer_and_warns_once(monkeypatch, capsys):
  fake_machine(monkeypatch, NO_BF16)
  try:
    assert hardware.set_precision('auto') == 'float32'
    assert keras.mixed_precision.global_policy().name == 'float32'
    out = capsys.readouterr()
    assert out.out == NO_BF16_LINE + '\n' and out.err == ''
    # Asked for explicitly on the same CPU: the policy it asks for, and one warning.
    assert hardware.set_precision('mixed_bfloat16') == 'mixed_bfloat16'
    assert keras.mixed_precision.global_policy().name == 'mixed_bfloat16'
    out = capsys.readouterr()
    assert out.out == '' and len(out.err.splitlines()) == 1
    assert out.err.startswith('warning: dtype mixed_bfloat16: computing in bfloat16 on this CPU')
    # Another worker than the chief: the same policy, nothing said.
    assert hardware.set_precision('mixed_bfloat16', warn=False) == 'mixed_bfloat16'
    assert capsys.readouterr() == ('', '')
  finally:
    keras.mixed_precision.set_dtype_policy('float32')


class Log:
  def __init__(self):
    self.lines = []

  def log(self, line):
    self.lines.append(line)


def views(dtype='auto', eval_dtype='auto'):
  return {'train': check(base_config(dtype=dtype)), 'eval': check(base_config(dtype=eval_dtype))}


def test_launch_resolves_every_view_once_and_says_it_in_one_line(monkeypatch):
  fake_machine(monkeypatch, NO_BF16)
  log = Log()
  configs, line = launch.resolve_dtype(views(), log)
  assert configs['train']['dtype'] == configs['eval']['dtype'] == 'float32'
  assert line == NO_BF16_LINE and log.lines == [NO_BF16_LINE]
  # A config that names its dtype is left as it is, and nothing is said.
  log = Log()
  configs, line = launch.resolve_dtype(dict(views('mixed_bfloat16'), eval=None), log)
  assert configs['train']['dtype'] == 'mixed_bfloat16' and configs['eval'] is None
  assert line is None and log.lines == []


def test_config_yaml_records_the_dtype_the_run_computes_in(monkeypatch, tmp_path):
  fake_machine(monkeypatch, BF16)
  configs, line = launch.resolve_dtype(views(), Log())
  options = argparse.Namespace(config=None)
  resume.record_configs(options, configs, str(tmp_path), 0, line)
  text = (tmp_path / 'config.yaml').read_text()
  assert text.splitlines()[0] == (
      '# dtype auto: mixed_bfloat16 (this CPU computes bfloat16 natively: avx512_bf16); the '
      'config asked for dtype: auto, this file records the dtype the run computes in')
  saved = yaml.safe_load(text)
  assert saved['base_params']['dtype'] == 'mixed_bfloat16'
  assert 'dtype' not in (saved.get('train_params') or {}) and 'dtype' not in (
      saved.get('eval_params') or {})
  assert (tmp_path / 'config-0.yaml').read_text() == text
  # Read back as a config, it asks for what the run used, on any machine.
  again = config_resolve.resolve(config_file.load_config_file(str(tmp_path / 'config.yaml')), 'train')
  assert check(again)['dtype'] == 'mixed_bfloat16'


def test_a_train_only_runs_eval_view_read_again_records_the_trains_dtype(monkeypatch, tmp_path):
  fake_machine(monkeypatch, NO_BF16)
  configs, line = launch.resolve_dtype(dict(views(), eval=None), Log())
  # The eval view recorded beside a train-only run is the config file's, read again: auto.
  monkeypatch.setattr(resume, 'recorded_eval_view', lambda options, configs: views()['eval'])
  resume.record_configs(argparse.Namespace(config=None), configs, str(tmp_path), 0, line)
  saved = yaml.safe_load((tmp_path / 'config.yaml').read_text())
  assert saved['base_params']['dtype'] == 'float32'
  assert 'dtype' not in (saved.get('eval_params') or {})


@pytest.mark.parametrize('saved, new, free', [
    ('mixed_bfloat16', 'float32', True),
    ('float32', 'mixed_bfloat16', True),
    ('mixed_float16', 'mixed_bfloat16', True),
    ('mixed', 'float32', True),
    ('float32', 'float16', False),
    ('bfloat16', 'mixed_bfloat16', False),
    ('float32', 'auto', False),  # a name the run never computes in is compared as it is
])
def test_a_dtype_change_that_keeps_the_variables_is_free_on_resume(saved, new, free):
  fixed, changed = rundir.config_changes({'dtype': saved, 'max_steps': 10},
                                         {'dtype': new, 'max_steps': 10})
  assert (changed, fixed) == (([('dtype', saved, new)], []) if free
                              else ([], [('dtype', saved, new)]))


def test_resuming_on_a_machine_that_resolves_auto_otherwise_says_so(monkeypatch, tmp_path,
                                                                     capsys):
  # Trained where auto chose mixed_bfloat16 ...
  fake_machine(monkeypatch, BF16)
  configs, line = launch.resolve_dtype(views(), Log())
  resume.record_configs(argparse.Namespace(config=None), configs, str(tmp_path), 0, line)
  # ... resumed on a CPU without bfloat16: float32, said, and the checkpoints taken as they are.
  fake_machine(monkeypatch, NO_BF16)
  configs, _ = launch.resolve_dtype(views(), Log())
  capsys.readouterr()
  resume.check_resume_config(str(tmp_path), configs['train'])
  assert capsys.readouterr().out == (
      "resuming with changed settings: dtype: 'mixed_bfloat16' -> 'float32' (the variables are "
      'float32 in both dtypes)\n')
  # A change the checkpoints cannot take is refused as before.
  with pytest.raises(launch.LaunchError, match=r"cannot take these changes: dtype: "
                                               r"'mixed_bfloat16' -> 'float16' "):
    resume.check_resume_config(str(tmp_path), check(base_config(dtype='float16')))


def checkpoint_of(policy):
  """A Dense model and its pipeline built under ``policy``, one update made; (checkpoint, model).

  The checkpoint holds what the Trainer's does: the model and the pipeline's items.
  """
  keras.mixed_precision.set_dtype_policy(policy)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  pipeline = GradientPipeline(model.trainable_variables,
                              UpdateSettings('Adam', {'learning_rate': 0.1}, dtype=policy))
  pipeline(lambda: tf.reduce_sum(tf.cast(model(tf.ones([4, 3])), tf.float32)))
  return tf.train.Checkpoint(model=model, **pipeline.checkpoint_items()), model


@pytest.mark.parametrize('trained, resumed', [('mixed_bfloat16', 'float32'),
                                              ('float32', 'mixed_bfloat16')])
def test_a_checkpoint_of_one_dtype_restores_in_the_other(tmp_path, trained, resumed):
  try:
    saved, model = checkpoint_of(trained)
    path = saved.save(str(tmp_path / 'ckpt'))
    weights = [v.numpy() for v in model.weights]
    restored, model = checkpoint_of(resumed)
    for variable in model.weights + restored.optimizer_variables:
      variable.assign(tf.zeros_like(variable))  # so that only the restore can bring them back
    restored.restore(path).assert_existing_objects_matched()
    assert int(restored.optimizer_variables[0].numpy()) == 1  # Adam's iterations: one update
    for value, variable in zip(weights, model.weights):
      assert variable.dtype == 'float32'
      np.testing.assert_array_equal(variable.numpy(), value)
  finally:
    keras.mixed_precision.set_dtype_policy('float32')
