"""The loss-scale optimizers: loss scaling around another optimizer, for Keras and for TF 1 style loops.

Both take the loss scales ``optimize_loss`` takes (a fixed number,
``'dynamic'``, OpenSeq2Seq's ``'Backoff'`` and ``'LogMax'``; the scalers of
``automatic_loss_scaler.py``):

* :class:`LossScaleOptimizer`, for ``model.compile``: a subclass of Keras'
  ``keras.optimizers.LossScaleOptimizer``, which knows one rule (dynamic
  scaling). It keeps Keras' behaviour in ``fit`` (the loss is multiplied by
  the scale in ``train_step``, the gradients are divided by it, a step with a
  non-finite gradient changes no variable and not ``iterations``), so
  ``model.compile`` does not wrap it a second time under a ``mixed_float16``
  policy. It is registered for Keras serialization: ``model.save`` stores the
  inner optimizer, the rule and the scaler's state, and
  ``keras.models.load_model`` restores them. TensorFlow backend only (the
  scalers hold ``tf.Variable`` state).
* :class:`MixedPrecisionLossScaleOptimizer`, the TF 2 counterpart of
  ``tf.train.experimental.MixedPrecisionLossScaleOptimizer`` for TF 1 style
  loops: ``compute_gradients`` multiplies the loss by the loss scale and
  divides the gradients by it; ``apply_gradients`` applies them only when every
  gradient is finite (otherwise no variable changes and ``global_step``
  stays), and advances the loss scale either way.
* :class:`MixedPrecisionOptimizerWrapper` (OpenSeq2Seq's ``mp_wrapper``) adds
  float32 master weights to it: variables that are themselves float16 or
  bfloat16 get a float32 copy that the optimizer and its slots update, and
  the half-precision variable receives the rounded result, so small updates
  accumulate instead of rounding away. Under Keras 3's mixed policies the
  variables are float32 already and only the loss scaling remains.
"""

import math

import keras
import tensorflow as tf

from optimizers import stages
from optimizers.pipeline import scaled_gradients
from optimizers import backend
from optimizers.stages import gradient_stats
from optimizers.automatic_loss_scaler import make_loss_scaler


@keras.saving.register_keras_serializable(package='largebatch')
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
  """Loss scaling for ``model.compile`` with a fixed, dynamic, Backoff or LogMax scale.

  Each step: the loss is multiplied by the current scale; the gradients are
  divided by it; when all are finite the inner optimizer applies them and the
  scaler sees (no overflow, largest |g|), otherwise nothing is applied and the
  scaler sees an overflow (Backoff and dynamic halve the scale).

  Example::

    model.compile(optimizer=LossScaleOptimizer(LARSOptimizer(0.1), 'Backoff'), loss='mse')

  Args:
    inner_optimizer: the Keras optimizer to wrap (e.g. ``LARSOptimizer``, ``LAMB``).
    loss_scaling: a positive number (fixed), ``'dynamic'``, ``'Backoff'`` or
      ``'LogMax'`` (names in any case), as ``optimize_loss``'s ``loss_scaling``.
    loss_scaling_params: the parameters of the rule, as ``loss_scaling_params``
      (e.g. ``{'scale_max': 2**15, 'step_window': 1000}`` for Backoff).
    name: the optimizer's name.

  Raises:
    ValueError: for any other ``loss_scaling`` or a bad parameter, naming it.
  """

  def __init__(self, inner_optimizer, loss_scaling='dynamic', loss_scaling_params=None,
               name=None, **kwargs):
    if not isinstance(loss_scaling, (int, float, str)) or isinstance(loss_scaling, bool):
      raise ValueError(f'loss_scaling: expected a positive number or a name (dynamic, Backoff, '
                       f'LogMax), got {loss_scaling!r}')
    super().__init__(inner_optimizer, name=name, **kwargs)
    self.loss_scaling = loss_scaling
    self.loss_scaling_params = dict(loss_scaling_params) if loss_scaling_params else None
    self.scaler = make_loss_scaler(loss_scaling, self.loss_scaling_params)

  def build(self, var_list):
    # Keras' build would add its own dynamic-scale variables; the scaler holds the state.
    self.inner_optimizer.build(var_list)
    keras.optimizers.Optimizer.build(self, var_list)

  @property
  def variables(self):
    """This optimizer's, the inner optimizer's and the scaler's variables (saved by ``model.save``)."""
    return self._variables + self.inner_optimizer.variables + list(self.scaler.variables)

  @property
  def loss_scale(self):
    """The current loss scale (a float32 tensor)."""
    return self.scaler.loss_scale

  def scale_loss(self, loss):
    return loss * tf.cast(self.scaler.loss_scale, loss.dtype)

  def _stateful_handle_finite_grads(self, grads, trainable_variables):
    tvs = trainable_variables or self._trainable_variables
    inverse = 1.0 / self.scaler.loss_scale
    unscaled = [g if g is None or self._overwrite_variable_with_gradient(v)
                else g * tf.cast(inverse, g.dtype) for g, v in zip(grads, tvs)]
    _, amax, _ = stages.gradient_statistics(unscaled, with_norm=False)
    self.scaler.update_op(tf.constant(False), amax)
    self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)

  def _stateful_handle_non_finite_grads(self):
    self.scaler.update_op(tf.constant(True), tf.constant(math.inf, tf.float32))

  def stateless_apply(self, optimizer_variables, grads, trainable_variables):
    raise NotImplementedError(f'{type(self).__name__} runs on the TensorFlow backend only')

  def get_config(self):
    return {
        'name': self.name,
        'inner_optimizer': keras.saving.serialize_keras_object(self.inner_optimizer),
        'loss_scaling': self.loss_scaling,
        'loss_scaling_params': self.loss_scaling_params,
    }


def _apply_if(condition, apply_fn):
  """Runs ``apply_fn`` only when ``condition`` holds, eagerly or inside a tf.function."""
  def run():
    apply_fn()
    return tf.constant(True)

  return tf.cond(condition, run, lambda: tf.constant(False))


def apply_to(optimizer, grads_and_vars):
  """Applies (gradient, variable) pairs with a Keras 3 optimizer, building it first if needed."""
  grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
  if not grads_and_vars:
    raise ValueError(f'{optimizer.name}: no gradients provided for any variable')
  build(optimizer, [v for _, v in grads_and_vars])
  grads, variables = zip(*grads_and_vars)
  optimizer.apply(list(grads), list(variables))


def build(optimizer, var_list):
  """Builds a Keras optimizer's slots outside any tf.function or tf.cond being traced."""
  if not optimizer.built:
    with tf.init_scope():
      optimizer.build(list(var_list))


class MixedPrecisionLossScaleOptimizer(tf.Module):
  """Wraps an optimizer with loss scaling and skipping of non-finite steps.

  Args:
    opt: the optimizer to wrap (a Keras 3 optimizer, e.g. ``LARSOptimizer``).
    loss_scale: a positive number (static), ``'dynamic'`` (starts at 2**15, ×2
      after 2000 finite steps, ÷2 on overflow, never below 1) or a scaler such
      as ``AutomaticLossScaler``.

  Raises:
    ValueError: for any other ``loss_scale``.
  """

  GATE_NONE = backend.TF1OptimizerMixin.GATE_NONE
  GATE_OP = backend.TF1OptimizerMixin.GATE_OP
  GATE_GRAPH = backend.TF1OptimizerMixin.GATE_GRAPH

  def __init__(self, opt, loss_scale, name=None):
    super().__init__(name=name or f'{getattr(opt, "name", "optimizer")}_loss_scale')
    self._optimizer = opt
    self.scaler = make_loss_scaler(loss_scale)

  @property
  def optimizer(self):
    """The wrapped optimizer."""
    return self._optimizer

  @property
  def loss_scale(self):
    """The current loss scale (a float32 tensor)."""
    return self.scaler.loss_scale

  def get_name(self):
    return self._optimizer.name

  def get_slot(self, var, name):
    return self._optimizer.get_slot(var, name)

  def get_slot_names(self):
    return self._optimizer.get_slot_names()

  @property
  def variables(self):
    """The wrapped optimizer's variables followed by the loss scaler's."""
    inner = self._optimizer.variables
    inner = inner() if callable(inner) else inner
    return backend.CallableList(list(inner) + list(self.scaler.variables))

  def compute_gradients(self, loss, var_list=None, gate_gradients=GATE_OP,
                        aggregation_method=None, colocate_gradients_with_ops=False,
                        grad_loss=None, tape=None):
    """Gradients of loss × loss_scale, divided by loss_scale, as float32.

    Args:
      loss: a zero-argument callable returning the loss.
      var_list: the variables (required unless the wrapped optimizer is built).
      gate_gradients, aggregation_method, colocate_gradients_with_ops, grad_loss,
        tape: accepted for compatibility; ``loss`` must be a callable.

    Returns:
      A list of (float32 gradient or None, variable) pairs.
    """
    del gate_gradients, aggregation_method, colocate_gradients_with_ops, grad_loss, tape
    if not callable(loss):
      raise ValueError(f'{self.name}: loss must be a zero-argument callable in TF 2')
    if var_list is None:
      if not getattr(self._optimizer, 'built', False):
        raise ValueError(f'{self.name}: var_list is required; pass model.trainable_variables')
      var_list = self._optimizer._trainable_variables  # pylint: disable=protected-access
    var_list = list(var_list)
    _, grads = scaled_gradients(loss, var_list, self.loss_scale)
    return list(zip(grads, var_list))

  def _apply(self, grads_and_vars):
    apply_to(self._optimizer, grads_and_vars)

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies the gradients when all are finite; updates the loss scale either way.

    Args:
      grads_and_vars: (gradient, variable) pairs of unscaled gradients.
      global_step: optional integer variable, incremented only when applied.
      name: accepted for compatibility.

    Returns:
      A boolean tensor: whether the update was applied.
    """
    del name
    grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
    build(self._optimizer, [v for _, v in grads_and_vars])
    has_nan, amax = gradient_stats([g for g, _ in grads_and_vars])
    self.scaler.update_op(has_nan, amax)

    def update():
      self._apply(grads_and_vars)
      if global_step is not None:
        global_step.assign_add(tf.cast(1, global_step.dtype))

    return _apply_if(tf.logical_not(has_nan), update)

  def minimize(self, loss, global_step=None, var_list=None, gate_gradients=GATE_OP,
               aggregation_method=None, colocate_gradients_with_ops=False, name=None,
               grad_loss=None, tape=None):
    """compute_gradients then apply_gradients; returns whether the step was applied."""
    if isinstance(global_step, (list, tuple)):
      global_step, var_list = None, global_step
    grads_and_vars = self.compute_gradients(loss, var_list=var_list, grad_loss=grad_loss,
                                            tape=tape)
    return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)


class MixedPrecisionOptimizerWrapper(MixedPrecisionLossScaleOptimizer):
  """Loss scaling plus float32 master weights around an optimizer.

  Args:
    optimizer: the optimizer to wrap.
    loss_scale: None (no scaling), a positive number (integers work),
      ``'dynamic'``, ``'Backoff'``, ``'LogMax'`` or a scaler object.
  """

  def __init__(self, optimizer, loss_scale=None, name=None):
    super().__init__(optimizer, 1.0 if loss_scale is None else loss_scale, name=name)
    self._masters = {}

  def master_weights(self, var_list):
    """The MasterWeights for ``var_list`` (created on first use)."""
    key = tuple(id(v) for v in var_list)
    if key not in self._masters:
      self._masters[key] = stages.MasterWeights(var_list)
    return self._masters[key]

  def _apply(self, grads_and_vars):
    var_list = [v for _, v in grads_and_vars]
    masters = self.master_weights(var_list)
    apply_to(self._optimizer, [(g, m) for (g, _), m in zip(grads_and_vars, masters.masters)])
    masters.copy_back()

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
    # Masters and slots must exist before the conditional update is traced.
    build(self._optimizer, self.master_weights([v for _, v in grads_and_vars]).masters)
    return super().apply_gradients(grads_and_vars, global_step=global_step, name=name)
