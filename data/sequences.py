"""Vocabularies, length-bucketed batch plans and padding waste for sequence data (NumPy only).

A sequence-to-sequence example is a source sequence and a target sequence of
token ids. Batches pad every sequence to the longest of its batch, so a
batch of mixed lengths spends work on padding; the plans here sort the
examples by length (source length, then target length) and cut the sorted
order into batches, which keeps the padded share small.

A batch size is given in one of two units:

* ``words``: a fixed number of examples per batch;
* ``tokens``: a budget of padded tokens per batch, ``examples x (longest
  source + longest target)``; short examples make large batches.

Because the cut depends only on the sorted lengths, the batch boundaries (and
so the number of batches in an epoch) are the same every epoch; which
examples of equal length fill a batch, and the order of the batches, are the
data layer's random draws (``data.seq2seq``).

This module imports no TensorFlow, so scripts and the config layer can plan
batches and report padding without it.
"""

import numpy as np

BATCH_UNITS = ('words', 'tokens')
# How a text becomes tokens: its characters (Unicode code points), or its
# white-space separated words.
TOKEN_UNITS = ('chars', 'words')


def tokenize(text, unit, lowercase=False, delimiter=None):
  """The tokens of ``text``: a tuple of its characters (``chars``) or of its words (``words``).

  Args:
    text: a string.
    unit: one of ``TOKEN_UNITS``.
    lowercase: lower-case the text first.
    delimiter: ``words`` only: what separates two words (empty pieces, from
      two delimiters in a row, are no words); None: any run of white space.

  Raises:
    ValueError: for a unit not in ``TOKEN_UNITS``.
  """
  if lowercase:
    text = text.lower()
  if unit == 'chars':
    return tuple(text)
  if unit == 'words':
    if delimiter is None:
      return tuple(text.split())
    return tuple(piece for piece in text.split(delimiter) if piece)
  raise ValueError(f'token unit {unit!r} is not allowed; allowed: '
                   f'{", ".join(map(repr, TOKEN_UNITS))}')


def token_separator(unit, delimiter=None):
  """What joins tokens of ``unit`` back into a text: ``''`` for characters; for words
  their ``delimiter``, ``' '`` when it is None (white space)."""
  if unit == 'chars':
    return ''
  return ' ' if delimiter is None else delimiter


class Vocabulary:
  """Token strings <-> integer ids, with the special ids every sequence layer shares.

  Ids 0-3 are ``<pad>`` (padding, never a real token), ``<s>`` (start of a
  target), ``</s>`` (end of a target) and ``<unk>`` (a token outside the
  vocabulary); the symbols follow in the order given.

  Args:
    symbols: the distinct real tokens (strings), none of them a special token.

  Raises:
    ValueError: for a repeated symbol or one spelled like a special token.
  """

  SPECIALS = ('<pad>', '<s>', '</s>', '<unk>')
  PAD, START, END, UNK = range(4)

  def __init__(self, symbols):
    symbols = tuple(symbols)
    clash = set(symbols) & set(self.SPECIALS)
    if clash:
      raise ValueError(f'vocabulary symbols may not be special tokens: {sorted(clash)}')
    if len(set(symbols)) != len(symbols):
      raise ValueError('vocabulary symbols must be distinct')
    self.tokens = self.SPECIALS + symbols
    self._ids = {token: i for i, token in enumerate(self.tokens)}

  @property
  def size(self):
    """Number of ids, specials included."""
    return len(self.tokens)

  @property
  def symbols(self):
    """The real tokens, in id order."""
    return self.tokens[len(self.SPECIALS):]

  def id_of(self, token):
    """The id of ``token``, or ``UNK`` when it is not in the vocabulary."""
    return self._ids.get(token, self.UNK)

  def encode(self, tokens, start_end=False):
    """Ids of ``tokens`` (``<unk>`` for unknown ones), framed by ``<s>`` ... ``</s>`` when asked."""
    ids, unk = self._ids, self.UNK
    ids = [ids.get(t, unk) for t in tokens]
    return [self.START] + ids + [self.END] if start_end else ids

  def decode(self, ids):
    """The tokens of ``ids`` up to the first ``</s>`` or ``<pad>``; a leading ``<s>`` is skipped."""
    tokens = []
    for position, i in enumerate(int(i) for i in ids):
      if i in (self.END, self.PAD):
        break
      if i == self.START and position == 0:
        continue
      tokens.append(self.tokens[i])
    return tuple(tokens)

  def __eq__(self, other):
    return isinstance(other, Vocabulary) and self.tokens == other.tokens

  def __hash__(self):
    return hash(self.tokens)

  def __repr__(self):
    return f'Vocabulary({self.size} ids: {" ".join(self.symbols)})'


def check_batch_unit(unit):
  """Raises ValueError unless ``unit`` is one of ``BATCH_UNITS``."""
  if unit not in BATCH_UNITS:
    raise ValueError(f'batch unit {unit!r} is not allowed; allowed: '
                     f'{", ".join(map(repr, BATCH_UNITS))}')


def length_sort_key(source_lengths, target_lengths):
  """One int64 per example that orders by source length, then target length."""
  source_lengths = np.asarray(source_lengths, np.int64)
  target_lengths = np.asarray(target_lengths, np.int64)
  return source_lengths * (int(target_lengths.max(initial=0)) + 1) + target_lengths


def word_batch_bounds(num_examples, batch_size, keep_partial=False):
  """Boundaries of consecutive batches of ``batch_size`` examples in a sorted order.

  Args:
    num_examples: examples in the sorted order.
    batch_size: examples per batch.
    keep_partial: keep a last, smaller batch (an evaluation pass) instead of
      leaving the remainder out.

  Returns:
    int64 ``[num_batches + 1]``: batch ``i`` is sorted positions
    ``[bounds[i], bounds[i + 1])``.
  """
  full = num_examples // batch_size * batch_size
  bounds = np.arange(0, full + 1, batch_size, dtype=np.int64)
  if keep_partial and full < num_examples:
    bounds = np.append(bounds, num_examples)
  return bounds


def token_batch_bounds(source_lengths, target_lengths, max_tokens):
  """Greedy cut of a length-sorted order into batches of at most ``max_tokens`` padded tokens.

  A batch's padded size is ``examples x (longest source + longest target)``;
  each batch takes examples in order while that stays within the budget.

  Args:
    source_lengths: source lengths in the sorted order.
    target_lengths: target lengths in the same order.
    max_tokens: the token budget of one batch.

  Returns:
    int64 ``[num_batches + 1]`` boundaries, covering every example.

  Raises:
    ValueError: when one example alone exceeds the budget (naming both).
  """
  source_lengths = np.asarray(source_lengths, np.int64)
  target_lengths = np.asarray(target_lengths, np.int64)
  longest = int((source_lengths + target_lengths).max(initial=0))
  if longest > max_tokens:
    raise ValueError(f'a batch of {max_tokens} tokens cannot hold the longest example '
                     f'({longest} tokens, source and target)')
  bounds = [0]
  count = max_source = max_target = 0
  for source, target in zip(source_lengths.tolist(), target_lengths.tolist()):
    grown_source, grown_target = max(max_source, source), max(max_target, target)
    if count and (count + 1) * (grown_source + grown_target) > max_tokens:
      bounds.append(bounds[-1] + count)
      count, grown_source, grown_target = 0, source, target
    count += 1
    max_source, max_target = grown_source, grown_target
  if count:
    bounds.append(bounds[-1] + count)
  return np.asarray(bounds, np.int64)


def batch_bounds(unit, batch_size, source_lengths, target_lengths, keep_partial=False):
  """The boundaries of a length-sorted order for a batch in ``unit`` (``words`` or ``tokens``).

  In ``words``, the remainder of the examples is left out unless
  ``keep_partial``; in ``tokens``, every example is in a batch.
  """
  check_batch_unit(unit)
  if unit == 'words':
    return word_batch_bounds(len(source_lengths), batch_size, keep_partial)
  return token_batch_bounds(source_lengths, target_lengths, batch_size)


def padding_waste(source_lengths, target_lengths, bounds):
  """The share of padded positions in the batches of a plan.

  Args:
    source_lengths: source lengths in the sorted order.
    target_lengths: target lengths in the same order.
    bounds: batch boundaries into that order (``batch_bounds``).

  Returns:
    ``1 - real tokens / padded tokens`` over all batches (source and target
    together), in [0, 1); 0.0 for no batches.
  """
  source_lengths = np.asarray(source_lengths, np.int64)
  target_lengths = np.asarray(target_lengths, np.int64)
  real = padded = 0
  for start, end in zip(bounds[:-1], bounds[1:]):
    if end <= start:
      continue
    source, target = source_lengths[start:end], target_lengths[start:end]
    real += int(source.sum() + target.sum())
    padded += int((end - start) * (source.max() + target.max()))
  return 1.0 - real / padded if padded else 0.0


def batch_padding_waste(batches, pad_id=0, keys=('source', 'target')):
  """The share of ``pad_id`` positions in batches as a data layer yields them.

  Args:
    batches: an iterable of dicts of integer arrays (NumPy or anything
      ``np.asarray`` reads, such as eager tensors).
    pad_id: the padding id.
    keys: the entries of each batch to count.

  Returns:
    ``padded positions / all positions`` over every batch and key; 0.0 when
    there are none.
  """
  pads = total = 0
  for batch in batches:
    for key in keys:
      values = np.asarray(batch[key])
      pads += int((values == pad_id).sum())
      total += values.size
  return pads / total if total else 0.0
