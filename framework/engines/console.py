"""What a run prints on the console: log lines and the progress of training.

On a terminal the progress of training is a bar that redraws itself in place
(on stderr); every other line (evaluations, notes) is printed above the bar,
never inside it. Without a terminal (a log file, a pipe, CI) the progress is a
plain log line every ``print_loss_steps`` steps.
"""

import os
import shutil
import sys

# Columns assumed when a terminal reports no width (some consoles, containers, CI runners).
FALLBACK_COLUMNS = 100

_active_bar = None


def say(message):
  """Prints one line on stdout, above the progress bar when one is on screen."""
  if _active_bar is not None:
    _active_bar.write(message, file=sys.stdout)
    sys.stdout.flush()
  else:
    print(message, flush=True)


def end_progress():
  """Closes the progress bar on screen, if any, so that what follows starts on a new line."""
  if _active_bar is not None:
    _active_bar.close()
    _set_active(None)


def _set_active(bar):
  global _active_bar  # pylint: disable=global-statement
  _active_bar = bar


def terminal_columns(stream):
  """The width of the terminal ``stream`` is on, or None when it does not say (0 or no size)."""
  try:
    columns = os.get_terminal_size(stream.fileno()).columns
  except (AttributeError, OSError, ValueError):
    return None
  return columns or None


def loss_scaling_on(config):
  """True when the run scales its loss: an automatic scaler or a fixed scale other than 1."""
  scaling = config['loss_scaling']
  return isinstance(scaling, str) or float(scaling) != 1.0


class Progress:
  """A progress bar on a terminal; a plain log line every ``every`` steps otherwise.

  Args:
    total: the step training ends at.
    initial: the step training starts at (a resumed run starts past 0).
    steps_per_epoch: optimizer updates per epoch, for the epoch column.
    every: the number of steps between plain log lines.
    enabled: False on the workers that print nothing (all but the chief).
    show_loss_scale: show the loss scale (only meaningful when loss scaling is on).
    stream: where the bar goes; stderr by default.
    metrics: train metrics shown after the loss (the task's, e.g. ``token_accuracy``).
    unit: what the rate counts (``images``, ``words``, ``tokens``).
  """

  def __init__(self, total, initial, steps_per_epoch, every, enabled=True,
               show_loss_scale=False, stream=None, metrics=(), unit='images'):
    self.enabled = enabled
    self.metrics = tuple(metrics)
    self.unit = unit
    self.every = every
    self.steps_per_epoch = steps_per_epoch
    self.show_loss_scale = show_loss_scale
    self.last_printed = initial
    self.position = initial
    self.bar = None
    stream = stream if stream is not None else sys.stderr
    if enabled and stream.isatty():
      from tqdm import tqdm  # pylint: disable=import-outside-toplevel
      columns = terminal_columns(stream)
      # tqdm sizes a dynamic bar from the terminal each time it draws; a terminal that
      # reports 0 columns would get an empty bar, so such a bar gets a fixed width.
      width = {'dynamic_ncols': True} if columns else {
          'ncols': shutil.get_terminal_size((FALLBACK_COLUMNS, 24)).columns or FALLBACK_COLUMNS}
      self.bar = tqdm(total=total, initial=initial, unit='step', file=stream, **width)
      _set_active(self.bar)

  def line(self, step, values, rate):
    """The plain log line of one step."""
    epoch = step / self.steps_per_epoch
    text = f'step {step} epoch {epoch:.2f} loss {values["loss"]:.4f} '
    text += ''.join(f'{name} {values[name]:.4f} ' for name in self.metrics)
    text += f'lr {values["next_learning_rate"]:.5g} grad_norm {values["global_norm"]:.4g} '
    if 'global_batch' in values:
      text += f'batch {values["global_batch"]} '
    if 'noise_scale' in values:
      text += f'noise_scale {values["noise_scale"]:.4g} '
    if self.show_loss_scale:
      # Only loss scaling skips updates (a non-finite float32 step stops the run).
      text += f'loss_scale {values["next_loss_scale"]:.4g} skipped {values["skipped_updates"]} '
    return text + f'{self.unit}/sec {rate:.1f}'

  def update(self, step, values, rate):
    if not self.enabled:
      return
    if self.bar is not None:
      postfix = {'epoch': f'{step / self.steps_per_epoch:.2f}', 'loss': f'{values["loss"]:.4f}'}
      postfix.update((name, f'{values[name]:.4f}') for name in self.metrics)
      postfix['lr'] = f'{values["next_learning_rate"]:.4g}'
      if 'global_batch' in values:
        postfix['batch'] = f'{values["global_batch"]}'
      if 'noise_scale' in values:
        postfix['noise'] = f'{values["noise_scale"]:.4g}'
      if self.show_loss_scale:
        postfix['scale'] = f'{values["next_loss_scale"]:.4g}'
        postfix['skipped'] = values['skipped_updates']
      postfix['img_s' if self.unit == 'images' else f'{self.unit}_s'] = f'{rate:.0f}'
      self.bar.update(step - self.position)
      self.bar.set_postfix(postfix, refresh=False)
    elif step - self.last_printed >= self.every:
      print(self.line(step, values, rate), flush=True)
      self.last_printed = step
    self.position = step

  def close(self):
    if self.bar is not None:
      self.bar.close()
      if _active_bar is self.bar:
        _set_active(None)
      self.bar = None
