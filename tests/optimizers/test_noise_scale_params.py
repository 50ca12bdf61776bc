"""``noise_scale_params`` that would give wrong numbers are refused in one line, not measured."""

import pytest
import tensorflow as tf

from optimizers.pipeline import GradientPipeline
from optimizers.settings import UpdateSettings


def settings(**params):
  return UpdateSettings('SGD', {'learning_rate': 0.1}, iter_size=2, noise_scale=True,
                        noise_scale_params=params)


@pytest.mark.parametrize('params,message', [
    ({'micro_batch': 0}, r'^noise_scale_params.micro_batch: 0; allowed: a number > 0'),
    ({'micro_batch': -8}, r'^noise_scale_params.micro_batch: -8; allowed: a number > 0'),
    ({'micro_batch': float('inf')}, r'^noise_scale_params.micro_batch: inf; allowed'),
    ({'decay': 1.0}, r'^noise_scale_params.decay: 1.0; allowed: a number in \[0, 1\)'),
    ({'decay': -0.5}, r'^noise_scale_params.decay: -0.5; allowed: a number in \[0, 1\)'),
    ({'parts': 0}, r'^noise_scale_params.parts: 0; allowed: an integer >= 1'),
    ({'parts': 1.5}, r'^noise_scale_params.parts: 1.5; allowed: an integer >= 1'),
])
def test_settings_that_would_give_wrong_numbers_are_refused(params, message):
  with pytest.raises(ValueError, match=message):
    settings(**params)


@pytest.mark.parametrize('parts,losses', [(2, 1), (1, 2), (2, 3)])
def test_parts_that_disagree_with_the_loss_functions_given_are_refused(parts, losses):
  w = tf.Variable(tf.ones([3]))
  pipeline = GradientPipeline([w], settings(parts=parts, micro_batch=4))
  loss = lambda: tf.reduce_sum(w * w)
  given = loss if losses == 1 else [loss] * losses
  with pytest.raises(ValueError, match=rf'^noise_scale_params.parts: {parts}, but the micro-step '
                                       rf'is given as {losses} loss function\(s\); allowed: as '
                                       'many as parts'):
    pipeline(given)
  assert int(pipeline.noise.small_count.numpy()) == 0  # nothing was added


def test_parts_that_agree_are_measured():
  w = tf.Variable(tf.ones([3]))
  pipeline = GradientPipeline([w], settings(parts=2, micro_batch=4))
  loss = lambda: tf.reduce_sum(w * w)
  pipeline([loss, loss])
  assert int(pipeline.noise.small_count.numpy()) == 2
