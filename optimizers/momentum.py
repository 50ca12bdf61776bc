"""``MomentumOptimizer``: Keras' momentum SGD under its TF 1 name, with the fused paths."""

import keras
import tensorflow as tf

from optimizers import backend
from optimizers import exclusions
from optimizers import native
from optimizers.backend import FusedUpdate


@keras.saving.register_keras_serializable(package='largebatch')
class MomentumOptimizer(FusedUpdate, keras.optimizers.SGD):
  """Momentum SGD under its TF 1 name and arguments (``use_nesterov``).

  Keras' update v ← m·v − lr·g; w ← w + v equals TF 1's accumulator form for a
  constant learning rate. The updates of all variables run as one XLA launch
  (``xla_update``); after LARC, where the native kernel applies, LARC and the
  update run as that one kernel (``native_larc_update``).

  Args:
    learning_rate: the learning rate.
    momentum: the momentum coefficient, in [0, 1].
    use_nesterov: Nesterov momentum (TF 1's name).
    name: the optimizer's name.
    nesterov: Keras' name for ``use_nesterov``; give one of the two.
    **kwargs: other Keras optimizer arguments.

  Raises:
    ValueError: for a momentum outside [0, 1], or ``use_nesterov`` and
      ``nesterov`` given with different values.
  """

  def __init__(self, learning_rate=0.01, momentum=0.9, use_nesterov=False, name='Momentum',
               nesterov=None, **kwargs):
    if isinstance(momentum, (int, float)) and not 0 <= momentum <= 1:
      raise ValueError(f'Momentum: momentum must be in [0, 1], got {momentum!r}')
    if nesterov is not None and use_nesterov and not nesterov:
      raise ValueError(f'Momentum: use_nesterov={use_nesterov!r} and nesterov={nesterov!r} are '
                       'the same setting; give one of them')
    super().__init__(learning_rate=learning_rate, momentum=float(momentum),
                     nesterov=bool(use_nesterov or nesterov), name=name, **kwargs)

  SLOTS = ('momentums',)

  def get_slot_names(self):
    return ['momentum']

  def _slot_lists(self):
    return {'momentum': self.momentums}

  def xla_update(self, grads, variables, indices, learning_rate):
    """Keras' ``update_step`` for every variable, in one XLA launch."""
    del indices
    backend.jit_for(self, self._update_all)(grads, variables, tf.convert_to_tensor(learning_rate))

  def _update_all(self, grads, variables, learning_rate):
    for grad, var in zip(grads, variables):
      self.update_step(grad, var, learning_rate)

  def native_larc_update(self, grads, keras_variables, variables, indices, learning_rate,
                         larc_params):
    """LARC (docs/math.md) followed by this optimizer's update, in the native kernel.

    Same math as ``stages.larc`` followed by ``update_step``: each adapted
    variable's gradient is scaled by its LARC factor c, then
    v ← m·v − lr·c·g; w ← w + v.

    Returns:
      A float32 vector, the LARC factor of each variable (1 for skipped ones).
    """
    slots = [self.momentums[i].value for i in indices]
    adapt = exclusions.larc_mask(keras_variables, larc_params)
    return native.trust_momentum(
        variables, slots, grads, learning_rate, adapt, 'larc_' + larc_params['larc_mode'],
        self.momentum, eeta=larc_params['larc_eta'], epsilon=larc_params['epsilon'],
        min_update=larc_params['min_update'], use_nesterov=self.nesterov)

  def get_config(self):
    config = super().get_config()
    config['use_nesterov'] = config.pop('nesterov')
    return config
