"""The global batch as a policy of the run, as ``lr_policy`` is for the learning rate.

A batch policy is a function ``policy(state, **batch_policy_params) -> int``:
given the run's :class:`BatchState` after an update, the global batch of the
next update. The built-in ones:

- ``fixed``: the config's batch from start to end (the default);
- ``steps``: a piecewise schedule, ``batches`` by ``boundaries`` (run steps) or
  ``boundary_epochs``;
- ``noise_scale``: doubles the batch (once or more in one decision) while twice
  it stays within the measured gradient noise scale over ``factor``, checked
  every ``interval`` updates, up to ``max_batch``; it never shrinks;
- ``seesaw``: Seesaw (Meterez et al. 2025): where the config's lr schedule
  falls to 1/2, 1/4, ... of its peak, the batch doubles and the rate falls by
  ``factor`` (1/sqrt(2)) instead of by half, up to ``max_batch``.

A name ``"package.module:name"`` is a policy of your own, with the same
signature. A batch grows by raising ``iter_size``: the micro-batch per worker
stays as configured, so memory stays what it was at the start, and every batch
a policy names is a whole multiple of the starting global batch (the run's
step counts examples in units of it; see :class:`BatchState`).

The learning rate follows the batch by the config's ``lr_scaling`` rule
(:func:`lr_factor`) and its schedule runs on the run's step, that is on the
examples seen, so that a warm-up or a decay keeps its length in data whatever
the batch. This module imports no TensorFlow: the config layer checks a
policy's parameters with it before anything is built, and the run's own side
is ``framework.run.batch_policy``. docs/critical_batch.md says how to choose one.
"""

import dataclasses
import math
import numbers
from typing import Optional

from core.params import ConfigError
from core.registry import Registry
from core.registry import where_raised

# A noise_scale policy's default ceiling, in multiples of the starting batch.
DEFAULT_MAX_FACTOR = 16
# A noise_scale policy's default updates between two checks (and before the first).
DEFAULT_INTERVAL = 20
# Seesaw's rate at each doubling of the batch, for Adam and normalized updates (Meterez et al.).
SEESAW_FACTOR = 1 / math.sqrt(2)
# The rates a seesaw factor may take: 1/2 (the schedule's own fall) to 1 (no fall: SGD's rule).
SEESAW_FACTORS = (0.5, 1.0)


@dataclasses.dataclass(frozen=True)
class BatchState:
  """What a batch policy is told after each applied update.

  Attributes:
    step: the run's step, the examples seen over the starting global batch: the
      step a run at the starting batch would be at (it counts epochs the same
      way, and the lr schedule and the run's length are in it).
    updates: the updates applied so far.
    epoch: the epochs seen (a float).
    batch: the current global batch (examples, or words/tokens for sequences).
    start_batch: the global batch the run started with.
    unit: the smallest change of the batch: the micro-batch x the workers.
    noise_scale: the measured gradient noise scale B_simple (in the batch's
      unit), or None when not measured (yet).
    noise_updates: the updates the noise scale was measured over.
    noise_window: the updates its moving averages span, 1/(1 - decay): an
      estimate over fewer is mostly its first few updates.
    last_change: the run step of the batch's last change (0: none yet).
  """
  step: int
  updates: int
  epoch: float
  batch: int
  start_batch: int
  unit: int
  noise_scale: Optional[float] = None
  noise_updates: int = 0
  noise_window: int = 0
  last_change: int = 0


def fixed(state):
  """The batch the run started with, to its end."""
  return state.batch


def steps(state, batches, boundaries=None, boundary_epochs=None):
  """``batches[i]`` from the i-th boundary on (``batches[0]`` before the first).

  Args:
    state: the run's :class:`BatchState`.
    batches: the global batches, one more than the boundaries; the first is the
      run's starting global batch.
    boundaries: the run steps (examples over the starting batch) at which each
      next batch begins; or
    boundary_epochs: the same in epochs.
  """
  if boundaries is not None:
    passed = sum(1 for b in boundaries if state.step >= b)
  else:
    passed = sum(1 for b in boundary_epochs if state.epoch >= b - 1e-9)
  return batches[passed]


def noise_scale(state, max_batch=None, factor=1.0, interval=DEFAULT_INTERVAL):
  """Doubles the batch while twice it is within B_simple / ``factor`` and ``max_batch``.

  McCandlish et al. (2018): below the noise scale a larger batch needs
  proportionally fewer updates; past it, it buys little. The estimate grows as
  the loss falls, so the batch follows it up, checked every ``interval``
  updates once the estimate spans its moving averages' window (and at least
  ``interval`` updates): the first updates' estimate, of a model at its
  initialization, is no guide to the run. It never shrinks.

  Args:
    state: the run's :class:`BatchState`.
    max_batch: the largest global batch (default: 16 x the starting one).
    factor: how far the noise scale must exceed a batch before the run takes
      it (1: up to B_simple; 2: up to half of it).
    interval: updates between checks.
  """
  ceiling = max_batch if max_batch is not None else DEFAULT_MAX_FACTOR * state.start_batch
  measured = state.noise_scale
  trusted = state.noise_updates >= max(interval, state.noise_window)
  if (state.updates % interval or not trusted or measured is None
      or not math.isfinite(measured) or measured <= 0):
    return state.batch
  batch = state.batch
  while 2 * batch <= ceiling and 2 * batch * factor <= measured:
    batch *= 2
  return batch


def seesaw(state, halvings=(), max_batch=None, factor=SEESAW_FACTOR):
  """The starting batch doubled at each of ``halvings`` passed, up to ``max_batch``.

  Meterez et al. (2025): where a schedule would halve the learning rate, double
  the batch and multiply the rate by 1/sqrt(2) instead (for Adam, through
  normalized SGD, while the gradient's noise dominates its mean: below the
  critical batch); for plain SGD doubling the batch alone (``factor`` 1) is
  what halving the rate was. The run finds the halvings in its lr schedule
  (:func:`halving_points`) when it is built, and sets the rate
  (:func:`seesaw_exponent`); ``factor`` is read there.

  Args:
    state: the run's :class:`BatchState`.
    halvings: the run steps at which the config's lr schedule has fallen to
      1/2, 1/4, ... of its peak, from :func:`halving_points`; the run gives
      them, not the config.
    max_batch: the largest global batch (default: 16 x the starting one).
    factor: the rate's multiplier at each doubling (read by the run).
  """
  del factor  # the rate's, not the batch's
  ceiling = max_batch if max_batch is not None else DEFAULT_MAX_FACTOR * state.start_batch
  batch = state.start_batch
  for step in halvings:
    if state.step < step or 2 * batch > ceiling:
      break
    batch *= 2
  return batch


def halving_points(rates, levels):
  """The steps where a schedule has first fallen to 1/2, 1/4, ... of its peak, after the peak.

  The peak is the largest rate, first reached at step p; a warm-up's rise
  before it halves nothing. The k-th point is the first step after p whose
  rate is at most peak / 2^k, so a drop by 4 at one step is two points there;
  a schedule that rises again later keeps the points it passed.

  Args:
    rates: the schedule's rate at run steps 0, 1, 2, ... (the run's steps).
    levels: the most points wanted (the doublings ``max_batch`` leaves room for).

  Returns:
    The steps, one per halving, increasing (equal for a fall by 4 or more at once).
  """
  rates = [float(r) for r in rates]
  if not rates or not max(rates) > 0:
    return []
  peak = max(rates)
  points = []
  for step in range(rates.index(peak) + 1, len(rates)):
    # peak x 2^-k is exact in a float: the test is against the schedule's own numbers.
    while len(points) < levels and rates[step] <= math.ldexp(peak, -(len(points) + 1)):
      points.append(step)
    if len(points) == levels:
      break
  return points


def seesaw_exponent(factor=SEESAW_FACTOR):
  """p in Seesaw's rate, the schedule's times (B/B0)^p: ``2 x factor`` per doubling of the start.

  p = 1 + log2(factor): 1/2 at Seesaw's 1/sqrt(2) (``lr_scaling``'s sqrt rule),
  1 at 1 (SGD; the linear rule), 0 at 1/2 (the schedule's own fall, the batch
  doubling on top).
  """
  return 1.0 + math.log2(factor)


# The parameters each built-in policy takes (name: required).
_PARAMETERS = {
    'fixed': {},
    'steps': {'batches': True, 'boundaries': False, 'boundary_epochs': False},
    'noise_scale': {'max_batch': False, 'factor': False, 'interval': False},
    'seesaw': {'max_batch': False, 'factor': False},
}

_BUILT_IN = {'fixed': fixed, 'steps': steps, 'noise_scale': noise_scale, 'seesaw': seesaw}

BATCH_POLICIES = Registry('batch policy')
for _name, _policy in _BUILT_IN.items():
  BATCH_POLICIES.register(_name, _policy)

KEY = 'batch_policy_params'


def built_in_name(policy):
  """The registered name of a built-in policy given by name, by import path or as the function.

  ``core.batch_policy:noise_scale`` and, from a Python config, the function
  ``noise_scale`` itself are the built-in policy, and the run treats them as
  the name (its parameters checked, the noise scale measured for it); a
  policy of the user's own, or a name no registry holds, is None.
  """
  if isinstance(policy, str):
    if policy in _BUILT_IN:
      return policy
    if not BATCH_POLICIES.is_own_code(policy) or policy not in BATCH_POLICIES:
      return None
    policy = BATCH_POLICIES[policy]
  return next((name for name, built_in in _BUILT_IN.items() if policy is built_in), None)


def noise_scale_setting(config):
  """The config's ``noise_scale`` as the run takes it: ``auto`` is true where the policy grows by it."""
  setting = config['noise_scale']
  if isinstance(setting, str):
    setting = setting.lower()
  return True if setting == 'auto' and config.get('batch_policy') == 'noise_scale' else setting


def is_fixed(config):
  """Whether the config's batch stays as it starts (``batch_policy: fixed``)."""
  return config.get('batch_policy', 'fixed') == 'fixed'


def check(name, params, start_batch=None, unit=None):
  """Refuses, in one line naming the key, parameters a built-in policy cannot run with.

  Args:
    name: the policy's name (a user's policy, by path or object, is checked as it runs).
    params: its ``batch_policy_params``.
    start_batch: the run's starting global batch; None (the config layer, before
      the workers are known) leaves out the checks against it.
    unit: the micro-batch x the workers (with ``start_batch``).

  Raises:
    ConfigError: an unknown or missing parameter, a ``steps`` schedule that
      does not increase, does not start at the starting batch or names a batch
      the starting batch does not divide, or a ``max_batch`` below the start.
  """
  if not isinstance(name, str) or name not in _PARAMETERS:
    return
  allowed = _PARAMETERS[name]
  unknown = sorted(set(params) - set(allowed))
  if unknown:
    raise ConfigError(f'{KEY}: unknown key(s) {unknown} for batch_policy {name!r}; allowed: '
                      f'{", ".join(sorted(allowed)) or "none"}')
  missing = sorted(k for k, required in allowed.items() if required and k not in params)
  if missing:
    raise ConfigError(f'{KEY}.{missing[0]}: required by batch_policy {name!r}')
  if name == 'steps':
    _check_steps(params, start_batch, unit)
  elif name == 'noise_scale':
    _check_noise_scale(params, start_batch)
  elif name == 'seesaw':
    _check_seesaw(params, start_batch)


def _check_steps(params, start_batch, unit):
  batches = params['batches']
  given = [k for k in ('boundaries', 'boundary_epochs') if params.get(k) is not None]
  if len(given) != 1:
    raise ConfigError(f'{KEY}: give one of boundaries (run steps) and boundary_epochs for '
                      "batch_policy 'steps'")
  marks = params[given[0]]
  if not _is_list(batches, numbers.Integral) or not batches:
    raise ConfigError(f'{KEY}.batches: must be a list of global batches (integers), got '
                      f'{batches!r}')
  if not _is_list(marks, numbers.Real):
    raise ConfigError(f'{KEY}.{given[0]}: must be a list of numbers, got {marks!r}')
  if len(batches) != len(marks) + 1:
    raise ConfigError(f'{KEY}.batches: {len(batches)} batches for {len(marks)} {given[0]}; '
                      'give one batch more than boundaries (the first is the starting batch)')
  for key, values in ((given[0], marks), ('batches', batches)):
    if any(b >= a for a, b in zip(values[1:], values)) or (key != 'batches' and marks
                                                            and marks[0] <= 0):
      raise ConfigError(f'{KEY}.{key}: must increase (and boundaries be positive), got {values}')
  if start_batch is None:
    return
  if batches[0] != start_batch:
    raise ConfigError(f'{KEY}.batches: starts at {batches[0]}, but the run starts at global '
                      f'batch {start_batch} (batch_size_per_gpu x workers x iter_size); make it '
                      'the first')
  for batch in batches:
    check_batch(batch, start_batch, unit, f'{KEY}.batches')


def _check_noise_scale(params, start_batch):
  _check_max_batch(params, start_batch)
  factor = params.get('factor', 1.0)
  if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not factor > 0:
    raise ConfigError(f'{KEY}.factor: must be a positive number, got {factor!r}')
  interval = params.get('interval', DEFAULT_INTERVAL)
  if isinstance(interval, bool) or not isinstance(interval, numbers.Integral) or interval < 1:
    raise ConfigError(f'{KEY}.interval: must be an integer >= 1 (updates), got {interval!r}')


def _check_seesaw(params, start_batch):
  _check_max_batch(params, start_batch)
  factor = params.get('factor', SEESAW_FACTOR)
  low, high = SEESAW_FACTORS
  if (isinstance(factor, bool) or not isinstance(factor, numbers.Real)
      or not low <= factor <= high):
    raise ConfigError(f'{KEY}.factor: {factor!r} is no rate factor Seesaw takes; allowed: a '
                      f'number from {low} to {high}: {SEESAW_FACTOR:.5f} (1/sqrt(2), the default: '
                      'Adam, LAMB, LARS), 1 (plain SGD or momentum)')


def _check_max_batch(params, start_batch):
  """A doubling policy's ``max_batch``: an integer the starting batch reaches by doubling."""
  top = params.get('max_batch')
  if top is not None and (not isinstance(top, numbers.Integral) or isinstance(top, bool)
                          or top < (start_batch or 1)):
    raise ConfigError(f'{KEY}.max_batch: {top!r} is below the starting global batch '
                      f'{start_batch}; give an integer >= {start_batch} (or null: '
                      f'{DEFAULT_MAX_FACTOR} x the start)' if start_batch else
                      f'{KEY}.max_batch: must be a positive integer, got {top!r}')
  if top is not None and start_batch and (top == start_batch
                                          or doubled_batches(start_batch, top)[-1] != top):
    # The policy doubles the batch: a ceiling it cannot reach is one it stops below, and
    # the start itself one it never grows from.
    doubled = ', '.join(str(start_batch * 2 ** k) for k in range(1, 5))
    raise ConfigError(f'{KEY}.max_batch: {top} is not reached by doubling the starting global '
                      f'batch {start_batch}; allowed: {doubled}, ... (or null: '
                      f'{DEFAULT_MAX_FACTOR} x the start)')


def _is_list(values, kind):
  return isinstance(values, (list, tuple)) and all(
      isinstance(v, kind) and not isinstance(v, bool) for v in values)


def check_batch(batch, start_batch, unit, where):
  """Refuses a global batch the run cannot take, in one line naming ``where``."""
  if isinstance(batch, bool) or not isinstance(batch, numbers.Integral) or batch < 1:
    raise ConfigError(f'{where}: a global batch must be a positive integer, got {batch!r}')
  if batch % unit:
    raise ConfigError(f'{where}: the global batch {batch} is not a multiple of {unit} (the '
                      'micro-batch x the workers): iter_size would not be whole')
  if batch % start_batch:
    raise ConfigError(f'{where}: the global batch {batch} is not a multiple of the starting '
                      f'batch {start_batch}: the run counts its steps in starting batches')


def next_batch(policy, params, state, where='batch_policy'):
  """The policy's batch after ``state``, checked: a whole multiple of the start, never smaller.

  Raises:
    ConfigError: one line naming the policy and what it returned, or what it
      raised and the line of its code that raised it.
  """
  try:
    batch = policy(state, **params)
  except Exception as exc:  # pylint: disable=broad-except
    # The user's code: its line, not the train loop's frames, says what to fix.
    detail = ' '.join(str(exc).split())
    raise ConfigError(f'{where}: raised {type(exc).__name__} at step {state.step}'
                      f'{where_raised(exc)}: {detail}') from None
  # True is a number to Python, not a batch.
  if (isinstance(batch, numbers.Real) and not isinstance(batch, bool)
      and float(batch).is_integer()):
    batch = int(batch)
  else:
    raise ConfigError(f'{where}: returned {batch!r} at step {state.step}; a batch policy '
                      'returns the global batch as an integer')
  if batch < state.batch:
    raise ConfigError(f'{where}: returned {batch} at step {state.step}, below the current '
                      f'global batch {state.batch}; a batch policy never shrinks the batch')
  check_batch(batch, state.start_batch, state.unit, where)
  return batch


def lr_factor(rule, batch, start_batch):
  """The learning rate at ``batch`` over the rate at the start: ``lr_scaling``'s rule.

  ``linear`` (Goyal et al.; also the rule without ``lr_scaling``): B/B0;
  ``sqrt`` (Krizhevsky; the LARS and LAMB recipes): sqrt(B/B0).
  """
  ratio = batch / start_batch
  return math.sqrt(ratio) if rule == 'sqrt' else ratio


def planned_batches(name, params, start_batch):
  """The global batches a built-in policy may use, smallest first (for the benchmark).

  ``steps``: its ``batches``; ``noise_scale``: the start doubled up to
  ``max_batch``; ``seesaw``: the same, once for each of the run's
  ``halvings`` when they are known; anything else: the start alone.
  """
  if name == 'steps':
    return list(params['batches'])
  if name in ('noise_scale', 'seesaw'):
    ladder = doubled_batches(start_batch, params.get('max_batch'))
    if name == 'seesaw' and 'halvings' in params:
      return ladder[:len(params['halvings']) + 1]
    return ladder
  return [start_batch]


def doubled_batches(start_batch, max_batch=None):
  """The start, doubled while within ``max_batch`` (default: 16 x the start)."""
  ceiling = max_batch or DEFAULT_MAX_FACTOR * start_batch
  result = [start_batch]
  while result[-1] * 2 <= ceiling:
    result.append(result[-1] * 2)
  return result
