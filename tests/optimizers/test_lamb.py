"""LAMB against a numpy transcription of You et al. 2019 (Algorithm 2)."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from optimizers.lamb import LAMB


def numpy_lamb(w, grads, lr, b1, b2, eps, wd, decay, adapt):
  w = np.array(w, np.float64)
  m = np.zeros_like(w)
  v = np.zeros_like(w)
  for t, g in enumerate(grads, start=1):
    g = np.array(g, np.float64)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat = m / (1 - b1 ** t)
    v_hat = v / (1 - b2 ** t)
    u = m_hat / (np.sqrt(v_hat) + eps) + (wd * w if decay else 0.0)
    wn, un = np.linalg.norm(w), np.linalg.norm(u)
    ratio = wn / un if (adapt and wn > 0 and un > 0) else 1.0
    w = w - lr * ratio * u
  return w


GRADS = [[0.1, -0.2, 0.3], [0.3, 0.1, -0.2], [-0.05, 0.2, 0.1], [0.2, 0.2, 0.2]]


@pytest.mark.parametrize('name,decay,adapt', [('kernel', True, True), ('bias', False, False),
                                              ('gamma', True, False)])
def test_matches_numpy(name, decay, adapt):
  w0 = [1.0, -2.0, 0.5]
  var = keras.Variable(np.array(w0, np.float32), name=name)
  opt = LAMB(0.01, beta_1=0.9, beta_2=0.99, epsilon=1e-6, weight_decay=0.1,
             exclude_from_weight_decay=['bias'], exclude_from_layer_adaptation=['bias', 'gamma'])
  for g in GRADS:
    opt.apply_gradients([(tf.constant(g), var)])
  want = numpy_lamb(w0, GRADS, 0.01, 0.9, 0.99, 1e-6, 0.1, decay, adapt)
  np.testing.assert_allclose(var.numpy(), want, rtol=1e-5, atol=1e-7)


def test_layer_adaptation_exclusions_default_to_weight_decay_ones():
  opt = LAMB(0.01, exclude_from_weight_decay=['bias'])
  assert opt.adaptation_exclusions == ['bias']


def test_zero_weights_use_ratio_one():
  var = keras.Variable(np.zeros(2, np.float32), name='w')
  opt = LAMB(0.1, beta_1=0.0, beta_2=0.0, epsilon=0.0)
  opt.apply_gradients([(tf.constant([2.0, -3.0]), var)])
  # m̂ = g, v̂ = g², u = sign(g), ratio 1 because ‖w‖ = 0.
  np.testing.assert_allclose(var.numpy(), [-0.1, 0.1], rtol=1e-6)


def test_config_round_trip_and_errors():
  opt = LAMB(0.002, weight_decay=0.01, exclude_from_weight_decay=['bias'])
  assert LAMB.from_config(opt.get_config()).get_config() == opt.get_config()
  with pytest.raises(ValueError, match='beta_1'):
    LAMB(0.1, beta_1=1.5)
  with pytest.raises(ValueError, match='weight_decay'):
    LAMB(0.1, weight_decay=-1.0)


def test_weight_decay_none_is_no_decay():
  assert LAMB().weight_decay == 0.0 and LAMB(0.01, weight_decay=None).weight_decay == 0.0
  var = keras.Variable(np.array([1.0, -2.0, 0.5], np.float32), name='kernel')
  opt = LAMB(0.01, beta_1=0.9, beta_2=0.99, epsilon=1e-6, weight_decay=None)
  for g in GRADS:
    opt.apply_gradients([(tf.constant(g), var)])
  want = numpy_lamb([1.0, -2.0, 0.5], GRADS, 0.01, 0.9, 0.99, 1e-6, 0.0, True, True)
  np.testing.assert_allclose(var.numpy(), want, rtol=1e-5, atol=1e-7)


def test_sparse_gradient_is_read_as_the_dense_one_it_sums_to_on_every_path(monkeypatch):
  """An embedding's gradient (tf.IndexedSlices, an index twice) updates as its dense sum.

  Rows no index names get g = 0 (their moments decay, and weight decay and the
  trust ratio still move them). The fused paths take it densified instead of
  falling back to the per-variable reference path.
  """
  from optimizers import native, stages  # pylint: disable=import-outside-toplevel
  w0 = np.array([[1.0, -2.0], [0.5, 0.25], [-1.0, 3.0]], np.float32)
  dense_w0 = np.array([0.3, -0.7], np.float32)
  values = [np.array([[0.1, -0.2], [0.3, 0.1], [-0.05, 0.2]], np.float32) * (k + 1)
            for k in range(3)]
  indices = np.array([2, 0, 2], np.int32)
  dense_grads = [np.array([0.2, -0.1], np.float32) * (k + 1) for k in range(3)]
  summed = []
  for v in values:
    g = np.zeros_like(w0)
    np.add.at(g, indices, v)
    summed.append(g)
  kwargs = dict(beta_1=0.9, beta_2=0.99, epsilon=1e-6, weight_decay=0.1)
  want = numpy_lamb(w0, summed, 0.01, 0.9, 0.99, 1e-6, 0.1, True, True)
  want_dense = numpy_lamb(dense_w0, dense_grads, 0.01, 0.9, 0.99, 1e-6, 0.1, True, True)
  for switch, fused, form in (('1', True, 'lamb(native)'), ('0', True, 'lamb(xla)'),
                              ('1', False, 'lamb(keras)')):
    monkeypatch.setenv(native.ENV_SWITCH, switch)
    table = keras.Variable(w0, name='embeddings')
    kernel = keras.Variable(dense_w0, name='kernel')
    opt = LAMB(0.01, fused=fused, **kwargs)
    opt.build([table, kernel])

    def grads(k):
      return [tf.IndexedSlices(tf.constant(values[k]), tf.constant(indices), tf.constant([3, 2])),
              tf.constant(dense_grads[k])]

    assert [s.describe() for s in stages.step_stages(opt, [table, kernel], grads(0))] == [form]
    step = tf.function(lambda k: opt.apply(grads(k), [table, kernel]))
    for k in range(3):
      step(k)
    np.testing.assert_allclose(table.numpy(), want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(kernel.numpy(), want_dense, rtol=1e-5, atol=1e-7)
