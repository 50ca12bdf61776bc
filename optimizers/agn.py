"""AGN: Accumulated Gradient Normalization (Hermans, Spanakis, Möckel 2017), over Horovod.

Each worker trains its own (local) copy of the model with the wrapped
optimizer for ``communication_period`` (τ) steps while summing its gradients.
Then the sum is normalized (divided by τ), averaged over all workers, and
applied by a second instance of the optimizer (with its own slots) to the
center variables; every worker then restarts from the center.

How this differs from ``tf.contrib.opt.AGNOptimizer``: the original keeps the
center variables on parameter servers, which each worker updates
asynchronously whenever its period ends. Here the workers are synchronous
Horovod peers: every worker holds an identical copy of the center, the
normalized gradients are averaged with one allreduce per period, and all
workers apply the same center update, so the center stays identical on every
worker without a parameter server. With one worker and τ = 1 the algorithm
is the wrapped optimizer alone.

References:
  Hermans, Spanakis, Möckel. Accumulated Gradient Normalization. ACML 2017,
  arXiv:1710.02368.
"""

import tensorflow as tf

from optimizers import allreduce
from optimizers import backend
from optimizers import exclusions


class AGNCustomGetter:
  """Creates the center (global) copy of each local variable.

  In TF 1 a custom getter placed the global variables on the parameter server;
  in TF 2 the center copies are ordinary float32 variables on every worker.

  Args:
    worker_device: accepted for compatibility; placement is left to TensorFlow.
  """

  def __init__(self, worker_device=None):
    self.worker_device = worker_device

  def center_variables(self, var_list):
    """Returns float32 copies of ``var_list`` (created outside any tf.function)."""
    with tf.init_scope():
      return [tf.Variable(tf.cast(backend.unwrap(v), tf.float32), trainable=False,
                          name='center/' + exclusions.variable_name(v))
              for v in var_list]


def _clone(optimizer):
  return type(optimizer).from_config(optimizer.get_config())


class AGNOptimizer(tf.Module):
  """Synchronous AGN over Horovod around a Keras 3 optimizer.

  Args:
    optimizer: the optimizer applied to the local variables every step; a copy
      with its own slots updates the center variables.
    num_worker: the number of workers; defaults to the Horovod size. Given
      explicitly, it must match the Horovod size.
    custom_getter: an AGNCustomGetter (default: a new one) that creates the
      center variables.
    communication_period: τ, local steps between two center updates (>= 1).
    use_locking: accepted for compatibility.
    name: the optimizer's name.

  Raises:
    ValueError: for communication_period < 1 or a num_worker that does not
      match the job.
  """

  # Configs name it with agn_params giving the optimizer it wraps.
  WRAPS_OPTIMIZER = True
  # It averages over the workers by itself, once per period: the pipeline
  # gives it each worker's own gradients.
  COMMUNICATES_ITSELF = True

  def __init__(self, optimizer, num_worker=None, custom_getter=None, communication_period=10,
               use_locking=True, name='AGNOptimizer'):
    super().__init__(name=name)
    if not isinstance(communication_period, int) or communication_period < 1:
      raise ValueError(f'AGNOptimizer: communication_period must be an integer >= 1, '
                       f'got {communication_period!r}')
    size = allreduce.size()
    if num_worker is None:
      num_worker = size
    if num_worker != size:
      raise ValueError(f'AGNOptimizer: num_worker={num_worker} but the job has {size} '
                       'Horovod worker(s)')
    self.local_optimizer = optimizer
    self.center_optimizer = _clone(optimizer)
    self.num_worker = num_worker
    self.custom_getter = custom_getter or AGNCustomGetter()
    self.communication_period = communication_period
    self.use_locking = use_locking
    self._name = name
    self.built = False
    with tf.init_scope():
      self.local_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='local_step')
      self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='agn_global_step')

  # --- the Keras-optimizer surface optimize_loss uses ---------------------------------------

  @property
  def name(self):
    return self._name

  @property
  def learning_rate(self):
    return self.local_optimizer.learning_rate

  @learning_rate.setter
  def learning_rate(self, value):
    self.local_optimizer.learning_rate = value
    self.center_optimizer.learning_rate = value

  @property
  def iterations(self):
    return self.local_step

  def build(self, var_list):
    """Creates the center variables, the accumulators and both optimizers' slots."""
    if self.built:
      return
    var_list = list(var_list)
    with tf.init_scope():
      self.local_optimizer.build(var_list)
      self.center = self.custom_getter.center_variables(var_list)
      self.center_optimizer.build(self.center)
      self.accumulators = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False,
                                       name=f'agn_accumulator_{i}') for i, v in enumerate(var_list)]
    self._local_vars = var_list
    self._index = {id(backend.unwrap(v)): i for i, v in enumerate(var_list)}
    self.built = True

  @property
  def variables(self):
    """Both optimizers' variables, the center, the accumulators and the step counters."""
    result = list(self.local_optimizer.variables) + list(self.center_optimizer.variables)
    if self.built:
      result += list(self.center) + list(self.accumulators)
    return backend.CallableList(result + [self.local_step, self.global_step])

  def apply(self, grads, var_list=None):
    """One local step; every τ-th local step also updates the center and resets the locals."""
    var_list = self._local_vars if var_list is None else list(var_list)
    if not self.built:
      self.build(var_list)
    grads = list(grads)
    self.local_optimizer.apply(grads, var_list)
    for g, v in zip(grads, var_list):
      if g is not None:
        self.accumulators[self._index[id(backend.unwrap(v))]].assign_add(
            tf.cast(tf.convert_to_tensor(g), tf.float32))
    self.local_step.assign_add(1)

    def communicate():
      normalized = [a / float(self.communication_period) for a in self.accumulators]
      averaged = allreduce.average(normalized)
      self.center_optimizer.apply(averaged, self.center)
      self.global_step.assign_add(1)
      for local, center, acc in zip(self._local_vars, self.center, self.accumulators):
        local.assign(tf.cast(center, local.dtype))
        acc.assign(tf.zeros_like(acc))
      return tf.constant(True)

    return tf.cond(tf.equal(self.local_step % self.communication_period, 0), communicate,
                   lambda: tf.constant(False))

  # --- the TF 1 surface ----------------------------------------------------------------------

  def get_name(self):
    return self._name

  def get_slot(self, var, name):
    return self.local_optimizer.get_slot(var, name)

  def get_slot_names(self):
    return self.local_optimizer.get_slot_names()

  def compute_gradients(self, loss, var_list=None, **kwargs):
    del kwargs
    var_list = list(var_list if var_list is not None else self._local_vars)
    return list(zip(backend.gradients_of(loss, var_list), var_list))

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies one local step; increments ``global_step`` when the center was updated."""
    del name
    grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
    communicated = self.apply([g for g, _ in grads_and_vars], [v for _, v in grads_and_vars])
    if global_step is not None:
      global_step.assign_add(tf.cast(communicated, global_step.dtype))
    return communicated

  def minimize(self, loss, global_step=None, var_list=None, name=None, **kwargs):
    del kwargs
    return self.apply_gradients(self.compute_gradients(loss, var_list), global_step, name)

  def synchronize(self):
    """Starts the run's state: the center comes from rank 0 and every local copy from the center.

    ``GradientPipeline.start`` calls it once before training, after the
    variables are restored and broadcast.
    """
    if not self.built:
      raise ValueError('AGNOptimizer: build the optimizer on the model variables before '
                       'synchronizing it')
    allreduce.broadcast(self.center, root_rank=0)
    for local, center in zip(self._local_vars, self.center):
      local.assign(tf.cast(center, local.dtype))

  def get_init_op(self, task_index=0):
    """TF 1's name of ``synchronize``; TF 2 has no init op to return, so it runs eagerly.

    Args:
      task_index: accepted for compatibility (the Horovod rank is used).
    """
    del task_index
    self.synchronize()

  def make_session_run_hook(self, is_chief=True, task_index=0):
    """The trainer hook that calls get_init_op when training begins (TF 2's session hook)."""
    return AGNInitHook(self, is_chief, task_index)


class AGNInitHook:
  """Trainer hook: ``begin()`` initialises AGN's center and local variables."""

  def __init__(self, optimizer, is_chief=True, task_index=0):
    self.optimizer = optimizer
    self.is_chief = is_chief
    self.task_index = task_index

  def begin(self):
    self.optimizer.get_init_op(self.task_index)
