"""Horovod's collectives as ``optimize_loss`` and AGN use them; one worker without Horovod.

The package's only contact with Horovod: ``init`` starts it once (the
framework's start-up calls it too), and ``average`` and ``broadcast`` fall
back to the single-process answer when it is not running, so callers use them
unconditionally. Keras 3 variables are passed to Horovod as their underlying
tf.Variables (Horovod's own Keras helpers do not accept Keras 3 variables).
"""

import contextlib
import os

import tensorflow as tf

_HVD = None

CYCLE_TIME_VARIABLE = 'HOROVOD_CYCLE_TIME'
# Horovod's background thread runs a negotiation round, a collective between
# all workers, every HOROVOD_CYCLE_TIME ms (default 1), even when there is
# nothing to reduce; on busy CPU cores those rounds cost training time. The
# Horovod that scripts/build_horovod.sh builds also wakes the thread when a
# tensor is enqueued, so there the cycle only paces idle rounds and a long one
# costs no latency (docs/performance.md has the measurements).
IDLE_CYCLE_TIME_MS = 50


def import_horovod():
  """Imports horovod.tensorflow, with a one-line error naming the fix when it is missing."""
  try:
    import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
  except ImportError as exc:
    raise RuntimeError('Horovod is not installed in this environment: run `bash scripts/setup.sh`, '
                       f'which builds horovod==0.28.1 with gloo ({exc})') from None
  return hvd


def wakes_on_enqueue():
  """Whether this Horovod build wakes its background thread on enqueue (build_horovod.sh)."""
  from horovod.tensorflow.mpi_ops import _basics  # pylint: disable=import-outside-toplevel
  return hasattr(_basics.MPI_LIB_CTYPES, 'horovod_wakes_on_enqueue')


def init():
  """Initialises Horovod once and returns the module.

  With a Horovod that wakes on enqueue and no HOROVOD_CYCLE_TIME in the
  environment, the cycle is set to IDLE_CYCLE_TIME_MS first.
  """
  global _HVD
  if _HVD is None:
    hvd = import_horovod()
    if CYCLE_TIME_VARIABLE not in os.environ and wakes_on_enqueue():
      os.environ[CYCLE_TIME_VARIABLE] = str(IDLE_CYCLE_TIME_MS)
    hvd.init()
    _HVD = hvd
  return _HVD


def horovod():
  """The initialised horovod.tensorflow module, or None in a single-process job."""
  return _HVD


@contextlib.contextmanager
def single_process():
  """Inside the block this worker acts as a one-worker job: size 1, rank 0, no collectives.

  Graphs traced in the block contain no Horovod ops, so a benchmark can time one
  worker and the whole Horovod job in the same processes (scripts/bench_horovod.py).
  """
  global _HVD
  saved, _HVD = _HVD, None
  try:
    yield
  finally:
    _HVD = saved


def size():
  return _HVD.size() if _HVD is not None else 1


def rank():
  return _HVD.rank() if _HVD is not None else 0


def local_rank():
  return _HVD.local_rank() if _HVD is not None else 0


def average(tensors, compression=None):
  """Averages a list of tensors over workers with one grouped allreduce.

  Args:
    tensors: tensors (None entries pass through unchanged).
    compression: None/'none', or 'fp16' to send float16 (halves the bytes sent).

  Returns:
    The averaged tensors, in order.
  """
  if _HVD is None or _HVD.size() == 1:
    return list(tensors)
  present = [i for i, t in enumerate(tensors) if t is not None]
  codec = _HVD.Compression.fp16 if compression == 'fp16' else _HVD.Compression.none
  reduced = _HVD.grouped_allreduce([tf.convert_to_tensor(tensors[i]) for i in present],
                                   op=_HVD.Average, compression=codec)
  result = list(tensors)
  for i, r in zip(present, reduced):
    result[i] = r
  return result


def broadcast(variables, root_rank=0):
  """Copies the values of ``variables`` (Keras 3 or tf.Variables) from ``root_rank`` to all workers."""
  if _HVD is None or _HVD.size() == 1:
    return
  for v in variables:
    target = v.value if hasattr(v, 'value') and not isinstance(v, tf.Variable) else v
    target.assign(_HVD.broadcast(tf.convert_to_tensor(target), root_rank=root_rank))
