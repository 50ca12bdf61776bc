"""Tests of the Transformer: sizes, masks, precision, the loss, and greedy and beam-search decoding."""

import itertools
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from core.params import ConfigError
from core.sequence_metrics import error_counts
from data.cmudict import CmudictDataLayer
from models import MODELS
from models.sequence_losses import _without_padding_columns  # pylint: disable=protected-access
from models.sequence_losses import sequence_cross_entropy, teacher_forced_loss, token_accuracy
from models.transformer import END_ID, FORBIDDEN_OUTPUT_IDS, START_ID

TINY = {'d_model': 16, 'num_heads': 2, 'ff_size': 24, 'encoder_layers': 2, 'decoder_layers': 2,
        'dropout': 0.0}


def build(params=None, source_vocab=11, target_vocab=9):
  keras.utils.set_random_seed(0)
  return MODELS['transformer']({**TINY, **(params or {})}, source_vocab, target_vocab)


def sizes(variables):
  return sum(int(np.prod(v.shape)) for v in variables)


def expected_parameters(d, ff, enc, dec, vs, vt, sharing='decoder', positions='sinusoidal',
                        max_length=64, pre_norm=True):
  """The parameter count from the architecture's definition."""
  attention = 3 * d * d + 3 * d + d * d + d          # fused qkv + output
  cross = d * d + d + 2 * d * d + 2 * d + d * d + d  # query, key_value, output
  feed_forward = d * ff + ff + ff * d + d
  norm = 2 * d
  total = enc * (attention + feed_forward + 2 * norm) + dec * (attention + cross + feed_forward
                                                                + 3 * norm)
  total += vt * d + (0 if sharing == 'all' else vs * d)
  total += vt * d + vt if sharing == 'none' else 0
  total += max_length * d if positions == 'learned' else 0
  total += 2 * norm if pre_norm else 0
  return total


def test_registered():
  assert 'transformer' in MODELS
  assert MODELS.facts('transformer')['PARAMS']['d_model'].default == 256


@pytest.mark.parametrize('params, vocab', [
    ({}, (11, 9)),
    ({'embedding_sharing': 'none'}, (11, 9)),
    ({'embedding_sharing': 'all'}, (13, 13)),
    ({'positions': 'learned', 'max_length': 40}, (11, 9)),
    ({'norm': 'post', 'encoder_layers': 1, 'decoder_layers': 3}, (11, 9)),
])
def test_parameter_counts(params, vocab):
  model = build(params, *vocab)
  p = {**TINY, 'embedding_sharing': 'decoder', 'positions': 'sinusoidal', 'max_length': 64,
       'norm': 'pre', **params}
  expected = expected_parameters(p['d_model'], p['ff_size'], p['encoder_layers'],
                                 p['decoder_layers'], *vocab, sharing=p['embedding_sharing'],
                                 positions=p['positions'], max_length=p['max_length'],
                                 pre_norm=p['norm'] == 'pre')
  assert sizes(model.trainable_variables) == expected
  assert not model.non_trainable_variables


def test_the_default_size():
  # d_model 256, 3 + 3 layers, ff 1024, CMUdict's 33 graphemes and 43 phones: 5.55 M parameters.
  model = MODELS['transformer']({}, 33, 43)
  assert sizes(model.trainable_variables) == expected_parameters(256, 1024, 3, 3, 33, 43)
  assert sizes(model.trainable_variables) == 5_550_080


def test_variable_names_serve_the_exclusion_lists():
  model = build()
  paths = [v.path for v in model.trainable_variables]
  norms = [p for p in paths if 'layer_normalization' in p]
  assert len(norms) == 2 * (2 * 2 + 2 * 3 + 2)  # gamma and beta of every layer norm
  assert all(p.endswith(('gamma', 'beta')) for p in norms)
  assert all(p.endswith(('kernel', 'bias', 'embeddings')) for p in paths if p not in norms)


@pytest.mark.parametrize('params, message', [
    ({'d_model': 18, 'num_heads': 2}, r'model_params.d_model: 18 must be a multiple of 2 x num_heads'),
    ({'embedding_sharing': 'all'}, r"model_params.embedding_sharing: 'all' needs one vocabulary.*"
                                   r'11 and 9 ids'),
    ({'dropout': 1.0}, r'model_params.dropout: must be in \[0, 1\)'),
    ({'positions': 'rotary'}, r"model_params.positions: 'rotary' is not allowed"),
    ({'layers': 3}, r'model_params.layers: unknown key'),
])
def test_bad_params_fail_in_one_line(params, message):
  with pytest.raises(ConfigError, match=message):
    build(params)


# --- masks ------------------------------------------------------------------------------

SOURCE = [[4, 5, 6, 0, 0], [7, 8, 9, 10, 5]]
TARGET = [[1, 4, 5, 2, 0, 0], [1, 6, 7, 8, 3, 2]]


def loss_and_gradients(model, source, target, smoothing=0.1):
  source, target = tf.constant(source), tf.constant(target)
  with tf.GradientTape() as tape:
    logits = model((source, target[:, :-1]), training=True)
    loss, count = sequence_cross_entropy(target[:, 1:], logits, smoothing)
  gradients = tape.gradient(loss, model.trainable_variables)
  return loss.numpy(), count.numpy(), [
      np.zeros(v.shape) if g is None else tf.convert_to_tensor(g).numpy()
      for g, v in zip(gradients, model.trainable_variables)]


def pad(rows, width):
  return [r + [0] * (width - len(r)) for r in rows]


@pytest.mark.parametrize('params', [{}, {'norm': 'post', 'positions': 'learned'},
                                    {'embedding_sharing': 'none'}])
def test_padding_changes_neither_loss_nor_gradient(params):
  model = build(params)
  loss, count, gradients = loss_and_gradients(model, SOURCE, TARGET)
  assert count == 3 + 5
  # Three more padded positions on each side of the batch.
  padded = loss_and_gradients(model, pad(SOURCE, 8), pad(TARGET, 9))
  assert padded[:2] == pytest.approx((loss, count), rel=1e-6)
  for g, h in zip(gradients, padded[2]):
    np.testing.assert_allclose(h, g, rtol=1e-4, atol=1e-6)
  # Each example alone, cut to its own length: the batch is the sum of the two.
  first = loss_and_gradients(model, [SOURCE[0][:3]], [TARGET[0][:4]])
  second = loss_and_gradients(model, [SOURCE[1]], [TARGET[1]])
  assert first[0] + second[0] == pytest.approx(loss, rel=1e-6)
  for g, a, b in zip(gradients, first[2], second[2]):
    np.testing.assert_allclose(a + b, g, rtol=1e-4, atol=1e-6)


def test_the_decoder_is_causal():
  model = build()
  source = tf.constant(SOURCE)
  base = model((source, tf.constant([[1, 4, 5, 6], [1, 6, 7, 8]]))).numpy()
  changed = model((source, tf.constant([[1, 4, 8, 6], [1, 6, 7, 4]]))).numpy()
  np.testing.assert_array_equal(changed[0, :2], base[0, :2])
  np.testing.assert_array_equal(changed[1, :3], base[1, :3])
  assert np.abs(changed[0, 2:] - base[0, 2:]).max() > 1e-4


def test_float32_logits_under_mixed_precision():
  previous = keras.mixed_precision.dtype_policy()
  keras.mixed_precision.set_dtype_policy('mixed_bfloat16')
  try:
    model = build({'embedding_sharing': 'none'})
    tied = build()
    for m in (model, tied):
      logits = m((tf.constant(SOURCE), tf.constant(TARGET)[:, :-1]))
      assert logits.dtype == tf.float32 and np.isfinite(logits.numpy()).all()
      assert all(v.dtype == 'float32' for v in m.trainable_variables)
      assert m.encode(tf.constant(SOURCE))[0].dtype == tf.bfloat16
      assert m.greedy_decode(tf.constant(SOURCE)).dtype == tf.int32
  finally:
    keras.mixed_precision.set_dtype_policy(previous)


# --- the loss ---------------------------------------------------------------------------

def test_cross_entropy_and_accuracy_against_numpy():
  logits = np.array([[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 3.0, -2.0], [1.0, 1.0, 1.0, 1.0]]],
                    np.float32)
  labels = np.array([[1, 2, 0]])  # the last position is padding
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  for e in (0.0, 0.1):
    target = np.zeros([1, 3, 4]) + e / 4
    target[0, 0, 1] += 1 - e
    target[0, 1, 2] += 1 - e
    expected = -(target * log_probs)[0, :2].sum()
    loss, count = sequence_cross_entropy(tf.constant(labels), tf.constant(logits), e)
    assert (loss.numpy(), count.numpy()) == (pytest.approx(expected, rel=1e-6), 2.0)
  # argmax: position 0 says 0 (label 1, wrong), position 1 says 2 (right).
  assert [t.numpy() for t in token_accuracy(tf.constant(labels), tf.constant(logits))] == [1, 2]


# --- decoding ---------------------------------------------------------------------------

def output_limits(model, source):
  """Each source's own length (before its padding) + the margin, below max_length."""
  return np.minimum((np.asarray(source) != 0).sum(axis=1) + model.decode_length_margin,
                    model.max_length - 1)


def reference_greedy(model, source, limits):
  """Greedy decoding written out: the whole decoder runs again on the prefix at every step.

  ``limits``: the most tokens of each row's output.
  """
  prefix = np.full([len(source), 1], START_ID)
  finished = np.zeros(len(source), bool)
  outputs = []
  for step in range(max(limits)):
    logits = model((tf.constant(source), tf.constant(prefix))).numpy()[:, -1]
    logits[:, list(FORBIDDEN_OUTPUT_IDS)] = -np.inf
    tokens = np.where(finished, 0, logits.argmax(-1))
    outputs.append(tokens)
    finished |= (tokens == END_ID) | (step + 1 >= np.asarray(limits))
    prefix = np.concatenate([prefix, tokens[:, None]], axis=1)
    if finished.all():
      break
  ids = np.stack(outputs, axis=1)
  return np.where(ids == END_ID, 0, ids)


def sequence_log_prob(model, source, outputs):
  """log p of each output sequence given ``source`` (its </s> included when it has one).

  Teacher forcing in one batch: a shorter output's trailing padding is after
  its last position, which the causal decoder never lets it see.
  """
  width = max(len(o) for o in outputs)
  inputs = np.array([[START_ID] + list(o[:-1]) + [0] * (width - len(o)) for o in outputs])
  sources = np.repeat(np.array([source]), len(outputs), axis=0)
  logits = model((tf.constant(sources), tf.constant(inputs))).numpy().astype(np.float64)
  logits[:, :, list(FORBIDDEN_OUTPUT_IDS)] = -np.inf
  top = logits.max(-1, keepdims=True)
  log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
  return np.array([sum(log_probs[k, i, t] for i, t in enumerate(o))
                   for k, o in enumerate(outputs)])


def all_outputs(real_tokens, limit):
  """Every output of at most ``limit`` tokens: real tokens then </s>, or ``limit`` real tokens."""
  for length in range(limit):
    for body in itertools.product(real_tokens, repeat=length):
      yield body + (END_ID,)
  yield from itertools.product(real_tokens, repeat=limit)


@pytest.mark.parametrize('alpha', [0.0, 0.6, 2.0])
def test_a_wide_beam_finds_the_best_output_by_exhaustive_search(alpha):
  # Three tokens may be output (<unk> and two symbols), at most three of them (a source of one
  # token and a margin of 2): 1 + 3 + 9 + 27 outputs. A beam of 20 holds every hypothesis, so
  # beam search is exhaustive here and must find the best normalized score.
  model = build({'decode_length_margin': 2}, source_vocab=7, target_vocab=6)
  table = model.target_embedding.embeddings
  table.assign(table * 4.0)
  outputs = list(all_outputs((3, 4, 5), 3))
  assert len(outputs) == 40
  lengths = np.array([len(o) for o in outputs])
  for row in ([4], [5], [6]):
    scores = sequence_log_prob(model, row, outputs)
    normalized = scores / ((5 + lengths) / 6) ** alpha
    best = outputs[int(np.argmax(normalized))]
    ids, score = model.beam_search(tf.constant([row]), 20, alpha)
    assert tuple(t for t in ids.numpy()[0] if t) == tuple(t for t in best if t != END_ID)
    assert score.numpy()[0] == pytest.approx(normalized.max(), rel=1e-4)


def test_greedy_decoding_and_a_beam_of_one_equal_the_step_by_step_reference():
  # What the decoders compute does not depend on training: an untrained model whose
  # output bias favours </s> a little ends its outputs at several lengths.
  model = build({'decode_length_margin': 3, 'embedding_sharing': 'none'})
  bias = next(v for v in model.trainable_variables if v.path.endswith('logits/bias'))
  bias.assign(np.where(np.arange(bias.shape[0]) == END_ID, 1.5, 0.0).astype(np.float32))
  source = np.array([[4, 5, 6, 0, 0], [7, 8, 9, 10, 5], [6, 0, 0, 0, 0], [3, 9, 4, 0, 0]],
                    np.int32)
  greedy = tf.function(model.greedy_decode)(tf.constant(source)).numpy()
  reference = reference_greedy(model, source, output_limits(model, source))
  np.testing.assert_array_equal(greedy, reference)
  # 6: the first row's own limit (3 tokens + a margin of 3), not the batch's (5 + 3).
  assert list((greedy > 0).sum(axis=1)) == [6, 5, 3, 1]
  beam, _ = model.beam_search(tf.constant(source), 1, 0.0)
  np.testing.assert_array_equal(beam.numpy(), greedy)


def never_ending(margin):
  """A tiny untrained model whose output bias keeps it from </s>: it decodes to its limits."""
  model = build({'decode_length_margin': margin, 'embedding_sharing': 'none'})
  bias = next(v for v in model.trainable_variables if v.path.endswith('logits/bias'))
  bias.assign(np.where(np.arange(bias.shape[0]) == END_ID, -30.0, 0.0).astype(np.float32))
  return model


@pytest.mark.parametrize('decoder', ['greedy', 'beam'])
def test_a_source_decodes_alike_alone_and_beside_a_much_longer_one(decoder):
  # Each source's output limit is its own length + the margin, not the batch's longest.
  model = never_ending(margin=2)
  if decoder == 'greedy':
    decode = lambda s: model.greedy_decode(tf.constant(s)).numpy()  # noqa: E731
  else:
    decode = lambda s: model.beam_search(tf.constant(s), 3, 0.6)[0].numpy()  # noqa: E731
  short, long = [5, 6], [4, 7, 8, 9, 10, 4, 7, 8, 9, 10]
  alone = decode([short])[0]
  batched = decode(np.array([short + [0] * 8, long]))
  assert list(batched[0][:len(alone)]) == list(alone)
  assert not batched[0][len(alone):].any()
  assert (alone > 0).sum() == len(short) + 2  # never </s>: exactly its own limit
  assert (batched[1] > 0).sum() == len(long) + 2
  # At most max_length - 1 tokens, whatever the margin.
  capped = never_ending(margin=2)
  capped.max_length = 6
  assert (capped.greedy_decode(tf.constant([long])).numpy() > 0).sum() == 5


# --- training in chunks -----------------------------------------------------------------

def ragged_batch(rows, low, high, vocab, seed, start_end=False):
  """Padded ids of ``rows`` random sequences of ``low``-``high`` tokens (``<s>``/``</s>`` around)."""
  rng = np.random.default_rng(seed)
  out = np.zeros([rows, high + 2], np.int32)
  for i in range(rows):
    body = list(rng.integers(4, vocab, rng.integers(low, high + 1)))
    row = [START_ID] + body + [END_ID] if start_end else body
    out[i, :len(row)] = row
  return out


def loss_in_passes(model, source, target, chunk_size, scale=1.0):
  """(loss, accuracy, gradients) of ``teacher_forced_loss`` in a tf.function, as the trainer runs it."""
  @tf.function
  def step():
    with tf.GradientTape() as tape:
      loss, accuracy = teacher_forced_loss(model, source, target, 0.1, chunk_size)
      scaled = loss * scale
    grads = tape.gradient(scaled, model.trainable_variables)
    return loss, accuracy, [tf.convert_to_tensor(g) / scale for g in grads]
  loss, accuracy, grads = step()
  return float(loss), float(accuracy), [g.numpy() for g in grads]


@pytest.mark.parametrize('chunk_size', [1, 3, 4, 10])
def test_chunks_give_the_loss_gradient_and_accuracy_of_one_pass(chunk_size):
  # Ten sources of 1-7 tokens sorted by length, as the data layer's batches are: chunks of 3
  # rows carry less padding than the batch. Without dropout the sums over chunks are the
  # one-pass numbers to float rounding, a loss scale included.
  model = build()
  source = ragged_batch(10, 1, 7, 11, seed=0)
  order = np.argsort((source > 0).sum(axis=1), kind='stable')
  source, target = tf.constant(source[order]), tf.constant(ragged_batch(10, 1, 6, 9, 1, True))
  loss, accuracy, grads = loss_in_passes(model, source, target, None)
  labels = target.numpy()[:, 1:]
  logits = model((source, target[:, :-1])).numpy()
  right = (logits.argmax(-1) == labels) & (labels > 0)
  assert accuracy == pytest.approx(right.sum() / (labels > 0).sum(), abs=1e-7)
  chunked = loss_in_passes(model, source, target, chunk_size, scale=4.0)
  assert chunked[:2] == (pytest.approx(loss, rel=1e-6), pytest.approx(accuracy, abs=1e-7))
  assert len(chunked[2]) == len(grads)
  for g, h in zip(grads, chunked[2]):
    np.testing.assert_allclose(h, g, rtol=1e-4, atol=1e-6)


def test_one_pass_is_the_plain_loss_to_the_bit():
  # What the task computed before chunks existed, dropout included: a micro-batch of at most
  # train_chunk_size examples trains exactly as before.
  source = tf.constant(ragged_batch(6, 1, 7, 11, seed=2))
  target = tf.constant(ragged_batch(6, 1, 6, 9, 3, True))
  results = []
  for plain in (True, False):
    model = build({'dropout': 0.1})

    @tf.function
    def step(plain=plain, model=model):
      with tf.GradientTape() as tape:
        if plain:
          labels = target[:, 1:]
          logits = model((source, target[:, :-1]), training=True)
          loss_sum, count = sequence_cross_entropy(labels, logits, 0.1)
          correct, _ = token_accuracy(labels, logits)
          loss, accuracy = loss_sum / tf.maximum(count, 1.0), correct / tf.maximum(count, 1.0)
        else:
          loss, accuracy = teacher_forced_loss(model, source, target, 0.1)
      return loss, accuracy, [tf.convert_to_tensor(g) for g in
                              tape.gradient(loss, model.trainable_variables)]
    results.append(step())
  (loss, accuracy, grads), (loss_b, accuracy_b, grads_b) = results
  assert (loss.numpy(), accuracy.numpy()) == (loss_b.numpy(), accuracy_b.numpy())
  for g, h in zip(grads, grads_b):
    np.testing.assert_array_equal(h.numpy(), g.numpy())


def test_padding_columns_are_cut_per_chunk():
  ids = tf.constant([[4, 5, 0, 0], [6, 0, 0, 0]])
  assert _without_padding_columns(ids).numpy().tolist() == [[4, 5], [6, 0]]
  # A chunk of padding alone keeps one column, so the model still has a position to read.
  assert _without_padding_columns(tf.zeros([2, 3], tf.int32)).shape == (2, 1)


def test_train_chunk_size_is_a_positive_size_or_null():
  assert build({'train_chunk_size': None}).params['train_chunk_size'] is None
  assert build().params['train_chunk_size'] == 1024
  with pytest.raises(ConfigError, match=r'model_params.train_chunk_size: must be > 0, got 0'):
    build({'train_chunk_size': 0})


# --- learning ---------------------------------------------------------------------------
# A training of several seconds, shared by the tests below: they are slow tests.

@pytest.fixture(scope='module')
def overfit():
  """A tiny Transformer trained with Adam on 30 CMUdict words until it knows them."""
  layer = CmudictDataLayer({'max_words': 30}, 'train')
  keras.utils.set_random_seed(1)
  model = MODELS['transformer']({'d_model': 64, 'num_heads': 4, 'ff_size': 128,
                                 'encoder_layers': 2, 'decoder_layers': 2, 'dropout': 0.0,
                                 'label_smoothing': 0.0},
                                layer.source_vocab_size, layer.target_vocab_size)
  batch = next(iter(layer.dataset(layer.num_examples)))
  source, target = batch['source'], batch['target']
  optimizer = keras.optimizers.Adam(3e-3)

  @tf.function
  def train_step():
    with tf.GradientTape() as tape:
      logits = model((source, target[:, :-1]), training=True)
      loss, count = sequence_cross_entropy(target[:, 1:], logits, model.label_smoothing)
      loss = loss / count
    optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
    return loss

  start = time.time()
  losses = [float(train_step()) for _ in range(200)]
  eval_layer = CmudictDataLayer({'max_words': 30, 'eval_split': 'train'}, 'eval')
  return model, eval_layer, losses, time.time() - start


@pytest.mark.slow
def test_greedy_decoding_equals_the_step_by_step_reference(overfit):
  model, layer, _, _ = overfit
  batch = next(iter(layer.dataset(64)))
  source = batch['source'].numpy()
  greedy = tf.function(model.greedy_decode)(batch['source']).numpy()
  reference = reference_greedy(model, source, output_limits(model, source))
  np.testing.assert_array_equal(greedy, reference)
  # Outputs of many lengths, each ended by </s> before the limit.
  lengths = (greedy > 0).sum(axis=1)
  assert len(set(lengths)) > 5 and greedy.shape[1] == lengths.max() + 1


@pytest.mark.slow
def test_beam_size_one_is_greedy(overfit):
  model, layer, _, _ = overfit
  batch = next(iter(layer.dataset(64)))
  greedy = model.greedy_decode(batch['source']).numpy()
  beam, _ = tf.function(model.beam_search)(batch['source'], 1, 0.0)
  np.testing.assert_array_equal(beam.numpy(), greedy)


def decode_words(model, layer, decode):
  hypotheses, references = [], []
  for batch in layer.dataset(64):
    for ids, word in zip(decode(batch['source']).numpy(), batch['source_index'].numpy()):
      hypotheses.append(layer.decode_target(ids))
      references.append(layer.references[word])
  return error_counts(hypotheses, references)


@pytest.mark.slow
def test_a_tiny_transformer_learns_thirty_words(overfit):
  model, layer, losses, seconds = overfit
  assert losses[-1] < 0.05 * losses[0]
  assert seconds < 60
  counts = decode_words(model, layer, tf.function(model.greedy_decode))
  assert counts.words == 30
  assert (counts.wer, counts.per) == (0.0, 0.0)
  beam = decode_words(model, layer, lambda s: model.beam_search(s, 4, 0.6)[0])
  assert (beam.wer, beam.per) == (0.0, 0.0)


@pytest.mark.slow
def test_decoding_in_a_saved_model(overfit, tmp_path):
  model, layer, _, _ = overfit
  module = tf.Module()
  module.model = model
  spec = tf.TensorSpec([None, None], tf.int32)
  module.greedy = tf.function(model.greedy_decode, input_signature=[spec])
  module.beam = tf.function(lambda s: model.beam_search(s, 3, 0.6)[0], input_signature=[spec])
  tf.saved_model.save(module, str(tmp_path / 'saved'))
  loaded = tf.saved_model.load(str(tmp_path / 'saved'))
  batch = next(iter(layer.dataset(8)))
  for name in ('greedy', 'beam'):
    want = getattr(module, name)(batch['source']).numpy()
    got = getattr(loaded, name)(batch['source']).numpy()
    np.testing.assert_array_equal(got, want)
    # What the model learned: each word's pronunciation.
    for ids, word in zip(got, batch['source_index'].numpy()):
      assert layer.decode_target(ids) in layer.references[word]
