"""One exclusion vocabulary for LARS, LAMB and LARC, each spelling checked against numpy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from models import MODELS
from optimizers import exclusions
from optimizers import stages
from optimizers import validation
from optimizers.lamb import LAMB
from optimizers.lars import LARSOptimizer
from optimizers.pipeline import GradientPipeline
from optimizers.settings import UpdateSettings
from tests.optimizers.test_lamb import numpy_lamb
from tests.optimizers.test_lars import numpy_lars

# Each spelling, and what it means for the bias: (gets weight decay, gets the trust ratio).
# The kernel is excluded by none of them.
SPELLINGS = {
    'exclude_from_weight_decay': ({'exclude_from_weight_decay': ['bias']}, (False, False)),
    'exclude_from_layer_adaptation': ({'exclude_from_layer_adaptation': ['bias']}, (True, False)),
    'decay_only': ({'exclude_from_weight_decay': ['bias'], 'exclude_from_layer_adaptation': []},
                   (False, True)),
    'skip_list': ({'skip_list': ['bias']}, (False, False)),
    'keras_var_names': ({}, (False, False)),
    'keras_var_list': ({}, (False, False)),
    'nothing': ({}, (True, True)),
}
GRADS = {'kernel': [[[0.1, -0.2], [0.3, 0.05]], [[0.2, 0.1], [-0.1, 0.4]]],
         'bias': [[0.3, -0.1], [0.05, 0.2]]}
W0 = {'kernel': [[1.0, -2.0], [0.5, 3.0]], 'bias': [0.5, -0.25]}


def make(cls, spelling, fused):
  """A built optimizer for the kernel and bias of a Dense layer, excluding by ``spelling``."""
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, name='dense')], name='net')
  kernel, bias = model.trainable_variables
  kernel.assign(np.array(W0['kernel'], np.float32))
  bias.assign(np.array(W0['bias'], np.float32))
  kwargs, _ = SPELLINGS[spelling]
  if cls is LARSOptimizer:
    opt = LARSOptimizer(0.5, momentum=0.9, weight_decay=0.1, eeta=0.02, epsilon=1e-5,
                        fused=fused, **kwargs)
  else:
    opt = LAMB(0.01, beta_1=0.9, beta_2=0.99, epsilon=1e-6, weight_decay=0.1, fused=fused,
               **kwargs)
  if spelling == 'keras_var_names':
    opt.exclude_from_weight_decay(var_names=['bias'])
  elif spelling == 'keras_var_list':
    opt.exclude_from_weight_decay(var_list=[bias])
  opt.build([kernel, bias])
  return opt, kernel, bias


def numpy_reference(cls, name, decay, adapt):
  if cls is LARSOptimizer:
    return numpy_lars(W0[name], GRADS[name], 0.5, 0.9, 0.1, 0.02, 1e-5, False, False,
                      decay=decay, adapt=adapt)[0]
  return numpy_lamb(W0[name], GRADS[name], 0.01, 0.9, 0.99, 1e-6, 0.1, decay, adapt)


@pytest.mark.parametrize('cls', [LARSOptimizer, LAMB])
@pytest.mark.parametrize('spelling', sorted(SPELLINGS))
@pytest.mark.parametrize('fused', [True, False])
def test_each_spelling_means_the_same_in_both_optimizers(cls, spelling, fused):
  opt, kernel, bias = make(cls, spelling, fused)
  bias_flags = SPELLINGS[spelling][1]
  assert (opt.decays(bias), opt.adapts(bias)) == bias_flags
  assert (opt.decays(kernel), opt.adapts(kernel)) == (True, True)
  step = tf.function(lambda gk, gb: opt.apply([gk, gb], [kernel, bias]))
  for gk, gb in zip(GRADS['kernel'], GRADS['bias']):
    step(tf.constant(gk, tf.float32), tf.constant(gb, tf.float32))
  np.testing.assert_allclose(kernel.numpy(), numpy_reference(cls, 'kernel', True, True),
                             rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(bias.numpy(), numpy_reference(cls, 'bias', *bias_flags),
                             rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize('cls', [LARSOptimizer, LAMB])
@pytest.mark.parametrize('spelling', ['exclude_from_weight_decay', 'decay_only', 'skip_list'])
def test_config_round_trip_keeps_the_exclusions(cls, spelling):
  opt, kernel, bias = make(cls, spelling, True)
  clone = cls.from_config(opt.get_config())
  assert clone.get_config() == opt.get_config()
  assert [(clone.decays(v), clone.adapts(v)) for v in (kernel, bias)] == \
      [(True, True), SPELLINGS[spelling][1]]


def test_larc_takes_the_same_adaptation_exclusion():
  kernel = keras.Variable(np.array(W0['kernel'], np.float32), name='kernel')
  bias = keras.Variable(np.array(W0['bias'], np.float32), name='bias')
  grads = [tf.constant(GRADS['kernel'][0], tf.float32), tf.constant(GRADS['bias'][0], tf.float32)]
  factors = {}
  for key in ('skip_list', 'exclude_from_layer_adaptation'):
    params = validation.check_larc_params({'larc_eta': 0.02, key: ['bias']})
    _, factors[key] = stages.larc(grads, [kernel, bias], 0.5, params)
  assert sorted(factors['skip_list']) == sorted(factors['exclude_from_layer_adaptation']) == [0]
  assert float(factors['skip_list'][0]) == float(factors['exclude_from_layer_adaptation'][0])


@pytest.mark.parametrize('cls', [LARSOptimizer, LAMB])
def test_a_single_string_is_rejected(cls):
  with pytest.raises(ValueError, match='exclude_from_weight_decay must be a list of strings'):
    cls(0.1, exclude_from_weight_decay='bias')
  with pytest.raises(ValueError, match='skip_list must be a list of strings'):
    cls(0.1, skip_list='bias')


# --- lists that match nothing, and batch norms by what they are ---------------------------

def keras_named_model():
  """A model named as Keras' applications name theirs: the batch norm is 'conv1_bn'."""
  inputs = keras.Input((6, 6, 2))
  x = keras.layers.Conv2D(3, 3, name='conv1')(inputs)
  x = keras.layers.BatchNormalization(name='conv1_bn')(x)
  x = keras.layers.GlobalAveragePooling2D()(x)
  return keras.Model(inputs, keras.layers.Dense(2, name='logits')(x))


def paths(variables):
  return [v.path for v in variables]


def test_unmatched_finds_exactly_the_strings_that_match_no_variable():
  variables = keras_named_model().trainable_variables
  assert paths(variables) == ['conv1/kernel', 'conv1/bias', 'conv1_bn/gamma', 'conv1_bn/beta',
                              'logits/kernel', 'logits/bias']
  patterns = ['batch_normalization', 'bias', '_bn/', 'layer_norm', 'bias', 'Conv1', 'logits/k']
  assert exclusions.unmatched(variables, patterns) == ['batch_normalization', 'layer_norm',
                                                      'Conv1']
  assert exclusions.unmatched(variables, None) == exclusions.unmatched([], []) == []
  assert exclusions.unmatched([], ['bias']) == ['bias']


def test_look_alikes_are_the_names_a_pattern_probably_meant():
  variables = keras_named_model().trainable_variables
  assert exclusions.look_alikes(variables, 'batch_normalization') == ['conv1_bn/gamma',
                                                                      'conv1_bn/beta']
  assert exclusions.look_alikes(variables, 'BatchNorm') == ['conv1_bn/gamma', 'conv1_bn/beta']
  assert exclusions.look_alikes(variables, 'biases') == ['conv1/bias', 'logits/bias']
  assert exclusions.look_alikes(variables, 'the_logits') == ['logits/kernel', 'logits/bias']
  # Nothing alike: the first names.
  assert exclusions.look_alikes(variables, 'embedding', count=3) == paths(variables)[:3]


def test_the_pipeline_warns_once_per_unmatched_string_naming_its_list_and_examples(caplog):
  model = keras_named_model()
  with caplog.at_level('WARNING', logger='optimizers'):
    pipeline = GradientPipeline(
        model.trainable_variables, UpdateSettings(
            'LARS', {'learning_rate': 0.1, 'skip_list': ['batch_normalization', 'bias'],
                     'exclude_from_weight_decay': ['layer_normalization', 'logits']},
            larc_params={'larc_eta': 0.002, 'skip_list': ['BatchNorm']}))
  assert [r.getMessage() for r in caplog.records] == [
      "warning: optimizer_params.skip_list: 'batch_normalization' matches none of the model's 6 "
      'variables (e.g. conv1_bn/gamma, conv1_bn/beta, ...); those variables get weight decay and '
      'the layer-wise adaptation',
      "warning: optimizer_params.exclude_from_weight_decay: 'layer_normalization' matches none of "
      "the model's 6 variables (e.g. conv1_bn/gamma, conv1_bn/beta, ...); those variables get "
      'weight decay and the layer-wise adaptation',
      "warning: larc_params.skip_list: 'BatchNorm' matches none of the model's 6 variables (e.g. "
      "conv1_bn/gamma, conv1_bn/beta, ...); those variables get LARC's adaptation"]
  assert all(r.levelname == 'WARNING' for r in caplog.records)
  # Built once, warned once: the steps say nothing more.
  caplog.clear()
  with caplog.at_level('WARNING', logger='optimizers'):
    pipeline(lambda: tf.add_n([tf.reduce_sum(v) for v in model.trainable_variables]))
  assert not caplog.records


def test_lists_that_match_say_nothing_and_other_optimizers_have_none(caplog):
  model = keras_named_model()
  with caplog.at_level('WARNING', logger='optimizers'):
    GradientPipeline(model.trainable_variables, UpdateSettings(
        'LAMB', {'learning_rate': 0.1, 'exclude_from_weight_decay': ['_bn/', 'bias'],
                 'exclude_from_layer_adaptation': ['bias']}))
    GradientPipeline(model.trainable_variables, UpdateSettings('SGD', {'learning_rate': 0.1}))
  assert not caplog.records
  lamb = LAMB(0.1, exclude_from_layer_adaptation=['bias', 'gamma_'])
  assert exclusions.exclusion_lists(lamb) == [
      ('optimizer_params.exclude_from_layer_adaptation', ['bias', 'gamma_'],
       'the layer-wise adaptation')]
  assert exclusions.unmatched_warnings(model.trainable_variables,
                                       exclusions.exclusion_lists(lamb)) == [
      "warning: optimizer_params.exclude_from_layer_adaptation: 'gamma_' matches none of the "
      "model's 6 variables (e.g. conv1_bn/gamma, conv1_bn/beta, ...); those variables get the "
      'layer-wise adaptation']
  assert exclusions.exclusion_lists(keras.optimizers.SGD(0.1)) == []


def test_regularized_leaves_out_batch_norms_by_layer_and_keeps_resnets_list():
  model = keras_named_model()
  assert paths(exclusions.regularized(model)) == ['conv1/kernel', 'logits/kernel']
  assert paths(exclusions.batch_norm_variables(model)) == [
      'conv1_bn/gamma', 'conv1_bn/beta', 'conv1_bn/moving_mean', 'conv1_bn/moving_variance']
  # This framework's models name every batch norm: the same variables in the same order.
  resnet = MODELS['resnet_cifar']({'depth': 8, 'shortcut': 'B'}, (8, 8, 3), 10)
  by_name = exclusions.kept(resnet.trainable_variables, exclusions.NORMALIZATION_AND_BIAS)
  assert [id(v) for v in exclusions.regularized(resnet)] == [id(v) for v in by_name]
  assert len(by_name) == 7 + 2 + 1  # convolutions, the two projections, the classifier kernel
  # A batch norm inside a nested model is found too.
  inputs = keras.Input((6, 6, 2))
  outer = keras.Model(inputs, keras.layers.Dense(2, name='head')(model(inputs)))
  assert paths(exclusions.regularized(outer)) == ['conv1/kernel', 'logits/kernel', 'head/kernel']
