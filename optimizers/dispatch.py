"""How an optimizer's update runs: the one place that chooses, and says so once.

Three paths compute the same math (docs/math.md) at different speeds:

* ``NATIVE``: the CPU kernels of ``native.py``, each variable read once
  (LARS, LAMB, and LARC followed by Momentum as one kernel);
* ``XLA``: norms with ``tf.nn.l2_loss`` kernels and the element-wise updates
  as a few XLA launches (``fused.py``);
* ``REFERENCE``: Keras' own ``update_step``, one variable at a time.

``update_path`` applies the rules in one order, so the choice can be read (and
changed) here alone. It is asked once per update, by whoever starts the
update: ``pipeline.larc_and_apply`` for ``optimize_loss`` (LARC and the update
together), which passes the path along (``keras_adapter.FusedUpdate.apply_on``),
and ``FusedUpdate`` itself when Keras' ``apply`` is called directly
(``model.fit``, a user's loop). The first time an optimizer class takes a
path, the choice is logged at INFO level on the ``optimizers`` logger.
"""

import logging

import tensorflow as tf

from optimizers import fused
from optimizers import native
from optimizers import tf1_compat

NATIVE = 'native'
XLA = 'xla'
REFERENCE = 'reference'
# LARC and the update as one native kernel (``MomentumOptimizer.native_larc_update``).
NATIVE_WITH_LARC = 'native LARC-and-update'

_LOG = logging.getLogger('optimizers')
_logged = set()


@tf.autograph.experimental.do_not_convert
def update_path(optimizer, grads, variables, larc_params=None, larc_rate_is_optimizers=True):
  """The path of one update of ``variables`` by ``optimizer``, LARC included when given.

  With ``larc_params`` (LARC, then the update): NATIVE_WITH_LARC when one
  kernel can do both: the optimizer has that kernel (``MomentumOptimizer``,
  momentum > 0), LARC's learning rate is the optimizer's own
  (``larc_rate_is_optimizers``), nothing of Keras' runs between the two steps
  (no ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``weight_decay``, EMA,
  gradient accumulation, ``loss_scale_factor``, ``overwrite_with_gradient``)
  and the kernel applies. Otherwise LARC runs first as a step of its own and
  the update takes its own path:

  REFERENCE when the optimizer has no fused paths or asked for none
  (``fused=False``), or a gradient is sparse and the optimizer's update does
  not read it as the dense one it sums to (``SPARSE_AS_DENSE``: LAMB does), or
  a ``tf.distribute`` strategy routes each variable's update; else NATIVE
  when the optimizer has a kernel and it applies (float32, dense, CPU, not
  inside an XLA cluster, built and loaded, not turned off by
  ``LARGEBATCH_NATIVE_KERNELS=0``); else XLA.

  Args:
    optimizer: the Keras optimizer.
    grads: the gradients of the update (no None entries).
    variables: the matching variables.
    larc_params: checked ``larc_params``, or None for the update alone.
    larc_rate_is_optimizers: whether LARC's learning rate is the one the
      optimizer's update uses.

  Returns:
    NATIVE_WITH_LARC (only with ``larc_params``), NATIVE, XLA or REFERENCE.
  """
  if larc_params is not None and (
      larc_rate_is_optimizers and hasattr(optimizer, 'native_larc_update')
      and optimizer.momentum > 0 and _keras_adds_nothing(optimizer, variables)
      and native.applies([tf1_compat.unwrap(v) for v in variables], [], grads)):
    return _chosen(optimizer, 'LARC and update', NATIVE_WITH_LARC)
  if getattr(optimizer, 'SPARSE_AS_DENSE', False):
    # The fused paths are given a sparse gradient densified (keras_adapter);
    # its values stand in for it here, where only types and dtypes are checked.
    grads = [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]
  if not (getattr(optimizer, 'fused', False) and fused.fusable(grads)):
    return _chosen(optimizer, 'update', REFERENCE)
  if hasattr(optimizer, 'native_update') and native.applies(
      [tf1_compat.unwrap(v) for v in variables], optimizer.native_slots(variables), grads):
    return _chosen(optimizer, 'update', NATIVE)
  return _chosen(optimizer, 'update', XLA)


def _keras_adds_nothing(optimizer, variables):
  """Whether Keras' ``apply`` would do nothing but ``update_step`` and count the iteration."""
  return not (optimizer.clipnorm is not None or optimizer.clipvalue is not None
              or optimizer.global_clipnorm is not None or optimizer.weight_decay
              or optimizer.use_ema or optimizer.gradient_accumulation_steps
              or optimizer.loss_scale_factor is not None
              or any(getattr(v, 'overwrite_with_gradient', False) for v in variables))


def _chosen(optimizer, what, path):
  key = (type(optimizer).__name__, what, path)
  if key not in _logged:
    _logged.add(key)
    reason = f' ({native.error()})' if path != NATIVE and native.error() else ''
    _LOG.info('%s: %s on the %s path%s', key[0], what, path, reason)
  return path
