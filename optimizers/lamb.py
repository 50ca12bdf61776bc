"""LAMB: layer-wise adaptive moments for large-batch training.

``update_step`` is the per-variable reference path. With ``fused=True`` (the
default) ``apply`` runs ``native_update``, the native CPU kernel
(``lamb_kernel``: moments, norms and update of each variable in one visit),
or where it does not apply ``xla_update``: the moments of all variables and
their directions u in one XLA launch, ‖w‖ and ‖u‖ with ``tf.nn.l2_loss``
kernels, and w ← w − lr·ratio·u in a second launch (``lamb_moments_all``,
``lamb_apply_all``); ``stages.step_stages`` chooses, once (docs/performance.md).

References:
  You, Li, Reddi, Hseu, Kumar, Bhojanapalli, Song, Demmel, Keutzer, Hsieh.
  Large Batch Optimization for Deep Learning: Training BERT in 76 minutes.
  arXiv:1904.00962, 2019.
"""

import keras
import tensorflow as tf

from optimizers import backend
from optimizers import exclusions
from optimizers.backend import FusedUpdate
from optimizers.backend import unwrap


def lamb_direction(m_hat, v_hat, w, epsilon, weight_decay):
  """The LAMB update direction u = m̂/(√v̂ + ε) + wd·w."""
  return m_hat / (tf.sqrt(v_hat) + epsilon) + weight_decay * w


def lamb_trust_ratio(w_norm, u_norm):
  """‖w‖/‖u‖, or 1 when either norm is 0."""
  usable = tf.logical_and(w_norm > 0.0, u_norm > 0.0)
  return tf.where(usable, w_norm / tf.where(usable, u_norm, 1.0), tf.ones_like(w_norm))


def lamb_moments_all(variables, ms, vs, grads, step, decays, beta_1, beta_2, epsilon,
                     weight_decay):
  """Updates the moments of many variables and returns their LAMB directions.

  Args:
    variables: the tf.Variables being trained.
    ms, vs: their first- and second-moment tf.Variables.
    grads: their dense gradients.
    step: the 1-based step t (float32 scalar).
    decays: one bool per variable, whether it gets weight decay.
    beta_1, beta_2, epsilon, weight_decay: as ``LAMB``.

  Returns:
    The float32 directions u = m̂/(√v̂ + ε) + wd·w, one per variable.
  """
  directions = []
  for var, m, v, g, decay in zip(variables, ms, vs, grads, decays):
    g = tf.cast(g, tf.float32)
    m.assign(beta_1 * m + (1.0 - beta_1) * tf.cast(g, m.dtype))
    v.assign(beta_2 * v + (1.0 - beta_2) * tf.cast(tf.square(g), v.dtype))
    m_hat = tf.cast(m, tf.float32) / (1.0 - tf.pow(beta_1, step))
    v_hat = tf.cast(v, tf.float32) / (1.0 - tf.pow(beta_2, step))
    directions.append(lamb_direction(m_hat, v_hat, tf.cast(var, tf.float32), epsilon,
                                     weight_decay if decay else 0.0))
  return directions


def lamb_apply_all(variables, directions, adapts, learning_rate, w_squared, u_squared):
  """w ← w − lr·ratio·u for many variables; ratio = ‖w‖/‖u‖ for adapted ones, else 1.

  Args:
    variables: the tf.Variables to update.
    directions: their float32 directions u (``lamb_moments_all``).
    adapts: one bool per variable, whether it gets the trust ratio.
    learning_rate: the learning rate (scalar).
    w_squared, u_squared: float32 vectors of ‖w‖² and ‖u‖² of the adapted variables.

  Returns:
    The trust ratios of the adapted variables (float32 vector).
  """
  lr = tf.cast(learning_rate, tf.float32)
  ratios = lamb_trust_ratio(tf.sqrt(w_squared), tf.sqrt(u_squared))
  k = 0
  for var, u, adapt in zip(variables, directions, adapts):
    ratio = 1.0
    if adapt:
      ratio = ratios[k]
      k += 1
    var.assign_sub(tf.cast(lr * ratio * u, var.dtype))
  return ratios


def lamb_kernel(kernels, variables, first_moments, second_moments, grads, learning_rate, step,
                decay, adapt, beta_1, beta_2, epsilon, weight_decay):
  """Runs the native ``LargebatchLamb`` op: LAMB's update of many variables (largebatch_ops.cc).

  Args:
    kernels: the loaded op library (``native.library_for``).
    variables, first_moments, second_moments: float32 tf.Variables, updated in place.
    grads: the dense float32 gradients.
    learning_rate: scalar learning rate.
    step: the 1-based step t (float32 scalar); the bias corrections 1 − β^t
      are computed here with the same tf ops as ``LAMB.update_step``.
    decay, adapt: one bool per variable: weight decay in u, trust ratio.
    beta_1, beta_2, epsilon, weight_decay: as ``LAMB``.

  Returns:
    A float32 vector, the trust ratio of each variable (1 where not adapted).
  """
  corrections = tf.stack([1.0 - tf.pow(beta_1, step), 1.0 - tf.pow(beta_2, step)])
  return kernels.largebatch_lamb(
      variables=[v.handle for v in variables], first_moments=[m.handle for m in first_moments],
      second_moments=[v.handle for v in second_moments],
      gradients=[tf.convert_to_tensor(g) for g in grads],
      learning_rate=tf.cast(learning_rate, tf.float32), corrections=corrections,
      decay=[bool(d) for d in decay], adapt=[bool(a) for a in adapt], beta_1=float(beta_1),
      one_minus_beta_1=1.0 - beta_1, beta_2=float(beta_2), one_minus_beta_2=1.0 - beta_2,
      epsilon=float(epsilon), weight_decay=float(weight_decay))


@keras.saving.register_keras_serializable(package='largebatch')
class LAMB(FusedUpdate, exclusions.LayerwiseExclusions, keras.optimizers.Optimizer):
  """LAMB: Adam moments with bias correction and a layer-wise trust ratio.

  With t the 1-based step: m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g²,
  m̂ = m/(1−β1^t), v̂ = v/(1−β2^t), u = m̂/(√v̂+ε) + wd·w,
  w ← w − lr·(‖w‖/‖u‖)·u (the ratio is 1 when a norm is 0).

  Registered for Keras serialization (``largebatch>LAMB``), as ``LARSOptimizer``.

  Args:
    learning_rate: a float, a Keras LearningRateSchedule, or a zero-argument callable.
    beta_1: decay of the first moment, in [0, 1).
    beta_2: decay of the second moment, in [0, 1).
    epsilon: added to √v̂ (> 0).
    weight_decay: coefficient of w in u (>= 0); None (the default, as in Keras) means 0.
    exclude_from_weight_decay: strings; variables whose name or path contains one
      get no weight decay. Keras' ``exclude_from_weight_decay(var_names=...)``
      method works too.
    exclude_from_layer_adaptation: strings; variables whose name or path contains
      one use a trust ratio of 1. Defaults to the weight-decay exclusions.
    name: the optimizer's name.
    fused: update all variables together: the native CPU kernel where it
      applies, else two XLA launches with the norms taken in between (same
      math; False runs ``update_step`` variable by variable).
    skip_list: the ``tf.contrib`` spelling: excluded from both (see ``exclusions.py``).
    **kwargs: other Keras optimizer arguments.
  """

  def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
               weight_decay=None, exclude_from_weight_decay=None,
               exclude_from_layer_adaptation=None, name='LAMB', fused=True, skip_list=None,
               **kwargs):
    weight_decay = 0.0 if weight_decay is None else weight_decay
    for key, value in (('learning_rate', learning_rate), ('weight_decay', weight_decay),
                       ('epsilon', epsilon)):
      if isinstance(value, (int, float)) and value < 0:
        raise ValueError(f'LAMB: {key} must be >= 0, got {value!r}')
    for key, value in (('beta_1', beta_1), ('beta_2', beta_2)):
      if not 0.0 <= value < 1.0:
        raise ValueError(f'LAMB: {key} must be in [0, 1), got {value!r}')
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self.beta_1 = float(beta_1)
    self.beta_2 = float(beta_2)
    self.epsilon = float(epsilon)
    self.weight_decay = float(weight_decay)
    self._set_exclusions(exclude_from_weight_decay, exclude_from_layer_adaptation, skip_list)
    self.fused = bool(fused)

  # Weight decay is part of the LAMB direction u, before the trust ratio.
  FOLDS_WEIGHT_DECAY = True
  # update_step reads a sparse gradient as the dense one it sums to (an embedding's
  # rows that no token of the batch used get g = 0, and their moments decay), so
  # the fused paths compute the same with it densified.
  SPARSE_AS_DENSE = True
  SLOTS = ('_m', '_v')

  def build(self, var_list):
    if self.built:
      return
    self.take_masks(var_list)
    super().build(var_list)
    self._m = self.add_optimizer_variables(var_list, 'm')
    self._v = self.add_optimizer_variables(var_list, 'v')

  def update_step(self, gradient, variable, learning_rate):
    index = self._get_variable_index(variable)
    var = unwrap(variable)
    m = unwrap(self._m[index])
    v = unwrap(self._v[index])
    g = tf.cast(tf.convert_to_tensor(gradient), tf.float32)
    t = tf.cast(self.iterations + 1, tf.float32)
    m.assign(self.beta_1 * m + (1.0 - self.beta_1) * tf.cast(g, m.dtype))
    v.assign(self.beta_2 * v + (1.0 - self.beta_2) * tf.cast(tf.square(g), v.dtype))
    m_hat = tf.cast(m, tf.float32) / (1.0 - tf.pow(self.beta_1, t))
    v_hat = tf.cast(v, tf.float32) / (1.0 - tf.pow(self.beta_2, t))
    w = tf.cast(var, tf.float32)
    wd = self.weight_decay if self._decays[index] else 0.0
    u = lamb_direction(m_hat, v_hat, w, self.epsilon, wd)
    if self._adapts[index]:
      ratio = lamb_trust_ratio(tf.norm(w), tf.norm(u))
    else:
      ratio = 1.0
    var.assign_sub(tf.cast(tf.cast(learning_rate, tf.float32) * ratio * u, var.dtype))

  def native_update(self, kernels, grads, variables, indices, learning_rate):
    """The update of all variables in the native kernel (``lamb_kernel``)."""
    lamb_kernel(kernels, variables, [self._m[i].value for i in indices],
                [self._v[i].value for i in indices], grads,
                tf.cast(learning_rate, tf.float32), tf.cast(self.iterations + 1, tf.float32),
                [self._decays[i] for i in indices], [self._adapts[i] for i in indices],
                self.beta_1, self.beta_2, self.epsilon, self.weight_decay)

  def xla_update(self, grads, variables, indices, learning_rate):
    """The moments and directions in one XLA launch, the norms, then the update in a second."""
    adapts = [self._adapts[i] for i in indices]
    directions = backend.jit_for(self, lamb_moments_all)(
        variables, [unwrap(self._m[i]) for i in indices],
        [unwrap(self._v[i]) for i in indices], grads,
        tf.cast(self.iterations + 1, tf.float32), tuple(self._decays[i] for i in indices),
        self.beta_1, self.beta_2, self.epsilon, self.weight_decay)
    adapted = [k for k, a in enumerate(adapts) if a]
    w_squared = backend.squared_norms([variables[k] for k in adapted])
    u_squared = backend.squared_norms([directions[k] for k in adapted])
    backend.jit_for(self, lamb_apply_all)(variables, directions, tuple(adapts),
                                        tf.cast(learning_rate, tf.float32), w_squared, u_squared)

  def get_slot_names(self):
    """The names of the per-variable slots: ``['m', 'v']``."""
    return ['m', 'v']

  def _slot_lists(self):
    return {'m': self._m, 'v': self._v}

  def get_config(self):
    config = super().get_config()
    config.update({
        'beta_1': self.beta_1,
        'beta_2': self.beta_2,
        'epsilon': self.epsilon,
        'weight_decay': self.weight_decay,
        'fused': self.fused,
        **self._exclusion_config(),
    })
    return config
