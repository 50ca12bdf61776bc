"""The in-memory, length-bucketed pipeline of sequence-to-sequence data layers.

A sequence layer holds its split as padded id arrays and yields batches as
dicts:

* ``source``: int32 ``[B, S]``, the source ids, padded with ``<pad>`` (0);
* ``target``: int32 ``[B, T]``, ``<s>`` target ids ``</s>``, padded with 0
  (a model reads ``target[:, :-1]`` and predicts ``target[:, 1:]``);
* ``source_index``: int32 ``[B]``, each example's source in the split's
  list of distinct sources (``references[source_index]`` are all its
  reference targets).

``S`` and ``T`` are the longest lengths of the batch, not of the split.

The interface a task reads speaks of sources, targets and tokens:
``sources`` and ``references`` (above), ``encode_sources`` (strings to
source ids, in TensorFlow, for serving), ``target_strings`` (target ids to
strings, in TensorFlow) and ``decode_target`` (one row of ids to its tuple of
tokens, in NumPy, for scoring). ``METRIC_NAMES`` names the two error rates a
task reports (``ser``/``ter`` by default; CMUdict says ``wer``/``per``), and
``SERVING_NAMES`` the input and output of an exported model.

Batching (``data.sequences``): examples are sorted by (source length, target
length) and the sorted order is cut into batches of ``batch_size`` examples
(unit ``words``) or of at most ``batch_size`` padded tokens (unit
``tokens``). The cut, and so the number of batches per epoch, is fixed; each
training epoch draws, from a stateless key made of ``(seed, epoch)``:

1. the order of examples of equal lengths (and, in ``words``, which examples
   are left out when the batch does not divide the split);
2. which batches are left out when the number of workers does not divide
   the number of batches;
3. the order of the steps. The batches of one step, one per worker, are
   neighbours in the sorted order, so the workers of a step wait for each
   other as little as possible.

The stream is a pure function of ``(seed, num_workers, worker_index,
batch_size)`` and resumes exactly at ``start_batch``, as in ``data.base``.
In eval mode every example is read once, in sorted order, and worker ``w``
takes batches ``w, w + W, ...``.
"""

import numpy as np
import tensorflow as tf

from core.params import ConfigError
from data import sequences
from data.base import SHUFFLE_KEY, DataLayer, check_batch_size, check_start_batch
from data.base import epoch_key, sub_key
from data.sequences import Vocabulary

# Token strings are looked up by a 62-bit hash of their bytes (no lookup-table
# resource, so a SavedModel holds the vocabulary as constants); a hit is
# confirmed by comparing the strings, so a collision can only turn a token
# into <unk>, never into another token.
HASH_BUCKETS = 2 ** 62

# Sub-key purposes of a training epoch (SHUFFLE_KEY orders the examples).
BATCH_CHOICE_KEY = 2
STEP_ORDER_KEY = 3


class SequenceDataLayer(DataLayer):
  """Base class of sequence-to-sequence data layers.

  Subclasses call :meth:`set_examples` in their constructor and set
  ``source_vocabulary``, ``target_vocabulary``, ``sources``,
  ``references`` and, when they differ from the defaults, the tokenization
  attributes below.

  ``TASK`` names the workload family its batches are for (``framework.tasks``).
  ``METRIC_NAMES`` are the names of the sequence and the token error rate
  (what share of sources decode to none of their references; edit distance
  over reference length). ``SERVING_NAMES`` are the exported model's input
  and output names.

  Attributes:
    batch_unit: ``'words'`` or ``'tokens'``, the unit of ``batch_size``.
    source_vocabulary, target_vocabulary: :class:`data.sequences.Vocabulary`.
    source_tokens, target_tokens: ``'chars'`` or ``'words'``, how a source
      string and a target string are cut into tokens.
    token_delimiter: what separates two words (``words``); None: any run of
      white space.
    max_source_length: the longest source in tokens the layer reads (infer
      refuses a longer one), or None; ``source_length_key`` is its config key.
    lowercase: whether a source is lower-cased before it is cut.
    target_separator: what joins target tokens into a string (``''`` for
      characters, ``token_delimiter`` or ``' '`` for words).
    sources: the split's distinct sources (what a ``source_index`` points at).
    references: per source, the tuple of its reference target token tuples.
  """

  TASK = 'sequence_to_sequence'
  METRIC_NAMES = ('ser', 'ter')
  SERVING_NAMES = ('sources', 'predictions')

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    self.batch_unit = 'words'
    self.source_vocabulary = None
    self.target_vocabulary = None
    self.source_tokens = 'chars'
    self.target_tokens = 'words'
    self.lowercase = False
    self.token_delimiter = None
    self.max_source_length = None
    self.source_length_key = 'max_source_length'
    self.sources = ()
    self.references = ()
    self._source = self._target = None
    self._source_lengths = self._target_lengths = None
    self._source_index = None
    self._order = self._sort_key = None
    self._bounds = {}

  @property
  def target_separator(self):
    return sequences.token_separator(self.target_tokens, self.token_delimiter)

  def set_examples(self, sources, targets, source_index):
    """Stores the split as padded arrays and sorts it by length.

    Args:
      sources: one list of source ids per example.
      targets: one list of target ids per example, ``<s>`` and ``</s>`` included.
      source_index: per example, its index in ``sources``.
    """
    self.num_examples = len(sources)
    self._source_lengths = np.array([len(s) for s in sources], np.int64)
    self._target_lengths = np.array([len(t) for t in targets], np.int64)
    self._source = _padded(sources, self._source_lengths)
    self._target = _padded(targets, self._target_lengths)
    self._source_index = np.asarray(source_index, np.int32)
    key = sequences.length_sort_key(self._source_lengths, self._target_lengths)
    # The stable sort keeps the split's own order among equal lengths (eval order).
    self._order = np.argsort(key, kind='stable')
    self._sort_key = key
    self._bounds = {}  # the cuts of the examples set before

  @property
  def source_vocab_size(self):
    return self.source_vocabulary.size

  @property
  def target_vocab_size(self):
    return self.target_vocabulary.size

  def batch_bounds(self, batch_size):
    """The fixed batch boundaries into the length-sorted order (cached per batch size).

    Raises:
      ConfigError: for a token budget smaller than the longest example.
    """
    check_batch_size(batch_size)
    if batch_size not in self._bounds:
      try:
        self._bounds[batch_size] = sequences.batch_bounds(
            self.batch_unit, batch_size, self._source_lengths[self._order],
            self._target_lengths[self._order], keep_partial=self.mode == 'eval')
      except ValueError as exc:
        raise ConfigError(f'batch_size: {exc}; give a larger batch in tokens') from None
    return self._bounds[batch_size]

  def batches_per_epoch(self, batch_size):
    """Train: full batches one worker reads per epoch. Eval: this worker's batches of the pass."""
    batches = len(self.batch_bounds(batch_size)) - 1
    if self.mode == 'eval':
      return len(range(self.worker_index, batches, self.num_workers))
    return batches // self.num_workers

  def train_batches_per_epoch(self, batch_size):
    batches = self.batches_per_epoch(batch_size)
    if batches == 0:
      raise ConfigError(
          f'batch_size: {batch_size} {self.batch_unit} per worker x {self.num_workers} worker(s) '
          f'makes no full batch of the {self.num_examples} examples of the {self.mode} split')
    return batches

  def padding_waste(self, batch_size, seed=0):
    """Measures the share of padded positions in one epoch of this worker's batches.

    Reads the first epoch of :meth:`dataset` (eval mode: the pass) and counts
    ``<pad>`` positions of ``source`` and ``target`` over all positions.
    """
    batches = self.dataset(batch_size, seed).take(self.batches_per_epoch(batch_size))
    return sequences.batch_padding_waste(batches.as_numpy_iterator(), Vocabulary.PAD)

  def serving_input(self):
    """Serves a batch of sources as strings: ``(TensorSpec [None] string, encode_sources)``."""
    return tf.TensorSpec([None], tf.string, name=self.SERVING_NAMES[0]), self.encode_sources

  def encode_sources(self, strings):
    """Source strings -> source ids, as the split's sources were encoded.

    Args:
      strings: tf.string ``[B]``; lower-cased when ``lowercase``, cut into
        ``source_tokens``; a token outside the vocabulary becomes ``<unk>``.

    Returns:
      int32 ``[B, S]`` padded with 0, ``S`` the longest source.
    """
    if self.lowercase:
      strings = tf.strings.lower(strings, encoding='utf-8')
    if self.source_tokens == 'chars':
      tokens = tf.strings.unicode_split(strings, 'UTF-8')
    elif self.token_delimiter is None:
      tokens = tf.strings.split(strings)
    else:
      # Two delimiters in a row make no empty word, as tokenize_source reads them.
      tokens = tf.strings.split(strings, sep=self.token_delimiter)
      tokens = tf.ragged.boolean_mask(tokens, tf.strings.length(tokens) > 0)
    ids = token_ids(self.source_vocabulary, tokens.flat_values)
    return tokens.with_flat_values(ids).to_tensor(Vocabulary.PAD)

  def target_strings(self, ids):
    """Target ids -> target strings, tokens joined by ``target_separator``.

    Args:
      ids: int ``[B, T]``; a leading ``<s>`` is skipped, and reading stops at
        the first ``</s>`` or ``<pad>``.

    Returns:
      tf.string ``[B]``, e.g. ``b'K AE T'``.
    """
    ids = tf.cast(ids, tf.int32)
    running = tf.math.cumprod(
        tf.cast((ids != Vocabulary.END) & (ids != Vocabulary.PAD), tf.int32), axis=1)
    first = tf.range(tf.shape(ids)[1]) == 0
    keep = (running > 0) & ~(first[tf.newaxis, :] & (ids == Vocabulary.START))
    tokens = tf.gather(tf.constant(self.target_vocabulary.tokens), ids)
    return tf.strings.reduce_join(tf.ragged.boolean_mask(tokens, keep), axis=1,
                                  separator=self.target_separator)

  def decode_target(self, ids):
    """Target ids (one row, NumPy or a list) -> the tuple of target tokens, as ``references`` holds."""
    return self.target_vocabulary.decode(ids)

  def tokenize_source(self, text):
    """The source tokens of one string, as :meth:`encode_sources` cuts it (in Python)."""
    return sequences.tokenize(text, self.source_tokens, self.lowercase, self.token_delimiter)

  def unknown_source_tokens(self, texts):
    """How many tokens of the source strings ``texts`` are outside the source vocabulary."""
    vocabulary = self.source_vocabulary
    return sum(vocabulary.id_of(token) == Vocabulary.UNK
               for text in texts for token in self.tokenize_source(text))

  def dataset(self, batch_size, seed=0, start_batch=0):
    """Returns a ``tf.data.Dataset`` of batch dicts (see the module docstring)."""
    check_start_batch(start_batch)
    bounds = self.batch_bounds(batch_size)
    source, target = tf.constant(self._source), tf.constant(self._target)
    source_lengths = tf.constant(self._source_lengths, tf.int32)
    target_lengths = tf.constant(self._target_lengths, tf.int32)
    source_index = tf.constant(self._source_index)

    def make_batch(index):
      longest_source = tf.reduce_max(tf.gather(source_lengths, index))
      longest_target = tf.reduce_max(tf.gather(target_lengths, index))
      return {'source': tf.gather(source, index)[:, :longest_source],
              'target': tf.gather(target, index)[:, :longest_target],
              'source_index': tf.gather(source_index, index)}

    if self.mode == 'eval':
      mine = np.arange(self.worker_index, len(bounds) - 1, self.num_workers)
      order = tf.constant(self._order, tf.int32)
      ds = tf.data.Dataset.from_tensor_slices((bounds[mine], bounds[mine + 1])).skip(start_batch)
      ds = ds.map(lambda start, end: make_batch(order[start:end]),
                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
      steps = self.train_batches_per_epoch(batch_size)
      ds = self._train_batches(bounds, steps, seed, start_batch, make_batch)
    return ds.prefetch(tf.data.AUTOTUNE)

  def _train_batches(self, bounds, steps, seed, start_batch, make_batch):
    """An infinite dataset of training batches (the draws of the module docstring)."""
    n, kept = self.num_examples, int(bounds[-1])
    workers, worker = self.num_workers, self.worker_index
    first_epoch, first_skip = divmod(start_batch, steps)
    sort_key = tf.constant(self._sort_key)
    starts, ends = tf.constant(bounds[:-1]), tf.constant(bounds[1:])
    num_batches = len(bounds) - 1

    def epoch_batches(epoch):
      key = epoch_key(seed, epoch)
      shuffled = tf.random.experimental.stateless_shuffle(
          tf.range(n), seed=sub_key(key, SHUFFLE_KEY))[:kept]
      order = tf.gather(shuffled, tf.argsort(tf.gather(sort_key, shuffled), stable=True))
      chosen = tf.random.experimental.stateless_shuffle(
          tf.range(num_batches), seed=sub_key(key, BATCH_CHOICE_KEY))[:steps * workers]
      groups = tf.reshape(tf.sort(chosen), [steps, workers])
      step_order = tf.random.experimental.stateless_shuffle(
          tf.range(steps), seed=sub_key(key, STEP_ORDER_KEY))
      mine = tf.gather(groups[:, worker], step_order)
      mine = mine[tf.where(epoch == first_epoch, first_skip, 0):]
      ds = tf.data.Dataset.from_tensor_slices((tf.gather(starts, mine), tf.gather(ends, mine)))
      return ds.map(lambda start, end: make_batch(order[start:end]))

    return tf.data.Dataset.counter(first_epoch).flat_map(epoch_batches)


def _padded(sequences_, lengths):
  """int32 ``[N, longest]`` of the sequences, padded with 0 (``<pad>``)."""
  out = np.zeros([len(sequences_), int(lengths.max(initial=0))], np.int32)
  for row, sequence in enumerate(sequences_):
    out[row, :len(sequence)] = sequence
  return out


def token_ids(vocabulary, tokens):
  """Ids of token strings in ``vocabulary`` (``<unk>`` for the others), in TensorFlow.

  Args:
    vocabulary: a :class:`data.sequences.Vocabulary`.
    tokens: tf.string ``[N]``.

  Returns:
    int32 ``[N]``.
  """
  symbols = tf.constant(vocabulary.symbols or ('',), tf.string)
  hashes = tf.strings.to_hash_bucket_fast(symbols, HASH_BUCKETS)
  order = tf.argsort(hashes)
  sorted_hashes = tf.gather(hashes, order)
  wanted = tf.strings.to_hash_bucket_fast(tokens, HASH_BUCKETS)
  at = tf.minimum(tf.searchsorted(sorted_hashes, wanted), tf.size(symbols) - 1)
  found = tf.gather(order, at)
  hit = tf.equal(tf.gather(symbols, found), tokens) & (len(vocabulary.symbols) > 0)
  return tf.where(hit, found + len(Vocabulary.SPECIALS), Vocabulary.UNK)
