"""The TF 1 optimizer methods (``tf.compat.v1.train.Optimizer``) on Keras 3 optimizers.

Users port code that calls ``opt.compute_gradients(loss)``,
``opt.apply_gradients(grads_and_vars, global_step=gs)``, ``opt.minimize(loss,
global_step=gs)``, ``opt.get_slot(var, 'momentum')`` and ``opt.variables()``.
:class:`TF1OptimizerMixin` adds them to a Keras 3 optimizer class without
changing its Keras behaviour. In TF 2, ``loss`` is a zero-argument callable
(or a tensor together with the ``tape`` that recorded it).
"""

import tensorflow as tf


class CallableList(list):
  """A list that also answers a call with itself: ``opt.variables`` and ``opt.variables()`` both work."""

  def __call__(self):
    return list(self)


def gradients_of(loss, var_list, tape=None, grad_loss=None):
  """Gradients of ``loss`` (a zero-argument callable, or a tensor recorded on ``tape``)."""
  if callable(loss):
    with tf.GradientTape() as tape:
      value = loss()
  else:
    if tape is None:
      raise ValueError('compute_gradients: in TF 2 `loss` must be a zero-argument callable, '
                       'or a tensor passed with the `tape` that recorded it')
    value = loss
  return tape.gradient(value, list(var_list), output_gradients=grad_loss)


class TF1OptimizerMixin:
  """Adds the ``tf.compat.v1.train.Optimizer`` methods to a Keras 3 optimizer.

  The subclass provides ``get_slot_names()`` and ``_slot_lists()`` (slot name ->
  list of slot variables in the order of the built variables).
  """

  GATE_NONE = 0
  GATE_OP = 1
  GATE_GRAPH = 2

  def get_name(self):
    """The optimizer's name."""
    return self.name

  @property
  def variables(self):
    return CallableList(super().variables)

  def _default_var_list(self, var_list):
    if var_list is not None:
      return list(var_list)
    if getattr(self, 'built', False):
      return list(self._trainable_variables)
    raise ValueError(f'{self.name}: var_list is required (TF 2 has no collection of '
                     'trainable variables); pass model.trainable_variables')

  def compute_gradients(self, loss, var_list=None, gate_gradients=GATE_OP,
                        aggregation_method=None, colocate_gradients_with_ops=False,
                        grad_loss=None, tape=None):
    """Computes the gradients of ``loss`` for ``var_list``.

    Args:
      loss: a zero-argument callable returning the loss (or a tensor with ``tape``).
      var_list: the variables; defaults to the ones the optimizer was built with.
      gate_gradients, aggregation_method, colocate_gradients_with_ops: accepted
        for compatibility; TF 2 eager gradients need no gating.
      grad_loss: optional gradient of the loss (``output_gradients``).
      tape: the GradientTape that recorded a tensor ``loss``.

    Returns:
      A list of (gradient, variable) pairs; the gradient is None for a variable
      the loss does not depend on.
    """
    del gate_gradients, aggregation_method, colocate_gradients_with_ops
    var_list = self._default_var_list(var_list)
    grads = gradients_of(loss, var_list, tape=tape, grad_loss=grad_loss)
    return list(zip(grads, var_list))

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies gradients; increments ``global_step`` by one when given.

    Args:
      grads_and_vars: (gradient, variable) pairs; pairs with a None gradient are ignored.
      global_step: optional integer variable incremented after the update.
      name: accepted for compatibility.

    Returns:
      The optimizer's iteration counter.

    Raises:
      ValueError: when no pair has a gradient.
    """
    del name
    grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
    if not grads_and_vars:
      raise ValueError(f'{self.name}: no gradients provided for any variable')
    result = super().apply_gradients(grads_and_vars)
    if global_step is not None:
      global_step.assign_add(tf.cast(1, global_step.dtype))
    return result

  def minimize(self, loss, global_step=None, var_list=None, gate_gradients=GATE_OP,
               aggregation_method=None, colocate_gradients_with_ops=False, name=None,
               grad_loss=None, tape=None):
    """compute_gradients followed by apply_gradients (TF 1 argument order).

    The Keras order ``minimize(loss, var_list)`` is accepted too: a list in the
    second position is taken as ``var_list``.
    """
    if isinstance(global_step, (list, tuple)):
      global_step, var_list = None, global_step
    grads_and_vars = self.compute_gradients(
        loss, var_list=var_list, gate_gradients=gate_gradients,
        aggregation_method=aggregation_method,
        colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss, tape=tape)
    return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

  def get_slot(self, var, name):
    """The slot variable ``name`` (see ``get_slot_names``) of ``var``, or None."""
    slots = self._slot_lists().get(name)
    if slots is None or not getattr(self, 'built', False):
      return None
    try:
      return slots[self._get_variable_index(var)]
    except KeyError:
      return None

  def get_slot_names(self):
    raise NotImplementedError

  def _slot_lists(self):
    raise NotImplementedError

