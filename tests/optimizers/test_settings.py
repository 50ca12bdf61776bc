"""The settings the optimizers package owns: one validator each, shared by optimize_loss and the config."""

import pytest

from core.params import ConfigError
from framework import schema
from optimizers import settings


def test_larc_settings_fill_defaults_and_name_the_key_path():
  assert settings.larc_settings({'larc_eta': 0.002, 'skip_list': ('bias',)}) == {
      'larc_eta': 0.002, 'larc_mode': 'clip', 'min_update': 1e-7, 'epsilon': 1e-7,
      'skip_list': ['bias'], 'exclude_from_layer_adaptation': None}
  with pytest.raises(ConfigError) as info:
    settings.larc_settings({'larc_eta': 1e-3, 'epsilon': -1}, 'x.larc')
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
    settings.check_larc_params(params)
  assert str(info.value) == message
  assert not isinstance(info.value, ConfigError)


def test_summaries_and_compression():
  assert settings.check_summaries(('gradients', 'loss_scale')) == ['gradients', 'loss_scale']
  assert settings.check_summaries(None) == []
  with pytest.raises(ValueError, match=r"^summaries: unknown summary 'weights'; allowed: "
                                       r'learning_rate, gradients, '):
    settings.check_summaries(['learning_rate', 'weights'])
  assert settings.check_compression(None) == 'none'
  assert settings.check_compression('fp16') == 'fp16'
  with pytest.raises(ConfigError, match=r"^horovod_params.compression: 'FP16' is not allowed "
                                        r"\(did you mean 'fp16'\?\); allowed: 'none', 'fp16'$"):
    settings.check_compression('FP16')


def test_the_config_schema_uses_the_owners_declarations():
  assert schema.SCHEMA['larc_params'].schema is settings.LARC_SCHEMA
  assert schema.SCHEMA['horovod_params'].schema is settings.HOROVOD_SCHEMA
  assert schema.SCHEMA['summaries'].item is settings.SUMMARY
