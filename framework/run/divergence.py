"""A run that cannot go on: :class:`TrainingError`, and the check of a diverging loss.

A non-finite loss or gradient in float32 with a fixed loss scale will not go
away by itself; with an adaptive loss scale the update is skipped and the scale
lowered, and only a long run of skipped updates means the run is stuck.
:class:`Divergence` tells the two apart, step by step, for framework.run.train_loop.
"""

import numpy as np

# Updates in a row that a dynamic loss scale may skip before the run is declared stuck.
_MAX_SKIPPED_UPDATES = 50


class TrainingError(RuntimeError):
  """A run stopped for a reason the user must act on (e.g. a non-finite loss)."""


class Divergence:
  """Stops a run whose loss or gradients are not finite and will not become so.

  With float32 and a fixed loss scale a non-finite loss or gradient will not
  go away by itself: the run stops at once. An adaptive loss scale skips such
  steps and lowers the scale; the run stops only when no update lands for
  ``_MAX_SKIPPED_UPDATES`` updates' worth of micro-steps.

  Args:
    config: the train config (``dtype``, ``loss_scaling``).
    iter_size: micro-steps per update, or ``f() -> int`` of the current one (a batch that grows).
    step: the global step training starts at.
  """

  def __init__(self, config, iter_size, step):
    self.fail_fast = config['dtype'] == 'float32' and not isinstance(config['loss_scaling'], str)
    self.iter_size = iter_size if callable(iter_size) else lambda: iter_size
    self.last_step = step
    self.stalled = 0  # micro-steps in a row after which the global step had not moved

  def check(self, step, loss, last_checkpoint):
    """Counts one micro-step that ended at global ``step`` with ``loss``.

    Args:
      step: the global step after the micro-step.
      loss: its loss.
      last_checkpoint: ``f() -> path or None``, the checkpoint the message names as kept.

    Raises:
      TrainingError: when the run cannot go on.
    """
    self.stalled = self.stalled + 1 if step == self.last_step else 0
    self.last_step = step
    limit = self.iter_size() * (1 if self.fail_fast else _MAX_SKIPPED_UPDATES)
    if (self.fail_fast and not np.isfinite(loss)) or self.stalled >= limit:
      # Not saved now: the forward passes may have left non-finite batch-norm
      # statistics; the last periodic checkpoint is the last good state.
      what = 'loss' if not np.isfinite(loss) else 'gradients'
      raise TrainingError(
          f'non-finite {what} (loss {loss}) at step {step + 1}, '
          f'{self.stalled} micro-step(s) without an applied update; last checkpoint kept: '
          f'{last_checkpoint() or "none yet"}. Lower the learning rate, enable clipping '
          '(max_grad_norm) or LARC.')
