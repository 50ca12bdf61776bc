"""The Transformer's building blocks: multi-head attention, the feed-forward and the encoder and decoder layers.

Each layer works in its Keras dtype policy's compute dtype, with the
attention softmax in float32; every layer normalization's name contains
``layer_normalization`` and every bias is named ``bias`` (see
``models.transformer``, which assembles them into the encoder-decoder
model). The ``step`` methods serve decoding: one new position at a time,
over keys and values cached per layer.
"""

import math

import keras
import tensorflow as tf

from models import initializers

LAYER_NORM_EPSILON = 1e-6


@keras.saving.register_keras_serializable(package='models')
class Attention(keras.layers.Layer):
  """Multi-head scaled dot-product attention with a fused query-key-value projection.

  Args:
    d_model: model width (a multiple of ``num_heads``).
    num_heads: number of heads.
    dropout: dropout rate on the attention probabilities.
    self_attention: one ``qkv`` projection of the input; otherwise ``query``
      projects the input and ``key_value`` the memory.
    kernel_initializer: the config's initializer of the projections' kernels
      (``models.initializers.KernelInitializers``; a fused kernel is drawn
      as its separate projections), or None for Glorot uniform.
  """

  def __init__(self, d_model, num_heads, dropout=0.0, self_attention=True,
               kernel_initializer=None, **kwargs):
    super().__init__(**kwargs)
    self.d_model, self.num_heads, self.rate = d_model, num_heads, dropout
    self.self_attention = self_attention
    self.depth = d_model // num_heads

    def kernel(parts=1):
      return initializers.kernel(kernel_initializer, initializers.KERAS_DEFAULT, parts)

    if self_attention:
      self.qkv = keras.layers.Dense(3 * d_model, kernel_initializer=kernel(3), name='qkv')
    else:
      self.query = keras.layers.Dense(d_model, kernel_initializer=kernel(), name='query')
      self.key_value = keras.layers.Dense(2 * d_model, kernel_initializer=kernel(2),
                                          name='key_value')
    self.output_projection = keras.layers.Dense(d_model, kernel_initializer=kernel(),
                                                name='output')
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
  """``Dense(ff_size, relu) -> dropout -> Dense(d_model)``; ``kernel_initializer`` as :class:`Attention`'s."""

  def __init__(self, d_model, ff_size, dropout=0.0, kernel_initializer=None, **kwargs):
    super().__init__(**kwargs)
    self.d_model, self.ff_size, self.rate = d_model, ff_size, dropout
    self.hidden = keras.layers.Dense(
        ff_size, activation='relu', name='hidden',
        kernel_initializer=initializers.kernel(kernel_initializer, initializers.KERAS_DEFAULT))
    self.output_projection = keras.layers.Dense(
        d_model, name='output',
        kernel_initializer=initializers.kernel(kernel_initializer, initializers.KERAS_DEFAULT))
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


def layer_norm(name):
  """A layer normalization with the model's epsilon."""
  return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name=name)


def build_all(layers, d_model):
  """Builds each of ``layers`` for inputs ``d_model`` wide."""
  for layer in layers:
    layer.build((None, None, d_model))


@keras.saving.register_keras_serializable(package='models')
class EncoderLayer(keras.layers.Layer):
  """Self-attention then feed-forward, each residual; ``kernel_initializer`` as :class:`Attention`'s."""

  def __init__(self, d_model, num_heads, ff_size, dropout, attention_dropout, pre_norm,
               kernel_initializer=None, **kwargs):
    super().__init__(**kwargs)
    self.settings = dict(d_model=d_model, num_heads=num_heads, ff_size=ff_size, dropout=dropout,
                         attention_dropout=attention_dropout, pre_norm=pre_norm)
    self.self_attention = Attention(d_model, num_heads, attention_dropout,
                                    kernel_initializer=kernel_initializer, name='self_attention')
    self.self_attention_norm = layer_norm('self_attention_layer_normalization')
    self.feed_forward = FeedForward(d_model, ff_size, dropout,
                                    kernel_initializer=kernel_initializer, name='feed_forward')
    self.feed_forward_norm = layer_norm('feed_forward_layer_normalization')
    self.dropout = keras.layers.Dropout(dropout)
    self._attention_block = _Residual(self.self_attention_norm, self.dropout, pre_norm)
    self._feed_forward_block = _Residual(self.feed_forward_norm, self.dropout, pre_norm)

  def build(self, input_shape):
    del input_shape
    build_all([self.self_attention, self.self_attention_norm, self.feed_forward,
                self.feed_forward_norm], self.settings['d_model'])

  def call(self, x, bias, training=False):
    x = self._attention_block(
        x, lambda y: self.self_attention(y, bias=bias, training=training), training)
    return self._feed_forward_block(x, lambda y: self.feed_forward(y, training=training), training)

  def get_config(self):
    return {**super().get_config(), **self.settings}


@keras.saving.register_keras_serializable(package='models')
class DecoderLayer(keras.layers.Layer):
  """Causal self-attention, attention over the encoder output, feed-forward; each residual.

  ``kernel_initializer`` as :class:`Attention`'s.
  """

  def __init__(self, d_model, num_heads, ff_size, dropout, attention_dropout, pre_norm,
               kernel_initializer=None, **kwargs):
    super().__init__(**kwargs)
    self.settings = dict(d_model=d_model, num_heads=num_heads, ff_size=ff_size, dropout=dropout,
                         attention_dropout=attention_dropout, pre_norm=pre_norm)
    self.self_attention = Attention(d_model, num_heads, attention_dropout,
                                    kernel_initializer=kernel_initializer, name='self_attention')
    self.self_attention_norm = layer_norm('self_attention_layer_normalization')
    self.cross_attention = Attention(d_model, num_heads, attention_dropout, self_attention=False,
                                     kernel_initializer=kernel_initializer, name='cross_attention')
    self.cross_attention_norm = layer_norm('cross_attention_layer_normalization')
    self.feed_forward = FeedForward(d_model, ff_size, dropout,
                                    kernel_initializer=kernel_initializer, name='feed_forward')
    self.feed_forward_norm = layer_norm('feed_forward_layer_normalization')
    self.dropout = keras.layers.Dropout(dropout)
    self._blocks = [_Residual(norm, self.dropout, pre_norm) for norm in (
        self.self_attention_norm, self.cross_attention_norm, self.feed_forward_norm)]

  def build(self, input_shape):
    del input_shape
    build_all([self.self_attention, self.self_attention_norm, self.cross_attention,
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
