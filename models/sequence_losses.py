"""The sequence-to-sequence training loss: token cross-entropy, token accuracy and the chunked teacher-forced loss.

``sequence_cross_entropy`` and ``token_accuracy`` return sums and counts
(padding, id 0, left out), so micro-batches and workers add them before
dividing; ``teacher_forced_loss`` is the mean loss of a batch through a
:class:`models.transformer.Transformer`, in one pass or chunk by chunk.
"""

import tensorflow as tf

from models.transformer import PAD_ID


def sequence_cross_entropy(labels, logits, label_smoothing=0.0):
  """Summed token cross-entropy of logits against labels, padding (id 0) left out.

  With label smoothing ``e``, the target distribution is ``1 - e`` on the
  label plus ``e / V`` on every id (Keras' convention).

  Args:
    labels: int ``[B, T]``, 0 at padding.
    logits: float ``[B, T, V]``.
    label_smoothing: ``e`` in ``[0, 1)``.

  Returns:
    ``(loss sum, token count)``, float32 scalars: divide for the mean per
    token, or add sums over micro-batches and workers first.
  """
  logits = tf.cast(logits, tf.float32)
  log_probs = tf.nn.log_softmax(logits, axis=-1)
  vocab = tf.cast(tf.shape(logits)[-1], tf.float32)
  token_loss = -tf.gather(log_probs, labels, batch_dims=2) * (1.0 - label_smoothing)
  if label_smoothing:
    token_loss -= label_smoothing / vocab * tf.reduce_sum(log_probs, axis=-1)
  mask = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
  return tf.reduce_sum(token_loss * mask), tf.reduce_sum(mask)


def token_accuracy(labels, logits):
  """``(correct, count)``: teacher-forced argmax predictions equal to the non-padding labels (float32)."""
  mask = tf.not_equal(labels, PAD_ID)
  right = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), tf.cast(labels, tf.int32))
  return (tf.reduce_sum(tf.cast(right & mask, tf.float32)),
          tf.reduce_sum(tf.cast(mask, tf.float32)))


def teacher_forced_loss(model, source, target, label_smoothing=0.0, chunk_size=None):
  """The training loss of a batch: mean label-smoothed token cross-entropy, and token accuracy.

  The decoder reads ``target[:, :-1]`` and predicts ``target[:, 1:]``; both
  means are over the batch's real tokens. With ``chunk_size``, the gradient
  of the loss is computed chunk by chunk: the batch's rows are cut into
  consecutive chunks of at most ``chunk_size``, each stripped of the columns
  that are padding in all its rows, and one chunk's forward and backward pass
  runs after the other, adding its gradient. The loss, its gradient and the
  accuracy are the same as in one pass to float rounding, while the memory
  and the working set are those of one chunk. Dropout draws its masks chunk
  by chunk: the gradient is the reported loss's, of those masks, which are
  other draws than one pass's (docs/sequence.md, "Dropout in chunks"). On a CPU that is what keeps a
  micro-batch of thousands of examples as fast per example as one of a
  thousand (the activations of one chunk stay in the caches, a chunk of
  sources of similar length carries less padding than the whole batch) and
  within the machine's memory.

  Chunks need a dtype without loss scaling: under a ``float16`` policy, or
  with no ``chunk_size``, the batch is one pass.

  Args:
    model: a :class:`Transformer` (any model of ``(source, decoder inputs)``
      to logits, with ``trainable_variables``).
    source: int ``[B, S]`` source ids, padded with 0.
    target: int ``[B, T]``: ``<s>``, the target ids, ``</s>``, padded with 0.
    label_smoothing: the loss's ``e`` (``sequence_cross_entropy``).
    chunk_size: rows per chunk, or None for one pass.

  Returns:
    ``(loss, token accuracy)``, float32 scalars; the loss is differentiable
    with respect to ``model.trainable_variables``.
  """
  labels = target[:, 1:]
  count = tf.maximum(tf.reduce_sum(tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)), 1.0)
  if not chunk_size or model.dtype_policy.compute_dtype == 'float16':
    logits = model((source, target[:, :-1]), training=True)
    loss_sum, _ = sequence_cross_entropy(labels, logits, label_smoothing)
    correct, _ = token_accuracy(labels, logits)
    return loss_sum / count, correct / count
  return _loss_in_chunks(model, source, target, label_smoothing, chunk_size, count)


def _without_padding_columns(ids):
  """``ids`` ``[N, L]`` cut after the last column where some row has a token (one column at least)."""
  used = tf.cast(tf.reduce_any(tf.not_equal(ids, PAD_ID), axis=0), tf.int32)
  width = tf.reduce_max(used * tf.range(1, tf.shape(ids)[1] + 1))
  return ids[:, :tf.maximum(width, 1)]


def _loss_in_chunks(model, source, target, label_smoothing, chunk_size, count):
  """:func:`teacher_forced_loss` with the gradient summed over chunks of ``chunk_size`` rows."""
  variables = model.trainable_variables
  rows = tf.shape(source)[0]
  chunks = (rows + chunk_size - 1) // chunk_size
  # Which variables have a gradient at all is known when the chunk's pass is traced.
  connected = [True] * len(variables)

  def body(index, loss_sum, correct, sums):
    start = index * chunk_size
    chunk_source = _without_padding_columns(source[start:start + chunk_size])
    chunk_target = _without_padding_columns(target[start:start + chunk_size])
    labels = chunk_target[:, 1:]
    with tf.GradientTape() as tape:
      logits = model((chunk_source, chunk_target[:, :-1]), training=True)
      chunk_loss, _ = sequence_cross_entropy(labels, logits, label_smoothing)
      # Divided by the whole batch's count, as the one-pass loss is before its gradient.
      scaled = chunk_loss / count
    grads = tape.gradient(scaled, variables)
    for i, grad in enumerate(grads):
      connected[i] = grad is not None
    grads = [tf.zeros_like(s) if g is None else tf.cast(tf.convert_to_tensor(g), tf.float32)
             for g, s in zip(grads, sums)]
    chunk_correct, _ = token_accuracy(labels, logits)
    return (index + 1, loss_sum + chunk_loss, correct + chunk_correct,
            [s + g for s, g in zip(sums, grads)])

  zeros = [tf.zeros(v.shape, tf.float32) for v in variables]
  # One chunk at a time: the point is that only one chunk's activations exist at once.
  _, loss_sum, correct, sums = tf.while_loop(
      lambda index, *_: index < chunks, body,
      (tf.constant(0), tf.constant(0.0), tf.constant(0.0), zeros), parallel_iterations=1)
  used = [(tf.convert_to_tensor(v), g) for v, g, c in zip(variables, sums, connected) if c]

  # The batch's loss, whose gradient with respect to each variable is its summed chunk gradient
  # (times the upstream gradient: a loss scale, or 1).
  @tf.custom_gradient
  def attach(value, *values):
    del values  # only there for the gradient to reach the variables they were read from

    def gradient(upstream):
      return [None] + [tf.cast(upstream * g, v.dtype) for v, g in used]

    return tf.identity(value), gradient

  loss = attach(tf.stop_gradient(loss_sum / count), *[v for v, _ in used])
  return loss, tf.stop_gradient(correct / count)
