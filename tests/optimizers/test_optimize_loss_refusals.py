"""optimize_loss refuses in one line what it would otherwise get wrong without a word or obscurely."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from optimizers.compat import openseq2seq as opt_lib
from optimizers.compat.openseq2seq import optimize_loss
# Each test starts with no pipeline (an autouse fixture).
from tests.optimizers.test_optimize_loss import fresh_pipelines  # pylint: disable=unused-import


def one_line(error):
  assert '\n' not in str(error.value)
  return str(error.value)


def test_a_variable_the_model_creates_after_the_first_call_is_refused_not_left_untrained():
  model = keras.Sequential([keras.Input([2]), keras.layers.Dense(1, name='first')], name='net')
  x = tf.ones([4, 2])
  loss = lambda: tf.reduce_mean(model(x))
  optimize_loss(loss, 'SGD', {'learning_rate': 0.1}, None, model=model)
  model.add(keras.layers.Dense(1, name='second'))
  with pytest.raises(ValueError) as error:
    optimize_loss(loss, 'SGD', {'learning_rate': 0.1}, None, model=model)
  assert re.match(r"optimize_loss: the model's trainable variables changed since the first call "
                  r"built the pipeline \(new: \['net/second/kernel', "
                  r"'net/second/bias'\]\); .* Allowed: the same variables at every call "
                  r'.*, or optimizers.clear_pipelines\(\)', one_line(error)), str(error.value)


def test_a_var_list_that_changes_is_refused_not_given_a_second_pipeline():
  w = keras.Variable(np.ones(2, np.float32), name='w')
  b = keras.Variable(np.ones(1, np.float32), name='b')
  loss = lambda: tf.reduce_sum(w) + tf.reduce_sum(b)
  for _ in range(4):
    optimize_loss(loss, 'SGD', {'learning_rate': 0.1}, None, var_list=[w])
  with pytest.raises(ValueError) as error:
    optimize_loss(loss, 'SGD', {'learning_rate': 0.1}, None, var_list=[w, b])
  assert re.match(r"optimize_loss: var_list changed since the first call built the pipeline "
                  r"\(new: \['b'\]\); ", one_line(error)), str(error.value)
  assert int(opt_lib.find_pipeline(var_list=[w]).global_step.numpy()) == 4
  # Variables of another model, none shared, have a pipeline of their own.
  optimize_loss(lambda: tf.reduce_sum(b), 'SGD', {'learning_rate': 0.1}, None, var_list=[b])


def test_a_learning_rate_beside_a_schedule_is_refused_not_ignored():
  w = keras.Variable(np.ones(2, np.float32), name='w')
  with pytest.raises(ValueError) as error:
    optimize_loss(lambda: tf.reduce_sum(w), 'SGD', {'learning_rate': 0.5},
                  lambda step: 0.1, var_list=[w])
  assert one_line(error) == ("optimize_loss: optimizer_params['learning_rate'] (0.5) beside "
                             'learning_rate_decay_fn, which gives the rate at every step; '
                             'allowed: one of them')


def test_a_loss_given_as_a_tensor_says_to_give_a_function():
  w = keras.Variable(np.ones(2, np.float32), name='w')
  with pytest.raises(TypeError) as error:
    optimize_loss(tf.reduce_sum(w), 'SGD', {'learning_rate': 0.1}, None, var_list=[w])
  assert one_line(error).startswith('optimize_loss: loss is a EagerTensor; allowed: a function '
                                    'of no arguments that computes the loss')


def test_a_schedule_that_returns_none_is_refused_when_the_pipeline_is_built():
  w = keras.Variable(np.ones(2, np.float32), name='w')

  def schedule(step):
    0.1 * tf.cast(step, tf.float32)  # pylint: disable=expression-not-assigned

  with pytest.raises(TypeError) as error:
    optimize_loss(lambda: tf.reduce_sum(w), 'SGD', {}, schedule, var_list=[w])
  assert one_line(error).startswith('optimize_loss: learning_rate_decay_fn returned None at '
                                    'global step 0 (a missing return?); allowed: a function of '
                                    'the global step that returns the learning rate')
