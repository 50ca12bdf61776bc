"""What the archived runs of the sequence-to-sequence study say: the page's recipe and its findings.

The recipe (:func:`recipe`) is the page's last section, in sentences each of
whose numbers comes from the runs: the optimizer, how the tuned rate grows with
the batch, what the warm-up is worth, scaling efficiency, the critical batch and
the cost of an update. The small readers of the runs it shares with the page's
table (the chosen runs at a batch, a sweep's label) live here too;
studies/large_batch/seq2seq_report.py writes the page.
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


def recipe(runs, target):
  """The recipe's lines, each number from the runs (``not yet run`` where they say nothing yet)."""
  lines = ['### What the runs say: a recipe for scaling the batch', '']
  # The learning rate: how the tuned rate grows with the batch, where the grid holds it inside.
  rule = []
  for arm in plan.ARMS:
    inside = []
    for batch in plan.BATCHES + plan.BEYOND:
      tried = sorted({r['lr'] for r in study.at_value(runs, arm.name, KEY, batch)
                      if r.get('lr') is not None})
      members = [r for r in members_at(runs, arm.name, batch) if r['status'] == 'ok']
      if members and len(tried) >= 3 and tried[0] < members[0]['lr'] < tried[-1]:
        inside.append((batch, members[0]['lr']))
    exponent = slope(inside)
    rates = ', '.join(f'{lr:g} at {batch}' for batch, lr in inside) or 'not yet run'
    rule.append(f'{arm.label}: {rates}'
                + (f' (lr ∝ B^{exponent:.2f})' if exponent is not None else ''))
  lines.append('- **Optimizer** (the best tuned arm at each batch, and its lead in WER points '
               'over the next): ' + optimizer_text(runs))
  lines.append('- **Learning rate.** The tuned rate, where its grid holds it inside: '
               + '; '.join(rule) + '. A slope of 0.5 is the square-root rule the grids at 8192 '
               'are centred on, 1 the linear rule.')
  lines.append('- **The square-root rule as a start** (the tuned rate over the arm\'s tuned '
               'rate at 256 × sqrt(B/256); 1 is the rule, 0.5 and 2 the neighbouring rates of '
               'a grid): ' + rule_text(runs))
  lines.append('- **Warm-up.** ' + warmup_text(runs))
  lines.append('- **What to tune first** (at batch 8192, in WER points): ' + worth_text(runs))
  lines.append('- **Where scaling stops** (the words batch 256 needs to reach '
               f'{target * 100:g} % dev WER over the words batch B needs, updates × batch: 1 is '
               'perfect scaling, 0.5 means twice the words): '
               + efficiency_text(runs))
  lines.append('- **Critical batch** (McCandlish et al. 2018: the batch at which a run needs '
               'twice the fewest updates and twice the fewest words; B_crit of S(B) = '
               'S_min·(1 + B_crit/B) fitted, by least squares of S on 1/B, to the updates to '
               f'{target * 100:g} % dev WER of the batches that reached it): '
               + critical_text(runs) + ' The updates are counted at the evaluations, every '
               'eighth of a run, and a batch that never reached the target is left out, so '
               'this is coarse.')
  lines.append('- **Cost per update** (wall seconds per update, evaluations included, Muon '
               'against AdamW at the same batch): ' + cost_text(runs) + ' These are whole runs '
               'on a shared machine, whose load varies from run to run; the strict turns below '
               'measure it better.')
  return lines


def optimizer_text(runs):
  """Per batch (tuned batches only), the best arm by mean test WER and its lead over the second."""
  parts = []
  for batch in plan.BATCHES:
    means = sorted((mean, arm.label) for arm in plan.ARMS
                   if (mean := study.metric_mean(members_at(runs, arm.name, batch),
                                                 study.WER)) is not None)
    if len(means) < len(plan.ARMS):
      parts.append(f'{batch}: not yet run')
      continue
    (best, name), (second, other) = means[:2]
    parts.append(f'{batch}: {name}, {(second - best) * 100:.2f} ahead of {other}')
  return '; '.join(parts) + '.'


def rule_text(runs):
  """Per arm, its tuned rate at each larger batch over its tuned rate at 256 by the square-root rule."""
  parts = []
  for arm in plan.ARMS:
    small = members_at(runs, arm.name, plan.SMALL)
    if not small or small[0].get('lr') is None:
      parts.append(f'{arm.label}: not yet run')
      continue
    ratios = []
    for batch in plan.BATCHES[1:] + plan.BEYOND:
      members = members_at(runs, arm.name, batch)
      # Past 32x only a grid's best rate says where the rate belongs, not one run's.
      if members and members[0].get('lr') is not None and not untuned(runs, arm.name, batch):
        rule = small[0]['lr'] * math.sqrt(batch / plan.SMALL)
        ratios.append(f'{members[0]["lr"] / rule:.2f} at {batch}')
    parts.append(f'{arm.label}: ' + (', '.join(ratios) or 'not yet run'))
  return '; '.join(parts) + '.'


def warmup_text(runs):
  """Test WER at 8192 of each arm at its chosen rate with each warm-up tried, the best arm first."""
  best = study.best_arm(runs, KEY, [a.name for a in plan.ARMS], plan.LARGE, study.WER)
  if best is None:
    return 'not yet run.'
  names = [best[0]] + [a.name for a in plan.ARMS if a.name != best[0]]
  return ' '.join(text for name in names if (text := arm_warmup_text(runs, name)))


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


def arm_warmup_text(runs, name):
  """One arm's warm-ups at 8192 against seed 0 of its chosen runs; '' before a run there."""
  recipe_runs = members_at(runs, name, plan.LARGE)
  if not recipe_runs:
    return ''
  wers = warmup_wers(runs, name)
  parts = [f'{fraction * 100:g} %' + (' (the recipe)' if fraction == plan.WARMUP_FRACTION else '')
           + ': ' + ('not yet run' if wer is None else f'{wer * 100:.2f} %')
           for fraction, wer in wers.items()]
  text = f'{label(name)} at 8192, seed 0, test WER by warm-up: ' + '; '.join(parts) + '.'
  # How far apart two seeds of the same setting are: the scale a warm-up's change is read on.
  seeds = [r['wer'] for r in recipe_runs if r['status'] == 'ok' and r.get('wer') is not None]
  if len(seeds) >= 2:
    text += (f' Its {len(seeds)} seeds at the recipe\'s warm-up differ by '
             f'{(max(seeds) - min(seeds)) * 100:.2f} points.')
  best = best_warmup(wers)
  if best in plan.WARMUP_LIMITS:
    text += (f' Its best is the {"longest" if best == max(plan.WARMUP_LIMITS) else "shortest"} '
             f'warm-up the study tries ({best * 100:g} %): past it may be better still.')
  return text


def worth_text(runs):
  """What each choice was worth at 8192: the rate (tuned against the rule), the warm-up, the optimizer."""
  parts = []
  for arm in plan.ARMS:
    members = study.at_value(runs, arm.name, KEY, plan.LARGE)
    middle = plan.centre(arm, plan.LARGE, lambda name, batch: tuned_rate(runs, name, batch))
    at_centre = study.metric_mean([r for r in members if study.rate_key(r.get('lr'))
                                   == study.rate_key(middle)], study.WER)
    tuned = study.metric_mean(members_at(runs, arm.name, plan.LARGE), study.WER)
    if middle is None or at_centre is None or tuned is None:
      parts.append(f'tuning {arm.label}\'s rate: not yet run')
    else:
      parts.append(f'tuning {arm.label}\'s rate (against its rate at 256 by the square-root '
                   f'rule, {middle:g}): {(at_centre - tuned) * 100:.2f}')
  for arm in plan.ARMS:
    wers = warmup_wers(runs, arm.name)
    recipe = wers[plan.WARMUP_FRACTION]
    if recipe is None or any(wer is None for wer in wers.values()):
      parts.append(f'the warm-up of {arm.label}: not yet run')
      continue
    best = best_warmup(wers)
    parts.append(f'the warm-up of {arm.label} (its best tried, {best * 100:g} %, against the '
                 f'recipe\'s {plan.WARMUP_FRACTION * 100:g} %, seed 0): '
                 f'{(recipe - wers[best]) * 100:.2f}')
  means = {arm.label: study.metric_mean(members_at(runs, arm.name, plan.LARGE), study.WER)
           for arm in plan.ARMS}
  known = {name: mean for name, mean in means.items() if mean is not None}
  if len(known) == len(means):
    parts.append(f'the optimizer (worst tuned arm against the best): '
                 f'{(max(known.values()) - min(known.values())) * 100:.2f}')
  else:
    parts.append('the optimizer: not yet run')
  return '; '.join(parts) + '.'


def steps_by_batch(runs, arm):
  """``{batch: S(B)}``: the fewest updates to the target of ``arm`` at each batch that reached it."""
  steps = {}
  for batch in plan.BATCHES + plan.BEYOND:
    value = study.steps_to_target(study.at_value(runs, arm.name, KEY, batch))
    if value is not None:
      steps[batch] = value
  return steps


def efficiency_text(runs):
  """Per arm, S(256)·256 / (S(B)·B) at each batch where both reached the target."""
  parts = []
  for arm in plan.ARMS:
    steps = steps_by_batch(runs, arm)
    if plan.SMALL not in steps or len(steps) < 2:
      parts.append(f'{arm.label}: not yet run')
      continue
    base = steps[plan.SMALL] * plan.SMALL
    parts.append(f'{arm.label}: ' + ', '.join(f'{base / (s * b):.2f} at {b}'
                                              for b, s in sorted(steps.items()) if b != plan.SMALL))
  return '; '.join(parts) + '.'


def critical_text(runs):
  """Per arm, the fitted critical batch, its tokens and S_min, from the batches that reached the target."""
  parts = []
  for arm in plan.ARMS:
    steps = steps_by_batch(runs, arm)
    if len(steps) < 2:
      parts.append(f'{arm.label}: not yet run')
      continue
    fit = critical_fit(steps)
    batches = ', '.join(str(b) for b in steps)
    if fit is None:
      parts.append(f'{arm.label}: no fit (from {batches})')
      continue
    s_min, b_crit = fit
    parts.append(f'{arm.label}: {b_crit:.0f} words ({b_crit * plan.TOKENS_PER_WORD / 1000:.1f} K '
                 f'tokens), S_min {s_min:.0f} updates (from {batches})')
  return '; '.join(parts) + '.'


def cost_text(runs):
  """Muon's wall seconds per update over AdamW's, at each batch both ran on one machine."""
  timing = study.timing_machine(runs)
  ratios = []
  for batch in plan.BATCHES + plan.BEYOND:
    per = {}
    for name in ('muon', 'adamw'):
      values = [r['wall_s'] / r['steps'] for r in study.at_value(runs, name, KEY, batch)
                if r['status'] == 'ok' and r.get('steps') and r.get('machine') == timing]
      if values:
        per[name] = sum(values) / len(values)
    if len(per) == 2:
      ratios.append(f'{per["muon"] / per["adamw"]:.2f} at {batch}')
  return (', '.join(ratios) or 'not yet run') + '.'
