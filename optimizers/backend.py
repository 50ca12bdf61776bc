"""The optimizers' side of the update: the fused forms of their step, and TF 1's methods.

An optimizer's step has up to three forms with the same math (docs/math.md),
at different speeds:

* native: the CPU kernels of ``native.py``, each variable read once (LARS,
  LAMB, and LARC followed by Momentum as one kernel);
* XLA: norms with ``tf.nn.l2_loss`` kernels (``squared_norms``) and the
  element-wise updates as a few XLA launches (``jit_for``, ``pipelined``);
* Keras: Keras' own ``update_step``, one variable at a time.

``stages.step_stages`` applies the rules of the choice in one order, once,
when an update's chain is built (``stages.Chain``). ``FusedUpdate``, the
base of the package's optimizers, gives Keras' ``apply`` the same choice,
and brings ``TF1OptimizerMixin``, the ``tf.compat.v1.train.Optimizer``
methods ported code calls; this module holds the XLA form's building blocks.

Why: a Python loop over variables runs several small ops per variable, each
reading and writing a whole tensor; ``tf.nn.l2_loss`` takes Σx²/2 in one
vectorised pass (``tf.norm`` and XLA reductions are 2-5x slower on CPU,
docs/performance.md), XLA fuses a group's element-wise arithmetic into one
launch, and ``pipelined`` overlaps the two.
"""

import keras
import tensorflow as tf

from optimizers import exclusions
from optimizers import stages


# --- building blocks of the XLA path ------------------------------------------------------

# Groups of variables whose norms and updates are overlapped (``pipelined``):
# three measured best on ResNet-50 (docs/performance.md); 1 turns it off.
PIPELINE_GROUPS = 3


# The norms of the XLA path are the stages' own (one ``tf.nn.l2_loss`` kernel per tensor).
squared_norms = stages.squared_norms
norms = stages.norm_vector
global_norm = stages.global_norm
unwrap = stages.unwrap
unwrap_all = stages.unwrap_all


def split_by_size(tensors, parts):
  """Splits ``range(len(tensors))`` into up to ``parts`` consecutive groups of about equal size.

  Returns:
    A list of non-empty lists of indices, in order.
  """
  sizes = [max(1, int(t.shape.num_elements() or 1)) for t in tensors]
  total = float(sum(sizes))
  groups, current, seen = [], [], 0
  for i, size in enumerate(sizes):
    current.append(i)
    seen += size
    if seen >= total * (len(groups) + 1) / parts and len(groups) < parts - 1:
      groups.append(current)
      current = []
  if current:
    groups.append(current)
  return groups


def pipelined(groups, norms_fn, update_fn):
  """Runs ``update_fn(i, group, norms_fn(group))`` group by group, norms overlapping updates.

  Inside a ``tf.function`` the norms of group i + 1 are ordered only after
  those of group i, and the update of group i only after that of group i − 1,
  so the norm kernels of the next group run while XLA updates the current one.
  Each pass alone leaves part of the memory bandwidth unused; together they
  fill more of it. Eagerly, the groups simply run in turn.

  Args:
    groups: lists of indices (see ``split_by_size``).
    norms_fn: ``group -> nest of tensors``, the norms one update needs.
    update_fn: ``(i, group, norms) -> tensor`` (a result to order the next update by).
  """
  norm_deps, update_deps = [], []
  for i, group in enumerate(groups):
    with tf.control_dependencies(norm_deps):
      group_norms = norms_fn(group)
    with tf.control_dependencies(update_deps):
      result = update_fn(i, group, group_norms)
    norm_deps = tf.nest.flatten(group_norms)
    update_deps = tf.nest.flatten(result)


def jit(fn):
  """``fn`` as a ``tf.function`` that XLA compiles into one launch (one cluster of an outer graph)."""
  return tf.function(fn, jit_compile=True, autograph=False)


def jit_for(owner, fn, name=None):
  """``jit(fn)`` private to ``owner`` (an optimizer), created on first use.

  A trace keeps weak references to its variables and fails once they are
  deleted, so a trace is never shared between two models' variables. The
  functions are held in a plain dict, out of checkpoint and SavedModel
  tracking.
  """
  functions = owner.__dict__.get('_fused_functions')
  if functions is None:
    functions = {}
    object.__setattr__(owner, '_fused_functions', functions)
  key = name or fn.__name__
  if key not in functions:
    functions[key] = jit(fn)
  return functions[key]


# --- TF 1's sparse momentum, the fallback of LARS and TF 1's Momentum --------------------

def deduplicate(grad):
  """Sums the rows of an IndexedSlices gradient that share an index.

  Returns:
    (values, unique_indices).
  """
  unique, positions = tf.unique(grad.indices)
  values = tf.math.unsorted_segment_sum(grad.values, positions, tf.shape(unique)[0])
  return values, unique


def sparse_momentum_update(var, momentum_slot, grad, learning_rate, momentum, use_nesterov):
  """Plain momentum on the rows of an IndexedSlices gradient (the TF 1 sparse fallback).

  As ``tf.compat.v1.train.MomentumOptimizer`` does for sparse gradients: only
  the rows named by the indices change, with accum ← m·accum + g and
  var ← var − lr·accum (Nesterov: var ← var − lr·(g + m·accum)). Duplicate
  indices are summed first.
  """
  values, indices = deduplicate(grad)
  values = tf.cast(values, var.dtype)
  lr = tf.cast(learning_rate, var.dtype)
  momentum = tf.cast(momentum, var.dtype)
  accum = momentum * tf.gather(momentum_slot, indices) + values
  momentum_slot.scatter_update(tf.IndexedSlices(accum, indices))
  step = lr * (values + momentum * accum) if use_nesterov else lr * accum
  var.scatter_sub(tf.IndexedSlices(step, indices))


# --- TF 1's optimizer methods on Keras 3 optimizers ---------------------------------------

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


# --- the optimizers' side: Keras' apply on the chosen path -------------------------------

class FusedUpdate(TF1OptimizerMixin):
  """Base of the package's Keras 3 optimizers: their update in fused forms, TF 1's methods.

  First among the bases of the optimizer class; it brings the
  ``tf.compat.v1.train.Optimizer`` methods (``TF1OptimizerMixin``) with it.

  The subclass provides ``xla_update(grads, variables, indices, learning_rate)``
  (all variables in a few XLA launches) and may provide
  ``native_update(kernels, grads, variables, indices, learning_rate)`` and
  ``native_larc_update(kernels, grads, variables, indices, learning_rate,
  larc_params, adapt)``, given the loaded native op library. ``variables``
  are the tf.Variables behind the Keras ones and ``indices`` their positions
  in the built variable list. ``SLOTS`` names the attributes that hold its
  slot lists, in the order the native kernel takes them.

  Keras' ``apply`` (``model.fit``, a user's loop) takes the form
  ``stages.step_stages`` chooses, once, as the chain of ``optimize_loss`` does; in
  Keras' own form it is Keras' ``apply`` (``reference_apply``).
  """

  # The attributes holding the optimizer's per-variable slot lists.
  SLOTS = ()

  # Whether the fused paths may be taken (LARS and LAMB take ``fused=`` for it).
  fused = True
  # Weight decay is part of the subclass's update, not Keras' decoupled step.
  FOLDS_WEIGHT_DECAY = False
  # The update reads a sparse gradient (tf.IndexedSlices) as the dense tensor it
  # sums to, as the subclass's update_step does: the fused paths then take it too.
  SPARSE_AS_DENSE = False

  def build(self, var_list):
    if self.FOLDS_WEIGHT_DECAY:
      # The decay is folded into the update: Keras' own decoupled step, which
      # its apply runs before update_step, must decay nothing (the subclass
      # read its decay masks before this).
      self.exclude_from_weight_decay(var_list=list(var_list))
    super().build(var_list)

  def native_slots(self, variables):
    """The slots of ``variables`` (tf.Variables) the native kernel writes, to check their dtypes."""
    indices = [self._get_variable_index(v) for v in variables]
    return [getattr(self, name)[i].value for name in self.SLOTS for i in indices]

  def apply(self, grads, trainable_variables=None):
    """Keras' ``apply``: in a fused form where one applies and Keras adds nothing, else Keras' own.

    The form is chosen once for a list of variables (``stages.step_stages``), the
    first time they are applied, and kept.
    """
    if trainable_variables is not None and grads and all(g is not None for g in grads):
      grads, variables = list(grads), list(trainable_variables)
      self._build_as_keras_does(variables)
      steps = self.__dict__.get('_apply_steps')
      if steps is None:
        steps = {}
        object.__setattr__(self, '_apply_steps', steps)
      key = tuple(id(v) for v in variables)
      if key not in steps:
        steps[key] = stages.step_stages(self, variables, grads)[0]
      if not isinstance(steps[key], stages.KerasStep):
        # The gradients as given: they come from the caller's graph, with no
        # branch of a chain between them and the update.
        stages.apply_fused(self, steps[key].update, grads, variables)
        return None
    return super().apply(grads, trainable_variables)

  def reference_apply(self, grads, trainable_variables=None):
    """Keras' own ``apply``: its steps around ``update_step``, called variable by variable."""
    return super().apply(grads, trainable_variables)

  def _build_as_keras_does(self, variables):
    if not self.built:
      with keras.name_scope(self.name, caller=self):
        self.build(variables)
      self.built = True
