"""The image classifier's precise batch norm: moving statistics averaged over training batches.

Training leaves batch norm's moving mean and variance an exponential average of
statistics taken while the weights moved; averaging them over a few batches of
the final weights (``precise_bn`` in the config) gives the statistics those
weights see. :func:`recomputed_statistics` does it for the span of a ``with``
block, and puts the training statistics back after it unless told to keep them.
"""

import contextlib

from framework.engines import distributed
from models.batch_norm import batch_norm_layers
from models.batch_norm import precise_statistics


@contextlib.contextmanager
def recomputed_statistics(model, batches, batch_size, keep, all_workers_sum=None):
  """Inside the block, ``model``'s moving statistics are the averages over ``batches``.

  Args:
    model: the Keras model whose batch-norm layers are recomputed.
    batches: the training batches to average over (already cut to their
      number); the run's stop check raises from inside them
      (``framework.run.stopping.until_stopped``).
    batch_size: the batches' size, for the line that says what was done.
    keep: keep the recomputed statistics after the block (the end of training).
    all_workers_sum: sums a NumPy array over the workers, or None for one worker.

  Raises:
    What reading ``batches`` raises (``StopRequested`` on a signal), with the
    training statistics back in place.
  """
  moving = [v for layer in batch_norm_layers(model)
            for v in (layer.moving_mean, layer.moving_variance)]
  saved = [v.numpy() for v in moving]

  try:
    count = precise_statistics(model, batches, all_workers_sum=all_workers_sum)
  except BaseException:
    # The forward passes moved the statistics: the training ones go back first.
    _assign(moving, saved)
    raise
  if keep:
    saved = None
    distributed.log(f'precise batch norm: moving statistics averaged over {count} batches '
                    f'of {batch_size}')
  try:
    yield
  finally:
    if saved is not None:
      _assign(moving, saved)


def _assign(variables, values):
  for variable, value in zip(variables, values):
    variable.assign(value)
