"""The update's stages as objects with one signature, ``stage(grads, update) -> grads``.

Each stage is checked alone against numbers worked out by hand, and the
pipeline's chain against the stages docs/math.md orders for a configuration.
"""

import numpy as np
import pytest
import tensorflow as tf

from optimizers import allreduce
from optimizers import stages
from optimizers import validation
from optimizers.agn import AGNOptimizer
from optimizers.automatic_loss_scaler import make_loss_scaler
from optimizers.pipeline import GradientPipeline
from optimizers.settings import UpdateSettings
from optimizers.pipeline import Update


def test_clip_scales_by_the_norm_the_finite_check_took():
  grads = [tf.constant([3.0, 0.0]), tf.constant([4.0])]  # global norm 5
  update = Update(tf.constant(0.1))
  last = tf.Variable(0.0)
  grads = stages.FiniteCheck(make_loss_scaler(1.0, None), True, last)(grads, update)
  assert float(update.global_norm) == pytest.approx(5.0) and float(last) == pytest.approx(5.0)
  assert bool(update.go_on) and update.checked is grads
  clipped = stages.Clip(2.5)(grads, update)
  # factor 2.5 / max(5, 2.5) = 0.5
  np.testing.assert_allclose([g.numpy() for g in clipped][0], [1.5, 0.0])
  np.testing.assert_allclose(clipped[1].numpy(), [2.0])


def test_the_finite_check_stops_a_non_finite_update_and_backs_the_scale_off():
  scaler = make_loss_scaler('Backoff', {'scale_min': 1.0, 'scale_max': 2.0 ** 24,
                                        'step_factor': 2.0, 'step_window': 2000})
  before = float(scaler.loss_scale)
  update = Update(tf.constant(0.1))
  stages.FiniteCheck(scaler, False, tf.Variable(0.0))([tf.constant([np.nan, 1.0])], update)
  assert not bool(update.go_on) and update.global_norm is None
  assert float(scaler.loss_scale) == before / 2.0


def test_accumulate_is_due_every_iter_size_micro_steps_and_gives_the_mean():
  variable = tf.Variable([0.0, 0.0])
  micro_step = tf.Variable(0, dtype=tf.int64)
  accumulate = stages.Accumulate(stages.GradientAccumulator([variable]), micro_step, 3)
  dues = [bool(accumulate.add([tf.constant(g)])) for g in ([1.0, 2.0], [3.0, 4.0], [5.0, 9.0])]
  assert dues == [False, False, True]
  mean = accumulate([None], Update(0.1))
  np.testing.assert_allclose(mean[0].numpy(), [3.0, 5.0])
  assert int(micro_step) == 0 and np.all(accumulate.accumulator.sums[0].numpy() == 0.0)
  assert bool(accumulate.add([tf.constant([1.0, 1.0])], skip_update=False))


def test_larc_records_its_factors_in_the_update():
  variable = tf.Variable([3.0, 4.0])  # norm 5
  params = validation.check_larc_params({'larc_eta': 0.1, 'larc_mode': 'scale'})
  update = Update(tf.constant(1.0))
  grads = stages.Larc(params, [variable])([tf.constant([0.0, 2.0])], update)
  # scale: c = max(eta·‖v‖ / (‖g‖ + eps), min_update) = 0.1·5 / 2 = 0.25
  assert float(update.larc_factors[0]) == pytest.approx(0.25)
  np.testing.assert_allclose(grads[0].numpy(), [0.0, 0.5])


def test_all_reduce_counts_its_calls(monkeypatch):
  monkeypatch.setattr(allreduce, 'average', lambda grads, compression: [g * 0.5 for g in grads])
  count = tf.Variable(0, dtype=tf.int64)
  grads = stages.AllReduce('none', count)([tf.constant([2.0])], Update(0.1))
  assert float(grads[0][0]) == 1.0 and int(count) == 1


@pytest.mark.parametrize('settings, expected', [
    ({}, [stages.FiniteCheck]),
    ({'iter_size': 2, 'clip_gradients': 1.0},
     [stages.Accumulate, stages.FiniteCheck, stages.Clip]),
    ({'iter_size': 2, 'clip_gradients': 1.0, 'multi_worker': True},
     [stages.Accumulate, stages.AllReduce, stages.FiniteCheck, stages.Clip]),
])
def test_the_chain_holds_the_stages_of_the_configuration_in_the_order_of_the_math(
    monkeypatch, settings, expected):
  monkeypatch.setattr(allreduce, 'engine_name', lambda: 'horovod')
  variable = tf.Variable([1.0])
  pipeline = GradientPipeline(
      [variable], UpdateSettings('Momentum', {'learning_rate': 0.1, 'momentum': 0.9}, **settings))
  assert [type(stage) for stage in pipeline.build_chain().stages] == expected


def test_an_optimizer_that_communicates_itself_gets_no_all_reduce(monkeypatch):
  monkeypatch.setattr(allreduce, 'engine_name', lambda: 'horovod')
  monkeypatch.setattr(allreduce, 'size', lambda: 1)
  variable = tf.Variable([1.0])
  agn = AGNOptimizer(tf.keras.optimizers.SGD(0.1), communication_period=2)
  pipeline = GradientPipeline([variable],
                              UpdateSettings(agn, {'learning_rate': 0.1}, multi_worker=True))
  assert [type(stage) for stage in pipeline.build_chain().stages] == [stages.FiniteCheck]


def test_a_sparse_gradient_counts_with_the_norm_of_the_dense_gradient_it_sums_to():
  # An embedding's gradient: a row per lookup, id 1 looked up twice. Its dense gradient adds
  # the two rows; the norm (logged, clipped by, LARC's) is that tensor's, not the rows'.
  rows = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], np.float32)
  sparse = tf.IndexedSlices(tf.constant(rows), tf.constant([1, 3, 1]), tf.constant([4, 2]))
  dense = np.zeros([4, 2], np.float32)
  np.add.at(dense, [1, 3, 1], rows)
  expected = float(np.sqrt((dense ** 2).sum()))
  assert float(stages.global_norm([sparse])) == pytest.approx(expected, rel=1e-6)
  assert float(stages.norms([sparse])[0]) == pytest.approx(expected, rel=1e-6)
  _, _, norm = stages.gradient_statistics([sparse], with_norm=True)
  assert float(norm) == pytest.approx(expected, rel=1e-6)
