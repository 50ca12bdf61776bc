"""The TensorBoard summaries ``optimize_loss`` writes inside its update (``summaries=[...]``)."""

import tensorflow as tf

from optimizers import exclusions
from optimizers import stages


def write(wanted, step, values, var_list, grads, larc_factors):
  """Writes the ``wanted`` summaries of one update at ``step``.

  Args:
    wanted: checked names of ``optimize_loss``'s ``summaries``.
    step: the global step before the update.
    values: the update's scalars ``learning_rate``, ``loss_scale`` and ``global_norm``.
    var_list: the variables; their gradients ``grads`` (None entries are left out).
    larc_factors: {variable index: LARC factor}.
  """
  if not wanted:
    return
  # Written inside the update's tf.cond; reset the name scope so the tags
  # are the plain names ('learning_rate', not 'cond/learning_rate').
  with tf.compat.v1.name_scope(None):
    _write_unscoped(set(wanted), step, values, var_list, grads, larc_factors)


def _write_unscoped(wanted, step, values, var_list, grads, larc_factors):
  names = [exclusions.variable_name(v) for v in var_list]
  for key, tag in (('learning_rate', 'learning_rate'), ('loss_scale', 'loss_scale'),
                   ('global_norm', 'global_gradient_norm')):
    if tag in wanted:
      tf.summary.scalar(tag, values[key], step=step)
  for name, g, v in zip(names, grads, var_list):
    if g is None:
      continue
    if 'gradients' in wanted:
      tf.summary.histogram(f'gradients/{name}', g, step=step)
    if 'gradient_norm' in wanted:
      tf.summary.scalar(f'gradient_norm/{name}', stages.norms([g])[0], step=step)
    if 'variables' in wanted:
      tf.summary.histogram(f'variables/{name}', v, step=step)
    if 'variable_norm' in wanted:
      tf.summary.scalar(f'variable_norm/{name}', stages.norms([v])[0], step=step)
  if 'larc_summaries' in wanted:
    for i, factor in larc_factors.items():
      tf.summary.scalar(f'larc_grad_update/{names[i]}', factor, step=step)
      tf.summary.scalar(f'larc_clip_on/{names[i]}', tf.cast(factor < 1.0, tf.float32), step=step)
