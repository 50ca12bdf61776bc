"""``LossScaleOptimizer``: Keras 3 loss scaling driven by any of the package's scalers.

Keras' own ``keras.optimizers.LossScaleOptimizer`` knows one rule (dynamic
scaling). This subclass keeps its behaviour in ``fit`` (the loss is multiplied
by the scale in ``train_step``, the gradients are divided by it, a step with a
non-finite gradient changes no variable and not ``iterations``) and takes the
scale from the scalers ``optimize_loss`` uses: a fixed number, ``'dynamic'``,
or OpenSeq2Seq's ``'Backoff'`` and ``'LogMax'`` (``automatic_loss_scaler``).

Because it is a ``keras.optimizers.LossScaleOptimizer``, ``model.compile``
does not wrap it a second time under a ``mixed_float16`` policy. It is
registered for Keras serialization: ``model.save`` stores the inner optimizer,
the rule and the scaler's state, and ``keras.models.load_model`` restores them.
TensorFlow backend only (the scalers hold ``tf.Variable`` state).
"""

import math

import keras
import tensorflow as tf

from optimizers import stages
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
