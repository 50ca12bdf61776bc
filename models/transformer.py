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
from models import schemas

PAD_ID, START_ID, END_ID = 0, 1, 2
# Never a decoded token.
FORBIDDEN_OUTPUT_IDS = (PAD_ID, START_ID)
# Added to the attention logits of masked positions and to forbidden logits:
# finite, so a fully masked row gives a uniform distribution, not NaN.
NEG_INF = -1e9
LAYER_NORM_EPSILON = 1e-6


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


@keras.saving.register_keras_serializable(package='models')
class Attention(keras.layers.Layer):
  """Multi-head scaled dot-product attention with a fused query-key-value projection.

  Args:
    d_model: model width (a multiple of ``num_heads``).
    num_heads: number of heads.
    dropout: dropout rate on the attention probabilities.
    self_attention: one ``qkv`` projection of the input; otherwise ``query``
      projects the input and ``key_value`` the memory.
  """

  def __init__(self, d_model, num_heads, dropout=0.0, self_attention=True, **kwargs):
    super().__init__(**kwargs)
    self.d_model, self.num_heads, self.rate = d_model, num_heads, dropout
    self.self_attention = self_attention
    self.depth = d_model // num_heads
    if self_attention:
      self.qkv = keras.layers.Dense(3 * d_model, name='qkv')
    else:
      self.query = keras.layers.Dense(d_model, name='query')
      self.key_value = keras.layers.Dense(2 * d_model, name='key_value')
    self.output_projection = keras.layers.Dense(d_model, name='output')
    self.dropout = keras.layers.Dropout(dropout)

  def build(self, input_shape):
    # Every input of these layers (and a memory) is d_model wide, so the variables are made
    # here rather than by tracing a first call.
    del input_shape
    width = (None, None, self.d_model)
    projections = [self.qkv] if self.self_attention else [self.query, self.key_value]
    for layer in projections + [self.output_projection]:
      layer.build(width)

  def _heads(self, x):
    """``[B, T, d_model]`` -> ``[B, T, heads, depth]``."""
    shape = tf.shape(x)
    return tf.reshape(x, [shape[0], shape[1], self.num_heads, self.depth])

  def _merge(self, x):
    shape = tf.shape(x)
    return tf.reshape(x, [shape[0], shape[1], self.d_model])

  def memory_kv(self, memory):
    """The heads' keys and values of ``memory`` (cross-attention), each ``[B, S, heads, depth]``."""
    key, value = tf.split(self.key_value(memory), 2, axis=-1)
    return self._heads(key), self._heads(value)

  def attend(self, query, key, value, bias, training=False):
    """Attention of heads-shaped queries over keys/values; ``bias`` is float32, broadcast to ``[B, heads, T, S]``."""
    logits = tf.einsum('bthd,bshd->bhts', query, key)
    # Keras casts a layer's float arguments to its compute dtype; the bias is added in float32.
    logits = tf.cast(logits, tf.float32) / math.sqrt(self.depth) + tf.cast(bias, tf.float32)
    weights = tf.cast(tf.nn.softmax(logits, axis=-1), query.dtype)
    weights = self.dropout(weights, training=training)
    return self.output_projection(self._merge(tf.einsum('bhts,bshd->bthd', weights, value)))

  def call(self, inputs, memory=None, bias=0.0, training=False):
    if self.self_attention:
      query, key, value = (self._heads(x) for x in tf.split(self.qkv(inputs), 3, axis=-1))
    else:
      query = self._heads(self.query(inputs))
      key, value = self.memory_kv(memory)
    return self.attend(query, key, value, bias, training)

  def step(self, inputs, position, cache, bias):
    """Self-attention of one new position over the cached ones (decoding).

    Args:
      inputs: ``[N, 1, d_model]``, the new position.
      position: int32 scalar, its index.
      cache: ``(keys, values)``, each ``[N, L, heads, depth]``; positions
        before ``position`` hold earlier steps' keys and values.
      bias: float32 ``[1, 1, 1, L]`` hiding the positions after ``position``.

    Returns:
      ``(output [N, 1, d_model], updated cache)``.
    """
    query, key, value = (self._heads(x) for x in tf.split(self.qkv(inputs), 3, axis=-1))
    keys, values = cache
    at = tf.cast(tf.equal(tf.range(tf.shape(keys)[1]), position), keys.dtype)
    at = at[tf.newaxis, :, tf.newaxis, tf.newaxis]
    keys, values = keys + at * key, values + at * value
    return self.attend(query, keys, values, bias), (keys, values)

  def cross_step(self, inputs, memory_kv, bias):
    """Attention of new positions over precomputed memory keys and values (decoding)."""
    return self.attend(self._heads(self.query(inputs)), *memory_kv, bias)

  def get_config(self):
    return {**super().get_config(), 'd_model': self.d_model, 'num_heads': self.num_heads,
            'dropout': self.rate, 'self_attention': self.self_attention}


@keras.saving.register_keras_serializable(package='models')
class FeedForward(keras.layers.Layer):
  """``Dense(ff_size, relu) -> dropout -> Dense(d_model)``."""

  def __init__(self, d_model, ff_size, dropout=0.0, **kwargs):
    super().__init__(**kwargs)
    self.d_model, self.ff_size, self.rate = d_model, ff_size, dropout
    self.hidden = keras.layers.Dense(ff_size, activation='relu', name='hidden')
    self.output_projection = keras.layers.Dense(d_model, name='output')
    self.dropout = keras.layers.Dropout(dropout)

  def build(self, input_shape):
    del input_shape
    self.hidden.build((None, None, self.d_model))
    self.output_projection.build((None, None, self.ff_size))

  def call(self, inputs, training=False):
    return self.output_projection(self.dropout(self.hidden(inputs), training=training))

  def get_config(self):
    return {**super().get_config(), 'd_model': self.d_model, 'ff_size': self.ff_size,
            'dropout': self.rate}


class _Residual:
  """One residual sub-layer with its layer normalization, before (pre) or after (post) the sum."""

  def __init__(self, norm, dropout, pre_norm):
    self.norm, self.dropout, self.pre_norm = norm, dropout, pre_norm

  def __call__(self, x, sublayer, training):
    if self.pre_norm:
      return x + self.dropout(sublayer(self.norm(x)), training=training)
    return self.norm(x + self.dropout(sublayer(x), training=training))


def _layer_norm(name):
  return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name=name)


def _build_all(layers, d_model):
  for layer in layers:
    layer.build((None, None, d_model))


@keras.saving.register_keras_serializable(package='models')
class EncoderLayer(keras.layers.Layer):
  """Self-attention then feed-forward, each residual."""

  def __init__(self, d_model, num_heads, ff_size, dropout, attention_dropout, pre_norm, **kwargs):
    super().__init__(**kwargs)
    self.settings = dict(d_model=d_model, num_heads=num_heads, ff_size=ff_size, dropout=dropout,
                         attention_dropout=attention_dropout, pre_norm=pre_norm)
    self.self_attention = Attention(d_model, num_heads, attention_dropout, name='self_attention')
    self.self_attention_norm = _layer_norm('self_attention_layer_normalization')
    self.feed_forward = FeedForward(d_model, ff_size, dropout, name='feed_forward')
    self.feed_forward_norm = _layer_norm('feed_forward_layer_normalization')
    self.dropout = keras.layers.Dropout(dropout)
    self._attention_block = _Residual(self.self_attention_norm, self.dropout, pre_norm)
    self._feed_forward_block = _Residual(self.feed_forward_norm, self.dropout, pre_norm)

  def build(self, input_shape):
    del input_shape
    _build_all([self.self_attention, self.self_attention_norm, self.feed_forward,
                self.feed_forward_norm], self.settings['d_model'])

  def call(self, x, bias, training=False):
    x = self._attention_block(
        x, lambda y: self.self_attention(y, bias=bias, training=training), training)
    return self._feed_forward_block(x, lambda y: self.feed_forward(y, training=training), training)

  def get_config(self):
    return {**super().get_config(), **self.settings}


@keras.saving.register_keras_serializable(package='models')
class DecoderLayer(keras.layers.Layer):
  """Causal self-attention, attention over the encoder output, feed-forward; each residual."""

  def __init__(self, d_model, num_heads, ff_size, dropout, attention_dropout, pre_norm, **kwargs):
    super().__init__(**kwargs)
    self.settings = dict(d_model=d_model, num_heads=num_heads, ff_size=ff_size, dropout=dropout,
                         attention_dropout=attention_dropout, pre_norm=pre_norm)
    self.self_attention = Attention(d_model, num_heads, attention_dropout, name='self_attention')
    self.self_attention_norm = _layer_norm('self_attention_layer_normalization')
    self.cross_attention = Attention(d_model, num_heads, attention_dropout, self_attention=False,
                                     name='cross_attention')
    self.cross_attention_norm = _layer_norm('cross_attention_layer_normalization')
    self.feed_forward = FeedForward(d_model, ff_size, dropout, name='feed_forward')
    self.feed_forward_norm = _layer_norm('feed_forward_layer_normalization')
    self.dropout = keras.layers.Dropout(dropout)
    self._blocks = [_Residual(norm, self.dropout, pre_norm) for norm in (
        self.self_attention_norm, self.cross_attention_norm, self.feed_forward_norm)]

  def build(self, input_shape):
    del input_shape
    _build_all([self.self_attention, self.self_attention_norm, self.cross_attention,
                self.cross_attention_norm, self.feed_forward, self.feed_forward_norm],
               self.settings['d_model'])

  def call(self, x, memory, source_bias, target_bias, training=False):
    attend_self, attend_memory, feed_forward = self._blocks
    x = attend_self(x, lambda y: self.self_attention(y, bias=target_bias, training=training),
                    training)
    x = attend_memory(
        x, lambda y: self.cross_attention(y, memory=memory, bias=source_bias, training=training),
        training)
    return feed_forward(x, lambda y: self.feed_forward(y, training=training), training)

  def step(self, x, position, cache, memory_kv, source_bias, target_bias):
    """One decoding position: ``x`` ``[N, 1, d_model]``; returns ``(output, updated cache)``."""
    attend_self, attend_memory, feed_forward = self._blocks
    updated = []

    def self_attention(y):
      out, new_cache = self.self_attention.step(y, position, cache, target_bias)
      updated.append(new_cache)
      return out

    x = attend_self(x, self_attention, False)
    x = attend_memory(x, lambda y: self.cross_attention.cross_step(y, memory_kv, source_bias),
                      False)
    return feed_forward(x, self.feed_forward, False), updated[0]

  def get_config(self):
    return {**super().get_config(), **self.settings}


@keras.saving.register_keras_serializable(package='models')
class Transformer(keras.Model):
  """The encoder-decoder Transformer; see the module docstring.

  Args:
    source_vocab_size: ids of the source vocabulary.
    target_vocab_size: ids of the target vocabulary.
    params: checked ``model_params`` (``models.schemas.TRANSFORMER_PARAMS``).
  """

  def __init__(self, source_vocab_size, target_vocab_size, params, **kwargs):
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
        target_vocab_size, dtype='float32', name='logits')
    self.position_embedding = None
    if p['positions'] == 'learned':
      self.position_embedding = keras.layers.Embedding(
          self.max_length, self.d_model,
          embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02),
          name='position_embedding')
    self.embedding_dropout = keras.layers.Dropout(p['dropout'])
    layer_args = (self.d_model, p['num_heads'], p['ff_size'], p['dropout'],
                  p['attention_dropout'], pre_norm)
    self.encoder_layers = [EncoderLayer(*layer_args, name=f'encoder_layer_{i}')
                           for i in range(p['encoder_layers'])]
    self.decoder_layers = [DecoderLayer(*layer_args, name=f'decoder_layer_{i}')
                           for i in range(p['decoder_layers'])]
    # tf.train.Checkpoint follows attributes, not Keras' tracked lists (Keras 3 gives those
    # to SavedModel only): each block is an attribute too, so a checkpoint holds every weight.
    for layer in self.encoder_layers + self.decoder_layers:
      setattr(self, layer.name, layer)
    # Pre-norm blocks leave their sum unnormalized; one last normalization each.
    self.encoder_norm = _layer_norm('encoder_output_layer_normalization') if pre_norm else None
    self.decoder_norm = _layer_norm('decoder_output_layer_normalization') if pre_norm else None

  def build(self, input_shape):
    del input_shape
    for embedding in (self.source_embedding, self.target_embedding, self.position_embedding):
      if embedding is not None and not embedding.built:
        embedding.build()
    norms = [n for n in (self.encoder_norm, self.decoder_norm) if n is not None]
    projection = [self.output_projection] if self.output_projection is not None else []
    _build_all(self.encoder_layers + self.decoder_layers + norms + projection, self.d_model)

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
      scores = alive_log_prob[:, :, tf.newaxis] + tf.reshape(log_probs, [batch, beams, vocab])
      top_scores, top_index = tf.math.top_k(tf.reshape(scores, [batch, beams * vocab]), 2 * beams)
      parent, token = top_index // vocab, top_index % vocab
      here = tf.one_hot(position, limit, dtype=tf.int32)
      candidates = (tf.gather(alive, parent, batch_dims=1)
                    + token[:, :, tf.newaxis] * here[tf.newaxis, tf.newaxis, :])
      is_end = tf.equal(token, END_ID)
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
      ended = tf.gather(pool, keep, batch_dims=1)
      # The best candidates that go on.
      alive_log_prob, keep = tf.math.top_k(tf.where(is_end, NEG_INF, top_scores), beams)
      alive = tf.gather(candidates, keep, batch_dims=1)
      tokens = tf.reshape(tf.gather(token, keep, batch_dims=1), [-1])
      rows = tf.reshape(tf.gather(parent, keep, batch_dims=1) + batch_offsets, [-1])
      caches = [(tf.gather(k, rows), tf.gather(v, rows)) for k, v in caches]
      return position + 1, tokens, alive, alive_log_prob, ended, ended_score, caches

    def not_done(position, tokens, alive, alive_log_prob, ended, ended_score, caches):
      del tokens, alive, ended, caches
      # A source is done when no live hypothesis can beat its best ended one (the penalty
      # is largest at its limit) or its limit is reached.
      best_possible = alive_log_prob[:, 0] / length_penalty(limits, alpha)
      done = (ended_score[:, 0] >= best_possible) | (position >= limits)
      return (position < limit) & ~tf.reduce_all(done)

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


def build_transformer(params, source_vocab_size, target_vocab_size):
  """The encoder-decoder Transformer, its variables created.

  Args:
    params: ``model_params``, see ``build_transformer.PARAMS``.
    source_vocab_size: ids of the source vocabulary (the data layer's).
    target_vocab_size: ids of the target vocabulary.

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
  model = Transformer(source_vocab_size, target_vocab_size, params)
  model((tf.ones([1, 1], tf.int32), tf.ones([1, 1], tf.int32)))
  return model


build_transformer.PARAMS = schemas.TRANSFORMER_PARAMS
build_transformer.TASK = 'sequence_to_sequence'


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
  accuracy are the same as in one pass, but to float rounding and the
  dropout draws (which each chunk makes anew), while the memory and the
  working set are those of one chunk. On a CPU that is what keeps a
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
