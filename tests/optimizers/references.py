"""Reference twins of the library's fused math, for tests to check it against.

``larc_reference`` is the LARC stage with each norm taken by its own
``tf.norm``, one tensor at a time, as the numerical contract states it
(docs/math.md, "LARC"); the library's stage (``stages.larc``) takes all the
norms of an update in one vector of ``tf.nn.l2_loss`` kernels. Both use the
one formula of the factor, ``stages.larc_coefficients``.
"""

import tensorflow as tf

from optimizers import exclusions
from optimizers import stages


def larc_reference(grads, var_list, learning_rate, params, adapts=None):
  """``stages.larc`` with one ``tf.norm`` per tensor: (new gradients, {index: factor})."""
  if adapts is None:
    adapts = exclusions.larc_mask(var_list, params)
  result, factors = list(grads), {}
  for i, (grad, var) in enumerate(zip(grads, var_list)):
    if grad is None or not adapts[i]:
      continue
    g_norm = tf.norm(tf.cast(stages.summed_rows(grad), tf.float32))
    v_norm = tf.norm(tf.cast(stages.unwrap(var), tf.float32))
    factor = stages.larc_coefficients(tf.reshape(g_norm, [1]), tf.reshape(v_norm, [1]),
                                      learning_rate, params['larc_eta'], params['larc_mode'],
                                      params['min_update'], params['epsilon'])[0]
    if isinstance(grad, tf.IndexedSlices):
      result[i] = tf.IndexedSlices(grad.values * tf.cast(factor, grad.dtype), grad.indices,
                                   grad.dense_shape)
    else:
      result[i] = grad * tf.cast(factor, grad.dtype)
    factors[i] = factor
  return result, factors
