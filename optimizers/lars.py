"""LARS: layer-wise adaptive rate scaling, as ``tf.contrib.opt.LARSOptimizer``.

The class is a Keras 3 optimizer (``model.compile(optimizer=LARSOptimizer(...))``
works) that also keeps the TF 1 optimizer methods users port code with:
``compute_gradients``, ``apply_gradients(grads_and_vars, global_step)``,
``minimize``, ``get_slot``, ``get_slot_names``, ``variables()`` and ``get_name``.

The math lives in plain tensor functions (``trust_ratio``, ``lars_momentum_update``)
so it can be tested and fused independently of the class. ``update_step`` and
``compute_lr`` are the per-variable reference path. With ``fused=True`` (the
default) ``apply`` runs ``native_update``, the native CPU kernel
(``trust_momentum``: each variable's norms and update in one visit,
about the cost of plain momentum), or where it does not apply ``xla_update``:
norms with ``tf.nn.l2_loss`` kernels and the element-wise updates as XLA
launches over groups of variables (``lars_update_all``, ``backend.pipelined``);
``stages.step_stages`` chooses, once (docs/performance.md).

``KerasMomentum`` is Keras' momentum SGD (the rate inside the velocity) with
the same fused paths; after LARC, where the native kernel applies, LARC and
its update run as one kernel (``native_larc_update``). TF 1's
``MomentumOptimizer`` (the rate outside the accumulator), the name
``Momentum`` of a config, is in ``compat/tf1.py``.

References:
  You, Gitman, Ginsburg. Large Batch Training of Convolutional Networks.
  arXiv:1708.03888, 2017.
"""

import keras
import tensorflow as tf

from optimizers import backend
from optimizers import exclusions
from optimizers.backend import FusedUpdate
from optimizers.backend import sparse_momentum_update
from optimizers.backend import unwrap


def trust_ratio(w_norm, g_norm, eeta, weight_decay, epsilon):
  """The LARS trust ratio eeta·‖w‖ / (‖g‖ + wd·‖w‖ + ε), or 1 when either norm is 0.

  Args:
    w_norm: float32 scalar (or vector, one entry per variable), ‖w‖.
    g_norm: float32 scalar (or vector), ‖g‖.
    eeta: the LARS coefficient.
    weight_decay: the L2 coefficient that is folded into the gradient.
    epsilon: added to the denominator.

  Returns:
    A float32 tensor shaped like the norms.
  """
  ratio = eeta * w_norm / (g_norm + weight_decay * w_norm + epsilon)
  usable = tf.logical_and(w_norm > 0.0, g_norm > 0.0)
  # The division above may be 0/0 when both norms vanish; tf.where discards it.
  return tf.where(usable, ratio, tf.ones_like(ratio))


def decayed_gradient(grad, var, weight_decay):
  """g + wd·w, the gradient LARS updates with (computed in the gradient's dtype)."""
  return grad + tf.cast(weight_decay, grad.dtype) * tf.cast(var, grad.dtype)


def lars_momentum_update(var, momentum_slot, grad, scaled_lr, momentum, use_nesterov):
  """Applies v ← m·v + lr·g; w ← w − v (or w − (lr·g + m·v) with Nesterov).

  Args:
    var: the tf.Variable to update.
    momentum_slot: its momentum tf.Variable.
    grad: the (weight-decayed) gradient, a dense tensor.
    scaled_lr: the learning rate for this variable (scalar).
    momentum: the momentum coefficient.
    use_nesterov: whether to use Nesterov momentum.
  """
  grad = tf.cast(grad, var.dtype)
  scaled_lr = tf.cast(scaled_lr, var.dtype)
  momentum = tf.cast(momentum, var.dtype)
  velocity = momentum * momentum_slot + scaled_lr * grad
  momentum_slot.assign(velocity)
  if use_nesterov:
    var.assign_sub(scaled_lr * grad + momentum * velocity)
  else:
    var.assign_sub(velocity)


def lars_update_all(variables, slots, grads, adapt, decay, learning_rate, w_squared, g_squared,
                    momentum, weight_decay, eeta, epsilon, use_nesterov):
  """The LARS update of many variables, given the squared norms of the adapted ones.

  Per variable this is ``compute_lr`` followed by ``lars_momentum_update``;
  the trust ratios of all adapted variables are computed as one vector.

  Args:
    variables: the tf.Variables to update.
    slots: their momentum tf.Variables.
    grads: their dense gradients.
    adapt: one bool per variable, False for one without the trust ratio.
    decay: one bool per variable, False for one without weight decay.
    learning_rate: the base learning rate (scalar).
    w_squared: float32 vector, ‖w‖² of each adapted variable, in order.
    g_squared: float32 vector, ‖g‖² of each adapted variable's gradient.
    momentum, weight_decay, eeta, epsilon, use_nesterov: as ``LARSOptimizer``.

  Returns:
    The trust ratios of the adapted variables (float32 vector).
  """
  lr = tf.cast(learning_rate, tf.float32)
  decays = tf.constant([weight_decay if d else 0.0 for a, d in zip(adapt, decay) if a],
                       tf.float32, shape=[sum(bool(a) for a in adapt)])
  ratios = trust_ratio(tf.sqrt(w_squared), tf.sqrt(g_squared), eeta, decays, epsilon)
  k = 0
  for var, slot, grad, adapted, decayed in zip(variables, slots, grads, adapt, decay):
    scaled_lr = lr
    if adapted:
      scaled_lr = lr * ratios[k]
      k += 1
    if decayed:
      grad = decayed_gradient(grad, var, weight_decay)
    lars_momentum_update(var, slot, grad, scaled_lr, momentum, use_nesterov)
  return ratios


def trust_momentum(kernels, variables, slots, grads, learning_rate, adapt, mode, momentum,
                   weight_decay=0.0, eeta=0.001, epsilon=0.0, min_update=0.0,
                   use_nesterov=False, decay=None):
  """Runs the native ``LargebatchTrustMomentum`` op (``optimizers/kernels/largebatch_ops.cc``).

  The op takes each variable's norms and applies its update while the
  variable is in the cache: LARS's update (``lars_update_all``'s math), or
  the LARC stage followed by Keras' momentum SGD.

  Args:
    kernels: the loaded op library (``native.library_for``).
    variables: float32 tf.Variables (resource variables), updated in place.
    slots: their momentum tf.Variables.
    grads: their dense float32 gradients.
    learning_rate: scalar base learning rate.
    adapt: one bool per variable; False for one that keeps the base lr (no
      trust ratio or LARC factor).
    mode: 'lars' (LARSOptimizer's update), 'larc_clip' or 'larc_scale' (the
      LARC stage followed by Keras' momentum SGD).
    momentum, weight_decay, eeta, epsilon, min_update, use_nesterov: as the
      optimizer and ``larc_params`` (eeta is larc_eta for the LARC modes).
    decay: in 'lars' mode, one bool per variable, whether it gets weight
      decay; None: the same as ``adapt``.

  Returns:
    A float32 vector: each variable's trust ratio or LARC factor (1 if skipped).
  """
  return kernels.largebatch_trust_momentum(
      variables=[v.handle for v in variables], slots=[s.handle for s in slots],
      gradients=[tf.convert_to_tensor(g) for g in grads],
      learning_rate=tf.cast(learning_rate, tf.float32), adapt=[bool(a) for a in adapt],
      decay=[bool(d) for d in (adapt if decay is None else decay)], mode=mode,
      momentum=float(momentum), weight_decay=float(weight_decay), eeta=float(eeta),
      epsilon=float(epsilon), min_update=float(min_update), use_nesterov=bool(use_nesterov))


def _check_non_negative(**values):
  for name, value in values.items():
    if isinstance(value, (int, float)) and value < 0:
      raise ValueError(f'LARSOptimizer: {name} must be >= 0, got {value!r}')


@keras.saving.register_keras_serializable(package='largebatch')
class LARSOptimizer(FusedUpdate, exclusions.LayerwiseExclusions, keras.optimizers.Optimizer):
  """Layer-wise Adaptive Rate Scaling with momentum.

  For each variable w with gradient g: trust = eeta·‖w‖ / (‖g‖ + weight_decay·‖w‖
  + epsilon) (1 when a norm is 0), g' = g + weight_decay·w,
  v ← momentum·v + lr·trust·g', w ← w − v. A variable excluded from the
  layer adaptation uses trust = 1; one excluded from weight decay uses g' = g
  (and no decay term in the trust ratio).

  Defaults: ``learning_rate=0.01`` as Keras' ``SGD`` (``tf.contrib.opt.LARSOptimizer``
  had none) and ``tf.contrib``'s ``weight_decay=1e-4``, so ported code trains
  the same; ``weight_decay=None`` (or 0) means no weight decay, as Keras accepts it.

  Registered for Keras serialization (``largebatch>LARSOptimizer``): a model
  compiled with it is saved by ``model.save`` and reloaded, slots and step
  included, by ``keras.models.load_model`` once ``optimizers`` is imported.

  Args:
    learning_rate: a float, a Keras LearningRateSchedule, or a zero-argument callable.
    momentum: momentum coefficient (>= 0).
    weight_decay: L2 coefficient folded into the gradient (>= 0); None means 0. The
      default, 1e-4, is ``tf.contrib``'s, kept so that ported code trains the same.
    eeta: LARS coefficient (>= 0), the trust in the layer-wise ratio.
    epsilon: added to the trust-ratio denominator (>= 0).
    name: the optimizer's name.
    skip_list: strings; a variable whose name or path contains one of them gets
      neither the trust ratio nor weight decay (e.g. ``['batch_normalization', 'bias']``),
      the ``tf.contrib`` spelling of the two lists below.
    use_nesterov: use Nesterov momentum.
    fused: update all variables together: the native CPU kernel where it
      applies, else ``tf.nn.l2_loss`` norms and a few XLA launches (same math;
      False runs ``update_step`` variable by variable).
    exclude_from_weight_decay: strings; matching variables get no weight decay.
      Keras' ``exclude_from_weight_decay(var_names=...)`` method works too.
    exclude_from_layer_adaptation: strings; matching variables get no trust
      ratio. Defaults to the weight-decay exclusions (see ``exclusions.py``).
    **kwargs: other Keras optimizer arguments (``clipnorm``, ``global_clipnorm``, ...).

  Raises:
    ValueError: for a negative learning_rate, momentum, weight_decay, eeta or
      epsilon, or an exclusion list that is not a list of strings.
  """

  def __init__(self, learning_rate=0.01, momentum=0.9, weight_decay=0.0001, eeta=0.001,
               epsilon=0.0, name='LARSOptimizer', skip_list=None, use_nesterov=False,
               fused=True, exclude_from_weight_decay=None, exclude_from_layer_adaptation=None,
               **kwargs):
    weight_decay = 0.0 if weight_decay is None else weight_decay
    _check_non_negative(learning_rate=learning_rate, momentum=momentum,
                        weight_decay=weight_decay, eeta=eeta, epsilon=epsilon)
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self._set_exclusions(exclude_from_weight_decay, exclude_from_layer_adaptation, skip_list)
    self.momentum = float(momentum)
    # Stored under the Keras name so get_config is familiar; the Keras base
    # class's decoupled decay is disabled below because LARS folds it into g.
    self.weight_decay = float(weight_decay)
    self.eeta = float(eeta)
    self.epsilon = float(epsilon)
    self.use_nesterov = bool(use_nesterov)
    self.fused = bool(fused)

  # Weight decay is part of the LARS gradient (g + wd·w), not a separate step.
  FOLDS_WEIGHT_DECAY = True
  SLOTS = ('_momentums',)

  def build(self, var_list):
    if self.built:
      return
    self.take_masks(var_list)
    super().build(var_list)
    self._momentums = self.add_optimizer_variables(var_list, 'momentum')

  def is_skipped(self, var):
    """Whether ``var`` is excluded from both the trust ratio and weight decay."""
    return not self.decays(var) and not self.adapts(var)

  def compute_lr(self, grad, var, learning_rate=None):
    """Returns (scaled_lr, grad') for one variable, as tf.contrib.opt's LARS does.

    Args:
      grad: the gradient of ``var`` (a dense tensor).
      var: the variable (Keras or tf.Variable).
      learning_rate: the base learning rate; defaults to the optimizer's current one.

    Returns:
      ``(lr·trust, g + weight_decay·w)``; ``lr`` for a variable excluded from
      the adaptation and ``g`` for one excluded from weight decay.
    """
    lr = self.learning_rate if learning_rate is None else learning_rate
    lr = tf.cast(lr, tf.float32)
    decayed, adapted = self._masks_for(var)
    weight_decay = self.weight_decay if decayed else 0.0
    w = tf.convert_to_tensor(var)
    if adapted:
      w_norm = tf.norm(tf.cast(w, tf.float32))
      g_norm = tf.norm(tf.cast(grad, tf.float32))
      lr = lr * trust_ratio(w_norm, g_norm, self.eeta, weight_decay, self.epsilon)
    if decayed:
      grad = decayed_gradient(grad, w, weight_decay)
    return lr, grad

  def update_step(self, gradient, variable, learning_rate):
    slot = unwrap(self._momentums[self._get_variable_index(variable)])
    tf_var = unwrap(variable)
    if isinstance(gradient, tf.IndexedSlices):
      sparse_momentum_update(tf_var, slot, gradient, learning_rate, self.momentum,
                             self.use_nesterov)
      return
    scaled_lr, grad = self.compute_lr(gradient, variable, learning_rate)
    lars_momentum_update(tf_var, slot, grad, scaled_lr, self.momentum, self.use_nesterov)

  def native_update(self, kernels, grads, variables, indices, learning_rate):
    """The update of all variables in the native kernel (``trust_momentum``)."""
    trust_momentum(kernels, variables, [self._momentums[i].value for i in indices],
                          grads, tf.cast(learning_rate, tf.float32),
                          [self._adapts[i] for i in indices], 'lars', self.momentum,
                          self.weight_decay, self.eeta, self.epsilon,
                          use_nesterov=self.use_nesterov, decay=[self._decays[i] for i in indices])

  def xla_update(self, grads, variables, indices, learning_rate):
    """The update of all variables as XLA launches over groups, their norms overlapped."""
    slots = [unwrap(self._momentums[i]) for i in indices]
    adapt = [self._adapts[i] for i in indices]
    decay = [self._decays[i] for i in indices]
    learning_rate = tf.cast(learning_rate, tf.float32)

    def norms(group):
      adapted = [k for k in group if adapt[k]]
      return (backend.squared_norms([variables[k] for k in adapted]),
              backend.squared_norms([grads[k] for k in adapted]))

    def update(n, group, group_norms):
      update_all = backend.jit_for(self, lars_update_all, f'lars_update_all_{n}')
      return update_all([variables[k] for k in group], [slots[k] for k in group],
                        [grads[k] for k in group], tuple(adapt[k] for k in group),
                        tuple(decay[k] for k in group), learning_rate, *group_norms,
                        self.momentum, self.weight_decay, self.eeta, self.epsilon,
                        self.use_nesterov)

    backend.pipelined(backend.split_by_size(variables, backend.PIPELINE_GROUPS), norms, update)

  def get_slot_names(self):
    """The names of the per-variable slots: ``['momentum']``."""
    return ['momentum']

  def _slot_lists(self):
    return {'momentum': self._momentums}

  def get_config(self):
    config = super().get_config()
    config.update({
        'momentum': self.momentum,
        'weight_decay': self.weight_decay,
        'eeta': self.eeta,
        'epsilon': self.epsilon,
        'use_nesterov': self.use_nesterov,
        'fused': self.fused,
        **self._exclusion_config(),
    })
    return config


@keras.saving.register_keras_serializable(package='largebatch')
class KerasMomentum(FusedUpdate, keras.optimizers.SGD):
  """Keras' momentum SGD, fused: v ← m·v − lr·g; w ← w + v (the optimizer name ``KerasMomentum``).

  The same numbers as ``keras.optimizers.SGD(momentum=...)``: the rate is
  inside the velocity, so a step keeps the rates of the steps before it. It
  equals TF 1's ``MomentumOptimizer`` (``compat/tf1.py``, the name ``Momentum``) for
  a constant learning rate only. This was the name ``Momentum`` before that
  name took TF 1's formula; the configs that relied on it name this class.
  The updates of all variables run as one XLA launch (``xla_update``); after
  LARC, where the native kernel applies, LARC and the update run as that one
  kernel (``native_larc_update``).

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

  def __init__(self, learning_rate=0.01, momentum=0.9, use_nesterov=False, name='KerasMomentum',
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

  def native_larc_update(self, kernels, grads, variables, indices, learning_rate, larc_params,
                         adapt):
    """LARC (docs/math.md) followed by this optimizer's update, in the native kernel.

    Same math as ``stages.larc`` followed by ``update_step``: each adapted
    variable's gradient is scaled by its LARC factor c, then
    v ← m·v − lr·c·g; w ← w + v.

    Args:
      kernels: the loaded op library.
      grads, variables, indices, learning_rate: as ``native_update``.
      larc_params: checked ``larc_params``.
      adapt: one bool per variable, whether LARC adapts it
        (``exclusions.larc_mask``).

    Returns:
      A float32 vector, the LARC factor of each variable (1 for skipped ones).
    """
    slots = [self.momentums[i].value for i in indices]
    return trust_momentum(
        kernels, variables, slots, grads, learning_rate, adapt,
        'larc_' + larc_params['larc_mode'], self.momentum, eeta=larc_params['larc_eta'],
        epsilon=larc_params['epsilon'], min_update=larc_params['min_update'],
        use_nesterov=self.nesterov)

  def get_config(self):
    config = super().get_config()
    config['use_nesterov'] = config.pop('nesterov')
    return config
