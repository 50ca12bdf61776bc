"""One exclusion vocabulary for LARS, LAMB and LARC, each spelling checked against numpy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from optimizers import stages
from optimizers import validation
from optimizers.lamb import LAMB
from optimizers.lars import LARSOptimizer
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
