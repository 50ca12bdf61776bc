"""Horovod, when the job runs under ``horovodrun``; a single worker otherwise.

Everything here degrades to the single-process answer when Horovod is not
initialised, so the trainer and ``optimize_loss`` call it unconditionally.
Keras 3 variables are passed to Horovod as their underlying tf.Variables
(Horovod's own Keras helpers do not accept Keras 3 variables).
"""

import contextlib
import os

import tensorflow as tf

_LAUNCHER_VARIABLES = ('HOROVOD_RANK', 'HOROVOD_SIZE', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK')


def launched_by_horovodrun():
  """Whether this process was started by horovodrun (or mpirun) with more than one worker."""
  return any(v in os.environ for v in _LAUNCHER_VARIABLES)


def import_horovod():
  """Imports horovod.tensorflow, with a one-line error naming the fix when it is missing."""
  try:
    import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
  except ImportError as exc:
    raise RuntimeError('Horovod is not installed in this environment: run `bash scripts/setup.sh`, '
                       f'which builds horovod==0.28.1 with gloo ({exc})') from None
  return hvd


_HVD = None

CYCLE_TIME_VARIABLE = 'HOROVOD_CYCLE_TIME'
# Horovod's background thread runs a negotiation round, a collective between
# all workers, every HOROVOD_CYCLE_TIME ms (default 1), even when there is
# nothing to reduce; on busy CPU cores those rounds cost training time. The
# Horovod that scripts/build_horovod.sh builds also wakes the thread when a
# tensor is enqueued, so there the cycle only paces idle rounds and a long one
# costs no latency (docs/performance.md has the measurements).
IDLE_CYCLE_TIME_MS = 50


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


def is_chief():
  return rank() == 0


def allreduce_average(grads, compression=None):
  """Averages a list of tensors over workers with one grouped allreduce.

  Args:
    grads: tensors (None entries pass through unchanged).
    compression: None/'none', or 'fp16' to send float16.

  Returns:
    The averaged tensors, in order.
  """
  if _HVD is None or _HVD.size() == 1:
    return list(grads)
  present = [i for i, g in enumerate(grads) if g is not None]
  codec = _HVD.Compression.fp16 if compression == 'fp16' else _HVD.Compression.none
  reduced = _HVD.grouped_allreduce([tf.convert_to_tensor(grads[i]) for i in present],
                                   op=_HVD.Average, compression=codec)
  result = list(grads)
  for i, r in zip(present, reduced):
    result[i] = r
  return result


def broadcast_variables(variables, root_rank=0):
  """Copies the values of ``variables`` (Keras 3 or tf.Variables) from ``root_rank`` to all workers."""
  if _HVD is None or _HVD.size() == 1:
    return
  for v in variables:
    target = v.value if hasattr(v, 'value') and not isinstance(v, tf.Variable) else v
    target.assign(_HVD.broadcast(tf.convert_to_tensor(target), root_rank=root_rank))


def sum_array(values):
  """The element-wise sum of a numpy array over workers (float64)."""
  if _HVD is None or _HVD.size() == 1:
    return values
  return _HVD.allreduce(tf.constant(values, tf.float64), op=_HVD.Sum).numpy()



def max_over_workers(value):
  """The largest of an integer over all workers (one scalar allreduce when there are several)."""
  if _HVD is None or _HVD.size() == 1:
    return int(value)
  return int(_HVD.allreduce(tf.constant(int(value), tf.int64), op=_HVD.Max).numpy())
