"""TensorFlow 1's schedules a ported config names as its lr policy: TF 1's arguments, the step first.

A config that gives ``lr_policy: tf.train.cosine_decay`` has it called with
the step and its ``lr_policy_params`` by name (OpenSeq2Seq passes
``global_step=``; the framework passes the step first, as to every policy); here
``tf.train.cosine_decay`` is :func:`cosine_decay` (``framework.config.openseq2seq``).
Each is TF 1's formula (docs/math.md's table of policies has the project's own):

- ``cosine_decay``: lr·((1 − alpha)·½(1 + cos(π·min(s, D)/D)) + alpha), the
  project's ``cosine_decay`` with ``min_lr = alpha`` and no warm-up.
- ``piecewise_constant``: ``values[k]`` while b_{k-1} < s ≤ b_k (``values[0]``
  up to b_0 included, the last value after the last boundary).

``decay_steps`` not given is the run's last step, as OpenSeq2Seq fills it.
"""

import tensorflow as tf

from optimizers import lr_policies
from optimizers import validation


def cosine_decay(global_step, learning_rate, decay_steps, alpha=0.0, name=None):  # pylint: disable=unused-argument
  """``tf.train.cosine_decay``: from ``learning_rate`` to ``alpha·learning_rate`` over ``decay_steps``.

  Args:
    global_step: the step s.
    learning_rate: the rate at step 0, >= 0.
    decay_steps: D, > 0; the rate stays at its floor after it.
    alpha: the floor, as a fraction of ``learning_rate``.
    name: TF 1's op name; not used.

  Returns:
    A scalar float32 tensor.

  Raises:
    ValueError: as ``optimizers.lr_policies.cosine_decay``.
  """
  return lr_policies.cosine_decay(global_step, learning_rate, decay_steps, min_lr=alpha)


def piecewise_constant(global_step, boundaries, values, name=None):  # pylint: disable=unused-argument
  """``tf.train.piecewise_constant`` with the step as ``global_step`` (TF 1's ``x``).

  Args:
    global_step: the step s.
    boundaries: strictly increasing steps b_0 < b_1 < ...
    values: one more than the boundaries: the rate up to b_0, then after each boundary.
    name: TF 1's op name; not used.

  Returns:
    A scalar float32 tensor.

  Raises:
    ValueError: for empty or non-increasing boundaries, or values of another length.
  """
  if not isinstance(boundaries, (list, tuple)) or not boundaries:
    raise ValueError(f'boundaries: expected a non-empty list of steps, got {boundaries!r}')
  if not isinstance(values, (list, tuple)) or len(values) != len(boundaries) + 1:
    raise ValueError(f'values: expected one value more than the boundaries '
                     f'({len(boundaries) + 1}), got {values!r}')
  boundaries = [validation.number(f'boundaries[{i}]', b, minimum=0.0)
                for i, b in enumerate(boundaries)]
  values = [validation.number(f'values[{i}]', v) for i, v in enumerate(values)]
  return lr_policies.step_values(tf.cast(global_step, tf.float64), boundaries, values)
