"""A run's training set as its run directory records it, and the check of it at resume.

A checkpoint's data position counts batches of one training set: resumed on
another (files added, removed or changed), the same position names other
examples, and a layer that holds out a validation split from the training
files holds out others. So a data layer that trains from files says what its
training set is (:class:`TrainSet`: its number of examples and a fingerprint
of what they are made of, as the layer can tell it cheaply: the file names of
an image folder, the names and sizes of TFRecord files, the pairs of a text
file), the run directory keeps that record, and a later start compares: a
change is one line with both counts, and ``accept_changed_train_dir: true``
goes on with the new set and records it.

The image folder keeps its record in ``image_statistics.json``, beside the
statistics computed from the same files (in ``train_set.json`` when ``mean``
and ``std`` are given); the other layers in ``train_set.json`` (:func:`hold`).
"""

import dataclasses
import hashlib
import json
import os
import sys

import tensorflow as tf

from data.base import DataError, holds_checkpoints, write_json_atomically

FILE = 'train_set.json'
ACCEPT_KEY = 'accept_changed_train_dir'


def fingerprint(lines):
  """A short hash of ``lines`` (strings), in order: what a training set is made of."""
  digest = hashlib.blake2b(digest_size=8)
  for line in lines:
    digest.update(f'{line}\n'.encode('utf-8'))
  return digest.hexdigest()


def file_lines(paths, sizes):
  """The fingerprint lines of files by base name and size (a copy elsewhere is the same set)."""
  return (f'{os.path.basename(path)}:{size}' for path, size in zip(paths, sizes))


@dataclasses.dataclass(frozen=True)
class TrainSet:
  """A training set: its size and fingerprint, and how its messages name it.

  Attributes:
    kind: the data layer's name in messages (``'tfrecord'``).
    source: what the set is read from, in messages (``'train_dir /data/flowers'``).
    examples: its number of training examples.
    fingerprint: :func:`fingerprint` of what the examples are made of.
    unit: what an example is called in messages (``'images'``).
    parts: what the fingerprint covers, for a change of it alone (``'file names'``).
  """
  kind: str
  source: str
  examples: int
  fingerprint: str
  unit: str = 'examples'
  parts: str = 'files'

  def record(self):
    """The keys a run directory keeps of the set."""
    return {'train_examples': self.examples, 'fingerprint': self.fingerprint}

  def change(self, saved, path):
    """How the set differs from ``saved`` (a record read from ``path``), in words; None: it does not.

    A record without a fingerprint is held to its count alone; one without a
    count (written before runs recorded it) to nothing.
    """
    then, kept = saved.get('train_examples'), saved.get('fingerprint')
    if then is None or (then == self.examples and kept in (None, self.fingerprint)):
      return None
    if then != self.examples:
      return (f'{self.examples} training {self.unit} now, {then} when the checkpoints beside '
              f'{path} were trained')
    return f'{self.examples} training {self.unit} then and now, but other {self.parts}'

  def check(self, saved, path, accepted, also=''):
    """Holds the set to the record ``saved`` (read from ``path``).

    Args:
      saved: the run directory's record (``record()``'s keys).
      path: the file it was read from, for messages.
      accepted: ``accept_changed_train_dir``: a change is said, not refused.
      also: what else resuming would read anew, for the refusal (``' (and validation split)'``).

    Returns:
      None when the set is the recorded one, else the one line that says a
      change was accepted (the caller records the new set).

    Raises:
      DataError: the set changed and the change is not accepted.
    """
    change = self.change(saved, path)
    if change is None:
      return None
    if not accepted:
      raise DataError(f'{self.kind}: {self.source} changed since this run directory was '
                      f'trained: {change}; resuming would read another training set{also} from '
                      'the same data position. Put the files back, train in a new logdir, or go '
                      f'on with them: --set data_layer_params.{ACCEPT_KEY}=true')
    return f'{self.kind}: {self.source} changed: {change}; going on with it ({ACCEPT_KEY})'


def read(path):
  """The record kept in ``path``, or None when there is none.

  Raises:
    DataError: the file is there but cannot be read.
  """
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      saved = json.loads(f.read())
    if not isinstance(saved, dict):
      raise ValueError('not a JSON object')
  except (tf.errors.OpError, ValueError) as e:
    raise DataError(f'{path}: unreadable ({e}); it records the training set the checkpoints '
                    "beside it were trained on: put it back, or delete it to record today's") from None
  return saved


def hold(layer, now, kept=''):
  """At a training start, holds ``now`` to the set the run directory's checkpoints were trained on.

  Called by a train layer once it knows its run directory. Without
  checkpoints there (a first start), or without a record beside them (a
  run directory from before records), the set is to be recorded; with both
  it is checked (:meth:`TrainSet.check`), and an accepted change is said in
  one line (worker 0) and to be recorded. Every worker refuses alike.

  Args:
    layer: the data layer (its ``run_dir``, ``params``, ``worker_index``).
    now: its :class:`TrainSet`.
    kept: what stays as recorded when a change is accepted, appended to its line.

  Returns:
    Whether ``now`` is to be recorded (:func:`record`, when the layer first
    writes into the run directory).

  Raises:
    DataError: the set changed and ``accept_changed_train_dir`` is false.
  """
  if layer.run_dir is None:
    return False
  path = os.path.join(layer.run_dir, FILE)
  saved = read(path) if holds_checkpoints(layer.run_dir) else None
  if saved is None:
    return True
  note = now.check(saved, path, layer.params[ACCEPT_KEY])
  if note is not None and layer.worker_index == 0:
    print(note + kept, file=sys.stderr, flush=True)
  return note is not None


def keep(layer, now):
  """:func:`hold`, then :func:`record` at once where the set is to be recorded."""
  if hold(layer, now):
    record(layer, now)


def record(layer, now):
  """Writes ``now`` as the record of the layer's run directory (worker 0 alone writes)."""
  if layer.worker_index == 0:
    tf.io.gfile.makedirs(layer.run_dir)
    write_json_atomically(os.path.join(layer.run_dir, FILE), {**now.record(), 'source': now.source})
