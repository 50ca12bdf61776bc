"""The page of the sequence-to-sequence large-batch study, written from its archived runs alone.

  .venv/bin/python scripts/large_batch/seq2seq_report.py \\
      [--archive docs/results/large_batch_seq2seq] [--page docs/large_batch_seq2seq.md]

Reads every archived run (``ARCHIVE/<sweep>/<point>.json``, a failed one's
``<point>.error``) of scripts/large_batch/seq2seq_study.py and puts between the
page's ``<!-- seq2seq_study: begin -->`` and ``<!-- seq2seq_study: end -->``
lines: the table (per batch and arm, the chosen rate's final test WER, mean ±
std over seeds, its PER, the gap to the best batch-256 result, tokens per
batch, updates and wall time to the target dev WER), the tuning grids, the
targets, the steps-to-result figure (``docs/images/large_batch_seq2seq_steps.png``:
updates to first reach the target dev WER against the batch, log-log, with
the line of perfect scaling; ``..._wall.png`` beside it, the wall time to
that WER) and the recipe, each number from the runs; a
point not yet run says so. Nothing on the page is typed in by hand.
"""

import argparse
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from framework.sweep import report  # noqa: E402  pylint: disable=wrong-import-position
from scripts.large_batch import report as study_report  # noqa: E402  pylint: disable=wrong-import-position
from scripts.large_batch import seq2seq_plan as plan  # noqa: E402  pylint: disable=wrong-import-position
from scripts.large_batch import study  # noqa: E402  pylint: disable=wrong-import-position
from scripts.large_batch import targets  # noqa: E402  pylint: disable=wrong-import-position

BEGIN = '<!-- seq2seq_study: begin -->'
END = '<!-- seq2seq_study: end -->'
KEY = study.GLOBAL_BATCH
# The dev WER whose first reaching counts the updates of the steps-to-result
# figure, fixed before the study ran: the main job's larger model is at 62 %
# after 2 of its 10 epochs (configs/cmudict_transformer_lamb.py).
TARGET_WER = 0.6
# LAMB at 32x within this many WER points of the best batch-256 result (the study's target).
CLAIM_POINTS = 1.0
# The budget is large enough when the best batch-256 arm gains less than this from half to all.
BUDGET_POINTS = 0.3
SEEDS_WANTED = 2
FIGURE = os.path.join('docs', 'images', 'large_batch_seq2seq_steps.png')


# Past 32x each arm runs once, at its chosen rate at 8192 (both seeds) by the
# square-root rule; only the best arm at 8192 gets a grid there.
UNTUNED = ' (one rate, not tuned)'


def untuned(runs, sweep, batch):
  """UNTUNED past 32x where ``sweep`` ran one rate at ``batch``, else ''."""
  rates = {study.rate_key(r.get('lr')) for r in study.at_value(runs, sweep, KEY, batch)}
  return UNTUNED if batch in plan.BEYOND and len(rates) == 1 else ''


def read(archive, target=TARGET_WER):
  """Every archived run, labelled by its sweep (``lamb``, ``lamb_half``, ...)."""
  return plan.Results(archive, target).runs


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


def reference(runs):
  """``(sweep, mean WER, runs)`` of the best arm at batch 256, each at its chosen rate, or None."""
  return study.best_arm(runs, KEY, [a.name for a in plan.ARMS], plan.SMALL, study.WER)


def batch_text(batch):
  micro, iter_size = plan.micro_batches(batch)
  return f'{batch}' + (f' ({micro} × {iter_size})' if iter_size > 1 else '')


def table(runs, target):
  """The main table: a row per batch and arm, every point of the plan (not yet run ones too)."""
  best = reference(runs)
  timing = study.timing_machine(runs)
  cells = []
  for batch in plan.BATCHES + plan.BEYOND:
    for arm in plan.ARMS:
      members = members_at(runs, arm.name, batch)
      ok = [r for r in members if r['status'] == 'ok']
      head = [batch_text(batch), f'{batch * plan.TOKENS_PER_WORD / 1000:.1f} K', arm.label]
      if not members:
        cells.append(head + ['not yet run'] + [''] * 9)
        continue
      if not ok:
        cells.append(head + [f'{r["lr"]:g}' if r.get('lr') else 'n/a' for r in members[:1]]
                     + [f'0/{len(members)}', 'failed'] + [''] * 7)
        continue
      mean = study.metric_mean(members, study.WER)
      gap = '' if best is None else f'{(mean - best[1]) * 100:+.2f}'
      timed = [r for r in ok if timing is None or r.get('machine') == timing] or ok
      per_update = [r['wall_s'] / r['steps'] for r in timed if r.get('steps')]
      cells.append(head + [
          f'{ok[0]["lr"]:g}' + untuned(runs, arm.name, batch), f'{len(ok)}/{len(members)}',
          percent([r['wer'] for r in ok]),
          percent([r.get('per') for r in ok]), gap, str(ok[0].get('steps')),
          _reached(ok, 'steps_to_target'), _reached(timed, 'seconds_to_target'),
          report.mean_std_text([r['wall_s'] for r in timed], 0),
          report.mean_std_text(per_update, 2)])
  columns = ['batch (words)', 'tokens per batch', 'arm', 'learning rate', 'seeds',
             'test WER (%)', 'test PER (%)', 'gap (WER points)', 'updates',
             f'updates to {target * 100:g} % dev WER', f'wall to {target * 100:g} % (s)',
             'wall per run (s)', 'wall per update (s)']
  lines = report.table_lines(columns, cells)
  if best is not None:
    lines += ['', f'The gap is to the best batch-256 result, {label(best[0])} at '
                  f'{best[1] * 100:.2f} % test WER (positive: worse). Tokens per batch: words × '
                  f'{plan.TOKENS_PER_WORD} (the mean letters + phones with <s> and </s> of a '
                  'train pronunciation), before padding.']
  if timing is not None:
    lines += ['', f'Wall times are seconds on {timing} (shared with other jobs), evaluations '
                  'included.']
  return lines


def _reached(runs, field):
  values = [r[field] for r in runs if r.get(field) is not None]
  if not values:
    return 'not reached'
  text = report.mean_std_text(values, 0)
  return text if len(values) == len(runs) else f'{text} ({len(values)}/{len(runs)})'


def grids(runs):
  """The tuning grids: per batch and arm, each rate's seed-0 test WER, the chosen rate in bold."""
  cells = []
  for batch in plan.BATCHES + plan.BEYOND:
    for arm in plan.ARMS:
      members = study.at_value(runs, arm.name, KEY, batch)
      if not members:
        continue
      chosen = {r['logdir'] for r in members_at(runs, arm.name, batch)}
      texts = []
      for (_, lr), lr_runs in sorted(study.by_setting(members).items(),
                                     key=lambda item: item[0][1] or 0.0):
        wer = [r.get('wer') for r in lr_runs if r['status'] == 'ok' and r.get('wer') is not None]
        text = f'{lr:g}: ' + (percent(wer) if wer else 'failed')
        texts.append(f'**{text}**' if chosen & {r['logdir'] for r in lr_runs} else text)
      cells.append([str(batch), arm.label, '; '.join(texts) + untuned(runs, arm.name, batch)])
  if not cells:
    return []
  return ['', 'Tuning grids (rate: test WER in %, mean over seeds; the table\'s rate in bold):', '',
          *report.table_lines(['batch', 'arm', 'rates tried'], cells)]


def target_lines(runs):
  """Whether each arm at 32x is within ``CLAIM_POINTS`` of the best batch-256 result, and the budget."""
  best = reference(runs)
  lines = ['', 'Targets, from the runs above:', '']
  if best is None:
    lines.append('- the best result at batch 256: not yet run')
  else:
    lines.append(f'- the best result at batch 256: {label(best[0])}, {best[1] * 100:.2f} % test '
                 f'WER over {study.finished(best[2], study.WER)} seed(s)')
  for arm in plan.ARMS:
    result = targets.claim(runs, KEY, arm.name, plan.LARGE, CLAIM_POINTS, best, study.WER)
    line = f'- {arm.label} at {plan.LARGE} within {CLAIM_POINTS:g} WER point of it: '
    if result['mean'] is None:
      line += 'not yet run'
    elif result['gap'] is None:
      line += f'{result["mean"] * 100:.2f} %, no batch-256 result yet'
    else:
      line += (f'{result["mean"] * 100:.2f} % over {result["seeds"]} seed(s){result["setting"]}, '
               f'{-result["gap"]:+.2f} points: **{"met" if result["met"] else "missed"}**')
      if result['seeds'] < SEEDS_WANTED:
        line += f' (provisional: {result["seeds"]} of {SEEDS_WANTED} seeds)'
      wers = warmup_wers(runs, arm.name)
      warm = best_warmup(wers)
      if warm is not None and warm != plan.WARMUP_FRACTION and best is not None:
        line += (f'; with its best warm-up ({warm * 100:g} %, seed 0) {wers[warm] * 100:.2f} %, '
                 f'{(wers[warm] - best[1]) * 100:+.2f} points')
    lines.append(line)
  lines.append(budget_line(runs, best))
  failed = [r for r in runs if r['status'] != 'ok']
  if failed:
    lines += ['', 'Failed runs:', '']
    lines += [f'- {label(r["arm"])}, `{os.path.basename(r["logdir"])}`: {r["error"]}'
              for r in failed]
  return lines


def budget_line(runs, best):
  """How much the best batch-256 arm gains from half the epochs to all of them."""
  if best is None:
    return '- budget: not yet run'
  gain, full, half, setting = targets.budget_gain(runs, KEY, best[0], best[0] + '_half', plan.SMALL,
                                                  study.WER)
  if gain is None:
    return f'- budget: {label(best[0])} at 256 with half the epochs: not yet run'
  verdict = 'large enough' if gain < BUDGET_POINTS else 'too small'
  return (f'- budget: {label(best[0])} at 256 ({setting}) gains {gain:.2f} WER points from half '
          f'the epochs ({half} seed(s)) to all of them ({full} seed(s)); under {BUDGET_POINTS:g} '
          f'is enough: the budget is **{verdict}**')


def figures(runs, target, path):
  """The steps-to-result figure at ``path`` and the wall-time one beside it (``*_wall.png``).

  Returns:
    the paths drawn (none when no run reached the target).
  """
  wall = path[:-len('.png')] + '_wall.png' if path.endswith('.png') else path + '_wall.png'
  title = f'CMUdict, Transformer d128 2+2, {plan.EPOCHS:g} epochs'
  arms = [a.name for a in plan.ARMS]
  labels = {a.name: a.label for a in plan.ARMS}
  batches = list(plan.BATCHES + plan.BEYOND)  # the whole axis from the start, and its line
  drawn = []
  if study_report.plot_steps(runs, KEY, arms, path, title, target,
                             ylabel=f'updates to {target * 100:g} % dev WER',
                             xlabel='batch (words)', labels=labels, values=batches, bounds=True):
    drawn.append(path)
  if study_report.plot_steps(runs, KEY, arms, wall, title, target,
                             ylabel=f'wall seconds to {target * 100:g} % dev WER (one CPU)',
                             xlabel='batch (words)', field='seconds_to_target', perfect=False,
                             labels=labels, values=batches, bounds=True):
    drawn.append(wall)
  return drawn


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


def critical_fit(steps):
  """``(S_min, B_crit)`` of S(B) = S_min·(1 + B_crit / B) fitted to ``{batch: S(B)}``, or None.

  McCandlish et al. 2018: the updates to a result fall from S_min·B_crit/B
  (small batches, the words fixed) to S_min (large ones, the updates fixed);
  at B = B_crit a run needs twice the fewest updates and twice the fewest
  words. S is linear in 1/B, so the fit is least squares of S on 1/B (exact
  through two batches). None for fewer than two batches, or a fit whose
  S_min or B_crit is not positive (the updates do not level off as the model
  says).
  """
  if len(steps) < 2:
    return None
  xs = [1.0 / batch for batch in steps]
  ys = list(steps.values())
  mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
  slope_ = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
  s_min = my - slope_ * mx
  if s_min <= 0 or slope_ <= 0:
    return None
  return s_min, slope_ / s_min


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


def progress(archive):
  """How far the study is: runs archived, planned now, decided later, and the hours they took."""
  results = plan.Results(archive)
  steps = plan.plan(results)
  left = sum(1 for s in steps if isinstance(s, plan.Run) and results.get(s) is None)
  later = sum(1 for s in steps if isinstance(s, plan.Pending))
  hours = sum(r.get('wall_s') or 0.0 for r in results.runs) / 3600.0
  return (f'Progress: {len(results.runs)} run(s) archived ({hours:.1f} hours of this machine), '
          f'{left} more planned, and {later} step(s) whose runs the results decide (a grid '
          'that grows, a second seed, the budget and warm-up checks); '
          '`--dry-run` lists them.')


def page_block(runs, target, figure_paths=(), archive=None):
  """The generated block of the page (markdown)."""
  lines = ['']
  if archive is not None:
    lines += [progress(archive), '']
  lines += table(runs, target) + grids(runs) + target_lines(runs)
  alts = [f'updates to {target * 100:g} % dev WER against the batch, log-log',
          f'wall seconds to {target * 100:g} % dev WER against the batch, log-log']
  for alt, path in zip(alts, figure_paths):
    lines += ['', f'![{alt}]({path})']
  if figure_paths:
    lines += ['', 'The wall time is that of one CPU doing every update in turn: a batch that '
                  'needs fewer epochs to the target saves time here, one that only needs fewer '
                  'updates saves it on as many workers as the batch has micro-batches.']
  lines += [''] + recipe(runs, target) + ['']
  return '\n'.join(lines)


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--archive', default=plan.DEFAULT_ARCHIVE,
                      help='the archived runs (default %(default)s)')
  parser.add_argument('--page', default=os.path.join(ROOT, plan.PAGE),
                      help=f'the page to write into, between {BEGIN} and {END}')
  parser.add_argument('--figure', default=os.path.join(ROOT, FIGURE), help='the figure to write')
  parser.add_argument('--target-wer', type=float, default=TARGET_WER,
                      help='dev WER (a fraction) for the updates and wall time to result')
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if not os.path.isdir(args.archive):
    print(f'error: --archive {args.archive}: not a directory', file=sys.stderr)
    return 2
  runs = read(args.archive, args.target_wer)
  os.makedirs(os.path.dirname(os.path.abspath(args.figure)), exist_ok=True)
  drawn = figures(runs, args.target_wer, args.figure)
  links = [os.path.relpath(path, os.path.dirname(os.path.abspath(args.page))) for path in drawn]
  block = page_block(runs, args.target_wer, links, args.archive)
  try:
    study_report.write_into_doc(args.page, block, markers=(BEGIN, END))
  except (OSError, ValueError) as exc:
    print(f'error: --page: {exc}', file=sys.stderr)
    return 2
  print(block)
  print(f'wrote {args.page}' + (f' and {", ".join(drawn)}' if drawn
                                 else ' (no run reached the target WER: no figure)'))
  return 0


if __name__ == '__main__':
  sys.exit(main())
