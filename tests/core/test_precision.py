"""dtype names: Keras' policy names everywhere, OpenSeq2Seq's mixed, and the float16-on-CPU warning."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from framework import config as cfg
from core import precision
from optimizers import openseq2seq as opt_lib
from tests.framework.test_config import base_config
from tests.framework.test_config import check
from tests.test_run import ROOT
from tests.test_run import run

KERAS_POLICIES = ['float32', 'float16', 'bfloat16', 'mixed_float16', 'mixed_bfloat16']


@pytest.mark.parametrize('name', KERAS_POLICIES + ['mixed'])
def test_every_policy_name_is_accepted_by_the_config_and_selects_that_policy(name):
  raw = {'base_params': base_config()}
  resolved = cfg.resolve(raw, 'train', [f'dtype={name}'])
  assert check(resolved)['dtype'] == name
  policy = keras.mixed_precision.Policy(precision.policy_name(name))
  assert policy.name == ('mixed_float16' if name == 'mixed' else name)


@pytest.mark.parametrize('dtype, masters', [
    (tf.float32, False), ('float16', False), ('bfloat16', False), ('mixed', True),
    ('mixed_float16', True), ('mixed_bfloat16', True)])
def test_optimize_loss_takes_the_same_names(dtype, masters):
  opt_lib.clear_pipelines()
  var = keras.Variable(np.array([1.0, 2.0], np.float16), dtype='float16', name='w')
  opt_lib.optimize_loss(lambda: tf.reduce_sum(tf.square(var)), 'SGD', {'learning_rate': 0.25},
                        None, var_list=[var], dtype=dtype)
  np.testing.assert_allclose(var.numpy(), [0.5, 1.0])
  pipeline = opt_lib.find_pipeline(var_list=[var])
  assert (pipeline.masters is not None) == masters
  opt_lib.clear_pipelines()


def test_mixed_and_mixed_float16_are_the_same_optimize_loss_argument():
  opt_lib.clear_pipelines()
  var = keras.Variable(np.array([1.0], np.float32), name='w')
  for dtype in ('mixed', 'mixed_float16'):
    opt_lib.optimize_loss(lambda: tf.reduce_sum(var), 'SGD', {'learning_rate': 0.5}, None,
                          var_list=[var], dtype=dtype)
  assert int(opt_lib.find_pipeline(var_list=[var]).global_step.numpy()) == 2
  with pytest.raises(ValueError, match=r"dtype: 'float64' is not allowed; allowed: 'float32', "
                                       r"'float16', 'bfloat16', 'mixed_float16', 'mixed_bfloat16'"):
    opt_lib.optimize_loss(lambda: tf.reduce_sum(var), 'SGD', {'learning_rate': 0.5}, None,
                          var_list=[keras.Variable([1.0])], dtype=tf.float64)
  opt_lib.clear_pipelines()


@pytest.mark.parametrize('dtype, gpu, flags, warns', [
    ('mixed_float16', False, set(), True),
    ('mixed', False, {'avx512f', 'avx512_bf16'}, True),
    ('float16', False, set(), True),
    ('mixed_float16', False, {'avx512_fp16'}, False),
    ('mixed_float16', False, {'amx_fp16'}, False),
    ('mixed_float16', True, set(), False),
    ('float32', False, set(), False),
    ('mixed_bfloat16', False, set(), False),
    ('bfloat16', False, set(), False),
])
def test_float16_warning_only_where_float16_is_emulated(dtype, gpu, flags, warns):
  message = precision.float16_cpu_warning(dtype, gpu, flags)
  assert (message is not None) == warns
  if warns:
    assert '\n' not in message and message.startswith(f'warning: dtype {dtype}: ')
    assert 'no float16 arithmetic' in message and 'float32' in message


@pytest.mark.slow
def test_run_py_prints_the_warning_once_for_float16_on_this_cpu():
  with open('/proc/cpuinfo', encoding='utf-8') as f:
    flags = set(f.read().split())
  emulated = not ({'avx512_fp16', 'amx_fp16'} & flags) and not tf.config.list_physical_devices('GPU')
  result = run('--config', os.path.join(ROOT, 'configs', 'resnet50_lars.py'), '--mode',
               'benchmark', '--bench_steps', '1', '--set', 'batch_size_per_gpu=2',
               '--set', 'bench_warmup_steps=1', '--set', 'dtype=mixed_float16',
               '--set', 'data_layer_params.image_shape=[32, 32, 3]')
  warnings = [l for l in result.stderr.splitlines() if l.startswith('warning: dtype mixed_float16')]
  assert len(warnings) == (1 if emulated else 0), result.stderr
  assert any(l.startswith('benchmark:') for l in result.stdout.splitlines())


@pytest.mark.parametrize('name, hint', [
    ('flaot16', " (did you mean 'float16'?)"), ('Mixed_Float16', " (did you mean 'mixed_float16'?)"),
    ('float64', ''), ('int32', ''), ('bfloat8', ''), ('half', ''),
])
def test_check_dtype_suggests_a_spelling_only_for_a_misspelling(name, hint):
  with pytest.raises(ValueError) as info:
    precision.check_dtype(name, 'model.dtype')
  assert str(info.value) == (
      f"model.dtype: {name!r} is not allowed{hint}; allowed: 'float32', 'float16', 'bfloat16', "
      "'mixed_float16', 'mixed_bfloat16', 'mixed'")
  assert precision.check_dtype('mixed', 'model.dtype') == 'mixed'
