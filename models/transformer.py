"""An encoder-decoder Transformer for sequence-to-sequence work, with greedy and beam-search decoding.

The model maps source ids ``[B, S]`` and decoder inputs ``[B, T]`` (``<s>``
then the target, teacher forcing) to float32 logits ``[B, T, V]`` over the
target vocabulary, whatever the Keras dtype policy: under
``mixed_bfloat16`` or ``mixed_float16`` the layers compute in half
precision, while attention softmaxes, layer normalization and the logits
are float32. Id 0 is padding in both vocabularies, 1 ``<s>`` and 2 ``</s>``
(``data.sequences.Vocabulary``): a padded source position is never
attended to, and the decoder's self-attention is causal, so a target's
trailing padding changes no logit of a real position.

Layers: token embeddings scaled by sqrt(d_model) plus sinusoidal or learned
positions, then ``encoder_layers`` blocks of self-attention and a ReLU
feed-forward, and ``decoder_layers`` blocks of causal self-attention,
attention over the encoder output and a feed-forward. Each sub-layer is
residual, with layer normalization before it (``norm: pre``, as in
tensor2tensor's Transformer, steadier at a large learning rate) or after
the sum (``norm: post``, the original paper). ``embedding_sharing``: the
decoder's input embedding is the transpose of the output projection
(``decoder``, the paper's choice), also the encoder's (``all``, which needs
one vocabulary for source and target), or no matrix is shared (``none``).

Decoding (:meth:`Transformer.greedy_decode`, :meth:`Transformer.beam_search`)
is written with ``tf.while_loop`` and keys/values cached per decoder layer,
so it runs inside a ``tf.function`` and in a SavedModel. It never emits
``<pad>`` or ``<s>``, stops a sequence at ``</s>`` and stops the batch when
every sequence has ended; each sequence has at most its own ``source length +
decode_length_margin`` tokens (at most ``max_length - 1``), so an output does
not depend on what else is in the batch. Beam search ranks finished hypotheses by
log-probability over GNMT's length penalty ``((5 + length) / 6) ** alpha``
(``length_penalty``: alpha; 0 ranks by log-probability alone, and then beam
size 1 is greedy decoding).

Variable names: every layer normalization's path contains
``layer_normalization`` and every bias is named ``bias``, so an optimizer's
``exclude_from_weight_decay: ['layer_normalization', 'bias']`` keeps exactly
those from weight decay.

The layers themselves are in ``models.transformer_layers``, the training
loss (``teacher_forced_loss``) in ``models.sequence_losses``.

References:
  Vaswani et al. "Attention Is All You Need", NeurIPS 2017. arXiv:1706.03762.
  Wang et al. "Learning Deep Transformer Models for Machine Translation",
  ACL 2019 (pre-norm). arXiv:1906.01787.
  Wu et al. "Google's Neural Machine Translation System", 2016 (the length
  penalty). arXiv:1609.08144.
"""

import math

import keras
import tensorflow as tf

from core.params import ConfigError, check_params
from models import initializers
from models import schemas
from models.transformer_layers import DecoderLayer, EncoderLayer, build_all, layer_norm

PAD_ID, START_ID, END_ID = 0, 1, 2
# Never a decoded token.
FORBIDDEN_OUTPUT_IDS = (PAD_ID, START_ID)
# Added to the attention logits of masked positions and to forbidden logits:
# finite, so a fully masked row gives a uniform distribution, not NaN.
NEG_INF = -1e9


def sinusoids(length, depth):
  """The sinusoidal position signal of Vaswani et al.: float32 ``[length, depth]``.

  Row ``p`` holds ``sin(p / 10000^(2i/depth))`` at column ``2i`` and the
  cosine at ``2i + 1``.
  """
  positions = tf.cast(tf.range(length), tf.float32)[:, tf.newaxis]
  rates = tf.pow(10000.0, -tf.cast(tf.range(depth // 2), tf.float32) * 2.0 / depth)
  angles = positions * rates[tf.newaxis, :]
  return tf.reshape(tf.stack([tf.sin(angles), tf.cos(angles)], axis=-1), [length, depth])


def padding_bias(source):
  """float32 ``[B, 1, 1, S]``: 0 at real source positions, ``NEG_INF`` at padding."""
  return tf.cast(tf.equal(source, PAD_ID), tf.float32)[:, tf.newaxis, tf.newaxis, :] * NEG_INF


def causal_bias(length):
  """float32 ``[1, 1, T, T]``: position ``t`` sees positions ``<= t``."""
  visible = tf.linalg.band_part(tf.ones([length, length]), -1, 0)
  return ((1.0 - visible) * NEG_INF)[tf.newaxis, tf.newaxis]


def length_penalty(length, alpha):
  """GNMT's ``((5 + length) / 6) ** alpha`` (float32)."""
  return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _beam_candidates(alive, alive_log_prob, log_probs, position, limit, shape):
  """The best ``2 x beams`` one-token extensions of the live hypotheses (one beam-search step).

  Args:
    alive: int32 ``[B, beams, limit]``, the live hypotheses' ids so far.
    alive_log_prob: float32 ``[B, beams]``, their log-probabilities.
    log_probs: float32 ``[B x beams, V]``, the next token's log-probabilities.
    position: int32 scalar, the step.
    limit: the steps the batch may take.
    shape: ``(B, beams, V)``.

  Returns:
    ``(scores, parent beams, tokens)``, each ``[B, 2 x beams]`` best first,
    and the extended ids ``[B, 2 x beams, limit]``.
  """
  batch, beams, vocab = shape
  scores = alive_log_prob[:, :, tf.newaxis] + tf.reshape(log_probs, [batch, beams, vocab])
  top_scores, top_index = tf.math.top_k(tf.reshape(scores, [batch, beams * vocab]), 2 * beams)
  parent, token = top_index // vocab, top_index % vocab
  here = tf.one_hot(position, limit, dtype=tf.int32)
  candidates = (tf.gather(alive, parent, batch_dims=1)
                + token[:, :, tf.newaxis] * here[tf.newaxis, tf.newaxis, :])
  return top_scores, parent, token, candidates


def _keep_ended(ended, ended_score, candidates, top_scores, is_end, position, limits, alpha,
                beams):
  """The best ``beams`` ended hypotheses and their normalized scores, with this step's endings added."""
  # An ending candidate ends a hypothesis only when it ranks among the best beam_size
  # (as in fairseq), so beam size 1 follows the greedy path. At a source's own length
  # limit every candidate ends; past it, none (the batch may go on for longer sources).
  in_beam = tf.range(2 * beams) < beams
  at_limit = tf.equal(position, limits - 1)[:, tf.newaxis]
  ends = (is_end & in_beam[tf.newaxis, :]) | at_limit
  ends &= (position < limits)[:, tf.newaxis]
  normalized = top_scores / length_penalty(position + 1, alpha)
  ended_now = tf.where(ends, normalized, NEG_INF)
  pool_score = tf.concat([ended_score, ended_now], axis=1)
  pool = tf.concat([ended, candidates], axis=1)
  ended_score, keep = tf.math.top_k(pool_score, beams)
  return tf.gather(pool, keep, batch_dims=1), ended_score


def _beam_search_goes_on(position, alive_log_prob, ended_score, limits, limit, alpha):
  """Beam search's loop condition: some source is not done and the batch's limit is not reached."""
  # A source is done when no live hypothesis can beat its best ended one (the penalty
  # is largest at its limit) or its limit is reached.
  best_possible = alive_log_prob[:, 0] / length_penalty(limits, alpha)
  done = (ended_score[:, 0] >= best_possible) | (position >= limits)
  return (position < limit) & ~tf.reduce_all(done)


@keras.saving.register_keras_serializable(package='models')
class Transformer(keras.Model):
  """The encoder-decoder Transformer; see the module docstring.

  Args:
    source_vocab_size: ids of the source vocabulary.
    target_vocab_size: ids of the target vocabulary.
    params: checked ``model_params`` (``models.schemas.TRANSFORMER_PARAMS``).
    kernel_initializer: the config's initializer of the attention, feed-forward
      and output projections' kernels (``models.initializers.KernelInitializers``),
      or None for Glorot uniform; embeddings, biases and layer normalization
      keep theirs.
  """

  def __init__(self, source_vocab_size, target_vocab_size, params, kernel_initializer=None,
               **kwargs):
    kwargs.setdefault('name', 'transformer')
    super().__init__(**kwargs)
    self.source_vocab_size, self.target_vocab_size = source_vocab_size, target_vocab_size
    self.params = dict(params)
    p = self.params
    self.d_model = p['d_model']
    self.max_length = p['max_length']
    self.label_smoothing = p['label_smoothing']
    self.beam_size, self.alpha = p['beam_size'], p['length_penalty']
    self.decode_length_margin = p['decode_length_margin']
    pre_norm = p['norm'] == 'pre'
    init = keras.initializers.RandomNormal(stddev=self.d_model ** -0.5)
    self.target_embedding = keras.layers.Embedding(target_vocab_size, self.d_model,
                                                   embeddings_initializer=init,
                                                   name='target_embedding')
    if p['embedding_sharing'] == 'all':
      self.source_embedding = self.target_embedding
    else:
      self.source_embedding = keras.layers.Embedding(source_vocab_size, self.d_model,
                                                     embeddings_initializer=init,
                                                     name='source_embedding')
    self.tied_output = p['embedding_sharing'] != 'none'
    self.output_projection = None if self.tied_output else keras.layers.Dense(
        target_vocab_size, dtype='float32', name='logits',
        kernel_initializer=initializers.kernel(kernel_initializer, initializers.KERAS_DEFAULT))
    self.position_embedding = None
    if p['positions'] == 'learned':
      self.position_embedding = keras.layers.Embedding(
          self.max_length, self.d_model,
          embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02),
          name='position_embedding')
    self.embedding_dropout = keras.layers.Dropout(p['dropout'])
    layer_args = (self.d_model, p['num_heads'], p['ff_size'], p['dropout'],
                  p['attention_dropout'], pre_norm, kernel_initializer)
    self.encoder_layers = [EncoderLayer(*layer_args, name=f'encoder_layer_{i}')
                           for i in range(p['encoder_layers'])]
    self.decoder_layers = [DecoderLayer(*layer_args, name=f'decoder_layer_{i}')
                           for i in range(p['decoder_layers'])]
    # tf.train.Checkpoint follows attributes, not Keras' tracked lists (Keras 3 gives those
    # to SavedModel only): each block is an attribute too, so a checkpoint holds every weight.
    for layer in self.encoder_layers + self.decoder_layers:
      setattr(self, layer.name, layer)
    # Pre-norm blocks leave their sum unnormalized; one last normalization each.
    self.encoder_norm = layer_norm('encoder_output_layer_normalization') if pre_norm else None
    self.decoder_norm = layer_norm('decoder_output_layer_normalization') if pre_norm else None

  def build(self, input_shape):
    del input_shape
    for embedding in (self.source_embedding, self.target_embedding, self.position_embedding):
      if embedding is not None and not embedding.built:
        embedding.build()
    norms = [n for n in (self.encoder_norm, self.decoder_norm) if n is not None]
    projection = [self.output_projection] if self.output_projection is not None else []
    build_all(self.encoder_layers + self.decoder_layers + norms + projection, self.d_model)

  # --- pieces -------------------------------------------------------------------------------

  def _positions(self, start, length):
    """Position signals of positions ``[start, start + length)``: ``[length, d_model]``."""
    if self.position_embedding is None:
      return sinusoids(start + length, self.d_model)[start:]
    # Positions past the table reuse its last row (longer inputs than trained on).
    index = tf.minimum(tf.range(start, start + length), self.max_length - 1)
    return self.position_embedding(index)

  def _embed(self, embedding, ids, start=0, training=False):
    x = embedding(ids) * math.sqrt(self.d_model)
    x = x + tf.cast(self._positions(start, tf.shape(ids)[1]), x.dtype)[tf.newaxis]
    return self.embedding_dropout(x, training=training)

  def logits(self, hidden):
    """float32 logits ``[..., V]`` of decoder outputs (the tied embedding or the ``logits`` layer)."""
    if self.output_projection is not None:
      return self.output_projection(hidden)
    table = tf.cast(self.target_embedding.embeddings, tf.float32)
    return tf.einsum('...d,vd->...v', tf.cast(hidden, tf.float32), table)

  def encode(self, source, training=False):
    """Encodes source ids ``[B, S]``: ``(memory [B, S, d_model], padding bias [B, 1, 1, S])``."""
    bias = padding_bias(source)
    x = self._embed(self.source_embedding, source, training=training)
    for layer in self.encoder_layers:
      x = layer(x, bias=bias, training=training)
    if self.encoder_norm is not None:
      x = self.encoder_norm(x)
    return x, bias

  def decode_logits(self, memory, source_bias, decoder_inputs, training=False):
    """Teacher-forced float32 logits ``[B, T, V]`` of decoder inputs ``[B, T]``."""
    x = self._embed(self.target_embedding, decoder_inputs, training=training)
    target_bias = causal_bias(tf.shape(decoder_inputs)[1])
    for layer in self.decoder_layers:
      x = layer(x, memory=memory, source_bias=source_bias, target_bias=target_bias,
                training=training)
    if self.decoder_norm is not None:
      x = self.decoder_norm(x)
    return self.logits(x)

  def call(self, inputs, training=False):
    """``(source [B, S], decoder inputs [B, T])`` -> float32 logits ``[B, T, target_vocab_size]``."""
    source, decoder_inputs = inputs
    memory, source_bias = self.encode(source, training=training)
    return self.decode_logits(memory, source_bias, decoder_inputs, training=training)

  # --- decoding -----------------------------------------------------------------------------

  def output_limits(self, source):
    """Most tokens the decode of each source produces, ``</s>`` included (int32 ``[B]``).

    Each source's own length (its tokens before the padding) plus
    ``decode_length_margin``, at most ``max_length - 1``: so a source decodes
    to the same output whatever it is batched with.
    """
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(source, PAD_ID), tf.int32), axis=1)
    return tf.minimum(lengths + self.decode_length_margin, self.max_length - 1)

  def output_limit(self, source):
    """The steps a decode of ``source`` may take: the largest of :meth:`output_limits` (1 if none)."""
    return tf.reduce_max(tf.concat([self.output_limits(source), [1]], axis=0))

  def _start_decoding(self, source, copies, limit):
    """Encodes ``source`` (each item repeated ``copies`` times) and makes empty caches."""
    memory, source_bias = self.encode(source)
    if copies > 1:
      memory = tf.repeat(memory, copies, axis=0)
      source_bias = tf.repeat(source_bias, copies, axis=0)
    memory_kv = [layer.cross_attention.memory_kv(memory) for layer in self.decoder_layers]
    heads = self.decoder_layers[0].self_attention.num_heads if self.decoder_layers else 1
    shape = [tf.shape(memory)[0], limit, heads, self.d_model // heads]
    caches = [(tf.zeros(shape, memory.dtype), tf.zeros(shape, memory.dtype))
              for _ in self.decoder_layers]
    return memory_kv, source_bias, caches

  def _step(self, tokens, position, caches, memory_kv, source_bias, limit):
    """Log-probabilities ``[N, V]`` of the next token after ``tokens`` ``[N]`` at ``position``."""
    x = self._embed(self.target_embedding, tokens[:, tf.newaxis], start=position)
    visible = tf.cast(tf.range(limit) <= position, tf.float32)
    target_bias = ((1.0 - visible) * NEG_INF)[tf.newaxis, tf.newaxis, tf.newaxis, :]
    updated = []
    for layer, cache, kv in zip(self.decoder_layers, caches, memory_kv):
      x, cache = layer.step(x, position, cache, kv, source_bias, target_bias)
      updated.append(cache)
    if self.decoder_norm is not None:
      x = self.decoder_norm(x)
    logits = self.logits(x)[:, 0, :]
    forbidden = tf.reduce_sum(tf.one_hot(FORBIDDEN_OUTPUT_IDS, self.target_vocab_size), axis=0)
    return tf.nn.log_softmax(logits + forbidden * NEG_INF), updated

  def greedy_decode(self, source):
    """Greedy decoding: the most probable next token at each step.

    Args:
      source: int32 ``[B, S]`` source ids, padded with 0.

    Returns:
      int32 ``[B, L]``: the decoded ids without ``</s>``, padded with 0; ``L``
      is the number of steps the batch took.
    """
    source = tf.cast(source, tf.int32)
    batch = tf.shape(source)[0]
    limits = self.output_limits(source)
    limit = self.output_limit(source)
    memory_kv, source_bias, caches = self._start_decoding(source, 1, limit)

    def body(position, tokens, finished, caches, outputs):
      log_probs, caches = self._step(tokens, position, caches, memory_kv, source_bias, limit)
      tokens = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
      tokens = tf.where(finished, PAD_ID, tokens)
      outputs = outputs.write(position, tokens)
      # A sequence ends at </s> or at its own limit, whatever the batch's longest source.
      finished = finished | tf.equal(tokens, END_ID) | (position + 1 >= limits)
      return position + 1, tokens, finished, caches, outputs

    def not_done(position, tokens, finished, caches, outputs):
      del tokens, caches, outputs
      # At least one step, so the output has a column even for an empty batch.
      return (position < limit) & ((position == 0) | ~tf.reduce_all(finished))

    start = (tf.constant(0), tf.fill([batch], START_ID), tf.zeros([batch], tf.bool), caches,
             tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None]))
    _, _, _, _, outputs = tf.while_loop(not_done, body, start)
    ids = tf.transpose(outputs.stack())
    return tf.where(tf.equal(ids, END_ID), PAD_ID, ids)

  def beam_search(self, source, beam_size=None, alpha=None):
    """Beam search ranked by length-normalized log-probability.

    Each step extends every live hypothesis by every token and ranks the
    extensions by log-probability. Those ending in ``</s>`` among the best
    ``beam_size`` end (the others are dropped, as in fairseq: so beam size 1
    follows the greedy path); the best ``beam_size`` that do not end live on.
    Ended hypotheses are ranked by ``log p / ((5 + length) / 6) ** alpha``
    (``length`` counts the tokens, ``</s>`` included), and the best
    ``beam_size`` are kept. A hypothesis that reaches the length limit ends
    there. The search stops when no live hypothesis can beat the best ended
    one (its log-probability can only fall, and the penalty is largest at
    the limit).

    Args:
      source: int32 ``[B, S]`` source ids, padded with 0.
      beam_size: hypotheses kept; default the ``beam_size`` param.
      alpha: the length penalty's exponent (>= 0); default the
        ``length_penalty`` param.

    Returns:
      ``(ids, scores)``: int32 ``[B, L]`` best hypotheses without ``</s>``,
      padded with 0, and their float32 ``[B]`` normalized scores.
    """
    beams = self.beam_size if beam_size is None else beam_size
    alpha = float(self.alpha if alpha is None else alpha)
    source = tf.cast(source, tf.int32)
    batch = tf.shape(source)[0]
    vocab = self.target_vocab_size
    limits = self.output_limits(source)
    limit = self.output_limit(source)
    memory_kv, source_bias, caches = self._start_decoding(source, beams, limit)
    # Only the first beam is alive at the start, so the first step's candidates are distinct.
    alive_log_prob = tf.tile(tf.constant([[0.0] + [NEG_INF] * (beams - 1)]), [batch, 1])
    alive = tf.zeros([batch, beams, limit], tf.int32)
    ended = tf.zeros([batch, beams, limit], tf.int32)
    ended_score = tf.fill([batch, beams], NEG_INF)
    batch_offsets = (tf.range(batch) * beams)[:, tf.newaxis]

    def body(position, tokens, alive, alive_log_prob, ended, ended_score, caches):
      log_probs, caches = self._step(tokens, position, caches, memory_kv, source_bias, limit)
      top_scores, parent, token, candidates = _beam_candidates(
          alive, alive_log_prob, log_probs, position, limit, (batch, beams, vocab))
      is_end = tf.equal(token, END_ID)
      ended, ended_score = _keep_ended(ended, ended_score, candidates, top_scores, is_end,
                                       position, limits, alpha, beams)
      # The best candidates that go on.
      alive_log_prob, keep = tf.math.top_k(tf.where(is_end, NEG_INF, top_scores), beams)
      alive = tf.gather(candidates, keep, batch_dims=1)
      tokens = tf.reshape(tf.gather(token, keep, batch_dims=1), [-1])
      rows = tf.reshape(tf.gather(parent, keep, batch_dims=1) + batch_offsets, [-1])
      caches = [(tf.gather(k, rows), tf.gather(v, rows)) for k, v in caches]
      return position + 1, tokens, alive, alive_log_prob, ended, ended_score, caches

    def not_done(position, tokens, alive, alive_log_prob, ended, ended_score, caches):
      del tokens, alive, ended, caches
      return _beam_search_goes_on(position, alive_log_prob, ended_score, limits, limit, alpha)

    start = (tf.constant(0), tf.fill([batch * beams], START_ID), alive, alive_log_prob, ended,
             ended_score, caches)
    position, _, _, _, ended, ended_score, _ = tf.while_loop(not_done, body, start)
    ids = ended[:, 0, :position]
    return tf.where(tf.equal(ids, END_ID), PAD_ID, ids), ended_score[:, 0]

  def decode(self, source):
    """Decodes ``source`` ``[B, S]`` with the model's params: greedy at ``beam_size`` 1, else beam search.

    Returns:
      int32 ``[B, L]`` ids without ``</s>``, padded with 0.
    """
    if self.beam_size == 1:
      return self.greedy_decode(source)
    return self.beam_search(source)[0]

  def get_config(self):
    return {'source_vocab_size': self.source_vocab_size,
            'target_vocab_size': self.target_vocab_size, 'params': self.params,
            'name': self.name}


def build_transformer(params, source_vocab_size, target_vocab_size, kernel_initializer=None):
  """The encoder-decoder Transformer, its variables created.

  Args:
    params: ``model_params``, see ``build_transformer.PARAMS``.
    source_vocab_size: ids of the source vocabulary (the data layer's).
    target_vocab_size: ids of the target vocabulary.
    kernel_initializer: the config's initializer of the projections' kernels
      (see :class:`Transformer`), or None.

  Returns:
    A :class:`Transformer` named ``transformer``.

  Raises:
    ConfigError: for bad ``params``, or ``embedding_sharing: all`` with two
      vocabularies of different sizes.
  """
  params = check_params(params, build_transformer.PARAMS, 'model_params')
  if params['d_model'] % (2 * params['num_heads']):
    raise ConfigError(f"model_params.d_model: {params['d_model']} must be a multiple of 2 x "
                      f"num_heads ({params['num_heads']}): each head gets an even width",
                      'model_params.d_model', 'invalid')
  if params['embedding_sharing'] == 'all' and source_vocab_size != target_vocab_size:
    raise ConfigError(
        f'model_params.embedding_sharing: \'all\' needs one vocabulary for source and target, got '
        f'{source_vocab_size} and {target_vocab_size} ids (set data_layer_params.joint_vocabulary)',
        'model_params.embedding_sharing', 'invalid')
  model = Transformer(source_vocab_size, target_vocab_size, params, kernel_initializer)
  model((tf.ones([1, 1], tf.int32), tf.ones([1, 1], tf.int32)))
  return model


build_transformer.PARAMS = schemas.TRANSFORMER_PARAMS
build_transformer.TASK = 'sequence_to_sequence'
build_transformer.TAKES_INITIALIZER = True
