"""A chunked step with dropout on: its gradient is the gradient of the loss it reports.

Each chunk of ``teacher_forced_loss`` draws its own dropout masks. The test
records the masks the chunks drew, lays them out as one pass's masks (a
chunk's rows at their rows, its columns at the first columns), runs one pass
with them and differentiates a cross-entropy of its own: the loss and every
gradient are the chunked step's, to float rounding. Eager mode, where the
chunks' loop runs in Python and a mask can be recorded; the trainer's
``tf.function`` traces the same code.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from models import MODELS
from models.sequence_losses import teacher_forced_loss
from models.transformer import END_ID, START_ID

PARAMS = {'d_model': 16, 'num_heads': 2, 'ff_size': 24, 'encoder_layers': 2, 'decoder_layers': 2,
          'dropout': 0.3, 'attention_dropout': 0.2, 'label_smoothing': 0.1}
SMOOTHING = 0.1


class Masks:
  """Dropout by masks drawn here (recording) or given back (replaying), one per Dropout call."""

  def __init__(self):
    self.rng = np.random.default_rng(7)
    self.recorded, self.replay = [], None

  def call(self, layer, inputs, training=False):
    if not training or layer.rate == 0:
      return inputs
    if self.replay is None:
      keep = (self.rng.random(inputs.shape) >= layer.rate).astype(np.float32)
      self.recorded.append(keep)
    else:
      keep = self.replay.pop(0)
      assert keep.shape == tuple(inputs.shape)
    return inputs * tf.constant(keep, inputs.dtype) / (1.0 - layer.rate)


@pytest.fixture
def masks(monkeypatch):
  masks = Masks()
  monkeypatch.setattr(keras.layers.Dropout, 'call',
                      lambda layer, inputs, training=False: masks.call(layer, inputs, training))
  return masks


def padded(rows, low, high, vocab, seed, start_end=False):
  rng = np.random.default_rng(seed)
  out = np.zeros([rows, high + 2], np.int32)
  for i in range(rows):
    body = list(rng.integers(4, vocab, rng.integers(low, high + 1)))
    row = [START_ID] + body + [END_ID] if start_end else body
    out[i, :len(row)] = row
  return out


def one_pass_loss(model, source, target, vocab):
  """Mean label-smoothed token cross-entropy over the real tokens, written here from its definition."""
  labels = target[:, 1:]
  log_p = tf.nn.log_softmax(tf.cast(model((source, target[:, :-1]), training=True), tf.float32))
  picked = tf.reduce_sum(log_p * tf.one_hot(labels, vocab), axis=-1)
  token = -(1.0 - SMOOTHING) * picked - SMOOTHING / vocab * tf.reduce_sum(log_p, axis=-1)
  real = tf.cast(labels > 0, tf.float32)
  return tf.reduce_sum(token * real) / tf.reduce_sum(real)


def dense(grads):
  return [tf.convert_to_tensor(g).numpy() for g in grads]


@pytest.mark.parametrize('chunk_size', [1, 4])
def test_the_chunked_gradient_is_the_gradient_of_the_reported_loss_with_dropout(masks,
                                                                                chunk_size):
  keras.utils.set_random_seed(0)
  model = MODELS['transformer'](PARAMS, 11, 9)
  # Sorted by source length as the data layer's batches are, so chunks carry less padding.
  source = padded(10, 1, 7, 11, seed=0)
  source = source[np.argsort((source > 0).sum(axis=1), kind='stable')]
  target = padded(10, 1, 6, 9, seed=1, start_end=True)
  model((tf.constant(source), tf.constant(target[:, :-1])))  # built before the masks are drawn
  masks.recorded.clear()

  with tf.GradientTape() as tape:
    loss, _ = teacher_forced_loss(model, tf.constant(source), tf.constant(target), SMOOTHING,
                                  chunk_size)
  chunked = dense(tape.gradient(loss, model.trainable_variables))
  chunks = -(-len(source) // chunk_size)
  calls = len(masks.recorded) // chunks
  assert calls * chunks == len(masks.recorded) and calls >= 10  # every dropout of the model

  # The chunks' masks laid out as one pass's: chunk c's rows, its (unpadded) first columns.
  # A padded position is read by no real one, so what its mask holds does not matter.
  # The shapes of one pass's dropout inputs, in call order (masks drawn and put aside).
  before = len(masks.recorded)
  one_pass_loss(model, tf.constant(source), tf.constant(target), 9)
  full_shapes = [m.shape for m in masks.recorded[before:]]
  del masks.recorded[before:]
  assert len(full_shapes) == calls
  replay = [np.ones(shape, np.float32) for shape in full_shapes]
  for c in range(chunks):
    for k in range(calls):
      mask = masks.recorded[c * calls + k]
      where = (slice(c * chunk_size, c * chunk_size + mask.shape[0]),) + tuple(
          slice(0, n) for n in mask.shape[1:])
      replay[k][where] = mask
  masks.replay = replay
  with tf.GradientTape() as tape:
    expected_loss = one_pass_loss(model, tf.constant(source), tf.constant(target), 9)
  expected = dense(tape.gradient(expected_loss, model.trainable_variables))
  assert masks.replay == []

  assert float(loss) == pytest.approx(float(expected_loss), rel=1e-5)
  assert len(chunked) == len(expected)
  for variable, got, want in zip(model.trainable_variables, chunked, expected):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=variable.path)
  # Dropout was on: the chunks dropped some of every kind of activation they drew masks for.
  assert all((m == 0).any() for m in masks.recorded if m.size >= 50)
