"""The in-memory, length-bucketed pipeline of sequence-to-sequence data layers.

A sequence layer holds its split as padded id arrays and yields batches as
dicts:

* ``source``: int32 ``[B, S]``, the source ids, padded with ``<pad>`` (0);
* ``target``: int32 ``[B, T]``, ``<s>`` target ids ``</s>``, padded with 0
  (a model reads ``target[:, :-1]`` and predicts ``target[:, 1:]``);
* ``word_index``: int32 ``[B]``, each example's word in the split's word
  list (``references[word_index]`` are all its reference targets).

``S`` and ``T`` are the longest lengths of the batch, not of the split.

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

# Sub-key purposes of a training epoch (SHUFFLE_KEY orders the examples).
BATCH_CHOICE_KEY = 2
STEP_ORDER_KEY = 3


class SequenceDataLayer(DataLayer):
  """Base class of sequence-to-sequence data layers.

  Subclasses call :meth:`set_examples` in their constructor and set
  ``source_vocabulary`` and ``target_vocabulary``.

  ``TASK`` names the workload family its batches are for (``framework.tasks``).

  Attributes:
    batch_unit: ``'words'`` or ``'tokens'``, the unit of ``batch_size``.
    source_vocabulary, target_vocabulary: :class:`data.sequences.Vocabulary`.
    words: the split's word list (what a ``word_index`` points at).
    references: per word, the tuple of its reference target token tuples.
  """

  TASK = 'sequence_to_sequence'

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    self.batch_unit = 'words'
    self.source_vocabulary = None
    self.target_vocabulary = None
    self.words = ()
    self.references = ()
    self._source = self._target = None
    self._source_lengths = self._target_lengths = None
    self._word_index = None
    self._order = self._sort_key = None
    self._bounds = {}

  def set_examples(self, sources, targets, word_index):
    """Stores the split as padded arrays and sorts it by length.

    Args:
      sources: one list of source ids per example.
      targets: one list of target ids per example, ``<s>`` and ``</s>`` included.
      word_index: per example, its index in ``words``.
    """
    self.num_examples = len(sources)
    self._source_lengths = np.array([len(s) for s in sources], np.int64)
    self._target_lengths = np.array([len(t) for t in targets], np.int64)
    self._source = _padded(sources, self._source_lengths)
    self._target = _padded(targets, self._target_lengths)
    self._word_index = np.asarray(word_index, np.int32)
    key = sequences.length_sort_key(self._source_lengths, self._target_lengths)
    # The stable sort keeps the split's own order among equal lengths (eval order).
    self._order = np.argsort(key, kind='stable')
    self._sort_key = key

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
    """Serves a batch of words as strings: ``(TensorSpec [None] string, words -> int32 [B, S] ids)``."""
    return tf.TensorSpec([None], tf.string, name='words'), self.encode_words

  def encode_words(self, words):
    """String words -> source ids ``[B, S]``; implemented by each layer."""
    raise NotImplementedError

  def dataset(self, batch_size, seed=0, start_batch=0):
    """Returns a ``tf.data.Dataset`` of batch dicts (see the module docstring)."""
    check_start_batch(start_batch)
    bounds = self.batch_bounds(batch_size)
    source, target = tf.constant(self._source), tf.constant(self._target)
    source_lengths = tf.constant(self._source_lengths, tf.int32)
    target_lengths = tf.constant(self._target_lengths, tf.int32)
    word_index = tf.constant(self._word_index)

    def make_batch(index):
      longest_source = tf.reduce_max(tf.gather(source_lengths, index))
      longest_target = tf.reduce_max(tf.gather(target_lengths, index))
      return {'source': tf.gather(source, index)[:, :longest_source],
              'target': tf.gather(target, index)[:, :longest_target],
              'word_index': tf.gather(word_index, index)}

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
