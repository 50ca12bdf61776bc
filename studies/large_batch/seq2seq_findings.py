"""What the archived runs of the sequence-to-sequence study measure, as numbers.

The findings of docs/large_batch_seq2seq.md are read from the runs here and
returned as data (rates, ratios, WER points, batches), never as sentences:
studies/large_batch/seq2seq_report.py lays them out as the tables of the
page's findings block, and the page's own prose reads those tables. A
finding a run has not measured yet is None. The small readers of the runs the
findings share with the page's results table (the chosen runs at a batch, a
sweep's label) live here too.
"""

import math

from framework.sweep import report
from studies.large_batch import seq2seq_plan as plan
from studies.large_batch import study
from studies.large_batch.critical_fit import critical_fit

KEY = study.GLOBAL_BATCH


# Past 32x each arm runs once, at its chosen rate at 8192 (both seeds) by the
# square-root rule; only the best arm at 8192 gets a grid there.
UNTUNED = ' (one rate, not tuned)'


def untuned(runs, sweep, batch):
  """UNTUNED past 32x where ``sweep`` ran one rate at ``batch``, else ''."""
  rates = {study.rate_key(r.get('lr')) for r in study.at_value(runs, sweep, KEY, batch)}
  return UNTUNED if batch in plan.BEYOND and len(rates) == 1 else ''


def label(sweep):
  """The page's name of a sweep: ``LAMB``, ``LAMB, half the epochs``, ``LAMB, warm-up 5 %``."""
  for arm in plan.ARMS:
    if sweep == arm.name:
      return arm.label
    if sweep == arm.name + '_half':
      return f'{arm.label}, half the epochs'
    if sweep.startswith(arm.name + plan.WARMUP_SUFFIX):
      fraction = study.number(sweep[len(arm.name + plan.WARMUP_SUFFIX):])
      return f'{arm.label}, warm-up {fraction * 100:g} %' if fraction is not None else sweep
  return sweep


def percent(values, digits=2):
  """``mean ± std`` of fractions, in %; 'n/a' for none.

  The mean is of the fractions, as the page's other lines take theirs, so a mean
  reads the same in the table and in the targets.
  """
  return report.mean_std_text(values, digits, scale=100.0)


def members_at(runs, sweep, batch):
  """The chosen runs (the rate of best mean test WER) of ``sweep`` at ``batch``."""
  return study.chosen(study.at_value(runs, sweep, KEY, batch), study.WER)


def mean_wer(runs, sweep, batch):
  """The mean test WER of ``sweep``'s chosen runs at ``batch``, or None."""
  return study.metric_mean(members_at(runs, sweep, batch), study.WER)


def tuned_rate(runs, sweep, batch):
  """The rate of ``sweep``'s best seed-0 run at ``batch``, or None before a run there.

  Seed 0 alone, as the study's plan centres the larger batches' grids on it
  (``seq2seq_plan.plan``): a second seed at the best rate can change which
  rate has the best mean, not the centre the grids were given.
  """
  seed0 = [r for r in study.at_value(runs, sweep, KEY, batch) if r['seed'] == 0]
  members = study.chosen(seed0, study.WER)
  return members[0]['lr'] if members else None


def slope(points):
  """The least-squares slope of log(y) against log(x); None for fewer than two distinct x."""
  points = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
  if len({x for x, _ in points}) < 2:
    return None
  mx = sum(x for x, _ in points) / len(points)
  my = sum(y for _, y in points) / len(points)
  return (sum((x - mx) * (y - my) for x, y in points)
          / sum((x - mx) ** 2 for x, _ in points))


def ranking(runs, batch):
  """``[(mean test WER, arm label), ...]`` at ``batch``, best first; None until every arm ran there."""
  means = sorted((mean, arm.label) for arm in plan.ARMS
                 if (mean := mean_wer(runs, arm.name, batch)) is not None)
  return means if len(means) == len(plan.ARMS) else None


def rates_inside(runs, arm):
  """``{batch: rate}``: the arm's chosen rate where a grid of 3 or more rates holds it inside."""
  inside = {}
  for batch in plan.BATCHES + plan.BEYOND:
    tried = sorted({r['lr'] for r in study.at_value(runs, arm.name, KEY, batch)
                    if r.get('lr') is not None})
    members = [r for r in members_at(runs, arm.name, batch) if r['status'] == 'ok']
    if members and len(tried) >= 3 and tried[0] < members[0]['lr'] < tried[-1]:
      inside[batch] = members[0]['lr']
  return inside


def rate_exponent(runs, arm):
  """x of lr ∝ B^x fitted to :func:`rates_inside`, or None for fewer than two batches."""
  return slope(sorted(rates_inside(runs, arm).items()))


def rule_ratios(runs, arm):
  """``{batch: chosen rate / (chosen rate at 256 × sqrt(B/256))}`` at each larger batch with a grid.

  Past 32x only a grid's best rate says where the rate belongs, not one run's.
  """
  small = members_at(runs, arm.name, plan.SMALL)
  if not small or small[0].get('lr') is None:
    return {}
  ratios = {}
  for batch in plan.BATCHES[1:] + plan.BEYOND:
    members = members_at(runs, arm.name, batch)
    if members and members[0].get('lr') is not None and not untuned(runs, arm.name, batch):
      ratios[batch] = members[0]['lr'] / (small[0]['lr'] * math.sqrt(batch / plan.SMALL))
  return ratios


def warmup_wers(runs, name):
  """``{fraction: seed 0's test WER or None}`` of ``name`` at 8192 at its chosen rate, the recipe's first.

  The warm-ups run with seed 0: the recipe's is its seed 0, not its mean.
  """
  recipe = [r for r in members_at(runs, name, plan.LARGE) if r['seed'] == 0]
  wers = {plan.WARMUP_FRACTION: study.metric_mean(recipe, study.WER)}
  prefix = name + plan.WARMUP_SUFFIX
  tried = {study.number(r['arm'][len(prefix):]) for r in runs if r['arm'].startswith(prefix)}
  for fraction in sorted(tried.union(plan.WARMUPS) - {None}):
    wers[fraction] = study.metric_mean(
        study.at_value(runs, plan.warmup_sweep(name, fraction), KEY, plan.LARGE), study.WER)
  return wers


def best_warmup(wers):
  """The fraction of the lowest WER among ``warmup_wers``' finished ones, or None."""
  done = {fraction: wer for fraction, wer in wers.items() if wer is not None}
  return min(done, key=done.get) if done else None


def seed_spread(runs, name):
  """How far apart the seeds of ``name``'s chosen runs at 8192 are (a fraction), or None below two.

  The scale a warm-up's change is read on: two seeds of the same setting.
  """
  seeds = [r['wer'] for r in members_at(runs, name, plan.LARGE)
           if r['status'] == 'ok' and r.get('wer') is not None]
  return max(seeds) - min(seeds) if len(seeds) >= 2 else None


def warmup_gain(runs, name):
  """``(best fraction, recipe's WER - best's WER)`` at 8192, seed 0, or None before every warm-up ran."""
  wers = warmup_wers(runs, name)
  if any(wer is None for wer in wers.values()):
    return None
  best = best_warmup(wers)
  return best, wers[plan.WARMUP_FRACTION] - wers[best]


def rate_tuning_gain(runs, arm):
  """``(rule's rate, its mean WER - the tuned rate's)`` at 8192, or None before both ran.

  The rule's rate is the grid's centre: the arm's tuned rate at 256 by the
  square-root rule.
  """
  members = study.at_value(runs, arm.name, KEY, plan.LARGE)
  middle = plan.centre(arm, plan.LARGE, lambda name, batch: tuned_rate(runs, name, batch))
  at_centre = study.metric_mean([r for r in members if study.rate_key(r.get('lr'))
                                 == study.rate_key(middle)], study.WER)
  tuned = mean_wer(runs, arm.name, plan.LARGE)
  if middle is None or at_centre is None or tuned is None:
    return None
  return middle, at_centre - tuned


def steps_by_batch(runs, arm):
  """``{batch: S(B)}``: the fewest updates to the target of ``arm`` at each batch that reached it."""
  steps = {}
  for batch in plan.BATCHES + plan.BEYOND:
    value = study.steps_to_target(study.at_value(runs, arm.name, KEY, batch))
    if value is not None:
      steps[batch] = value
  return steps


def efficiency(runs, arm):
  """``{batch: S(256)·256 / (S(B)·B)}``: the words batch 256 needs to the target over those B needs.

  1 is perfect scaling, 0.5 twice the words; at each batch above 256 that
  reached the target, when 256 did.
  """
  steps = steps_by_batch(runs, arm)
  if plan.SMALL not in steps:
    return {}
  base = steps[plan.SMALL] * plan.SMALL
  return {b: base / (s * b) for b, s in sorted(steps.items()) if b != plan.SMALL}


def critical(runs, arm):
  """``(S_min, B_crit or None, batches fitted)`` of S(B) = S_min·(1 + B_crit/B); None below two batches.

  B_crit is None when the updates do not level off as the batch grows (no fit).
  """
  steps = steps_by_batch(runs, arm)
  if len(steps) < 2:
    return None
  fit = critical_fit(steps)
  return (None, None, tuple(steps)) if fit is None else (fit[0], fit[1], tuple(steps))


def cost_ratios(runs):
  """``{batch: Muon's mean wall seconds per update over AdamW's}`` where both ran on one machine."""
  timing = study.timing_machine(runs)
  ratios = {}
  for batch in plan.BATCHES + plan.BEYOND:
    per = {}
    for name in ('muon', 'adamw'):
      values = [r['wall_s'] / r['steps'] for r in study.at_value(runs, name, KEY, batch)
                if r['status'] == 'ok' and r.get('steps') and r.get('machine') == timing]
      if values:
        per[name] = sum(values) / len(values)
    if len(per) == 2:
      ratios[batch] = per['muon'] / per['adamw']
  return ratios
