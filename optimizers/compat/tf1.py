"""TensorFlow 1's optimizers as Keras 3 optimizers: their update formulas, argument names and defaults.

OpenSeq2Seq's configs name their optimizer by a string of its
``OPTIMIZER_CLS_NAMES`` (``"Momentum"``, ``"Adam"``, ``"RMSProp"``, ...) or by
a TF 1 class (``tf.train.MomentumOptimizer``, ``tf.contrib.opt.LazyAdamOptimizer``);
a ported config means what it meant there. Each class below is the TF 1 class
of that name: its formula (docs/math.md, "TensorFlow 1's optimizers"), its
arguments with their TF 1 defaults, and beside them the Keras name of the same
argument (``beta_1`` for ``beta1``, ``rho`` for ``decay``, ``nesterov`` for
``use_nesterov``): give either, not two different values. ``use_locking`` is
accepted and has no effect (TF 2 has no locking to ask for).

Where TF 1's formula is Keras' (Adam, Adagrad without Keras' epsilon,
gradient descent) the class is Keras' with TF 1's arguments; where it is not
(Momentum's rate outside the accumulator, RMSProp's mean square starting at 1
with epsilon under the root, LazyAdam's sparse rows) the update is written
here. Keras' classes given as classes (``keras.optimizers.SGD``) keep Keras'
formulas.
"""

import keras
import tensorflow as tf

from optimizers import backend
from optimizers.backend import FusedUpdate
from optimizers.backend import TF1OptimizerMixin
from optimizers.backend import deduplicate
from optimizers.backend import sparse_momentum_update
from optimizers.backend import unwrap


def one_value(who, tf1_name, tf1_value, tf1_default, keras_name, keras_value):
  """The value of an argument TF 1 and Keras name differently; both given and different is an error.

  Returns:
    ``keras_value`` when it is given (not None), else ``tf1_value``.

  Raises:
    ValueError: when the Keras name is given and the TF 1 name is given
      another value than its default and than the Keras one.
  """
  if keras_value is None:
    return tf1_value
  if tf1_value != tf1_default and tf1_value != keras_value:
    raise ValueError(f'{who}: {tf1_name}={tf1_value!r} and {keras_name}={keras_value!r} are the '
                     f'same argument ({tf1_name} is TF 1\'s name, {keras_name} Keras\'); give one '
                     'of them')
  return keras_value


def _non_negative(who, **values):
  for name, value in values.items():
    if isinstance(value, (int, float)) and value < 0:
      raise ValueError(f'{who}: {name} must be >= 0, got {value!r}')


# --- the update formulas, as plain tensor functions ---------------------------------------

def summed_rows(gradient):
  """A tf.IndexedSlices with each row once, its slices summed, as TF 1 applies one; others as given."""
  if not isinstance(gradient, tf.IndexedSlices):
    return gradient
  values, indices = deduplicate(gradient)
  return tf.IndexedSlices(values, indices, gradient.dense_shape)


def momentum_update(var, accumulator, grad, learning_rate, momentum, use_nesterov):
  """TF 1's momentum: a ← m·a + g; w ← w − lr·a, or with Nesterov w ← w − lr·(g + m·a).

  The rate multiplies the whole accumulator, so a change of the rate changes
  the whole step at once (Keras' SGD keeps the old rates inside its velocity).

  Args:
    var: the tf.Variable to update.
    accumulator: its accumulator tf.Variable.
    grad: a dense gradient.
    learning_rate, momentum: scalars.
    use_nesterov: Nesterov momentum.
  """
  grad = tf.cast(grad, var.dtype)
  lr = tf.cast(learning_rate, var.dtype)
  momentum = tf.cast(momentum, var.dtype)
  accumulated = momentum * accumulator + grad
  accumulator.assign(accumulated)
  if use_nesterov:
    var.assign_sub(lr * (grad + momentum * accumulated))
  else:
    var.assign_sub(lr * accumulated)


def rmsprop_update(var, mean_square, mom, mean_grad, grad, learning_rate, decay, momentum,
                   epsilon):
  """TF 1's RMSProp on dense tensors (``mean_grad`` None unless centered).

  ms ← decay·ms + (1 − decay)·g²; centered: mg ← decay·mg + (1 − decay)·g and
  the denominator is √(ms − mg² + ε), else √(ms + ε);
  mom ← momentum·mom + lr·g/denominator; w ← w − mom.
  """
  grad = tf.cast(grad, var.dtype)
  lr = tf.cast(learning_rate, var.dtype)
  new_ms = decay * mean_square + (1.0 - decay) * tf.square(grad)
  mean_square.assign(new_ms)
  denominator = new_ms + epsilon
  if mean_grad is not None:
    new_mg = decay * mean_grad + (1.0 - decay) * grad
    mean_grad.assign(new_mg)
    denominator = denominator - tf.square(new_mg)
  new_mom = momentum * mom + lr * grad / tf.sqrt(denominator)
  mom.assign(new_mom)
  var.assign_sub(new_mom)


def sparse_rmsprop_update(var, mean_square, mom, mean_grad, grad, learning_rate, decay, momentum,
                          epsilon):
  """TF 1's sparse RMSProp: :func:`rmsprop_update` on the rows a tf.IndexedSlices names, duplicates summed."""
  values, indices = deduplicate(grad)
  values = tf.cast(values, var.dtype)
  lr = tf.cast(learning_rate, var.dtype)
  ms_rows = decay * tf.gather(mean_square, indices) + (1.0 - decay) * tf.square(values)
  mean_square.scatter_update(tf.IndexedSlices(ms_rows, indices))
  denominator = ms_rows + epsilon
  if mean_grad is not None:
    mg_rows = decay * tf.gather(mean_grad, indices) + (1.0 - decay) * values
    mean_grad.scatter_update(tf.IndexedSlices(mg_rows, indices))
    denominator = denominator - tf.square(mg_rows)
  mom_rows = momentum * tf.gather(mom, indices) + lr * values / tf.sqrt(denominator)
  mom.scatter_update(tf.IndexedSlices(mom_rows, indices))
  var.scatter_sub(tf.IndexedSlices(mom_rows, indices))


def lazy_adam_rows(var, m, v, grad, alpha, beta_1, beta_2, epsilon):
  """LazyAdam's sparse step: m, v and w change on the rows of ``grad`` only (duplicates summed).

  m ← β1·m + (1 − β1)·g, v ← β2·v + (1 − β2)·g² on those rows, then
  w ← w − alpha·m/(√v + ε) on them, ``alpha`` = lr·√(1 − β2^t)/(1 − β1^t).
  """
  values, indices = deduplicate(grad)
  values = tf.cast(values, var.dtype)
  m_rows = beta_1 * tf.gather(m, indices) + (1.0 - beta_1) * values
  v_rows = beta_2 * tf.gather(v, indices) + (1.0 - beta_2) * tf.square(values)
  m.scatter_update(tf.IndexedSlices(m_rows, indices))
  v.scatter_update(tf.IndexedSlices(v_rows, indices))
  var.scatter_sub(tf.IndexedSlices(alpha * m_rows / (tf.sqrt(v_rows) + epsilon), indices))


# --- the classes ------------------------------------------------------------------------------

@keras.saving.register_keras_serializable(package='largebatch')
class MomentumOptimizer(FusedUpdate, keras.optimizers.Optimizer):
  """``tf.train.MomentumOptimizer``: a ← m·a + g; w ← w − lr·a (Nesterov: w ← w − lr·(g + m·a)).

  The name ``Momentum`` of a config. The updates of all variables run as one
  XLA launch where the fused path applies (``xla_update``); a sparse gradient
  updates only its rows, as TF 1's does. Keras' momentum SGD, the rate inside
  the velocity, is ``keras.optimizers.SGD`` or the fused ``KerasMomentum``.

  Args:
    learning_rate: the learning rate; required, as in TF 1.
    momentum: the momentum coefficient, in [0, 1]; required, as in TF 1.
    use_locking: accepted, no effect.
    name: the optimizer's name.
    use_nesterov: Nesterov momentum.
    nesterov: Keras' name for ``use_nesterov``.
    **kwargs: other Keras optimizer arguments.

  Raises:
    ValueError: for a momentum outside [0, 1], or ``use_nesterov`` and
      ``nesterov`` given different values.
  """

  def __init__(self, learning_rate, momentum, use_locking=False, name='Momentum',
               use_nesterov=False, nesterov=None, **kwargs):
    del use_locking
    if isinstance(momentum, (int, float)) and not 0 <= momentum <= 1:
      raise ValueError(f'Momentum: momentum must be in [0, 1], got {momentum!r}')
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self.momentum = float(momentum)
    self.use_nesterov = bool(one_value('Momentum', 'use_nesterov', bool(use_nesterov), False,
                                       'nesterov', nesterov))

  SLOTS = ('momentums',)

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    self.momentums = self.add_optimizer_variables(var_list, 'momentum')

  def update_step(self, gradient, variable, learning_rate):
    accumulator = unwrap(self.momentums[self._get_variable_index(variable)])
    if isinstance(gradient, tf.IndexedSlices):
      sparse_momentum_update(unwrap(variable), accumulator, gradient, learning_rate,
                             self.momentum, self.use_nesterov)
      return
    momentum_update(unwrap(variable), accumulator, gradient, learning_rate, self.momentum,
                    self.use_nesterov)

  def xla_update(self, grads, variables, indices, learning_rate):
    """:func:`momentum_update` for every variable, in one XLA launch."""
    slots = [self.momentums[i].value for i in indices]
    backend.jit_for(self, self._update_all)(grads, variables, slots,
                                            tf.convert_to_tensor(learning_rate))

  def _update_all(self, grads, variables, slots, learning_rate):
    for grad, var, slot in zip(grads, variables, slots):
      momentum_update(var, slot, grad, learning_rate, self.momentum, self.use_nesterov)

  def get_slot_names(self):
    return ['momentum']

  def _slot_lists(self):
    return {'momentum': self.momentums}

  def get_config(self):
    config = super().get_config()
    config.update({'momentum': self.momentum, 'use_nesterov': self.use_nesterov})
    return config


@keras.saving.register_keras_serializable(package='largebatch')
class GradientDescentOptimizer(TF1OptimizerMixin, keras.optimizers.SGD):
  """``tf.train.GradientDescentOptimizer``: w ← w − lr·g. The name ``SGD`` of a config.

  TF 1's class has no momentum: for momentum give ``Momentum`` (TF 1's) or
  ``keras.optimizers.SGD`` (Keras', the rate inside the velocity).

  Args:
    learning_rate: the learning rate; required, as in TF 1.
    use_locking: accepted, no effect.
    name: the optimizer's name.
    **kwargs: other Keras optimizer arguments (not ``momentum`` nor ``nesterov``).
  """

  def __init__(self, learning_rate, use_locking=False, name='GradientDescent', **kwargs):
    del use_locking
    for keras_only in ('momentum', 'nesterov'):
      if kwargs.get(keras_only):
        raise ValueError(f'GradientDescentOptimizer: {keras_only} is no argument of TF 1\'s '
                         'gradient descent (optimizer SGD); for momentum give optimizer Momentum '
                         '(TF 1\'s, w -= lr*a) or keras.optimizers.SGD (Keras\', the rate inside '
                         'the velocity)')
      kwargs.pop(keras_only, None)
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)

  def get_slot_names(self):
    return []

  def _slot_lists(self):
    return {}

  def get_config(self):
    config = super().get_config()
    config.pop('momentum', None)
    config.pop('nesterov', None)
    return config


@keras.saving.register_keras_serializable(package='largebatch')
class AdamOptimizer(TF1OptimizerMixin, keras.optimizers.Adam):
  """``tf.train.AdamOptimizer``: Keras' Adam (the same formula) with TF 1's arguments and epsilon 1e-8.

  lr_t = lr·√(1 − β2^t)/(1 − β1^t); m ← β1·m + (1 − β1)·g; v ← β2·v + (1 − β2)·g²;
  w ← w − lr_t·m/(√v + ε). A sparse gradient moves every row (m and v decay
  everywhere), as TF 1's Adam; ``LazyAdamOptimizer`` moves only its rows.
  The name ``Adam`` of a config.

  Args:
    learning_rate: the learning rate.
    beta1, beta2: the moments' decays (TF 1's names).
    epsilon: added to √v; 1e-8 as in TF 1 (Keras: 1e-7).
    use_locking: accepted, no effect.
    name: the optimizer's name.
    beta_1, beta_2: Keras' names for ``beta1`` and ``beta2``.
    **kwargs: other Keras optimizer arguments (``amsgrad``, ``clipnorm``, ...).

  Raises:
    ValueError: when both names of an argument are given different values.
  """

  def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, use_locking=False,
               name='Adam', beta_1=None, beta_2=None, **kwargs):
    del use_locking
    super().__init__(learning_rate=learning_rate,
                     beta_1=one_value(type(self).__name__, 'beta1', beta1, 0.9, 'beta_1', beta_1),
                     beta_2=one_value(type(self).__name__, 'beta2', beta2, 0.999, 'beta_2',
                                      beta_2),
                     epsilon=epsilon, name=name, **kwargs)

  def update_step(self, gradient, variable, learning_rate):
    # TF 1 sums the slices of a repeated row first (Keras would square each apart).
    super().update_step(summed_rows(gradient), variable, learning_rate)

  def get_slot_names(self):
    return ['m', 'v']

  def _slot_lists(self):
    return {'m': self._momentums, 'v': self._velocities}


@keras.saving.register_keras_serializable(package='largebatch')
class LazyAdamOptimizer(AdamOptimizer):
  """``tf.contrib.opt.LazyAdamOptimizer``: Adam, but a sparse gradient moves only its rows.

  On a ``tf.IndexedSlices`` gradient (an embedding's) m, v and w change on
  the rows the batch read and nowhere else (:func:`lazy_adam_rows`); on a
  dense gradient it is Adam. Arguments as :class:`AdamOptimizer`.
  """

  def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, use_locking=False,
               name='LazyAdam', beta_1=None, beta_2=None, **kwargs):
    super().__init__(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                     use_locking=use_locking, name=name, beta_1=beta_1, beta_2=beta_2, **kwargs)
    if self.amsgrad:
      raise ValueError('LazyAdamOptimizer: amsgrad is not an argument of TF 1\'s LazyAdam')

  def update_step(self, gradient, variable, learning_rate):
    if not isinstance(gradient, tf.IndexedSlices):
      super().update_step(gradient, variable, learning_rate)
      return
    dtype = variable.dtype
    step = tf.cast(self.iterations + 1, dtype)
    beta_1 = tf.cast(self.beta_1, dtype)
    beta_2 = tf.cast(self.beta_2, dtype)
    alpha = (tf.cast(learning_rate, dtype) * tf.sqrt(1 - tf.pow(beta_2, step))
             / (1 - tf.pow(beta_1, step)))
    index = self._get_variable_index(variable)
    lazy_adam_rows(unwrap(variable), unwrap(self._momentums[index]),
                   unwrap(self._velocities[index]), gradient, alpha, beta_1, beta_2,
                   tf.cast(self.epsilon, dtype))


@keras.saving.register_keras_serializable(package='largebatch')
class AdamWOptimizer(AdamOptimizer):
  """``tf.contrib.opt.AdamWOptimizer``: w ← w − weight_decay·w, then Adam's step.

  The decay is applied to the variable as it was, not multiplied by the
  rate: TF 1's class leaves the schedule of the decay to its user.
  OpenSeq2Seq's ``optimizer: "AdamW"`` multiplies it by the rate, which is
  the name's class, :class:`AdamW`. Keras' ``exclude_from_weight_decay``
  exempts variables.

  Args:
    weight_decay: the decay per step, >= 0; required, as in TF 1.
    learning_rate, beta1, beta2, epsilon, use_locking, name, beta_1, beta_2,
      **kwargs: as :class:`AdamOptimizer`.
  """

  def __init__(self, weight_decay, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
               use_locking=False, name='AdamW', beta_1=None, beta_2=None, **kwargs):
    _non_negative(type(self).__name__, weight_decay=weight_decay)
    super().__init__(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                     use_locking=use_locking, name=name, beta_1=beta_1, beta_2=beta_2,
                     weight_decay=weight_decay, **kwargs)

  def _apply_weight_decay(self, variables):
    # TF 1's decay, weight_decay·w with the rate left out, routed as Keras routes its own.
    if not self.weight_decay:
      return

    def decay(variable):
      if self._use_weight_decay(variable):
        variable.assign_sub(variable * tf.cast(self.weight_decay, variable.dtype))

    def decay_all(distribution, variables):
      for variable in variables:
        distribution.extended.update(unwrap(variable), decay, group=False)

    tf.__internal__.distribute.interim.maybe_merge_call(decay_all, self._distribution_strategy,
                                                        variables)


@keras.saving.register_keras_serializable(package='largebatch')
class AdamW(AdamWOptimizer):
  """OpenSeq2Seq's ``optimizer: "AdamW"``: w ← w − lr·weight_decay·w, then Adam's step.

  OpenSeq2Seq's ``optimize_loss`` multiplies the config's ``weight_decay`` by
  the learning rate of the step for this name, then builds
  ``tf.contrib.opt.AdamWOptimizer``; Keras' AdamW decays so as well.
  Arguments as :class:`AdamWOptimizer` (epsilon 1e-8; ``weight_decay``
  required).
  """

  def _apply_weight_decay(self, variables):
    # Keras' decoupled decay is lr·weight_decay·w, OpenSeq2Seq's for this name.
    keras.optimizers.Optimizer._apply_weight_decay(self, variables)  # pylint: disable=protected-access


@keras.saving.register_keras_serializable(package='largebatch')
class RMSPropOptimizer(TF1OptimizerMixin, keras.optimizers.Optimizer):
  """``tf.train.RMSPropOptimizer``: the mean square starts at 1 and epsilon is under the root.

  ms ← decay·ms + (1 − decay)·g²; mom ← momentum·mom + lr·g/√(ms + ε); w ← w − mom;
  centered, the denominator is √(ms − mg² + ε) with mg ← decay·mg + (1 − decay)·g.
  A sparse gradient updates only its rows. The name ``RMSProp`` of a config.

  Args:
    learning_rate: the learning rate; required, as in TF 1.
    decay: the mean square's decay (Keras' ``rho``).
    momentum: the momentum coefficient.
    epsilon: added under the root; 1e-10 as in TF 1 (Keras: 1e-7, outside it).
    use_locking: accepted, no effect.
    centered: normalize by the centered second moment.
    name: the optimizer's name.
    rho: Keras' name for ``decay``.
    **kwargs: other Keras optimizer arguments.
  """

  def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10,
               use_locking=False, centered=False, name='RMSProp', rho=None, **kwargs):
    del use_locking
    _non_negative('RMSPropOptimizer', learning_rate=learning_rate, momentum=momentum,
                  epsilon=epsilon)
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self.decay = float(one_value('RMSPropOptimizer', 'decay', decay, 0.9, 'rho', rho))
    self.momentum = float(momentum)
    self.epsilon = float(epsilon)
    self.centered = bool(centered)

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    # TF 1's slot "rms" starts at one, so the first steps are not divided by a tiny root.
    self._mean_squares = self.add_optimizer_variables(var_list, 'rms', initializer='ones')
    self._moms = self.add_optimizer_variables(var_list, 'momentum')
    self._mean_grads = (self.add_optimizer_variables(var_list, 'mg') if self.centered
                        else [None] * len(var_list))

  def update_step(self, gradient, variable, learning_rate):
    index = self._get_variable_index(variable)
    mean_grad = self._mean_grads[index]
    update = sparse_rmsprop_update if isinstance(gradient, tf.IndexedSlices) else rmsprop_update
    update(unwrap(variable), unwrap(self._mean_squares[index]), unwrap(self._moms[index]),
           None if mean_grad is None else unwrap(mean_grad), gradient, learning_rate,
           self.decay, self.momentum, self.epsilon)

  def get_slot_names(self):
    return ['rms', 'momentum'] + (['mg'] if self.centered else [])

  def _slot_lists(self):
    slots = {'rms': self._mean_squares, 'momentum': self._moms}
    if self.centered:
      slots['mg'] = self._mean_grads
    return slots

  def get_config(self):
    config = super().get_config()
    config.update({'decay': self.decay, 'momentum': self.momentum, 'epsilon': self.epsilon,
                   'centered': self.centered})
    return config


@keras.saving.register_keras_serializable(package='largebatch')
class AdagradOptimizer(TF1OptimizerMixin, keras.optimizers.Adagrad):
  """``tf.train.AdagradOptimizer``: a ← a + g²; w ← w − lr·g/√a, a starting at 0.1.

  Keras' Adagrad with its epsilon (added under the root, Keras' own) 0 by
  default, which is TF 1's formula. The name ``Adagrad`` of a config.

  Args:
    learning_rate: the learning rate; required, as in TF 1.
    initial_accumulator_value: a's start, > 0.
    use_locking: accepted, no effect.
    name: the optimizer's name.
    epsilon: Keras' argument, added to a under the root; 0, as TF 1 has none.
    **kwargs: other Keras optimizer arguments.

  Raises:
    ValueError: for an initial_accumulator_value <= 0 (TF 1 refuses it).
  """

  def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False,
               name='Adagrad', epsilon=0.0, **kwargs):
    del use_locking
    if isinstance(initial_accumulator_value, (int, float)) and initial_accumulator_value <= 0:
      raise ValueError(f'AdagradOptimizer: initial_accumulator_value must be positive, got '
                       f'{initial_accumulator_value!r}')
    super().__init__(learning_rate=learning_rate,
                     initial_accumulator_value=initial_accumulator_value, epsilon=epsilon,
                     name=name, **kwargs)

  def update_step(self, gradient, variable, learning_rate):
    # TF 1 sums the slices of a repeated row first (Keras would square each apart).
    super().update_step(summed_rows(gradient), variable, learning_rate)

  def get_slot_names(self):
    return ['accumulator']

  def _slot_lists(self):
    return {'accumulator': self._accumulators}
