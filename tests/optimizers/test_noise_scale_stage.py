"""The noise scale measured in the update (optimizers/noise_scale.py) against NumPy and closed forms.

The problem: a loss linear in the weights, L = mean_i x_i·w, whose gradient
is the batch mean of the x_i whatever w is. With x_i = μ + σ·z_i the
gradient's mean is μ and its per-example covariance σ²·I, so B_simple =
dσ²/|μ|² in closed form, and the squared norms the update sees can be
recomputed in NumPy from the same rows.
"""

import numpy as np
import pytest
import tensorflow as tf

from core.noise_scale import NoiseScaleTracker
from optimizers.pipeline import GradientPipeline
from optimizers.settings import UpdateSettings

D = 100
SIGMA = 0.5


def examples(count, seed=0):
  rng = np.random.default_rng(seed)
  mu = rng.normal(size=D) * 0.1
  return mu, (mu + SIGMA * rng.normal(size=(count, D))).astype(np.float32)


def pipeline_for(w, iter_size=1, micro_batch=8, decay=0.99, parts=1, **kwargs):
  return GradientPipeline([w], UpdateSettings(
      'SGD', {'learning_rate': 0.0}, iter_size=iter_size, noise_scale=True,
      noise_scale_params={'micro_batch': micro_batch, 'decay': decay, 'parts': parts},
      **kwargs))


def linear_loss(w, x):
  return lambda: tf.reduce_mean(tf.linalg.matvec(x, w))


def run_micro_batches(pipeline, w, rows, b):
  step = tf.function(lambda x: pipeline(linear_loss(w, x)))
  metrics = None
  for start in range(0, len(rows), b):
    metrics = step(tf.constant(rows[start:start + b]))
  return {k: float(v) for k, v in metrics.items() if k.startswith('noise')}


def numpy_estimates(rows, b, k, decay):
  tracker = NoiseScaleTracker(decay)
  for update in rows.reshape(-1, k, b, D).astype(np.float64):
    micro = update.mean(axis=1)
    tracker.add(np.mean(np.sum(micro ** 2, axis=1)), np.sum(micro.mean(axis=0) ** 2), b, b * k)
  return tracker.estimates()


def test_the_update_measures_what_numpy_computes_from_the_same_micro_batches():
  _, rows = examples(60 * 4 * 8)
  w = tf.Variable(tf.zeros([D]))
  measured = run_micro_batches(pipeline_for(w, iter_size=4, decay=0.95), w, rows, 8)
  expected = numpy_estimates(rows, 8, 4, 0.95)
  assert measured['noise_updates'] == 60
  assert measured['noise_scale'] == pytest.approx(expected['b_simple'], rel=1e-5)
  assert measured['noise_gradient_sq'] == pytest.approx(expected['gradient_sq'], rel=1e-5)
  assert measured['noise_trace'] == pytest.approx(expected['trace'], rel=1e-5)


def test_the_update_finds_the_closed_form_noise_scale_of_gradients_of_known_variance():
  # 600 updates of 4 x 8 rows, about the last 500 weighing: the sampling spread is ~3 %.
  mu, rows = examples(600 * 4 * 8, seed=1)
  w = tf.Variable(tf.zeros([D]))
  measured = run_micro_batches(pipeline_for(w, iter_size=4, decay=0.998), w, rows, 8)
  assert measured['noise_scale'] == pytest.approx(D * SIGMA ** 2 / np.sum(mu ** 2), rel=0.1)
  assert measured['noise_trace'] == pytest.approx(D * SIGMA ** 2, rel=0.1)


def test_a_micro_step_in_two_parts_is_iter_size_two_on_its_halves():
  _, rows = examples(30 * 16, seed=2)
  halves_w = tf.Variable(tf.zeros([D]))
  halves = pipeline_for(halves_w, micro_batch=8, parts=2)
  step = tf.function(lambda x: halves([linear_loss(halves_w, x[:8]), linear_loss(halves_w, x[8:])]))
  for start in range(0, len(rows), 16):
    metrics = step(tf.constant(rows[start:start + 16]))
  w = tf.Variable(tf.zeros([D]))
  accumulated = run_micro_batches(pipeline_for(w, iter_size=2, micro_batch=8), w, rows, 8)
  assert int(halves.global_step.numpy()) == 30
  for name, value in accumulated.items():
    assert float(metrics[name]) == pytest.approx(value, rel=1e-5), name


def test_the_loss_scale_is_taken_out_before_the_norms():
  _, rows = examples(20 * 2 * 8, seed=3)
  results = []
  for scale in (1.0, 1024.0):
    w = tf.Variable(tf.zeros([D]))
    results.append(run_micro_batches(pipeline_for(w, iter_size=2, loss_scaling=scale), w,
                                     rows, 8))
  for name in results[0]:
    assert results[1][name] == pytest.approx(results[0][name], rel=1e-5), name


def test_an_update_with_non_finite_gradients_adds_nothing_and_the_next_starts_afresh():
  _, rows = examples(10 * 2 * 8, seed=4)
  bad = rows.copy()
  bad[5 * 16 + 3] = np.inf  # update 5's first micro-batch
  w = tf.Variable(tf.zeros([D]))
  pipeline = pipeline_for(w, iter_size=2, decay=0.9, loss_scaling='Backoff')
  measured = run_micro_batches(pipeline, w, bad, 8)
  assert int(pipeline.global_step.numpy()) == 9  # the update with an infinity was skipped
  assert measured['noise_updates'] == 9
  # The same as the nine finite updates alone: the skipped one left no sum behind.
  expected = numpy_estimates(np.concatenate([rows[:5 * 16], rows[6 * 16:]]), 8, 2, 0.9)
  assert measured['noise_scale'] == pytest.approx(expected['b_simple'], rel=1e-5)


def test_the_estimates_are_checkpointed_and_restored(tmp_path):
  _, rows = examples(10 * 2 * 8, seed=5)
  w = tf.Variable(tf.zeros([D]))
  first = pipeline_for(w, iter_size=2)
  measured = run_micro_batches(first, w, rows[:-8], 8)  # stopped between two micro-batches
  path = tf.train.Checkpoint(**first.checkpoint_items()).save(str(tmp_path / 'ckpt'))
  again_w = tf.Variable(tf.zeros([D]))
  again = pipeline_for(again_w, iter_size=2)
  tf.train.Checkpoint(**again.checkpoint_items()).restore(path).assert_consumed()
  restored = {k: float(v) for k, v in again.noise.estimates().items()}
  assert restored == measured
  # The half-accumulated update goes on: its first micro-batch's norm was saved too.
  resumed = run_micro_batches(again, again_w, rows[-8:], 8)
  straight = run_micro_batches(first, w, rows[-8:], 8)
  assert resumed == straight and resumed['noise_updates'] == 10


def test_one_small_batch_gradient_per_update_is_refused_in_one_line():
  w = tf.Variable(tf.zeros([D]))
  with pytest.raises(ValueError, match=r'noise_scale needs two or more small-batch gradients '
                                       r'per update .* this update has 1$'):
    pipeline_for(w)
  with pytest.raises(ValueError, match=r"noise_scale_params: unknown key\(s\) \['every'\]"):
    UpdateSettings('SGD', {'learning_rate': 0.1}, iter_size=2, noise_scale=True,
                   noise_scale_params={'every': 3})


def test_without_the_noise_scale_the_update_returns_no_noise_metrics():
  w = tf.Variable(tf.zeros([D]))
  pipeline = GradientPipeline([w], UpdateSettings('SGD', {'learning_rate': 0.1}, iter_size=2))
  metrics = pipeline(linear_loss(w, tf.ones([4, D])))
  assert pipeline.noise is None and not any(k.startswith('noise') for k in metrics)
  assert 'noise_scale' not in pipeline.checkpoint_items()
