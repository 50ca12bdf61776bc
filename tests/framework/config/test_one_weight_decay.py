"""One source of weight decay per run: the model's L2 loss or the optimizer's own decay, not both."""

import os

import pytest

from core.params import ConfigError
from framework.config import validation as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LARS_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')
SGD_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py')
OWN_DEFAULT = {'LARS': 1e-4, 'LAMB': 0.0}


def train_view(path, *overrides):
  return config_lib.load_configs(path, 'train', list(overrides), construct=False)['train']


def decays(config):
  """(the model's L2 coefficient, the optimizer's decay) the run trains with."""
  optimizer = config['optimizer']
  own = config['optimizer_params'].get('weight_decay')
  if own is None:
    own = OWN_DEFAULT.get(optimizer, 0.0)
  return config['model_params']['weight_decay'], own


@pytest.mark.parametrize('path, expected', [
    ('fashion_mnist_lars.py', (0.0, 5e-4)),
    ('fashion_mnist_sgd.py', (5e-4, 0.0)),
    ('resnet50_lars.py', (0.0, 2e-4)),
    ('resnet50_lars.yaml', (0.0, 2e-4)),
    ('large_batch/lars.py', (0.0, 5e-4)),
    ('large_batch/lars_8k.py', (0.0, 5e-4)),
    ('large_batch/lamb.py', (0.0, 0.01)),
    ('large_batch/sgd.py', (5e-4, 0.0)),
])
def test_the_shipped_configs_keep_their_decay(path, expected):
  assert decays(train_view(os.path.join(ROOT, 'configs', path))) == expected


def test_by_default_the_optimizer_that_decays_weights_is_the_source():
  # Neither given: LARS's own 1e-4, not that plus the model's default 1e-4.
  config = train_view(LARS_CONFIG, 'model_params={depth: 8}', 'optimizer_params={momentum: 0.9}')
  assert decays(config) == (0.0, 1e-4) and 'weight_decay' not in config['optimizer_params']
  # An optimizer without its own decay keeps the model's default L2 ...
  assert decays(train_view(SGD_CONFIG, 'model_params={depth: 8}')) == (1e-4, 0.0)
  # ... unless it is given Keras' weight_decay.
  assert decays(train_view(SGD_CONFIG, 'model_params={depth: 8}',
                           'optimizer_params.weight_decay=2e-4')) == (0.0, 2e-4)


def test_a_model_decay_given_turns_the_optimizers_default_off():
  config = train_view(LARS_CONFIG, 'model_params={depth: 8, weight_decay: 5e-4}',
                      'optimizer_params={momentum: 0.9}')
  assert decays(config) == (5e-4, 0.0) and config['optimizer_params']['weight_decay'] == 0.0
  # Recorded so (the rate as the number lr_scaling gave), it resolves to the same again.
  recorded = dict(config, lr_scaling=None)
  assert config_lib.validate(recorded, config_lib.default_registries(), construct=False) == recorded


def test_two_sources_given_at_once_is_one_line():
  with pytest.raises(ConfigError) as info:
    train_view(LARS_CONFIG, 'model_params.weight_decay=1e-4')
  assert str(info.value) == (
      'model_params.weight_decay: 0.0001 given together with optimizer_params.weight_decay: '
      "0.0005; a run takes one source of weight decay (the L2 loss of the model, or the "
      "optimizer's own): set the other to 0")


def test_muons_two_decays_are_one_source():
  # Muon decays its orthogonalized matrices by weight_decay and its AdamW
  # fallback's variables by adam_weight_decay: a model decay turns both off.
  muon = ('optimizer=Muon', 'optimizer_params={}', 'model_params={depth: 8}')
  config = train_view(SGD_CONFIG, *muon)
  assert config['model_params']['weight_decay'] == 0.0 and config['optimizer_params'] == {}
  config = train_view(SGD_CONFIG, *muon, 'model_params.weight_decay=5e-4')
  assert config['optimizer_params'] == {'weight_decay': 0.0, 'adam_weight_decay': 0.0}
  # Only the fallback's given: the kernels keep none, as the config says.
  config = train_view(SGD_CONFIG, *muon, 'model_params.weight_decay=5e-4',
                      'optimizer_params.adam_weight_decay=0')
  assert config['optimizer_params'] == {'weight_decay': 0.0, 'adam_weight_decay': 0}
  with pytest.raises(ConfigError, match=r'^model_params.weight_decay: 0.0005 given together with '
                                        r'optimizer_params.adam_weight_decay: 0.01; a run takes '
                                        r'one source'):
    train_view(SGD_CONFIG, *muon, 'model_params.weight_decay=5e-4',
               'optimizer_params.adam_weight_decay=0.01')


L2 = ('regularizer=l2', 'regularizer_params.scale=1e-4')
TWO_SOURCES = ("; a run takes one source of weight decay (the L2 loss of the regularizer, or the "
               "optimizer's own): set {names} to 0, or drop the regularizer")


@pytest.mark.parametrize('overrides, decay, names', [
    # The optimizer's own default (LARS 1e-4) counts as much as a given one.
    (('optimizer_params={momentum: 0.9}',),
     "LARS's own weight decay (optimizer_params.weight_decay, 0.0001 by default)",
     'optimizer_params.weight_decay'),
    ((), 'optimizer_params.weight_decay: 0.0005', 'optimizer_params.weight_decay'),
    # AdamW (TF 1's AdamWOptimizer) has no default: its decay is always given.
    (('optimizer=AdamW', 'optimizer_params={weight_decay: 0.004}'),
     'optimizer_params.weight_decay: 0.004', 'optimizer_params.weight_decay'),
    (('optimizer=LAMB', 'optimizer_params={weight_decay: 0.01}'),
     'optimizer_params.weight_decay: 0.01', 'optimizer_params.weight_decay'),
    # Keras' weight_decay given to an optimizer without its own decay.
    (('optimizer=Adam', 'optimizer_params={weight_decay: 0.001}'),
     'optimizer_params.weight_decay: 0.001', 'optimizer_params.weight_decay'),
    (('optimizer=Muon', 'optimizer_params={}'),
     "Muon's own weight decay (optimizer_params.weight_decay and "
     'optimizer_params.adam_weight_decay, 0.004 by default)',
     'optimizer_params.weight_decay and optimizer_params.adam_weight_decay'),
    (('optimizer=Muon', 'optimizer_params={weight_decay: 0}'),
     "Muon's own weight decay (optimizer_params.adam_weight_decay, 0.004 by default)",
     'optimizer_params.adam_weight_decay'),
])
def test_an_l2_regularizer_beside_the_optimizers_decay_is_one_line(overrides, decay, names):
  with pytest.raises(ConfigError) as info:
    train_view(LARS_CONFIG, *L2, *overrides)
  assert str(info.value) == (
      f'regularizer: l2 (regularizer_params.scale: 0.0001) given together with {decay}'
      + TWO_SOURCES.format(names=names))


@pytest.mark.parametrize('overrides', [
    ('optimizer_params.weight_decay=0',),
    ('optimizer=LAMB', 'optimizer_params={}'),  # LAMB's own default is 0
    ('optimizer=Momentum', 'optimizer_params={momentum: 0.9}'),
    ('optimizer=Muon', 'optimizer_params={weight_decay: 0, adam_weight_decay: 0}'),
    # A model decay given has turned LARS's default off: the optimizer decays nothing.
    ('optimizer_params={momentum: 0.9}', 'model_params.weight_decay=5e-4'),
])
def test_an_l2_regularizer_with_an_optimizer_that_decays_nothing_is_taken(overrides):
  config = train_view(LARS_CONFIG, *L2, *overrides)
  assert config['regularizer_params'] == {'scale': 1e-4}
  assert not any(config['optimizer_params'].get(name)
                 for name in ('weight_decay', 'adam_weight_decay'))


def test_an_l2_regularizer_of_scale_0_is_no_second_source():
  config = train_view(LARS_CONFIG, 'regularizer=l2', 'regularizer_params.scale=0')
  assert decays(config) == (0.0, 5e-4)


def test_no_shipped_config_gives_two_sources():
  # The config check sweep.py runs before any point, over every shipped config's modes.
  from framework.sweep import check_configs  # pylint: disable=import-outside-toplevel
  names = sorted(os.path.relpath(os.path.join(d, n), ROOT)
                 for d, _, files in os.walk(os.path.join(ROOT, 'configs')) for n in files
                 if n.endswith(('.py', '.yaml')) and n not in ('common.py', '__init__.py'))
  assert len(names) >= 14
  for name in names:
    assert check_configs.check(os.path.join(ROOT, name), 'train_eval', [[]]) == [None], name


def test_adamw_without_its_weight_decay_is_one_line():
  # TF 1's AdamWOptimizer, the name AdamW, takes weight_decay as a required argument.
  with pytest.raises(ConfigError) as info:
    train_view(LARS_CONFIG, 'optimizer=AdamW', 'optimizer_params={}')
  assert str(info.value) == 'optimizer_params.weight_decay: required argument of AdamW is missing'
