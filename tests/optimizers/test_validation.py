"""The checks of optimizers.validation: one validator per setting, shared by optimize_loss and the config."""

import pytest

from core.params import ConfigError
from framework.config import schema
from optimizers import validation


def test_larc_settings_fill_defaults_and_name_the_key_path():
  assert validation.larc_settings({'larc_eta': 0.002, 'skip_list': ('bias',)}) == {
      'larc_eta': 0.002, 'larc_mode': 'clip', 'min_update': 1e-7, 'epsilon': 1e-7,
      'skip_list': ['bias'], 'exclude_from_layer_adaptation': None}
  with pytest.raises(ConfigError) as info:
    validation.larc_settings({'larc_eta': 1e-3, 'epsilon': -1}, 'x.larc')
  assert str(info.value) == 'x.larc.epsilon: must be >= 0, got -1'
  assert (info.value.path, info.value.problem) == ('x.larc.epsilon', 'invalid')


@pytest.mark.parametrize('params, message', [
    ({'larc_eta': 0.1, 'eta': 1}, "larc_params: unknown key 'eta'; allowed keys: larc_eta, larc_mode, "
                                  'min_update, epsilon, skip_list, exclude_from_layer_adaptation'),
    ({'larc_mode': 'clip'}, 'larc_params: larc_eta is required (e.g. 0.001)'),
    ({'larc_eta': 0.1, 'larc_mode': 'cap'},
     "larc_params.larc_mode: 'cap' is not allowed; allowed: clip, scale"),
    ({'larc_eta': 0.0}, 'larc_params.larc_eta: must be > 0, got 0.0'),
    ({'larc_eta': 0.1, 'skip_list': 'bias'},
     "larc_params.skip_list: expected a list or tuple, got 'bias' (str)"),
    ([('larc_eta', 0.1)], "larc_params must be a dict, got [('larc_eta', 0.1)]"),
])
def test_optimize_loss_wording_of_the_same_larc_check(params, message):
  with pytest.raises(ValueError) as info:
    validation.check_larc_params(params)
  assert str(info.value) == message
  assert not isinstance(info.value, ConfigError)


def test_summaries_and_compression():
  assert validation.check_summaries(('gradients', 'loss_scale')) == ['gradients', 'loss_scale']
  assert validation.check_summaries(None) == []
  with pytest.raises(ValueError, match=r"^summaries: unknown summary 'weights'; allowed: "
                                       r'learning_rate, gradients, '):
    validation.check_summaries(['learning_rate', 'weights'])
  assert validation.check_compression(None) == 'none'
  assert validation.check_compression('fp16') == 'fp16'
  with pytest.raises(ConfigError, match=r"^horovod_params.compression: 'FP16' is not allowed "
                                        r"\(did you mean 'fp16'\?\); allowed: 'none', 'fp16'$"):
    validation.check_compression('FP16')


def test_the_config_schema_uses_the_owners_declarations():
  assert schema.SCHEMA['larc_params'].schema is validation.LARC_SCHEMA
  assert schema.SCHEMA['horovod_params'].schema is validation.HOROVOD_SCHEMA
  assert schema.SCHEMA['summaries'].item is validation.SUMMARY


def test_loss_scaler_params_fill_the_defaults_of_docs_math():
  # The defaults docs/math.md (loss scaling) states for each rule.
  assert validation.loss_scaler_params('BACKOFF', {'step_window': 7, 'scale_max': 1024}) == {
      'scale_min': 1.0, 'scale_max': 1024.0, 'step_factor': 2.0, 'step_window': 7}
  assert validation.check_loss_scaling('LogMax') == {
      'scale_min': 1.0, 'scale_max': 2.0 ** 14, 'log_max': 16.0, 'beta1': 0.99, 'beta2': 0.999,
      'overflow_std_dev': 3.09}
  checked = validation.check_loss_scaling('dynamic', {'growth_steps': 3, 'initial_scale': 8})
  assert checked == {'initial_scale': 8.0, 'growth_steps': 3, 'multiplier': 2.0, 'min_scale': 1.0}
  assert type(checked['initial_scale']) is float and type(checked['growth_steps']) is int
  assert validation.check_loss_scaling(128) == validation.check_loss_scaling(0.5, {}) == {}


@pytest.mark.parametrize('loss_scaling, params, message', [
    ('Backoff', {'scale_maxx': 2}, "params.scale_maxx: unknown key for the 'Backoff' algorithm "
                                   '(did you mean params.scale_max?); allowed keys: scale_max, '
                                   'scale_min, step_factor, step_window'),
    ('backoff', {'scale_min': 2.0 ** 15}, 'scale_max: must be >= scale_min (32768.0), got 16384.0'),
    ('Backoff', {'step_factor': 1}, 'step_factor: must be > 1, got 1'),
    ('Backoff', {'step_window': True}, 'step_window: expected an integer >= 1, got True'),
    ('LogMax', {'beta1': 1}, 'beta1: must be < 1.0, got 1.0'),
    ('LogMax', {'overflow_std_dev': '3'}, "overflow_std_dev: expected a number, got '3' (str)"),
    ('dynamic', {'initial_scale': 1, 'min_scale': 2}, 'initial_scale: must be >= min_scale (2.0), got 1'),
    ('dynamic', [('growth_steps', 2)], "loss_scaling_params: expected a mapping, got [('growth_steps', 2)]"),
    (8.0, {'scale_max': 16}, "loss_scaling_params: only used with Backoff, LogMax or dynamic loss "
                             "scaling, got {'scale_max': 16} with loss_scaling=8.0"),
    ('Exponential', None, "loss_scaling: unknown value 'Exponential'; allowed: a positive number, "
                          "'Backoff', 'LogMax', 'dynamic'"),
])
def test_check_loss_scaling_names_each_mistake(loss_scaling, params, message):
  with pytest.raises(ValueError) as info:
    validation.check_loss_scaling(loss_scaling, params)
  assert str(info.value) == message
