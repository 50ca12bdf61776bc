"""The critical batch from branches: updates to a target, the fit S(B), its interval, along the run.

McCandlish et al. (2018) model the updates S and the examples E a run needs to
reach a result at batch B as S(B) = S_min·(1 + B_crit/B) and E(B) = S(B)·B =
E_min·(1 + B/B_crit). ``run.py --mode=critical_batch`` measures it as the
studies do, but from checkpoints of one run: at each point of the run, a
branch at 1x, 2x, 4x, … the config's batch goes on from the point's
checkpoint, its held-out loss evaluated every few examples, until it reaches
the loss the 1x branch has after its window, or a cap. This module holds the
arithmetic, none of it TensorFlow's (docs/math.md, "The critical batch from
branches", states the same):

- :func:`monotone_fit`: a branch's held-out losses made non-increasing by
  least squares (pool-adjacent-violators), which the crossing is read from,
  so that an evaluation's noise does not decide it;
- :func:`crossing`: the examples at which a curve first reaches the target,
  interpolated between its evaluations;
- :func:`critical_fit`: least squares of S on 1/B, ``(S_min, B_crit)``;
- :func:`measure_point`: a point's target, each branch's examples and updates
  to it, the fit, and the fit's interval by a bootstrap of the evaluations'
  residuals about their monotone fits;
- :func:`whole_run`: the one fixed batch for the whole run: the fit of the
  run's S(B), the sum of its parts' updates at each batch (:func:`run_updates`);
- :func:`growing_schedule`: a ``batch_policy: steps`` schedule from the points.
"""

import math
import random

# The bootstrap's draws, and the share of them outside the interval on each side.
BOOTSTRAP_DRAWS = 400
INTERVAL_TAIL = 0.05
# A point is measured only when the 1x branch's loss fell over its window by at least this
# many times its looks' noise (its monotone fit, from first look to last), or by
# MIN_PROGRESS_IN_ERRORS standard errors of its least-squares trend (trend_fall): the
# first test holds a fast fall, the second a slow one over many looks. Its window ends
# where it first has (window_end).
MIN_PROGRESS_IN_NOISE = 4.0
MIN_PROGRESS_IN_ERRORS = 3.0
# ... and with at least this many evaluations in the window.
MIN_LOOKS = 8
# ... and by at least this share of the loss at the point (a curve that is all but flat).
MIN_PROGRESS_SHARE = 0.002


def critical_fit(steps, relative=False):
  """``(S_min, B_crit)`` of S(B) = S_min·(1 + B_crit / B) fitted to ``{batch: S(B)}``, or None.

  S is linear in 1/B with intercept S_min and slope S_min·B_crit, so the fit
  is least squares of S on 1/B (exact through two batches). With
  ``relative``, each point's residual counts relative to its S (weights
  1/S²): the updates of every branch are read with about the same relative
  error, and unweighted the smallest batch's many updates would decide the
  line. None for fewer than two batches, or when the intercept or the slope
  is not positive: the updates do not level off (``S_min`` <= 0: every
  doubling still halved them) or do not fall (slope <= 0).
  """
  if len(steps) < 2:
    return None
  line = _weighted_line([1.0 / batch for batch in steps], list(steps.values()), relative)
  if line is None:
    return None
  s_min, slope = line
  if s_min <= 0 or slope <= 0:
    return None
  return s_min, slope / s_min


def _weighted_line(xs, ys, relative):
  """``(intercept, slope)`` of least squares of ys on xs, weights 1/y² when ``relative``."""
  ws = [1.0 / (y * y) if relative and y else 1.0 for y in ys]
  total = sum(ws)
  mx = sum(w * x for w, x in zip(ws, xs)) / total
  my = sum(w * y for w, y in zip(ws, ys)) / total
  spread = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
  if spread <= 0:
    return None
  slope = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / spread
  return my - slope * mx, slope


def fit_shape(steps, relative=False):
  """Why :func:`critical_fit` gives no fit: ``'few'``, ``'no_level'``, ``'no_gain'``, or None."""
  if len(steps) < 2:
    return 'few'
  if critical_fit(steps, relative) is not None:
    return None
  line = _weighted_line([1.0 / batch for batch in steps], list(steps.values()), relative)
  return 'no_gain' if line is None or line[1] <= 0 else 'no_level'


def monotone_fit(values):
  """The non-increasing sequence nearest ``values`` in least squares (pool adjacent violators)."""
  blocks = []  # [sum, count]
  for value in values:
    blocks.append([float(value), 1])
    while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
      total, count = blocks.pop()
      blocks[-1][0] += total
      blocks[-1][1] += count
  fitted = []
  for total, count in blocks:
    fitted.extend([total / count] * count)
  return fitted


def crossing(examples, values, target):
  """The examples at which the curve ``values`` (at ``examples``) first falls to ``target``, or None.

  Linear between the last evaluation above the target and the first at or
  below it; the curve's first point is the branch's start (examples 0).
  """
  previous = None
  for x, y in zip(examples, values):
    if y <= target:
      if previous is None or previous[1] == y:
        return float(x)
      x0, y0 = previous
      return x0 + (x - x0) * (y0 - target) / (y0 - y)
    previous = (x, y)
  return None


def _quantile(sorted_values, q):
  """The ``q`` quantile of sorted values, linear between order statistics."""
  if not sorted_values:
    return None
  position = q * (len(sorted_values) - 1)
  low = int(math.floor(position))
  high = min(low + 1, len(sorted_values) - 1)
  a, b = sorted_values[low], sorted_values[high]
  if a == b or position == low:
    return a
  if math.isinf(b):
    return b
  return a + (b - a) * (position - low)


def _curve(branch, start):
  """``(examples, losses)`` of a branch's evaluations, its start (the point's loss) first if given."""
  xs = [float(e) for e, _ in branch['curve']]
  ys = [float(v) for _, v in branch['curve']]
  if start is None:
    return xs, ys
  return [0.0] + xs, [float(start)] + ys


def _smooth(ys, anchored):
  """The monotone fit of a curve; an ``anchored`` one keeps its first value (the shared start)."""
  if not anchored:
    return monotone_fit(ys)
  fitted = [ys[0]] + monotone_fit(ys[1:])
  return [min(f, fitted[0]) for f in fitted]


def _crossings(curves, base, window):
  """The target and ``{batch: examples to it}``, from curves already smoothed."""
  xs, ys = curves[base]
  # The target: the 1x branch's smoothed loss at the end of its window.
  inside = [y for x, y in zip(xs, ys) if x <= window + 1e-9]
  target = inside[-1]
  examples = {}
  for batch, (bx, by) in curves.items():
    reached_at = crossing(bx, by, target)
    if reached_at is not None and reached_at > 0:
      examples[batch] = reached_at
  return target, examples


def _draw_value(steps):
  """A bootstrap draw's B_crit: its fit's, inf past the ladder, 0 below it, None for too few."""
  fitted = critical_fit(steps, relative=True)
  if fitted is not None:
    return fitted[1]
  shape = fit_shape(steps, relative=True)
  return {'no_level': math.inf, 'no_gain': 0.0}.get(shape)


def window_target(curve, start, window):
  """``(target, noise)`` of a 1x branch: its smoothed loss after ``window`` examples, its residuals.

  Args:
    curve: ``[[examples, held-out loss], ...]`` of the 1x branch.
    start: the held-out loss at the point.
    window: the examples whose end sets the target.

  Returns:
    The target every branch is run to, and the noise of the window's
    evaluations (:func:`curve_noise`).
  """
  xs, ys = _curve({'curve': curve}, start)
  anchored = start is not None
  fitted = _smooth(ys, anchored)
  inside = [f for x, f in zip(xs, fitted) if x <= window + 1e-9]
  return inside[-1], curve_noise([y for x, y in zip(xs, ys) if x <= window + 1e-9][anchored:])


def curve_noise(values):
  """The noise of a curve's values about its trend: the first differences' RMS over √2.

  Two neighbouring evaluations differ by the trend's small step and two
  independent noises, so the differences measure the noise without a model of
  the trend (a fit would absorb part of it). 0.0 for fewer than three values.
  """
  if len(values) < 3:
    return 0.0
  steps = [b - a for a, b in zip(values, values[1:])]
  return math.sqrt(sum(d * d for d in steps) / (2.0 * len(steps)))


def trend_fall(points):
  """``(fall, its standard error)`` of a curve's least-squares line over its span.

  The fall is −slope·(x_last − x_first); its standard error
  σ·(x_last − x_first)/√Sxx, with σ the looks' noise (:func:`curve_noise`)
  and Sxx = Σ(x − x̄)²: about σ·√(12/n) for n evenly spaced looks. A fall of
  three standard errors is what noise alone gives in about one curve in 700,
  however many looks the window holds. ``(0.0, inf)`` for fewer than
  three looks.
  """
  if len(points) < 3:
    return 0.0, math.inf
  xs = [float(x) for x, _ in points]
  ys = [float(y) for _, y in points]
  mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
  sxx = sum((x - mean_x) ** 2 for x in xs)
  if sxx <= 0:
    return 0.0, math.inf
  slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sxx
  span = xs[-1] - xs[0]
  return -slope * span, curve_noise(ys) * span / math.sqrt(sxx)


def progress_of(points):
  """``(monotone fall, looks' noise, trend fall, its standard error)`` of a curve's points."""
  values = [v for _, v in points]
  fitted = monotone_fit(values) if values else [0.0]
  fall, error = trend_fall(points)
  return fitted[0] - fitted[-1], curve_noise(values), fall, error


def made_progress(points, progress=MIN_PROGRESS_IN_NOISE, errors=MIN_PROGRESS_IN_ERRORS):
  """Whether a 1x curve fell by ``progress`` times its looks' noise (its monotone fit) or by
  ``errors`` standard errors of its trend, and by :data:`MIN_PROGRESS_SHARE` of its first
  value (a curve all but flat is not measured)."""
  if not points:
    return False
  monotone, noise, fall, error = progress_of(points)
  enough = ((monotone > 0 and monotone >= progress * noise)
            or (fall > 0 and fall >= errors * error))
  return enough and max(monotone, fall) >= MIN_PROGRESS_SHARE * abs(points[0][1])


def window_end(curve, fewest, most, progress=MIN_PROGRESS_IN_NOISE, looks=MIN_LOOKS):
  """The 1x branch's window: the first look from ``fewest`` examples on where it has made progress.

  Progress (:func:`made_progress`) is a fall of the curve's monotone fit of
  ``progress`` times its noise, or of its least-squares trend by
  :data:`MIN_PROGRESS_IN_ERRORS` standard errors, with at least ``looks``
  evaluations: the target is then a loss the branches can tell from noise.

  Args:
    curve: ``[[examples since the point, loss], ...]``, in order.
    fewest: the shortest window.
    most: the longest window.

  Returns:
    The window in examples; None while it is not decided (the curve is
    shorter than ``most``); 0 when the curve reached ``most`` without the
    progress (nothing to measure at this point).
  """
  for index in range(max(looks, 1) - 1, len(curve)):
    examples = curve[index][0]
    if examples > most + 1e-9:
      break
    if examples + 1e-9 < fewest:
      continue
    if made_progress(curve[:index + 1], progress):
      return examples
  if curve and curve[-1][0] + 1e-9 >= most:
    return 0
  return None


def reached(curve, start, target, margin):
  """Whether a branch's curve so far, smoothed, is at or below ``target - margin``.

  A branch runs on a little past the target (by the 1x branch's noise), so
  that the bootstrap's redrawn curves, which scatter by that much, still reach it.
  """
  if not curve:
    return False
  smoothed = monotone_fit(([] if start is None else [start]) + [v for _, v in curve])
  return smoothed[-1] <= target - margin


def measure_point(branches, start, base, window, draws=BOOTSTRAP_DRAWS, seed=0):
  """The critical batch at one point of the run, from its branches' curves.

  Args:
    branches: ``{batch: {'curve': [[examples, held-out loss], ...]}}``, each
      curve in order of examples read since the point; the 1x branch
      (``base``) among them, evaluated to at least ``window`` examples.
    start: the held-out loss at the point (every branch's start), or None
      when the curves have no point at 0 examples (the online loss, whose
      first value is already the mean of its first interval).
    base: the config's global batch (the 1x branch).
    window: the 1x branch's examples whose end defines the target.
    draws: the bootstrap's resamples.
    seed: the bootstrap's seed (the answer is the same for the same records).

  Returns:
    A dict: ``target``, ``progress`` (start − target), ``noise`` (the
    residuals' standard deviation), ``measured`` (False with ``why`` when the
    1x branch did not learn enough to measure anything), per batch
    ``examples`` and ``updates`` to the target (None: not reached), ``s_min``,
    ``e_min``, ``b_crit`` (None without a fit, ``shape`` saying why), and
    ``interval`` ``[low, high]`` of B_crit over the bootstrap (None when
    fewer than half of its draws fit), with ``fitted_draws``.
  """
  raw = {batch: _curve(branch, start) for batch, branch in branches.items()}
  anchored = start is not None
  smooth, residuals = {}, {}
  for batch, (xs, ys) in raw.items():
    # The start is a measured point too, shared by every branch: it is kept as measured.
    fitted = _smooth(ys, anchored)
    smooth[batch] = (xs, fitted)
    residuals[batch] = [y - f for y, f in zip(ys[anchored:], fitted[anchored:])]
  target, examples = _crossings(smooth, base, window)
  # The looks' noise is read from the branches that reached the target: one that did not
  # (its loss thrown up by its rate, and not back) departs from a falling trend by more
  # than its looks' noise, and a draw of its residuals would swamp every other curve.
  pooled = [r for b, rs in residuals.items() if b == base or b in examples for r in rs]
  noise = (math.sqrt(sum(r * r for r in pooled) / len(pooled)) if pooled else 0.0)
  if start is None:
    start = smooth[base][1][0]  # the 1x branch's first interval, smoothed
  result = {'target': target, 'start': start, 'progress': start - target, 'noise': noise,
            'window': window, 'measured': True, 'why': None,
            'examples': {b: examples.get(b) for b in sorted(branches)},
            'updates': {b: (examples[b] / b if b in examples else None) for b in sorted(branches)},
            's_min': None, 'e_min': None, 'b_crit': None, 'shape': None, 'interval': None,
            'fit_scatter': None, 'fitted_draws': 0, 'draws': draws}
  base_noise = curve_noise(raw[base][1][anchored:])
  result['noise'] = base_noise
  inside = [(x, y) for x, y in zip(*raw[base]) if x <= window + 1e-9]
  if not made_progress(inside) or not start > target:
    monotone, _, fall, error = progress_of(inside)
    result.update(measured=False, why=(
        f'the 1x branch\'s loss went from {start:.4g} to {target:.4g} over its window, a fall '
        f'of less than {MIN_PROGRESS_IN_NOISE:g}x its looks\' noise (±{base_noise:.2g}) and '
        f'than {MIN_PROGRESS_IN_ERRORS:g} standard errors of its trend (±{error:.2g})'))
    return result
  steps = {b: e / b for b, e in examples.items()}
  fitted = critical_fit(steps, relative=True)
  scatter = []
  if fitted is None:
    result['shape'] = fit_shape(steps, relative=True)
  else:
    s_min, b_crit = fitted
    result.update(s_min=s_min, e_min=s_min * b_crit, b_crit=b_crit)
    scatter = fit_scatter(steps, s_min, b_crit)
    if scatter:
      result['fit_scatter'] = math.sqrt(sum(r * r for r in scatter) / len(scatter))
  rng = random.Random(seed)
  values = []
  # Each draw's updates to its target, before the fit's scatter: what the whole run's
  # draws are summed from (whole_run).
  result['drawn_updates'] = drawn_updates = []
  for _ in range(draws):
    curves = {}
    for batch, (xs, _) in raw.items():
      fy = smooth[batch][1]
      ys = [f + rng.choice(pooled) if pooled else f for f in fy[anchored:]]
      curves[batch] = (xs, _smooth(fy[:anchored] + ys, anchored))
    _, drawn = _crossings(curves, base, window)
    drawn_updates.append({b: e / b for b, e in drawn.items()})
    values.append(_scattered_value(drawn_updates[-1], scatter, rng))
  result['interval'], result['fitted_draws'] = _interval(values, draws)
  return result


def fit_scatter(steps, s_min, b_crit):
  """The fit's relative residuals, widened by √(n/(n − 2)) for its two parameters ([] for two).

  They hold every source of scatter in S(B) about the law (the data order,
  the trajectory, the evaluations); a bootstrap draw multiplies each S by
  one plus one of them (:func:`_scattered_value`).
  """
  if len(steps) <= 2:
    return []
  widen = math.sqrt(len(steps) / (len(steps) - 2))
  return [widen * (s / (s_min * (1 + b_crit / b)) - 1) for b, s in steps.items()]


def _scattered_value(steps, scatter, rng):
  """A draw's B_crit (:func:`_draw_value`) from its updates, each times one plus a drawn residual."""
  scattered = {b: s * (1 + (rng.choice(scatter) if scatter else 0.0)) for b, s in steps.items()}
  return _draw_value({b: s for b, s in scattered.items() if s > 0})


def _interval(values, draws):
  """``([5th, 95th percentile] or None, fitted draws)`` of the draws' values (None: no fit).

  None unless at least half of the ``draws`` fitted.
  """
  fitted = sorted(v for v in values if v is not None)
  if not fitted or len(fitted) < draws / 2:
    return None, len(fitted)
  return [_quantile(fitted, INTERVAL_TAIL), _quantile(fitted, 1 - INTERVAL_TAIL)], len(fitted)


def run_updates(points, base, updates_key='updates'):
  """The whole run's updates at each batch, as a share of the 1x run's: ``{batch: S(B)/N}``.

  The run's part a point stands for (its ``share`` a_i of the run's N
  updates at the 1x batch B0) takes a_i·N·S_i(B)/S_i(B0) updates at batch B,
  where S_i is the point's updates to its target; the run's S(B) is the sum
  over the parts. Only batches every point reached count: a part that did
  not reach its target at B leaves the run's S(B) unknown.

  Args:
    points: dicts with ``share`` and ``updates_key``: ``{batch: updates or None}``
      (batches as ints or strings).
    base: the 1x batch.
    updates_key: the key of the updates in each point.
  """
  per_point = [{int(b): u for b, u in p[updates_key].items() if u} for p in points]
  if not per_point or any(base not in u for u in per_point):
    return {}
  common = set.intersection(*(set(u) for u in per_point))
  return {b: sum(p['share'] * u[b] / u[base] for p, u in zip(points, per_point))
          for b in sorted(common)}


def whole_run(points, base, draws=BOOTSTRAP_DRAWS, seed=0):
  """The critical batch of the whole run, with its interval, from the parts' updates summed.

  The run's S(B) is the sum of its parts' (:func:`run_updates`), and its
  B_crit the fit of S(B) = S_min·(1 + B_crit/B) to it, as a study fits whole
  runs at fixed batches. Where every part follows McCandlish's model, the sum
  does exactly: S_min = Σ n_i/(1 + B_crit,i/B0), S_min·B_crit = Σ E_min,i,
  so the run's B_crit is Σ E_min,i / Σ S_min,i. Fitted once over the sum, a
  part whose updates still halve at its largest batch, or whose own fit is
  wide, weighs in by its share of the run's updates and no more: at large
  batches the parts that speed up least make up most of the run's updates.

  The interval is over the points' bootstrap draws (``drawn_updates``, the
  i-th of each point summed into the i-th draw of the run), each S(B) times
  one plus a relative residual of the run's fit drawn at random (widened by
  √(n/(n − 2)), none with two batches), as :func:`measure_point` does for one
  point; a draw with no fit counts as ∞ or 0. Where that leaves it open above,
  the branches that ran at larger batches without reaching their target
  give its upper end (:func:`_censored_high`).

  Args:
    points: dicts with ``share``, ``updates`` and, for the interval,
      ``drawn_updates`` (a list of ``{batch: updates}``, one per draw) and
      ``updates_read`` (``{batch: updates each branch made}``).
    base: the 1x batch.
    draws, seed: the run's bootstrap (the scatter's draws).

  Returns:
    A dict: ``updates`` (:func:`run_updates`), ``b_crit`` and ``s_min``
    (None without a fit, ``shape`` saying why), ``at_least`` (the largest
    batch every part reached, where the run's updates still halve there),
    ``interval`` ``[low, high]`` (None when fewer than half the draws fit or
    the points have no draws), ``high_censored`` (its upper end from the
    branches that did not reach their target).
  """
  steps = run_updates(points, base)
  result = {'updates': steps, 'b_crit': None, 's_min': None, 'shape': None, 'at_least': None,
            'interval': None, 'fitted_draws': 0, 'high_censored': False}
  fitted = critical_fit(steps, relative=True)
  if fitted is None:
    result['shape'] = fit_shape(steps, relative=True)
    if result['shape'] == 'no_level':
      result['at_least'] = max(steps)
    return result
  s_min, b_crit = fitted
  result.update(s_min=s_min, b_crit=b_crit)
  scatter = fit_scatter(steps, s_min, b_crit)
  drawn = [p.get('drawn_updates') or [] for p in points]
  count = min(len(d) for d in drawn)
  if not count:
    return result
  rng = random.Random(seed)
  values = []
  count = min(count, draws)
  for i in range(count):
    one = run_updates([{'share': p['share'], 'draw': d[i]} for p, d in zip(points, drawn)],
                      base, 'draw')
    values.append(_scattered_value({b: s for b, s in one.items() if b in steps}, scatter, rng))
  result['interval'], result['fitted_draws'] = _interval(values, count)
  if result['interval'] and math.isinf(result['interval'][1]):
    high = _censored_high(points, drawn, base, steps, scatter, rng, count)
    if high is not None:
      result['interval'][1] = high
      result['high_censored'] = True
  return result


def _censored_high(points, drawn, base, steps, scatter, rng, count):
  """An upper end for an interval open above, from the branches that did not reach their target.

  A branch that ran without reaching its point's target (by the end of its
  cap, or in a draw whose curve did not cross) took more updates than it
  made (``updates_read``): counted as reaching the target at its last look,
  its S is too small, which can only steepen the run's S(B) at that batch
  and raise the fitted B_crit. So the 95th percentile of the draws with
  those branches in (at every batch each point ran) bounds the run's from
  above; None where no point says what it ran or it adds no batch.
  """
  reads = [{int(b): u for b, u in (p.get('updates_read') or {}).items() if u} for p in points]
  if not all(reads):
    return None
  ran = set.intersection(*(set(r) for r in reads))
  if not ran - set(steps) or base not in ran:
    return None
  values = []
  for i in range(count):
    one = run_updates([{'share': p['share'], 'draw': {b: d[i].get(b) or r[b] for b in ran}}
                       for p, d, r in zip(points, drawn, reads)], base, 'draw')
    values.append(_scattered_value(one, scatter, rng))
  interval, _ = _interval(values, count)
  return None if interval is None or math.isinf(interval[1]) else interval[1]


def point_shares(fractions):
  """The share of the run each point stands for: from midway to its neighbours, the ends included."""
  cuts = [0.0] + [(a + b) / 2.0 for a, b in zip(fractions, fractions[1:])] + [1.0]
  return [cuts[i + 1] - cuts[i] for i in range(len(fractions))]


def growing_schedule(points, base, max_batch):
  """A ``batch_policy: steps`` schedule from the points: ``(batches, boundaries)`` or None.

  From each point's step on, the batch is the largest power-of-two multiple
  of ``base`` not above the lower end of that point's interval (its estimate
  without one) nor ``max_batch``, and never smaller than the batch before
  it; a point without a measurement keeps the batch before it. Points that
  keep the batch add no boundary.

  Args:
    points: dicts with ``step``, ``b_crit``, ``interval``, in step order.
    base: the run's starting global batch.
    max_batch: the largest batch the schedule may name.
  """
  batches, boundaries = [base], []
  for point in points:
    if point.get('b_crit') is None:
      continue
    bound = point['interval'][0] if point.get('interval') else point['b_crit']
    batch = base
    while batch * 2 <= min(bound, max_batch):
      batch *= 2
    if batch > batches[-1]:
      if point['step'] <= 0:
        batches[-1] = batch
        continue
      batches.append(batch)
      boundaries.append(int(point['step']))
  if len(batches) == 1:
    return None
  return batches, boundaries
