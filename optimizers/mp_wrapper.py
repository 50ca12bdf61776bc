"""``MixedPrecisionOptimizerWrapper``: float32 master weights for half-precision compute.

Keras 3 dtype policies (``mixed_float16``, ``mixed_bfloat16``) already keep
variables in float32 and compute in half precision; for such a model the
wrapper only adds loss scaling and the non-finite-step skip. Variables that are
themselves float16/bfloat16 get a float32 master copy: the optimizer (and its
slots) update the copy, and the half-precision variable receives the rounded
result, so small updates accumulate instead of rounding away.
"""

from optimizers import stages
from optimizers.loss_scale_optimizer import MixedPrecisionLossScaleOptimizer
from optimizers.loss_scale_optimizer import apply_to
from optimizers.loss_scale_optimizer import build


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
