"""Argument checks shared by the optimizers package, without TensorFlow; each raises a ValueError naming the argument."""

import math
import numbers


def number(name, value, positive=False, minimum=None, below=None):
  """Returns ``value`` as a Python float after checking it.

  Args:
    name: the argument name, used in the error message.
    value: a Python or numpy real number (not a bool, not a tensor).
    positive: when True, the value must be > 0.
    minimum: when set, the value must be >= minimum.
    below: when set, the value must be < below.

  Raises:
    ValueError: for a non-number, a non-finite number or one out of range.
  """
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise ValueError(f'{name}: expected a number, got {value!r} ({type(value).__name__})')
  value = float(value)
  if not math.isfinite(value):
    raise ValueError(f'{name}: must be finite, got {value!r}')
  if positive and value <= 0:
    raise ValueError(f'{name}: must be > 0, got {value!r}')
  if minimum is not None and value < minimum:
    raise ValueError(f'{name}: must be >= {minimum}, got {value!r}')
  if below is not None and value >= below:
    raise ValueError(f'{name}: must be < {below}, got {value!r}')
  return value


def count(name, value):
  """Returns ``value`` as a positive int; raises ValueError naming ``name``."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
    raise ValueError(f'{name}: expected an integer >= 1, got {value!r}')
  return int(value)
