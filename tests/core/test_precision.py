"""dtype names: Keras' policy names everywhere, OpenSeq2Seq's mixed, and the float16-on-CPU warning."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from core import precision
from framework.config import config_resolve
from optimizers.compat import openseq2seq as opt_lib
from tests.framework.config.test_config import base_config
from tests.framework.config.test_config import check
from tests.test_run import ROOT
from tests.test_run import run

KERAS_POLICIES = ['float32', 'float16', 'bfloat16', 'mixed_float16', 'mixed_bfloat16']


@pytest.mark.parametrize('name', KERAS_POLICIES + ['mixed'])
def test_every_policy_name_is_accepted_by_the_config_and_selects_that_policy(name):
  raw = {'base_params': base_config()}
  resolved = config_resolve.resolve(raw, 'train', [f'dtype={name}'])
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
      "'mixed_float16', 'mixed_bfloat16', 'mixed', 'auto'")
  assert precision.check_dtype('mixed', 'model.dtype') == 'mixed'


# /proc/cpuinfo as Linux writes it, cut to the lines cpu_info reads (and one it skips).
CPUINFO = """processor\t: 0
vendor_id\t: {vendor}
model name\t: {model}
flags\t\t: fpu sse2 avx2 avx512f {flags}
bogomips\t: 4890.85
"""


def fake_cpuinfo(tmp_path, flags, model='Intel(R) Xeon(R) CPU @ 2.20GHz', vendor='GenuineIntel'):
  path = tmp_path / 'cpuinfo'
  path.write_text(CPUINFO.format(vendor=vendor, model=model, flags=flags))
  return precision.cpu_info(str(path))


def test_cpu_info_reads_the_model_and_flags_and_survives_a_missing_file(tmp_path):
  model, flags = fake_cpuinfo(tmp_path, 'avx512_bf16 amx_tile', model='AMD EPYC 9B14')
  assert model == 'AMD EPYC 9B14'
  assert flags == {'fpu', 'sse2', 'avx2', 'avx512f', 'avx512_bf16', 'amx_tile'}
  assert precision.cpu_info(str(tmp_path / 'none')) == ('unknown CPU', set())


@pytest.mark.parametrize('flags, dtype, why', [
    ('', 'float32', 'this CPU has no avx512_bf16/amx_bf16; mixed_bfloat16 would run about 2.6x '
                    'slower here'),
    ('avx512_fp16 amx_tile', 'float32', 'this CPU has no avx512_bf16/amx_bf16; '),
    ('avx512_bf16', 'mixed_bfloat16', 'this CPU computes bfloat16 natively: avx512_bf16'),
    ('amx_bf16 amx_tile', 'mixed_bfloat16', 'this CPU computes bfloat16 natively: amx_bf16'),
    ('avx512_bf16 amx_bf16', 'mixed_bfloat16',
     'this CPU computes bfloat16 natively: avx512_bf16/amx_bf16'),
])
def test_auto_on_a_cpu_follows_its_bfloat16_flags(tmp_path, flags, dtype, why):
  chosen, line = precision.auto_dtype([], fake_cpuinfo(tmp_path, flags)[1])
  assert chosen == dtype
  assert line.startswith(f'dtype auto: {dtype} ({why}') and line.endswith(')')
  assert '\n' not in line


@pytest.mark.parametrize('gpus, dtype, line', [
    ([('NVIDIA A100-SXM4-40GB', (8, 0))], 'mixed_bfloat16',
     'dtype auto: mixed_bfloat16 (GPU NVIDIA A100-SXM4-40GB: compute capability 8.0, which '
     'computes bfloat16 natively)'),
    ([('NVIDIA H100', (9, 0)), ('NVIDIA H100', (9, 0))], 'mixed_bfloat16',
     'dtype auto: mixed_bfloat16 (GPU NVIDIA H100: compute capability 9.0, which computes '
     'bfloat16 natively)'),
    ([('Tesla V100-SXM2-16GB', (7, 0))], 'float32',
     'dtype auto: float32 (GPU Tesla V100-SXM2-16GB has compute capability 7.0, below the 8.0 of '
     'native bfloat16; mixed_float16 with loss scaling is the fast precision of such a GPU)'),
    # One slow GPU of two: the run computes on both, so it takes the precision both compute fast.
    ([('NVIDIA A100', (8, 0)), ('Tesla T4', (7, 5))], 'float32',
     'dtype auto: float32 (GPU Tesla T4 has compute capability 7.5, below the 8.0 of native '
     'bfloat16; mixed_float16 with loss scaling is the fast precision of such a GPU)'),
    ([('/physical_device:GPU:0', None)], 'float32',
     'dtype auto: float32 (GPU /physical_device:GPU:0 reports no compute capability, below the '
     '8.0 of native bfloat16; mixed_float16 with loss scaling is the fast precision of such a '
     'GPU)'),
])
def test_auto_on_gpus_follows_their_compute_capability_not_the_cpu(gpus, dtype, line):
  # The CPU's flags say the opposite of the GPUs' answer: a GPU run computes on the GPUs.
  cpu_flags = {'avx512_bf16'} if dtype == 'float32' else set()
  assert precision.auto_dtype(gpus, cpu_flags) == (dtype, line)


def test_auto_is_a_config_name_but_no_policy_until_resolved():
  resolved = config_resolve.resolve({'base_params': base_config()}, 'train', ['dtype=auto'])
  assert check(resolved)['dtype'] == 'auto'
  with pytest.raises(ValueError, match=r"^dtype: 'auto' names no policy until it is resolved "
                                       r'for the machine'):
    precision.policy_name('auto')


@pytest.mark.parametrize('dtype, variables', [
    ('float32', 'float32'), ('mixed_bfloat16', 'float32'), ('mixed_float16', 'float32'),
    ('mixed', 'float32'), ('bfloat16', 'bfloat16'), ('float16', 'float16')])
def test_the_variables_dtype_of_each_policy_is_keras_own(dtype, variables):
  assert precision.variable_dtype(dtype) == variables
  assert keras.mixed_precision.Policy(precision.policy_name(dtype)).variable_dtype == variables


@pytest.mark.parametrize('dtype, gpu, flags, warns', [
    ('mixed_bfloat16', False, set(), True),
    ('bfloat16', False, {'avx512f', 'avx512_fp16'}, True),
    ('mixed_bfloat16', False, {'avx512_bf16'}, False),
    ('mixed_bfloat16', False, {'amx_bf16'}, False),
    ('mixed_bfloat16', True, set(), False),
    ('float32', False, set(), False),
    ('mixed_float16', False, {'avx512_fp16'}, False),
])
def test_bfloat16_warning_only_where_bfloat16_is_emulated(dtype, gpu, flags, warns):
  message = precision.bfloat16_cpu_warning(dtype, gpu, flags)
  assert (message is not None) == warns
  assert precision.cpu_warning(dtype, gpu, flags) == message
  if warns:
    assert message == (
        f'warning: dtype {dtype}: computing in bfloat16 on this CPU, which has no bfloat16 '
        'arithmetic (no AVX512-BF16/AMX-BF16), so TensorFlow emulates it: the CMUdict '
        'Transformer trained 2.6x slower in mixed_bfloat16 than in float32 (171 vs 442 '
        'words/sec on an Intel Xeon without AVX512-BF16, 2 cores); use float32 (or dtype auto) '
        'on this CPU')
  # The measured factor the messages quote is the measurement's own ratio.
  assert f'{442 / 171:.1f}' == '2.6'


def test_one_warning_line_for_emulated_half_precision(monkeypatch, capsys):
  monkeypatch.setattr(precision, 'cpu_info', lambda: ('Intel Xeon', {'avx512f'}))
  for dtype in ('mixed_bfloat16', 'mixed_float16', 'float32'):
    precision.warn_emulated_on_cpu(dtype, has_gpu=False)
  err = capsys.readouterr().err.splitlines()
  assert [line.split(': computing in ')[0] for line in err] == [
      'warning: dtype mixed_bfloat16', 'warning: dtype mixed_float16']
