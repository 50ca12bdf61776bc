"""The gradient noise scale measured inside the update, from gradients the update computes anyway.

The small-batch gradient is each micro-batch's on each worker (``iter_size``
micro-batches, or the two halves of a step given as parts), before
accumulation and the all-reduce; the big-batch gradient is the update's, after
them. Their squared norms give McCandlish et al.'s unbiased estimates of
|G|² and tr(Σ) (``core.noise_scale``), smoothed by bias-corrected moving
averages; B_simple = tr(Σ)/|G|² is in the unit of ``micro_batch`` (examples,
or words). The norms are of the unscaled float32 gradients, before clipping,
LARC and weight decay, and an update whose gradients are not finite adds
nothing: the stage runs after the finite check.

One update, as ``pipeline.GradientPipeline`` runs it:

1. ``add(|g|²)`` on every micro-batch (or part): Σ|g|² and the count;
2. ``take()`` when the update is due: the mean |g_small|², the sums start again;
3. ``stages.AllReduce`` averages that mean over the workers with the gradients;
4. the stage itself, after ``stages.FiniteCheck``: the estimates from the
   mean |g_small|² and the update's global norm², into the moving averages.
"""

import tensorflow as tf

from core import noise_scale as formulas


def measures(iter_size, workers, parts=1):
  """Whether an update sees two or more small-batch gradients (so the noise scale costs no pass)."""
  return iter_size * workers * parts >= 2


class NoiseScale(tf.Module):
  """The noise scale's state and its stage (see the module docstring).

  Args:
    micro_batches: small-batch gradients averaged into one update (micro-batches
      × workers whose gradients are averaged × parts of a micro-step), >= 2.
    micro_batch: examples (or words) in one small-batch gradient: B_small.
    decay: the moving averages' decay, in [0, 1).
    workers: for a batch that grows between updates: the workers whose
      gradients are averaged. An update's small-batch gradients are then the
      ones added since the last (counted) times ``workers``, and
      ``micro_batches`` is only the count at the start.
  """

  def __init__(self, micro_batches, micro_batch=1.0, decay=formulas.DEFAULT_DECAY,
               workers=None, name='noise_scale'):
    super().__init__(name=name)
    if micro_batches < 2:
      raise ValueError('the noise scale needs two or more small-batch gradients per update, '
                       f'got {micro_batches}')
    self.micro_batches = int(micro_batches)
    self.micro_batch = float(micro_batch)
    self.decay = float(decay)
    self.workers = workers
    with tf.init_scope():
      # Σ|g_small|² and their count since the last update (checkpointed: a run
      # stopped between micro-batches resumes with them).
      self.small_sum = tf.Variable(0.0, dtype=tf.float64, trainable=False, name='small_sum')
      self.small_count = tf.Variable(0.0, dtype=tf.float64, trainable=False, name='small_count')
      self.gradient_sq_average = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                             name='gradient_sq_average')
      self.trace_average = tf.Variable(0.0, dtype=tf.float64, trainable=False, name='trace_average')
      self.updates = tf.Variable(0.0, dtype=tf.float64, trainable=False, name='updates')
      if workers is not None:
        # The small-batch gradients one worker added to the update being applied.
        self.taken = tf.Variable(0.0, dtype=tf.float64, trainable=False, name='taken')

  def add(self, squared):
    """Adds one small-batch gradient's squared norm |g_small|² (a float32 scalar)."""
    self.small_sum.assign_add(tf.cast(squared, tf.float64))
    self.small_count.assign_add(1.0)

  def take(self):
    """The mean |g_small|² since the last update (float32, to travel with the gradients); resets."""
    mean = self.small_sum / tf.maximum(self.small_count, 1.0)
    if self.workers is not None:
      self.taken.assign(self.small_count)
    with tf.control_dependencies([mean]):
      self.small_sum.assign(0.0)
      self.small_count.assign(0.0)
    return tf.cast(mean, tf.float32)

  def describe(self):
    return 'noise_scale'

  def __call__(self, grads, update):
    """The stage: the update's estimates into the moving averages; the gradients pass unchanged."""
    small_sq = tf.cast(update.noise_small, tf.float64)
    big_sq = tf.square(tf.cast(update.global_norm, tf.float64))
    if self.workers is None:
      big_batch = self.micro_batch * self.micro_batches
    else:
      big_batch = self.micro_batch * self.taken * self.workers
    gradient_sq, trace = formulas.unbiased_estimates(small_sq, big_sq, self.micro_batch,
                                                     big_batch)
    keep = self.decay
    self.gradient_sq_average.assign(keep * self.gradient_sq_average + (1 - keep) * gradient_sq)
    self.trace_average.assign(keep * self.trace_average + (1 - keep) * trace)
    self.updates.assign_add(1.0)
    return grads

  def estimates(self):
    """{'noise_scale', 'noise_gradient_sq', 'noise_trace', 'noise_updates'} as float32 tensors.

    B_simple is NaN before the first measured update and infinite while the
    |G|² estimate is not positive.
    """
    started = self.updates > 0
    correction = tf.where(started, 1.0 - tf.pow(tf.constant(self.decay, tf.float64),
                                                self.updates), 1.0)
    nan = tf.constant(float('nan'), tf.float64)
    gradient_sq = tf.where(started, self.gradient_sq_average / correction, nan)
    trace = tf.where(started, self.trace_average / correction, nan)
    ratio = tf.where(gradient_sq > 0, trace / tf.where(gradient_sq > 0, gradient_sq, 1.0),
                     tf.constant(float('inf'), tf.float64))
    b_simple = tf.where(started, ratio, nan)
    return {'noise_scale': tf.cast(b_simple, tf.float32),
            'noise_gradient_sq': tf.cast(gradient_sq, tf.float32),
            'noise_trace': tf.cast(trace, tf.float32),
            'noise_updates': tf.cast(self.updates, tf.float32)}
