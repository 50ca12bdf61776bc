"""What every mode of run.py runs inside, once the engine has started and the configs are checked.

A mode does its own work (train, evaluate, export, measure the critical batch);
around it, the same three things hold for all of them, and live here once:

- :func:`holding`: the run directory's lock, released as the mode ends, and
  what a mode that ends badly undoes (a directory it made and left empty);
- :func:`stop_signals`: SIGTERM and SIGINT. A mode that stops at a step (the
  training modes, the critical batch) gets a ``StopRequest`` that saves there;
  the others end as at start-up. A stop that came while the engine started is
  taken over, and from the mode's end on a repeat of it is ignored;
- :func:`one_line`: the one line and exit status of an error (a config
  mistake or a missing file, 2; a failed run, a worker lost, memory, 1),
  raised by :func:`raise_one_line`.

``framework.run.launch`` runs the modes in it (``config_file.MODE_TABLE``
says which trains), ``framework.run.critical_batch`` its measurement.
"""

import contextlib

from framework.run.resume import LaunchError


@contextlib.contextmanager
def holding(lock, undo):
  """Holds ``lock`` (or None) for the mode; after a mode that did not end well, ``undo(lock)``."""
  finished = False
  try:
    yield
    finished = True
  finally:
    if lock is not None:
      lock.release()
      if not finished:
        undo(lock)


@contextlib.contextmanager
def stop_signals(logdir, stops):
  """The stop signals for the mode: yields its ``StopRequest``, or None where ``stops`` is false.

  A signal kept pending while a cluster started is taken by the request, or
  sent again (the mode then ends as at start-up). At the end the mode has its
  exit status (finished, saved or failed): a stop signal from then on, the
  repeat of a stop forwarded twice above all, is ignored.
  """
  # pylint: disable=import-outside-toplevel
  from core import signals
  from framework.engines import start_watch
  from framework.run import stopping
  stop = stopping.StopRequest(logdir).install() if stops else None
  pending = signals.take_pending()
  if pending is not None:
    if stop is None:
      signals.replay(pending)
    else:
      stop.take(pending)
  # A SIGTERM TensorFlow's cluster start-up took is sent again from now on, to these handlers.
  start_watch.stop_handlers_ready()
  try:
    yield stop
  finally:
    if stop is not None:
      signals.ending()
      stop.uninstall()


def one_line(exc, logdir, trainer=None, mode=None):
  """The ``LaunchError`` a mode's exception ends with, or None for one to let through.

  ``trainer`` (when built) names a file whose records could not be read and
  the memory a step needed; ``mode`` goes in the line for memory.
  """
  # pylint: disable=import-outside-toplevel
  from core.params import ConfigError
  from data.base import DataError, named_data_loss
  from framework.config import config_file
  from framework.engines import distributed
  from framework.run import checkpoints
  from framework.run.trainer import TrainingError
  if isinstance(exc, LaunchError):
    return exc
  if isinstance(exc, ConfigError):
    return LaunchError(config_file.format_error(exc))
  if isinstance(exc, DataError):  # a record TensorFlow could not read: the layers find its file
    return LaunchError(named_data_loss(exc, trainer and (trainer.train_data, trainer.eval_data)))
  if isinstance(exc, (TrainingError, checkpoints.CheckpointError)):
    return LaunchError(str(exc), status=1)
  failure = peer_failure(exc, distributed, logdir)
  if failure is None and trainer is not None:
    failure = out_of_memory(exc, trainer, mode, logdir)
  return None if failure is None else LaunchError(failure, status=1)


def raise_one_line(exc, logdir, trainer=None, mode=None):
  """Raises :func:`one_line`'s ``LaunchError`` for ``exc`` (from None), or ``exc`` itself."""
  line = one_line(exc, logdir, trainer, mode)
  if line is None or line is exc:
    raise exc
  raise line from None


def peer_failure(exc, distributed, logdir):
  """One line for a collective that failed because another worker died or hung; else None."""
  from optimizers import allreduce  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from framework.run import checkpoints  # pylint: disable=import-outside-toplevel
  kinds = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError,
           tf.errors.CancelledError, tf.errors.UnknownError, tf.errors.InternalError)
  if allreduce.size() < 2 or not isinstance(exc, kinds):
    return None
  cause = ' '.join(str(exc.message if hasattr(exc, 'message') else exc).split())
  if not any(word in cause for word in ('ollective', 'heartbeat', 'Socket closed', 'peer',
                                        'unhealthy', 'Deadline', 'task')):
    return None
  return (f'a worker of this {allreduce.engine_name()} job failed or stopped answering, so '
          f'worker {allreduce.rank()} stops too ({cause[:200]}); kept: '
          f'{checkpoints.latest_listed(logdir) or "no checkpoint"}')


def out_of_memory(exc, trainer, mode, logdir):
  """The one line for TensorFlow's out of memory in a step (``framework.run.memory``); else None."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from framework.run import checkpoints  # pylint: disable=import-outside-toplevel
  from framework.run import memory  # pylint: disable=import-outside-toplevel
  if not isinstance(exc, tf.errors.ResourceExhaustedError):
    return None
  return memory.out_of_memory_line(trainer, exc, mode, checkpoints.latest_listed(logdir))
