"""The tables of the sequence-to-sequence large-batch study's page, written from its archived runs alone.

  .venv/bin/python studies/large_batch/seq2seq_report.py \\
      [--archive docs/results/large_batch_seq2seq] [--page docs/large_batch_seq2seq.md]
  .venv/bin/python studies/large_batch/seq2seq_report.py --check   # exit 1 when the page is stale

Reads every archived run (``ARCHIVE/<sweep>/<point>.json``, a failed one's
``<point>.error``) of studies/large_batch/seq2seq_study.py and writes two
blocks of the page. Between ``<!-- seq2seq_study: begin -->`` and
``<!-- seq2seq_study: end -->``: the table (per batch and arm, the chosen
rate's final test WER, mean ± std over seeds, its PER, the gap to the best
batch-256 result, tokens per batch, updates and wall time to the target dev
WER), the tuning grids, the targets and the steps-to-result figure
(``docs/images/large_batch_seq2seq_steps.png``: updates to first reach the
target dev WER against the batch, log-log, with the line of perfect scaling;
``..._wall.png`` beside it, the wall time to that WER). Between
``<!-- seq2seq_findings: begin -->`` and ``<!-- seq2seq_findings: end -->``:
the findings as tables of numbers (studies/large_batch/seq2seq_findings.py),
which the page's prose around them reads. A point not yet run says so; no
number in either block is typed in by hand. ``--check`` draws and writes
nothing and says whether the page's blocks are those of the archive.
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from core import files  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep import report  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import figures as study_figures  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import seq2seq_findings as findings  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import seq2seq_plan as plan  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import study  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import targets  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_findings import KEY  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_findings import best_warmup  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_findings import label  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_findings import members_at  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_findings import percent  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_findings import untuned  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_findings import warmup_wers  # noqa: E402  pylint: disable=wrong-import-position

BEGIN = '<!-- seq2seq_study: begin -->'
END = '<!-- seq2seq_study: end -->'
FINDINGS_BEGIN = '<!-- seq2seq_findings: begin -->'
FINDINGS_END = '<!-- seq2seq_findings: end -->'
COMMAND = '.venv/bin/python studies/large_batch/seq2seq_report.py'
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


def read(archive, target=TARGET_WER):
  """Every archived run, labelled by its sweep (``lamb``, ``lamb_half``, ...)."""
  return plan.Results(archive, target).runs


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


def figures(runs, target, path, draw=True):
  """The steps-to-result figure at ``path`` and the wall-time one beside it (``*_wall.png``).

  Args:
    draw: False draws nothing and names the figures the runs would give.

  Returns:
    the paths drawn (none when no run reached the target).
  """
  wall = path[:-len('.png')] + '_wall.png' if path.endswith('.png') else path + '_wall.png'
  title = f'CMUdict, Transformer d128 2+2, {plan.EPOCHS:g} epochs'
  arms = [a.name for a in plan.ARMS]
  labels = {a.name: a.label for a in plan.ARMS}
  batches = list(plan.BATCHES + plan.BEYOND)  # the whole axis from the start, and its line
  drawn = []
  for figure, field, ylabel in (
      (path, 'steps_to_target', f'updates to {target * 100:g} % dev WER'),
      (wall, 'seconds_to_target', f'wall seconds to {target * 100:g} % dev WER (one CPU)')):
    if not study_figures.steps_series(runs, KEY, arms, batches, field):
      continue
    if draw:
      study_figures.plot_steps(runs, KEY, arms, figure, title, target, ylabel=ylabel,
                               xlabel='batch (words)', field=field,
                               perfect=field == 'steps_to_target', labels=labels, values=batches,
                               bounds=True)
    drawn.append(figure)
  return drawn


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
  lines.append('')
  return '\n'.join(lines)


NOT_MEASURED = '—'


def points(fraction):
  """A difference of WERs (fractions) in WER points, to two decimals."""
  return f'{fraction * 100:.2f}'


def findings_block(runs, target):
  """The findings block of the page: the numbers its prose reads, as four tables (markdown).

  By batch, the ranking of the tuned arms and Muon's cost per update; by arm
  and batch, the tuned rate and how far the words to ``target`` scale; by
  arm, the rate's growth and the critical batch; at 8192, what tuning the
  rate and the warm-up were worth. A cell the runs cannot fill is
  NOT_MEASURED, one they have not filled yet ``not yet run``.
  """
  lines = ['', *by_batch(runs), '', *by_arm_and_batch(runs, target), '', *by_arm(runs), '',
           *at_large_batch(runs), '']
  return '\n'.join(lines)


def by_batch(runs):
  """Per batch: the best tuned arm, its lead, the spread of the arms, and Muon's cost per update."""
  costs = findings.cost_ratios(runs)
  cells = []
  for batch in plan.BATCHES + plan.BEYOND:
    ranked = findings.ranking(runs, batch) if batch in plan.BATCHES else None
    if ranked:
      (best, name), (second, other) = ranked[:2]
      ranks = [name, points(second - best), other, points(ranked[-1][0] - best)]
    else:
      ranks = ['not yet run' if batch in plan.BATCHES else NOT_MEASURED] + [NOT_MEASURED] * 3
    cost = f'{costs[batch]:.2f}' if batch in costs else NOT_MEASURED
    cells.append([str(batch), *ranks, cost])
  return report.table_lines(
      ['batch (words)', 'best tuned arm', 'ahead by (WER points)', 'of', 'worst − best (WER points)',
       "Muon's wall per update over AdamW's"], cells)


def by_arm_and_batch(runs, target):
  """Per arm and batch: the tuned rate inside its grid, against the rule, and the words to ``target``."""
  cells = []
  for arm in plan.ARMS:
    inside = findings.rates_inside(runs, arm)
    ratios = findings.rule_ratios(runs, arm)
    scaled = findings.efficiency(runs, arm)
    for batch in plan.BATCHES + plan.BEYOND:
      cells.append([arm.label, str(batch),
                    f'{inside[batch]:g}' if batch in inside else NOT_MEASURED,
                    f'{ratios[batch]:.2f}' if batch in ratios else NOT_MEASURED,
                    f'{scaled[batch]:.2f}' if batch in scaled else NOT_MEASURED])
  return report.table_lines(
      ['arm', 'batch (words)', 'tuned rate, inside its grid', 'over the square-root rule',
       f'words 256 needs to {target * 100:g} % dev WER over those B needs'], cells)


def by_arm(runs):
  """Per arm: how the tuned rate grows with the batch, and the critical batch fitted to the runs."""
  cells = []
  for arm in plan.ARMS:
    exponent = findings.rate_exponent(runs, arm)
    fit = findings.critical(runs, arm)
    if fit is None:
      critical = ['not yet run'] + [NOT_MEASURED] * 3
    elif fit[1] is None:
      critical = ['no fit', NOT_MEASURED, NOT_MEASURED, ', '.join(map(str, fit[2]))]
    else:
      s_min, b_crit, batches = fit
      critical = [f'{b_crit:.0f}', f'{b_crit * plan.TOKENS_PER_WORD / 1000:.1f}', f'{s_min:.0f}',
                  ', '.join(map(str, batches))]
    cells.append([arm.label, NOT_MEASURED if exponent is None else f'{exponent:.2f}', *critical])
  return report.table_lines(
      ['arm', 'x of lr ∝ B^x', 'B_crit (words)', 'B_crit (K tokens)', 'S_min (updates)',
       'batches fitted'], cells)


def at_large_batch(runs):
  """Per arm at 8192: the rule's rate against the tuned one, and each warm-up's test WER (seed 0)."""
  wers = {arm.name: warmup_wers(runs, arm.name) for arm in plan.ARMS}
  fractions = sorted(set().union(*wers.values()))
  cells = []
  for arm in plan.ARMS:
    tuning = findings.rate_tuning_gain(runs, arm)
    spread = findings.seed_spread(runs, arm.name)
    gain = findings.warmup_gain(runs, arm.name)
    row = [arm.label] + (['not yet run', NOT_MEASURED] if tuning is None
                         else [f'{tuning[0]:g}', points(tuning[1])])
    for fraction in fractions:
      wer = wers[arm.name].get(fraction, NOT_MEASURED)
      row.append('not yet run' if wer is None else wer if wer == NOT_MEASURED else points(wer))
    row.append(NOT_MEASURED if spread is None else points(spread))
    if gain is None:
      row += ['not yet run', NOT_MEASURED]
    else:
      edge = {min(plan.WARMUP_LIMITS): ' (the shortest tried)',
              max(plan.WARMUP_LIMITS): ' (the longest tried)'}.get(gain[0], '')
      row += [f'{gain[0] * 100:g} %{edge}', points(gain[1])]
    cells.append(row)
  warmups = [f'WER, warm-up {f * 100:g} %' + (' (recipe)' if f == plan.WARMUP_FRACTION else '')
             for f in fractions]
  return report.table_lines(
      ['arm', 'rate by the square-root rule', 'WER points the tuned rate gains over it', *warmups,
       'seeds at the recipe differ by (points)', 'best warm-up', 'WER points it gains'], cells)


def page_with(text, results, numbers):
  """``text`` with its two blocks replaced: the results between BEGIN and END, the findings' numbers.

  Raises:
    ValueError: when the text lacks either pair of markers, in order.
  """
  for begin_marker, end_marker, block in ((BEGIN, END, results),
                                          (FINDINGS_BEGIN, FINDINGS_END, numbers)):
    begin, end = text.find(begin_marker), text.find(end_marker)
    if begin < 0 or end < begin:
      raise ValueError(f'no {begin_marker} ... {end_marker} block')
    text = text[:begin + len(begin_marker)] + '\n' + block + text[end:]
  return text


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--archive', default=plan.DEFAULT_ARCHIVE,
                      help='the archived runs (default %(default)s)')
  parser.add_argument('--page', default=os.path.join(ROOT, plan.PAGE),
                      help=f'the page to write into, between {BEGIN} and {END} and between '
                           f'{FINDINGS_BEGIN} and {FINDINGS_END}')
  parser.add_argument('--check', action='store_true',
                      help='draw and write nothing; exit 1 when the page is not the archive\'s')
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
  if not args.check:
    os.makedirs(os.path.dirname(os.path.abspath(args.figure)), exist_ok=True)
  drawn = figures(runs, args.target_wer, args.figure, draw=not args.check)
  links = [os.path.relpath(path, os.path.dirname(os.path.abspath(args.page))) for path in drawn]
  results = page_block(runs, args.target_wer, links, args.archive)
  numbers = findings_block(runs, args.target_wer)
  status = files.refresh_generated_page(
      args.page, lambda text: page_with(text, results, numbers), args.check, COMMAND)
  if status == 0 and not args.check:
    print(f'drew {", ".join(drawn)}' if drawn else 'no run reached the target WER: no figure')
  return status


if __name__ == '__main__':
  sys.exit(main())
