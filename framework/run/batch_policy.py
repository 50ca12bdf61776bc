"""A run's batch policy: its state in the checkpoint, its decision after each update, what a change sets.

``batch_policy`` (``core.batch_policy``: ``fixed``, ``steps``, ``noise_scale``
or your ``module:name``) gives the global batch of the next update. With any
policy but ``fixed`` the trainer builds a :class:`BatchControl`, and:

- the batch grows by ``iter_size``, a variable of the pipeline's accumulation;
  the micro-batch per worker and the data position (in micro-batches) stay, so
  no example is read twice or skipped across a change;
- the run's step counts examples in starting batches (an update of 4 x the
  starting batch advances it by 4): the lr schedule, the run's length
  (``num_epochs``), and the cadences of checkpoints, summaries and
  evaluations keep their length in data, as the run at the fixed batch has them;
  ``updates`` counts the applied updates; the run ends at ``max_steps`` as a
  fixed batch does: an update that would pass it reads only the micro-batches
  left (:meth:`BatchControl.fit_to_end`);
- the learning rate is the schedule at that step times ``lr_scaling``'s rule
  for the current batch over the starting one (linear without ``lr_scaling``);
- the batch, ``iter_size``, the run step and the step of the last change are
  checkpointed (with the noise scale's estimates, in the pipeline's state), so a
  resumed run goes on as a run straight through.

``fixed`` builds nothing: the run is what it was without a policy, to the bit.
The decision is taken on every worker from the same values: the run step, the
updates and the noise scale, which comes from all-reduced gradients; a policy
of your own is decided on the chief and broadcast.
"""

import math

import numpy as np
import tensorflow as tf

from core import batch_policy as policies
from core.params import ConfigError
from framework.engines import distributed


planned_batches = policies.planned_batches


def control_for(config, batch_size, num_workers):
  """The run's :class:`BatchControl`, or None for ``batch_policy: fixed``."""
  if policies.is_fixed(config):
    return None
  return BatchControl(config, batch_size, num_workers)


def policy_name(policy):
  """A policy as the log names it: its registered name, or ``module:name``."""
  if isinstance(policy, str):
    return policy
  return f'{getattr(policy, "__module__", "?")}:{getattr(policy, "__qualname__", policy)}'


class BatchControl(tf.Module):
  """The state and decisions of a growing batch (see the module docstring).

  Args:
    config: the validated train config (``batch_policy``, its params,
      ``iter_size``, ``lr_scaling``).
    batch_size: the micro-batch per worker.
    num_workers: the workers training together.

  Raises:
    ConfigError: the policy's parameters do not fit this run's starting batch.
  """

  def __init__(self, config, batch_size, num_workers):
    super().__init__(name='batch_policy')
    self.policy_name = policy_name(config['batch_policy'])
    self.policy = policies.BATCH_POLICIES.resolve(config['batch_policy'])
    self.params = dict(config['batch_policy_params'])
    self.unit = batch_size * num_workers
    self.start_batch = self.unit * config['iter_size']
    policies.check(config['batch_policy'], self.params, self.start_batch, self.unit)
    self.rule = (config['lr_scaling'] or {}).get('rule', 'linear')
    self.rule_named = config['lr_scaling'] is not None
    self.noise_window = round(1.0 / (1.0 - config['noise_scale_params']['decay']))
    # A policy of the user's may draw on anything: the chief's decision is broadcast.
    self.broadcast = num_workers > 1 and config['batch_policy'] not in ('steps', 'noise_scale')
    with tf.init_scope():
      self.batch = tf.Variable(self.start_batch, dtype=tf.int64, trainable=False,
                               name='global_batch')
      self.iter_size = tf.Variable(config['iter_size'], dtype=tf.int64, trainable=False,
                                   name='iter_size')
      # Examples seen by the applied updates, over the starting batch.
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name='step')
      self.last_change = tf.Variable(0, dtype=tf.int64, trainable=False, name='last_change')

  def current_iter_size(self):
    """The ``iter_size`` of the next update."""
    return int(self.iter_size.numpy())

  def learning_rate_fn(self, schedule_fn):
    """``f(_) -> lr``: the schedule at the run step, times the rule's factor for the current batch."""
    start = float(self.start_batch)

    def rate(_=None):
      # The batch of the next update: the policy's, or the shorter last one (fit_to_end).
      ratio = tf.cast(self.iter_size * self.unit, tf.float32) / start
      factor = tf.sqrt(ratio) if self.rule == 'sqrt' else ratio
      return tf.cast(schedule_fn(self.step), tf.float32) * factor
    return rate

  def advance(self):
    """The run steps the next update advances by: its examples over the starting batch (a tensor)."""
    return self.iter_size * self.unit // self.start_batch

  def count(self, applied):
    """Advances the run step by the update's batch over the start when it was applied (in the step)."""
    return self.step.assign_add(tf.where(applied, self.advance(), tf.constant(0, tf.int64)))

  def fit_to_end(self, max_steps, accumulated=0):
    """Gives the next update only the run steps left before ``max_steps``, as a fixed batch ends there.

    Called after each applied update and when training starts. The policy's
    batch stays what it is (a resumed run that trains further takes it
    again); the update reads fewer micro-batches, at least ``accumulated``
    (those a resumed run has added already), and its rate follows its batch.

    Returns:
      The global batch of a shortened update, or None when the update is whole.
    """
    step, batch = int(self.step.numpy()), int(self.batch.numpy())
    left = max_steps - step
    if left <= 0:
      return None
    # The micro-step to come makes the update due once iter_size counts it too.
    steps = max(min(batch // self.start_batch, left),
                -(-(accumulated + 1) * self.unit // self.start_batch))
    self.iter_size.assign(steps * self.start_batch // self.unit)
    return steps * self.start_batch if steps * self.start_batch < batch else None

  def state(self, values, steps_per_epoch):
    """The :class:`core.batch_policy.BatchState` after the micro-step whose metrics are ``values``."""
    step = int(self.step.numpy())
    noise = values.get('noise_scale')
    noise = float(noise) if noise is not None and math.isfinite(float(noise)) else None
    return policies.BatchState(
        step=step, updates=int(values['updates']), epoch=step / steps_per_epoch,
        batch=int(self.batch.numpy()), start_batch=self.start_batch, unit=self.unit,
        noise_scale=noise, noise_updates=int(values.get('noise_updates', 0)),
        noise_window=self.noise_window, last_change=int(self.last_change.numpy()))

  def decide(self, values, steps_per_epoch):
    """After an applied update: the policy's batch, set when it changed.

    Returns:
      ``(old batch, new batch)`` when the batch changed, else None.

    Raises:
      ConfigError: the policy returned a batch the run cannot take.
    """
    state = self.state(values, steps_per_epoch)
    batch = policies.next_batch(self.policy, self.params, state, f'batch_policy {self.policy_name}')
    if self.broadcast:
      batch = int(distributed.sum_array(np.array([batch if distributed.is_chief() else 0],
                                                 np.float64))[0])
    if batch == state.batch:
      return None
    self.set(batch, state.step)
    return state.batch, batch

  def check_restored(self, steps_per_epoch):
    """Refuses a ``steps`` schedule below the batch of the checkpoint it resumes, before a step.

    ``batch_policy_params`` may change on resume; a schedule that would take
    the batch back below the checkpoint's is refused here, before the run
    writes its config, and not after its first update.

    Raises:
      ConfigError: one line naming the schedule's batch, the step and the checkpoint's batch.
    """
    if self.policy_name != 'steps':
      return
    step, batch = int(self.step.numpy()), int(self.batch.numpy())
    state = policies.BatchState(step=step, updates=0, epoch=step / steps_per_epoch, batch=batch,
                                start_batch=self.start_batch, unit=self.unit)
    scheduled = policies.steps(state, **self.params)
    if scheduled < batch:
      raise ConfigError(f'{policies.KEY}.batches: {scheduled} at step {step}, below the global '
                        f'batch {batch} of the checkpoint resumed; a batch policy never shrinks '
                        f'the batch; allowed: a schedule at {batch} or more from step {step} on')

  def set(self, batch, step):
    """Sets the global batch (and ``iter_size``) from the next update on."""
    self.batch.assign(batch)
    self.iter_size.assign(batch // self.unit)
    self.last_change.assign(step)

  def describe_change(self, old, new, values, learning_rate, unit):
    """The log line of a change."""
    noise = values.get('noise_scale')
    why = (f' (noise scale {float(noise):.0f} {unit})'
           if noise is not None and math.isfinite(float(noise)) else '')
    rule = f'lr_scaling {self.rule}' if self.rule_named else 'linear: no lr_scaling'
    return (f'batch {old} -> {new} at step {int(self.step.numpy())}{why}: iter_size '
            f'{new // self.unit}, lr {learning_rate:.5g} ({rule}) after update '
            f'{int(values["updates"])}')

  def describe_end(self, short, max_steps, learning_rate):
    """The log line of a last update shortened by :meth:`fit_to_end` to global batch ``short``."""
    return (f'the last update reads the examples left before step {max_steps}: global batch '
            f'{short} (iter_size {short // self.unit}) instead of {int(self.batch.numpy())}, '
            f'lr {learning_rate:.5g}')

  def describe(self):
    """How the run's batch is chosen, for the line that starts training."""
    return (f'batch policy {self.policy_name} from global batch {self.start_batch} (it grows by '
            'iter_size; a step counts the examples of one starting batch)')

  def summary_line(self, updates):
    """``batch policy P: N updates to step S, global batch A -> B``: the run's end, in one line."""
    step, batch = int(self.step.numpy()), int(self.batch.numpy())
    return (f'batch policy {self.policy_name}: {updates} updates to step {step} (a fixed batch '
            f'of {self.start_batch} takes {step}), global batch {self.start_batch} -> {batch}')

  def write_scalars(self, step):
    """``batch/global`` and ``batch/iter_size`` at ``step``, to the default summary writer."""
    tf.summary.scalar('batch/global', tf.cast(self.batch, tf.float32), step=step)
    tf.summary.scalar('batch/iter_size', tf.cast(self.iter_size, tf.float32), step=step)
