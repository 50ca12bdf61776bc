"""A run's batch policy: its state in the checkpoint, its decision after each update, what a change sets.

``batch_policy`` (``core.batch_policy``: ``fixed``, ``steps``, ``noise_scale``,
``seesaw`` or your ``module:name``) gives the global batch of the next update. With any
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
  ``seesaw`` finds where the schedule halves when the run is built
  (:meth:`BatchControl.learning_rate_fn`), and its factor takes the rule's place;
- the batch, ``iter_size``, the run step and the step of the last change are
  checkpointed (with the noise scale's estimates, in the pipeline's state), so a
  resumed run goes on as a run straight through.

``fixed`` builds nothing: the run is what it was without a policy, to the bit.
The decision is taken on every worker from the same values: the run step, the
updates and the noise scale, which comes from all-reduced gradients; a policy
of your own is decided on the chief and broadcast.
"""

import math

import tensorflow as tf

from core import batch_policy as policies
from core.params import ConfigError
from framework.engines import distributed


planned_batches = policies.planned_batches


def control_for(config, batch_size, num_workers, max_steps=None, examples=None):
  """The run's :class:`BatchControl`, or None for ``batch_policy: fixed``."""
  if policies.is_fixed(config):
    return None
  return BatchControl(config, batch_size, num_workers, max_steps, examples)


def current_batch(control, start_batch):
  """The global batch of the next update: the control's when the batch grows, else ``start_batch``."""
  return int(control.batch.numpy()) if control is not None else start_batch


def schedule_rates(schedule_fn, steps):
  """The lr schedule's rates at run steps 0 .. ``steps`` - 1, as the run casts them, in one call.

  The schedule is a function of a scalar step; vectorized over the steps it is
  one computation of a few milliseconds, where a call per step of a long run
  would take minutes.
  """
  if steps <= 0:
    return []
  rates = tf.vectorized_map(lambda step: tf.cast(schedule_fn(step), tf.float32),
                            tf.range(steps, dtype=tf.int64))
  return rates.numpy().tolist()


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
    max_steps: the run's length in run steps (``seesaw``, which needs it,
      looks for its schedule's halvings within it).
    examples: the examples of the training split, when known: ``seesaw``'s
      default ``max_batch`` stays within them.

  Raises:
    ConfigError: the policy's parameters do not fit this run's starting batch.
  """

  def __init__(self, config, batch_size, num_workers, max_steps=None, examples=None):
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
    self.broadcast = num_workers > 1 and config['batch_policy'] not in ('steps', 'noise_scale',
                                                                        'seesaw')
    self.max_steps = max_steps
    self.examples = examples
    self.lr_policy = policy_name(config['lr_policy'])
    # Seesaw's rate at each doubling, in place of the rule's; None for the other policies.
    self.factor = None
    if self.policy_name == 'seesaw':
      self.factor = self.params.get('factor', policies.SEESAW_FACTOR)
      if self.params.get('max_batch') is None:
        self.params['max_batch'] = self._default_max_batch(examples)
      # Where the schedule halves, from learning_rate_fn (a tuple: tf.Module tracks a list).
      self.params['halvings'], self.peak = (), (0.0, 0)
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

  def _default_max_batch(self, examples):
    """Seesaw's ceiling: 16 x the start, within the training split (an update reads none twice)."""
    ladder = policies.doubled_batches(self.start_batch)
    within = [b for b in ladder if examples is None or b <= examples]
    return within[-1] if within else self.start_batch

  def learning_rate_fn(self, schedule_fn):
    """``f(_) -> lr``: the schedule at the run step, times the rule's factor for the current batch.

    For ``seesaw`` the factor is Seesaw's, ``(2 x factor)`` per doubling of the
    start ((B/B0)^(1 + log2(factor))), and the schedule given here is the one
    whose halvings within the run become the points where the batch doubles
    (``self.params['halvings']``, found once, now).
    """
    start = float(self.start_batch)
    if self.factor is not None:
      levels = len(policies.doubled_batches(self.start_batch, self.params['max_batch'])) - 1
      rates = schedule_rates(schedule_fn, self.max_steps)
      self.params['halvings'] = tuple(policies.halving_points(rates, levels))
      self.peak = (max(rates), rates.index(max(rates))) if rates else (0.0, 0)
      exponent = policies.seesaw_exponent(self.factor)

    def rate(_=None):
      # The batch of the next update: the policy's, or the shorter last one (fit_to_end).
      ratio = tf.cast(self.iter_size * self.unit, tf.float32) / start
      if self.factor is not None:
        factor = tf.pow(ratio, exponent)
      else:
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
      batch = distributed.chief_decides(batch)
    if batch == state.batch:
      return None
    self.set(batch, state.step)
    return state.batch, batch

  def check_restored(self, steps_per_epoch):
    """Refuses a ``steps`` or ``seesaw`` plan below the checkpoint's batch, before a step.

    ``batch_policy_params`` (and the lr schedule seesaw follows) may change on
    resume; a plan that would take the batch back below the checkpoint's is
    refused here, before the run writes its config, and not after its first update.

    Raises:
      ConfigError: one line naming the plan's batch, the step and the checkpoint's batch.
    """
    if self.policy_name not in ('steps', 'seesaw'):
      return
    step, batch = int(self.step.numpy()), int(self.batch.numpy())
    state = policies.BatchState(step=step, updates=0, epoch=step / steps_per_epoch, batch=batch,
                                start_batch=self.start_batch, unit=self.unit)
    scheduled = self.policy(state, **self.params)
    if scheduled >= batch:
      return
    if self.policy_name == 'steps':
      raise ConfigError(f'{policies.KEY}.batches: {scheduled} at step {step}, below the global '
                        f'batch {batch} of the checkpoint resumed; a batch policy never shrinks '
                        f'the batch; allowed: a schedule at {batch} or more from step {step} on')
    halvings = list(self.params['halvings'])
    raise ConfigError(f'batch_policy: seesaw plans global batch {scheduled} at step {step} (the '
                      f'lr schedule halves at steps {halvings}), below the global batch {batch} '
                      'of the checkpoint resumed; a batch policy never shrinks the batch; '
                      f'allowed: an lr schedule and max_batch that reach {batch} by step {step}')

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
    rule = self._rule()
    return (f'batch {old} -> {new} at step {int(self.step.numpy())}{why}: iter_size '
            f'{new // self.unit}, lr {learning_rate:.5g} ({rule}) after update '
            f'{int(values["updates"])}')

  def describe_end(self, short, max_steps, learning_rate):
    """The log line of a last update shortened by :meth:`fit_to_end` to global batch ``short``."""
    return (f'the last update reads the examples left before step {max_steps}: global batch '
            f'{short} (iter_size {short // self.unit}) instead of {int(self.batch.numpy())}, '
            f'lr {learning_rate:.5g}')

  def _rule(self):
    """How the rate follows the batch, in words."""
    if self.factor is not None:
      return f'seesaw: the rate x{self.factor:.5g} at each doubling'
    return f'lr_scaling {self.rule}' if self.rule_named else 'linear: no lr_scaling'

  def describe(self):
    """How the run's batch is chosen, for the line that starts training (seesaw: its plan)."""
    text = (f'batch policy {self.policy_name} from global batch {self.start_batch} (it grows by '
            'iter_size; a step counts the examples of one starting batch)')
    if self.factor is None:
      return text
    halvings = self.params['halvings']
    if not halvings:
      return f'{text}; {self._no_halving()}'
    batches = policies.planned_batches('seesaw', self.params, self.start_batch)[1:]
    return (f'{text}; the lr schedule ({self.peak[0]:.5g} at its peak, step {self.peak[1]}) '
            f'halves at steps {", ".join(map(str, halvings))}: the batch doubles there to '
            f'{", ".join(map(str, batches))} (max_batch {self.params["max_batch"]}), the rate '
            f'x{self.factor:.5g} at each instead of x0.5')

  def _no_halving(self):
    if self.params['max_batch'] == self.start_batch:
      return (f'twice the starting global batch {self.start_batch} is more than the '
              f'{self.examples} examples of the training split, so the batch stays '
              f'{self.start_batch}')
    return (f'the lr schedule ({self.lr_policy}) does not fall to half its peak within the '
            f"run's {self.max_steps} steps, so the batch stays {self.start_batch}")

  def plan_note(self):
    """The one-line note of a seesaw that plans no doubling in this run; else None."""
    if self.factor is None or self.params['halvings']:
      return None
    return f'note: batch_policy seesaw: {self._no_halving()}'

  def summary_line(self, updates):
    """``batch policy P: N updates to step S, global batch A -> B``: the run's end, in one line."""
    step, batch = int(self.step.numpy()), int(self.batch.numpy())
    return (f'batch policy {self.policy_name}: {updates} updates to step {step} (a fixed batch '
            f'of {self.start_batch} takes {step}), global batch {self.start_batch} -> {batch}')

  def write_scalars(self, step):
    """``batch/global`` and ``batch/iter_size`` at ``step``, to the default summary writer."""
    tf.summary.scalar('batch/global', tf.cast(self.batch, tf.float32), step=step)
    tf.summary.scalar('batch/iter_size', tf.cast(self.iter_size, tf.float32), step=step)
