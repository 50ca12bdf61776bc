"""Horovod start-up and the rank-0 questions of the framework; a single worker otherwise.

Horovod itself (starting it, the allreduce of ``optimize_loss``, broadcasts)
lives in ``optimizers.allreduce``, which the optimizers use without knowing
the framework; this module starts it for a run and adds what only the
framework asks: whether horovodrun launched the process, whether this worker
is the chief that writes files and prints (:func:`log`), and the sums and
maxima of host values the trainer needs (eval metrics, stop requests).
Everything degrades to the single-process answer when Horovod is not
initialised.
"""

import os

import tensorflow as tf

from framework import console
from optimizers import allreduce
# Start-up and the job's shape, as the optimizers see them.
from optimizers.allreduce import CYCLE_TIME_VARIABLE  # noqa: F401  (re-exported)
from optimizers.allreduce import IDLE_CYCLE_TIME_MS  # noqa: F401
from optimizers.allreduce import init  # noqa: F401
from optimizers.allreduce import rank
from optimizers.allreduce import single_process  # noqa: F401
from optimizers.allreduce import size  # noqa: F401
from optimizers.allreduce import wakes_on_enqueue  # noqa: F401

# The names the trainer and scripts call them by.
allreduce_average = allreduce.average
broadcast_variables = allreduce.broadcast

_LAUNCHER_VARIABLES = ('HOROVOD_RANK', 'HOROVOD_SIZE', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK')


def launched_by_horovodrun():
  """Whether this process was started by horovodrun (or mpirun) with more than one worker."""
  return any(v in os.environ for v in _LAUNCHER_VARIABLES)


def is_chief():
  return rank() == 0


def log(message):
  """Prints one line on the chief's console (above its progress bar); other workers are quiet."""
  if is_chief():
    console.say(message)


def sum_array(values):
  """The element-wise sum of a numpy array over workers (float64)."""
  hvd = allreduce.horovod()
  if hvd is None or hvd.size() == 1:
    return values
  return hvd.allreduce(tf.constant(values, tf.float64), op=hvd.Sum).numpy()


def max_over_workers(value):
  """The largest of an integer over all workers (one scalar allreduce when there are several)."""
  hvd = allreduce.horovod()
  if hvd is None or hvd.size() == 1:
    return int(value)
  return int(hvd.allreduce(tf.constant(int(value), tf.int64), op=hvd.Max).numpy())
