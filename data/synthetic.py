"""Random images and labels of any shape, for benchmarks that must not wait on input."""

import tensorflow as tf

from data import synthetic_facts
from data.base import DataLayer, check_batch_size, check_start_batch, epoch_key, sub_key


class SyntheticDataLayer(DataLayer):
  """Standard-normal images and uniform labels, generated once and repeated.

  One batch is drawn from ``(seed, worker_index)`` and every batch is that
  batch, so the pipeline costs nothing. ``num_examples`` only sets the length of
  an epoch (and of the eval pass); ``start_batch`` skips eval batches and is
  otherwise irrelevant since all train batches are equal.
  """

  # What it accepts and how long its epoch is: data/synthetic_facts.py (no TensorFlow).
  PARAMS = synthetic_facts.PARAMS

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    self.num_examples = self.params['num_examples']
    self.image_shape = tuple(self.params['image_shape'])
    self.num_classes = self.params['num_classes']
    self.split = 'train' if mode == 'train' else 'validation'

  def dataset(self, batch_size, seed=0, start_batch=0):
    check_batch_size(batch_size)
    check_start_batch(start_batch)
    if self.mode == 'train':
      self.train_batches_per_epoch(batch_size)
    key = sub_key(epoch_key(seed, 0), self.worker_index)
    images = tf.random.stateless_normal([batch_size, *self.image_shape], seed=sub_key(key, 0))
    labels = tf.random.stateless_uniform([batch_size], seed=sub_key(key, 1), minval=0,
                                         maxval=self.num_classes, dtype=tf.int32)
    batch = tf.data.Dataset.from_tensors((images, labels))
    if self.mode == 'train':
      return batch.repeat()
    # The worker's share of a strided split, as the file-backed layers cut it.
    count = len(range(self.worker_index, self.num_examples, self.num_workers))
    ds = batch.repeat(count // batch_size)
    if count % batch_size:
      ds = ds.concatenate(tf.data.Dataset.from_tensors(
          (images[:count % batch_size], labels[:count % batch_size])))
    return ds.skip(start_batch)
