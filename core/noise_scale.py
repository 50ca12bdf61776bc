"""The gradient noise scale: McCandlish et al.'s estimators from two batch sizes, TensorFlow-free.

B_simple = tr(Σ) / |G|² (McCandlish, Kaplan, Amodei et al. 2018, "An Empirical
Model of Large-Batch Training", appendix A.1) is the batch at which the noise
of a gradient estimate is as large as the gradient itself. Neither term is
seen directly; both follow from the squared norms of gradients taken at two
batch sizes. For a mean gradient over B examples, E|G_B|² = |G|² + tr(Σ)/B,
so from B_small < B_big:

    |G|²  ≈ (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)
    tr(Σ) ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

both unbiased. Each is noisy from one update to the next (|G|²'s estimate is
often negative), so each is smoothed by an exponential moving average, with
Adam's bias correction so that the first updates count fully, before the
ratio is taken. docs/math.md ("The gradient noise scale and the critical
batch") states the same.

The functions use arithmetic operators only, so they take Python floats,
NumPy arrays or TensorFlow tensors alike: ``optimizers.stages.NoiseScale``
runs them in the train step, and the tests check them against NumPy.
"""

import math

# The exponential moving averages' default decay: about the last 100 updates weigh.
DEFAULT_DECAY = 0.99


def unbiased_estimates(small_sq, big_sq, b_small, b_big):
  """McCandlish's unbiased estimates of |G|² and tr(Σ) from one pair of gradient norms.

  Args:
    small_sq: |G_small|², the squared norm of a gradient averaged over
      ``b_small`` examples (the mean of several such, for less noise).
    big_sq: |G_big|², the squared norm of the gradient averaged over ``b_big`` examples.
    b_small: the small batch, in examples (or any unit; the results are per that unit).
    b_big: the big batch, > ``b_small``.

  Returns:
    (|G|² estimate, tr(Σ) estimate); tr(Σ) is per example of the unit.
  """
  gradient_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
  trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
  return gradient_sq, trace


def debiased(average, decay, count):
  """An exponential moving average started at 0 after ``count`` updates, corrected for its start."""
  return average / (1.0 - decay ** count)


def b_simple(trace, gradient_sq):
  """tr(Σ)/|G|²; infinite where the |G|² estimate is not positive (the noise hides the gradient)."""
  if gradient_sq <= 0:
    return math.inf
  return trace / gradient_sq


class NoiseScaleTracker:
  """The smoothed estimates over a sequence of updates, in plain Python (the train step's twin).

  Args:
    decay: the moving averages' decay, in [0, 1).
  """

  def __init__(self, decay=DEFAULT_DECAY):
    if not 0.0 <= decay < 1.0:
      raise ValueError(f'decay must be in [0, 1), got {decay!r}')
    self.decay = decay
    self.gradient_sq_average = 0.0
    self.trace_average = 0.0
    self.count = 0

  def add(self, small_sq, big_sq, b_small, b_big):
    """Adds one update's pair of squared norms (see ``unbiased_estimates``)."""
    gradient_sq, trace = unbiased_estimates(small_sq, big_sq, b_small, b_big)
    self.gradient_sq_average = self.decay * self.gradient_sq_average + (1 - self.decay) * gradient_sq
    self.trace_average = self.decay * self.trace_average + (1 - self.decay) * trace
    self.count += 1

  def estimates(self):
    """{'gradient_sq', 'trace', 'b_simple', 'updates'}; None before the first update."""
    if not self.count:
      return None
    gradient_sq = debiased(self.gradient_sq_average, self.decay, self.count)
    trace = debiased(self.trace_average, self.decay, self.count)
    return {'gradient_sq': gradient_sq, 'trace': trace,
            'b_simple': b_simple(trace, gradient_sq), 'updates': self.count}


def describe(value, unit):
  """``'N <unit>'`` for the run log: B_simple rounded to whole examples, or why there is none."""
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return 'not measured'
  if math.isinf(value):
    return 'unbounded (the |G|² estimate is not positive yet)'
  return f'{int(round(value))} {unit}'
