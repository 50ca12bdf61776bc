"""The one adapter between the package's optimizers and Keras' private update hooks.

A Keras 3 optimizer's ``apply`` ends in ``_backend_update_step``, which runs
``update_step`` variable by variable, after ``_apply_weight_decay``.
``FusedUpdate`` is the only class of the package that overrides the two: it
runs the optimizer's ``native_update`` or ``xla_update`` for all variables
at once, or Keras' own per-variable path (the reference), on the path
``dispatch.update_path`` chose for the update. ``optimize_loss`` chooses it
once, with LARC, and passes it in (``apply_on``); a plain ``apply``
(``model.fit``, a user's loop) asks ``dispatch`` itself, once. Optimizers that
fold weight decay into their update (LARS, LAMB) set ``FOLDS_WEIGHT_DECAY``;
those whose update reads a sparse gradient as the dense one it sums to (LAMB)
set ``SPARSE_AS_DENSE``, and their fused paths are given it densified.

``apply_with_larc`` is ``apply`` for the LARC-and-update kernel: what Keras'
``apply`` does around the update, for the path ``NATIVE_WITH_LARC``.
"""

import tensorflow as tf

from optimizers import dispatch
from optimizers import tf1_compat


class FusedUpdate:
  """Mixin, first among the bases of a Keras 3 optimizer, that runs its update on one of three paths.

  The subclass provides ``xla_update(grads, variables, indices, learning_rate)``
  (all variables in a few XLA launches) and may provide ``native_update``
  with the same arguments and ``native_slots(variables)`` (the slots the
  kernel writes, so ``dispatch`` can check their dtypes), and
  ``native_larc_update(grads, keras_variables, variables, indices,
  learning_rate, larc_params)``. ``variables`` are the tf.Variables behind
  the Keras ones and ``indices`` their positions in the built variable list.
  """

  # Whether the fused paths may be taken (LARS and LAMB take ``fused=`` for it).
  fused = True
  # Weight decay is part of the subclass's update, not Keras' decoupled step.
  FOLDS_WEIGHT_DECAY = False
  # The update reads a sparse gradient (tf.IndexedSlices) as the dense tensor it
  # sums to, as the subclass's update_step does: the fused paths then take it too.
  SPARSE_AS_DENSE = False
  # The path ``apply_on`` was given for the update under way; None: ask dispatch.
  _given_path = None

  def _apply_weight_decay(self, variables):
    if self.FOLDS_WEIGHT_DECAY:
      return None
    return super()._apply_weight_decay(variables)

  def apply_on(self, path, grads, trainable_variables):
    """Keras' ``apply`` on a path already chosen for this update.

    Args:
      path: ``dispatch.NATIVE``, ``XLA`` or ``REFERENCE``, from
        ``dispatch.update_path`` on these gradients and variables.
      grads: the gradients (no None entries).
      trainable_variables: the matching variables.
    """
    if path not in (dispatch.NATIVE, dispatch.XLA, dispatch.REFERENCE):
      raise ValueError(f'{self.name}: apply_on takes the path of an update alone, got {path!r}')
    self._given_path = path
    try:
      return self.apply(grads, trainable_variables)
    finally:
      self._given_path = None

  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    path = self._given_path
    if path is None:  # Keras' apply called directly: this is where the update starts
      path = dispatch.update_path(self, grads, trainable_variables)
    if path == dispatch.REFERENCE:
      return super()._backend_update_step(grads, trainable_variables, learning_rate)
    indices = [self._get_variable_index(v) for v in trainable_variables]
    variables = [tf1_compat.unwrap(v) for v in trainable_variables]
    update = self.native_update if path == dispatch.NATIVE else self.xla_update
    # Sparse gradients come this far only when SPARSE_AS_DENSE: the dense
    # tensor they sum to is what update_step would read.
    update([tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads],
           variables, indices, learning_rate)
    return None

  def apply_with_larc(self, grads, trainable_variables, larc_params):
    """LARC at this optimizer's learning rate, then its update, as one kernel.

    Call only where ``dispatch.update_path(self, grads, trainable_variables,
    larc_params)`` is NATIVE_WITH_LARC: then Keras' ``apply`` would run nothing but the
    update between building the optimizer and applying the variables'
    constraints and counting the iteration, which this does too.

    Returns:
      A float32 vector, the LARC factor of each variable (1 for skipped ones).
    """
    trainable_variables = list(trainable_variables)
    if not self.built:
      self.build(trainable_variables)
    with tf.name_scope(self.name):
      indices = [self._get_variable_index(v) for v in trainable_variables]
      factors = self.native_larc_update(
          list(grads), trainable_variables, [tf1_compat.unwrap(v) for v in trainable_variables],
          indices, self.learning_rate, larc_params)
      for variable in trainable_variables:
        if variable.constraint is not None:
          variable.assign(variable.constraint(variable))
    self._iterations.assign_add(1)
    return factors
