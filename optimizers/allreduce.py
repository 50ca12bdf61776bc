"""The multi-worker seam: rank, size, mean, sum and broadcast, whichever engine answers.

Two engines stand behind the same few functions, and code above them (the
gradient pipeline, AGN, the framework's eval sums and stop agreement) never
asks which one is running:

- ``horovod``: Horovod's collectives (``horovodrun``; gloo on CPUs, NCCL on GPUs);
- ``multi_worker_mirrored``: TensorFlow's own collective all-reduce, set up by a
  ``tf.distribute.MultiWorkerMirroredStrategy`` (``TF_CONFIG``, Slurm). The
  strategy only configures the collectives and the cluster: variables are
  plain variables, one copy per worker, built outside its scope, and the
  train step runs in the default context. So Keras never all-reduces by itself
  (its optimizers sum gradients across replicas when ``apply`` runs in a
  replica context), and every worker's step is the same graph as a
  single-process step plus one grouped all-reduce.

With neither started, this is a one-worker job: ``average`` and ``broadcast``
give the single-process answer, so callers use them unconditionally. Keras 3
variables are passed to the engines as their underlying tf.Variables.
"""

import contextlib
import os

import numpy as np
import tensorflow as tf

NONE = 'none'
HOROVOD = 'horovod'
MULTI_WORKER_MIRRORED = 'multi_worker_mirrored'

_ENGINE = None


# --- the engines ----------------------------------------------------------------------------

def _present(tensors):
  """Indices of the entries that are not None."""
  return [i for i, t in enumerate(tensors) if t is not None]


def _with_results(tensors, present, results):
  merged = list(tensors)
  for i, r in zip(present, results):
    merged[i] = r
  return merged


def _underlying(variable):
  """The tf.Variable behind a Keras 3 variable (a tf.Variable as it is)."""
  if hasattr(variable, 'value') and not isinstance(variable, tf.Variable):
    return variable.value
  return variable


class _Horovod:
  """Horovod's grouped allreduce and broadcast (``horovod.tensorflow``)."""

  name = HOROVOD

  def __init__(self, hvd):
    self.hvd = hvd

  def size(self):
    return self.hvd.size()

  def rank(self):
    return self.hvd.rank()

  def local_rank(self):
    return self.hvd.local_rank()

  def describe(self):
    return 'Horovod (gloo/NCCL allreduce)'

  def average(self, tensors, compression):
    present = _present(tensors)
    codec = self.hvd.Compression.fp16 if compression == 'fp16' else self.hvd.Compression.none
    reduced = self.hvd.grouped_allreduce([tf.convert_to_tensor(tensors[i]) for i in present],
                                         op=self.hvd.Average, compression=codec)
    return _with_results(tensors, present, reduced)

  def broadcast(self, variables, root_rank):
    for v in variables:
      target = _underlying(v)
      target.assign(self.hvd.broadcast(tf.convert_to_tensor(target), root_rank=root_rank))

  def sum_host(self, values):
    return self.hvd.allreduce(tf.constant(values, tf.float64), op=self.hvd.Sum).numpy()

  def max_host(self, value):
    return int(self.hvd.allreduce(tf.constant(int(value), tf.int64), op=self.hvd.Max).numpy())


class _Collective:
  """TensorFlow's collective all-reduce, configured by a MultiWorkerMirroredStrategy.

  The reductions go through the strategy's public ``extended.batch_reduce_to``
  in the default (cross-replica) context, on this worker's one device, so one
  call is one grouped all-reduce (packed by the strategy). Collectives match
  across workers by the order they are launched in: every worker must make the
  same calls in the same order, as the trainer does.
  """

  name = MULTI_WORKER_MIRRORED

  def __init__(self, strategy, implementation):
    self.strategy = strategy
    self.implementation = implementation
    self.device = strategy.extended.worker_devices[0]
    resolver = strategy.cluster_resolver
    self._size = strategy.num_replicas_in_sync
    jobs = resolver.cluster_spec().as_dict()
    # The chief, when the cluster has one, is rank 0; the workers follow.
    chiefs = len(jobs.get('chief', [])) if resolver.task_type == 'worker' else 0
    self._rank = chiefs + int(resolver.task_id)
    self._local_rank = _local_rank(resolver)
    self._host_sum_fn = None

  def size(self):
    return self._size

  def rank(self):
    return self._rank

  def local_rank(self):
    return self._local_rank

  def describe(self):
    return f'tf.distribute MultiWorkerMirroredStrategy ({self.implementation} all-reduce)'

  def _reduce(self, op, tensors):
    """One grouped all-reduce of dense tensors (and IndexedSlices) on this worker's device."""
    with tf.device(self.device):
      values = [tf.identity(t) if not isinstance(t, tf.IndexedSlices) else t for t in tensors]
    return self.strategy.extended.batch_reduce_to(op, [(v, self.device) for v in values])

  def average(self, tensors, compression):
    present = _present(tensors)
    values = [tf.convert_to_tensor(tensors[i]) if not isinstance(tensors[i], tf.IndexedSlices)
              else tensors[i] for i in present]
    if compression == 'fp16':
      # The strategy has no compression of its own: send float16, as Horovod's fp16 codec does.
      dtypes = [v.dtype for v in values]
      values = [_cast(v, tf.float16) if v.dtype.is_floating else v for v in values]
      reduced = self._reduce(tf.distribute.ReduceOp.MEAN, values)
      reduced = [_cast(r, d) for r, d in zip(reduced, dtypes)]
    else:
      reduced = self._reduce(tf.distribute.ReduceOp.MEAN, values)
    return _with_results(tensors, present, reduced)

  def broadcast(self, variables, root_rank):
    # A sum in which every worker but the root adds zeros: the root's values, exactly.
    targets = [_underlying(v) for v in variables]
    if not targets:
      return
    mine = self._rank == root_rank
    sent = []
    for t in targets:
      value = tf.convert_to_tensor(t)
      if value.dtype == tf.bool:
        value = tf.cast(value, tf.int32)
      sent.append(value if mine else tf.zeros_like(value))
    received = self._reduce(tf.distribute.ReduceOp.SUM, sent)
    for t, r in zip(targets, received):
      t.assign(tf.cast(r, t.dtype))

  def _host_sum(self, value):
    """The sum of one host array over workers, by a compiled step.

    Called eagerly, the strategy's reduction starts a thread pool per call
    that is not reclaimed fast enough for a collective every training step
    (the stop agreement); a tf.function launches the collective from its graph.
    """
    if self._host_sum_fn is None:
      self._host_sum_fn = tf.function(
          lambda t: self._reduce(tf.distribute.ReduceOp.SUM, [t])[0])
    return self._host_sum_fn(tf.constant(value)).numpy()

  def sum_host(self, values):
    return self._host_sum(np.asarray(values, np.float64))

  def max_host(self, value):
    # An all-gather by a sum: each worker fills its own slot, then the largest entry.
    slots = np.zeros(self._size, np.int64)
    slots[self._rank] = int(value)
    return int(np.max(self._host_sum(slots)))


def _cast(value, dtype):
  if isinstance(value, tf.IndexedSlices):
    return tf.IndexedSlices(tf.cast(value.values, dtype), value.indices, value.dense_shape)
  return tf.cast(value, dtype)


def _local_rank(resolver):
  """This worker's index among the workers of its host (the cluster's order)."""
  try:
    cluster = resolver.cluster_spec().as_dict()
    workers = cluster.get(resolver.task_type, [])
    mine = workers[int(resolver.task_id)]
  except (KeyError, IndexError, TypeError, ValueError):
    return 0
  host = mine.rsplit(':', 1)[0]
  return sum(1 for w in workers[:int(resolver.task_id)] if w.rsplit(':', 1)[0] == host)


# --- the engine of this process ------------------------------------------------------------
# framework/engines/distributed.py starts an engine for a run and hands it here; a
# script of the user's own that started Horovod itself (hvd.init()) is joined by
# join_started_horovod, as OpenSeq2Seq's on_horovod did.

def use_horovod(hvd):
  """Makes a started Horovod (the initialised ``horovod.tensorflow``) this process's engine.

  Raises:
    RuntimeError: another engine is running.
  """
  global _ENGINE
  if _ENGINE is None:
    _ENGINE = _Horovod(hvd)
  elif _ENGINE.name != HOROVOD:
    raise RuntimeError(f'the {_ENGINE.name} engine is running; Horovod cannot start beside it')
  return _ENGINE.hvd


def use_collective(strategy, implementation):
  """Makes the collectives a ``MultiWorkerMirroredStrategy`` configured this process's engine.

  Args:
    strategy: the strategy, made before any other TensorFlow op of the process.
    implementation: 'RING' or 'NCCL', the collectives' kind, for the log.

  Raises:
    RuntimeError: Horovod is running.
  """
  global _ENGINE
  if _ENGINE is not None:
    if _ENGINE.name != MULTI_WORKER_MIRRORED:
      raise RuntimeError(f'the {_ENGINE.name} engine is running; multi_worker_mirrored cannot '
                         'start beside it')
    return _ENGINE.strategy
  _ENGINE = _Collective(strategy, implementation)
  return strategy


def join_started_horovod():
  """Joins the Horovod the user's own script started (``hvd.init()``); returns the module.

  Raises:
    RuntimeError: Horovod is not installed or was not started, in one line naming the fix.
  """
  try:
    import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
  except ImportError:
    hvd = None
  if hvd is None or not hvd.is_initialized():
    raise RuntimeError('multi_worker: no multi-worker engine runs in this process; start '
                       'Horovod first (hvd.init()), or train with run.py, which starts the '
                       'engine its launcher asks for')
  return use_horovod(hvd)


def engine_name():
  """'none', 'horovod' or 'multi_worker_mirrored': the engine running in this process."""
  return _ENGINE.name if _ENGINE is not None else NONE


def describe():
  """The running engine in words, for the log."""
  return _ENGINE.describe() if _ENGINE is not None else 'a single process'


def horovod():
  """The initialised horovod.tensorflow module, or None unless the Horovod engine runs."""
  return _ENGINE.hvd if _ENGINE is not None and _ENGINE.name == HOROVOD else None


@contextlib.contextmanager
def single_process():
  """Inside the block this worker acts as a one-worker job: size 1, rank 0, no collectives.

  Graphs traced in the block contain no collectives, so a benchmark can time one
  worker and the whole job in the same processes (scripts/bench_distributed.py).
  """
  global _ENGINE
  saved, _ENGINE = _ENGINE, None
  try:
    yield
  finally:
    _ENGINE = saved


# --- the seam -------------------------------------------------------------------------------

def size():
  return _ENGINE.size() if _ENGINE is not None else 1


def rank():
  return _ENGINE.rank() if _ENGINE is not None else 0


def local_rank():
  return _ENGINE.local_rank() if _ENGINE is not None else 0


def average(tensors, compression=None):
  """Averages a list of tensors over workers with one grouped all-reduce.

  Args:
    tensors: tensors or IndexedSlices (None entries pass through unchanged).
    compression: None/'none', or 'fp16' to send float16 (halves the bytes sent).

  Returns:
    The averaged tensors, in order.
  """
  if _ENGINE is None or _ENGINE.size() == 1:
    return list(tensors)
  return _ENGINE.average(list(tensors), compression)


def broadcast(variables, root_rank=0):
  """Copies the values of ``variables`` (Keras 3 or tf.Variables) from ``root_rank`` to all workers."""
  if _ENGINE is None or _ENGINE.size() == 1:
    return
  _ENGINE.broadcast(list(variables), root_rank)


def sum_host(values):
  """The element-wise sum of a numpy array over workers (float64); a collective."""
  if _ENGINE is None or _ENGINE.size() == 1:
    return values
  return _ENGINE.sum_host(np.asarray(values, np.float64))


def max_host(value):
  """The largest of an integer over all workers; a collective."""
  if _ENGINE is None or _ENGINE.size() == 1:
    return int(value)
  return _ENGINE.max_host(value)
