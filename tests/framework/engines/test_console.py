"""The console: lines above the progress bar, a bar on terminals without a width, the loss scale."""

import io
import sys

import pytest

from framework.engines import console

VALUES = {'loss': 0.5, 'next_learning_rate': 0.1629, 'global_norm': 1.25,
          'next_loss_scale': 16384.0, 'skipped_updates': 3}


class FakeTerminal(io.StringIO):
  """A terminal that reports ``columns`` (0: a terminal that does not know its width)."""

  def __init__(self, columns):
    super().__init__()
    self.columns = columns

  def isatty(self):
    return True

  def fileno(self):
    raise OSError('no file descriptor')


def screen(text):
  """The lines a terminal shows for ``text``: a carriage return moves back to column 0."""
  lines, current, column = [], [], 0
  for char in text:
    if char == '\n':
      lines.append(''.join(current).rstrip())
      current, column = [], 0
    elif char == '\r':
      column = 0
    elif char == '\x1b':
      continue
    else:
      if column < len(current):
        current[column] = char
      else:
        current.append(char)
      column += 1
  lines.append(''.join(current).rstrip())
  return [l for l in lines if l]


def on_terminal(monkeypatch, columns):
  """stdout and stderr on one terminal, as in an interactive shell.

  Called inside the test: pytest puts its own capture back after the fixtures.
  """
  terminal = FakeTerminal(columns)
  monkeypatch.setattr(sys, 'stdout', terminal)
  monkeypatch.setattr(sys, 'stderr', terminal)
  monkeypatch.setattr(console, 'terminal_columns', lambda stream: stream.columns or None)
  return terminal


def test_eval_lines_are_printed_above_the_bar_on_their_own_line(monkeypatch):
  terminal = on_terminal(monkeypatch, 120)
  progress = console.Progress(total=40, initial=0, steps_per_epoch=10, every=10)
  for step in range(1, 31):
    progress.update(step, VALUES, 100.0)
  progress.bar.refresh()
  console.say('eval at step 30: loss 0.4000, top-1 0.8000')
  progress.update(31, VALUES, 100.0)
  progress.close()
  lines = screen(terminal.getvalue())
  assert 'eval at step 30: loss 0.4000, top-1 0.8000' in lines
  assert not [l for l in lines if 'eval at step' in l and 'step/s' in l]
  assert '31/40' in lines[-1], lines
  # Once the bar is closed, lines are plain prints again.
  console.say('done')
  assert screen(terminal.getvalue())[-1] == 'done'


def test_a_terminal_without_a_width_gets_a_bar_of_the_fallback_width(monkeypatch):
  terminal = on_terminal(monkeypatch, 0)
  monkeypatch.delenv('COLUMNS', raising=False)
  progress = console.Progress(total=20, initial=0, steps_per_epoch=10, every=10)
  assert progress.bar is not None and progress.bar.ncols == console.FALLBACK_COLUMNS
  progress.update(10, VALUES, 50.0)
  progress.bar.refresh()
  progress.close()
  bars = [l for l in screen(terminal.getvalue()) if '10/20' in l]
  assert bars and 0 < len(bars[-1]) <= console.FALLBACK_COLUMNS


def test_plain_lines_show_the_loss_scale_only_with_loss_scaling(capsys):
  assert not console.loss_scaling_on({'loss_scaling': 1.0})
  assert console.loss_scaling_on({'loss_scaling': 128.0})
  assert console.loss_scaling_on({'loss_scaling': 'Backoff'})
  plain = console.Progress(total=20, initial=0, steps_per_epoch=10, every=5)
  scaled = console.Progress(total=20, initial=0, steps_per_epoch=10, every=5,
                            show_loss_scale=True)
  assert plain.bar is None  # pytest's captured stderr is not a terminal
  plain.update(5, VALUES, 12.0)
  plain.update(7, VALUES, 12.0)  # fewer than `every` steps since the last line
  scaled.update(5, VALUES, 12.0)
  out = capsys.readouterr().out.splitlines()
  assert out == [
      'step 5 epoch 0.50 loss 0.5000 lr 0.1629 grad_norm 1.25 images/sec 12.0',
      'step 5 epoch 0.50 loss 0.5000 lr 0.1629 grad_norm 1.25 loss_scale 1.638e+04 skipped 3 '
      'images/sec 12.0']


def test_an_error_after_a_stopped_bar_gets_its_own_line(monkeypatch):
  terminal = on_terminal(monkeypatch, 120)
  progress = console.Progress(total=40, initial=0, steps_per_epoch=10, every=10)
  progress.update(7, VALUES, 100.0)
  progress.bar.refresh()
  console.end_progress()  # what run.py's fail() does before printing the error
  print('error: non-finite loss', file=sys.stderr)
  lines = screen(terminal.getvalue())
  assert lines[-1] == 'error: non-finite loss' and '7/40' in lines[-2], lines
  console.end_progress()  # nothing on screen: nothing to do
