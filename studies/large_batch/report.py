"""Combine the sweeps of a study (one sweep directory per arm) into one table and one plot.

  python studies/large_batch/report.py --arm 'SGD, linear lr'=runs/large_batch/sgd \\
      --arm 'LARS'=runs/large_batch/lars --key batch_size_per_gpu --out runs/large_batch

Reads every finished point (``result.json``) and failed point (``error.txt``)
of each sweep directory written by ``scripts/sweep.py``, whichever sweep
invocation ran it (so seeds added later count), groups them by the value of
``--key`` and writes to ``--out``. A label given to several ``--arm``
directories makes one arm of all their runs, tuned over what tells them apart:
``--arm LARS=runs/lars --arm LARS=runs/lars_eeta0.004`` (the second swept with
``--set optimizer_params.eeta=0.004``) is LARS with its learning rate and eeta
tuned; its *setting* at each run is the learning rate and the ``--set``
overrides that differ between the directories.

- ``study.csv``: one row per run (arm, key value, seed, learning rate, metrics,
  updates and wall time to the target accuracy, wall time);
- ``study.md``: one row per arm and key value: mean ± std of the test accuracy
  over seeds, its gap to the best result at the smallest key value (or at
  ``--baseline``; of the ``--reference-arm`` arms, or of all), the
  learning rate, the updates, the updates and wall time to first reach
  ``--target`` test accuracy, and the wall time per run. Where an arm ran
  several settings at one key value (a tuning grid), the row is the setting
  with the best mean accuracy, and a second table lists the grid;
- ``study.png``: accuracy against the key, one line per arm, std error bars;
- ``steps.png``: updates to the target against the key, log-log, one line per
  arm (the ``--reference-arm`` arms where named; for a tuning grid, the fewest
  mean updates over its settings, as Shallue et al. 2019 measure steps
  to result), with the line of perfect scaling.

With ``--claim LABEL@VALUE<=POINTS`` (e.g. ``LARS@8192<=1.0``) and ``--budget
FULL=HALF``, lines under the table say whether each target is met: the arm's
mean at that value against the best reference result at ``--baseline``, and
how much the best arm at the baseline gains from half the epochs to all of
them, at its chosen setting (HALF's runs of the same rate and overrides but
``num_epochs``; the budget is large enough below ``--budget-points``); a target measured
on fewer than ``--seeds-wanted`` seeds is marked provisional.

The updates to the target come from the curve of evaluations each run's
result.json keeps (the first evaluation with ``A >= target``), the wall time
from the same evaluation's seconds, counted from the start of training.
"""

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from framework.sweep import report  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import figures  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import study  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import targets  # noqa: E402  pylint: disable=wrong-import-position

DOC_BEGIN = '<!-- study_report: begin -->'
DOC_END = '<!-- study_report: end -->'
SUMMARY_BEGIN = '<!-- study_report: summary begin -->'
SUMMARY_END = '<!-- study_report: summary end -->'


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--arm', action='append', required=True, metavar='LABEL=DIR',
                      help='a sweep directory and its label; repeatable, in table order; a '
                           'label repeated makes one arm of its directories, tuned over their '
                           '--set overrides')
  parser.add_argument('--key', required=True,
                      help=f'the swept config key to group by, or {study.GLOBAL_BATCH} '
                           '(batch_size_per_gpu x iter_size)')
  parser.add_argument('--out', required=True, help='where study.csv/.md/.png go')
  parser.add_argument('--title', default='', help='plot title')
  parser.add_argument('--target', type=float, default=study.DEFAULT_TARGET,
                      help='test accuracy (a fraction) for updates and time to accuracy')
  parser.add_argument('--baseline', type=float, metavar='VALUE',
                      help='the key value whose best mean accuracy the gaps are measured to '
                           '(default: the smallest of the runs; no gaps while it has no run)')
  parser.add_argument('--reference-arm', action='append', default=[], metavar='LABEL',
                      help='an arm whose results the gaps are measured to; repeatable '
                           '(default: every arm)')
  parser.add_argument('--doc', metavar='FILE.md',
                      help=f'also put the table into FILE.md, between the lines {DOC_BEGIN} '
                           f'and {DOC_END}')
  parser.add_argument('--summary', metavar='FILE.md',
                      help='also put the study at a glance (an accuracy matrix of arms and key '
                           f'values, and the targets) into FILE.md, between the lines '
                           f'{SUMMARY_BEGIN} and {SUMMARY_END}')
  parser.add_argument('--doc-images', metavar='PREFIX',
                      help='also copy the plots to PREFIX_accuracy.png and PREFIX_steps.png')
  parser.add_argument('--claim', action='append', default=[], metavar='LABEL@VALUE<=POINTS',
                      help="a target to check, e.g. 'LARS@8192<=1.0': LABEL at key VALUE within "
                           'POINTS percentage points of the best reference result at --baseline; '
                           'repeatable; each gets a line under the table')
  parser.add_argument('--budget', action='append', default=[], metavar='FULL=HALF',
                      help='two arm labels, the full epoch budget and half of it: the line under '
                           'the table gives how much FULL gains over HALF at --baseline, both at '
                           "FULL's chosen setting (HALF's runs may differ in num_epochs only); "
                           'repeatable')
  parser.add_argument('--budget-points', type=float, default=0.3, metavar='POINTS',
                      help='the budget is large enough when the best reference arm gains less '
                           'than this from half the epochs to all of them (default 0.3)')
  parser.add_argument('--seeds-wanted', type=int, default=2, metavar='N',
                      help='a target measured on fewer seeds than this is marked provisional')
  parser.add_argument('--best-lr', metavar='VALUE',
                      help='print only the learning rate with the best mean accuracy at this '
                           'key value (one --arm), and exit (status 3 when none finished)')
  parser.add_argument('--best-arm', metavar='VALUE',
                      help='print only the label of the arm with the best mean accuracy at this '
                           "key value (each at its best learning rate), and exit (status 3 when "
                           'none finished)')
  return parser.parse_args(argv)


def _reached_text(runs, field, digits):
  ok = [r for r in runs if r['status'] == 'ok']
  values = [r[field] for r in ok if r.get(field) is not None]
  if not values:
    return 'not reached' if ok else 'n/a'
  text = report.mean_std_text(values, digits)
  return text if len(values) == len(ok) else f'{text} ({len(values)}/{len(ok)} reached)'


def markdown(runs, key, arms, target=study.DEFAULT_TARGET, baseline=None, reference_arms=None):
  """The study's table: a row per key value and arm, then the tuning grids and failures.

  The gaps are to the best mean accuracy of ``reference_arms`` (default: all
  arms) at the key value ``baseline`` (default: the smallest the runs have).
  """
  percent = f'{target * 100:g} %'
  grouped = study.groups(runs, key)
  reference = study.best_at_smallest(runs, key, reference_arms or arms, baseline)
  timing = study.timing_machine(runs)
  cells, tuned = [], []
  for value in study.ordered_values(runs, key):
    for arm in arms:
      members = grouped.get((arm, value))
      if not members:
        continue
      if len(study.tuned(members)) > 1:
        tuned.append((value, arm, members))
      cells.append(_chosen_cells(value, arm, study.chosen(members), reference, timing))
  lines = report.table_lines([key, 'arm', 'learning rate', 'seeds ok', 'test accuracy',
                              'gap (points)', 'steps', f'steps to {percent}',
                              f'wall to {percent} (s)', 'wall (s) per run'], cells)
  if timing is not None:
    lines += ['', f'Wall times are seconds on {timing}, from the runs made there; † marks a '
                  'row timed only on another machine, or before machines were recorded.']
  if tuned:
    lines += ['', 'Tuning grids (the row above is the setting in bold; a setting without '
                  '`name=value` ran with its config\'s value):', '']
    lines += report.table_lines(
        [key, 'arm', 'learning rate', 'seeds ok', 'test accuracy', f'steps to {percent}'],
        [cells for value, arm, members in tuned for cells in _grid_cells(value, arm, members)])
  failed = [r for r in runs if r['status'] != 'ok']
  if failed:
    lines += ['', 'Failed runs:', '']
    lines += [f'- {r["arm"]}, `{os.path.basename(r["logdir"])}`: {r["error"]}' for r in failed]
  return '\n'.join(lines) + '\n'


def summary(runs, key, arms, baseline=None, reference_arms=None):
  """The study at a glance: a row per arm, a column per key value, the table's accuracy in %.

  A cell is the arm's chosen setting at that value, as in the table: the mean
  test accuracy ± its standard deviation over seeds (the mean alone for one
  seed) and, in brackets, the gap in points to the best result of
  ``reference_arms`` at ``baseline``; empty where the arm has no finished run,
  and an arm with none at all (an ablation still running) has no row.
  """
  grouped = study.groups(runs, key)
  reference = study.best_at_smallest(runs, key, reference_arms or arms, baseline)
  values = study.ordered_values(runs, key)
  cells = []
  for arm in arms:
    row = [arm]
    for value in values:
      members = study.chosen(grouped.get((arm, value), []))
      accuracy = [r['accuracy'] * 100.0 for r in members
                  if r['status'] == 'ok' and r['accuracy'] is not None]
      text = report.mean_std_text(accuracy, 2) if accuracy else ''
      if accuracy and reference is not None:
        text += f' ({(study.accuracy_mean(members) - reference) * 100:+.2f})'
      row.append(text)
    if any(row[1:]):
      cells.append(row)
  caption = ('Test accuracy (%) of each arm at its chosen setting, mean ± standard deviation '
             'over seeds (one seed where no ± is shown)')
  if reference is not None:
    at = study.baseline_value(runs, key, baseline)
    at = f'{study.number(at):g}' if study.number(at) is not None else at
    caption += (f'; in brackets, the gap in points to the best result at {key} {at} '
                f'({reference * 100:.2f} %)')
  return '\n'.join(report.table_lines(['arm'] + [str(v) for v in values], cells)
                   + ['', caption + '.']) + '\n'


def _chosen_cells(value, arm, rows, reference, timing=None):
  """The table cells of the chosen runs of one arm at one key value.

  The wall times are those of the runs on the machine ``timing``; where none
  ran there, those of the others, marked †.
  """
  ok = [r for r in rows if r['status'] == 'ok']
  timed = [r for r in ok if timing is None or r.get('machine') == timing]
  mark = ''
  if not timed:
    timed, mark = ok, ' †'
  walls = [r['wall_s'] for r in timed]
  settings = sorted({(r.get('setting') or (), study.rate_key(r['lr'])) for r in ok
                     if r.get('lr') is not None}, key=_setting_order)
  steps = sorted({r['steps'] for r in ok if r.get('steps') is not None})
  mean = study.accuracy_mean(rows)
  gap = 'n/a' if mean is None or reference is None else f'{(mean - reference) * 100:+.2f}'
  return [str(value), arm, '; '.join(study.setting_text(lr, setting) for setting, lr in settings)
          or 'n/a', f'{len(ok)}/{len(rows)}',
          report.mean_std_text([r['accuracy'] for r in ok]), gap,
          ', '.join(map(str, steps)) or 'n/a', _reached_text(rows, 'steps_to_target', 0),
          _reached_text(timed, 'seconds_to_target', 0) + (mark if walls else ''),
          report.mean_std_text(walls, 0) + (mark if walls else '')]


def _setting_order(setting_lr):
  """Sorts ``(setting, lr)`` pairs: by the overrides (the config's value first), then the lr."""
  setting, lr = setting_lr
  return ([(name, value is not None, study.number(value) or 0.0, str(value))
           for name, value in setting], -1.0 if lr is None else lr)


def _grid_cells(value, arm, members):
  """One row of cells per setting of a tuning grid, the chosen one in bold."""
  best = {r['logdir'] for r in study.chosen(members)}
  cells = []
  for (setting, lr), lr_runs in sorted(study.by_setting(members).items(),
                                       key=lambda item: _setting_order(item[0])):
    ok = [r for r in lr_runs if r['status'] == 'ok']
    label = study.setting_text(lr, setting)
    if best & {r['logdir'] for r in lr_runs} and lr is not None:
      label = f'**{label}**'
    cells.append([str(value), arm, label, f'{len(ok)}/{len(lr_runs)}',
                  report.mean_std_text([r['accuracy'] for r in ok]),
                  _reached_text(lr_runs, 'steps_to_target', 0)])
  return cells



def write_into_doc(path, table, images=(), markers=(DOC_BEGIN, DOC_END)):
  """Replaces the text between the two ``markers`` lines of ``path`` with ``table``.

  ``images``: ``(alt text, image path)`` pairs, linked after the table
  relative to the page.

  Raises:
    ValueError: when the file lacks the two lines, in that order.
  """
  with open(path, encoding='utf-8') as f:
    text = f.read()
  begin, end = text.find(markers[0]), text.find(markers[1])
  if begin < 0 or end < begin:
    raise ValueError(f'{path}: no {markers[0]} ... {markers[1]} block to write the table into')
  begin += len(markers[0])
  links = ''.join(f'\n![{alt}]({os.path.relpath(image, os.path.dirname(os.path.abspath(path)))})\n'
                  for alt, image in images)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(text[:begin] + '\n' + table + links + text[end:])


def read_arms(arm_texts, key, target):
  """``(labels, runs)`` of the ``--arm LABEL=DIR`` arguments, in their order.

  Raises:
    ValueError: an argument that is not LABEL=DIR or names no directory.
  """
  arms, runs = [], []
  for text in arm_texts:
    label, sep, directory = text.partition('=')
    if not sep or not label or not directory:
      raise ValueError(f'--arm {text!r}: expected LABEL=DIR')
    if not os.path.isdir(directory):
      raise ValueError(f'--arm {text!r}: {directory} is not a directory')
    if label not in arms:
      arms.append(label)
    runs += study.read_runs(label, directory, key, target)
  return arms, study.mark_settings(runs)


def copy_images(prefix, out, plotted, plotted_steps, target):
  """Copies the plots to ``PREFIX_accuracy.png`` and ``PREFIX_steps.png``; their (alt, path)."""
  images = []
  for name, alt, plotted_now in (('accuracy', 'test accuracy against batch size', plotted),
                                 ('steps', f'updates to {target * 100:g} % test accuracy '
                                           'against batch size', plotted_steps)):
    if plotted_now:
      image = f'{prefix}_{name}.png'
      shutil.copyfile(os.path.join(out, 'study.png' if name == 'accuracy' else 'steps.png'), image)
      images.append((alt, os.path.abspath(image)))
  return images


def checked_targets(args, arms):
  """``(claims, budgets)`` of the arguments; ValueError for a malformed one or a label not of ``arms``."""
  claims = [targets.parse_claim(text) for text in args.claim]
  budgets = [targets.parse_budget(text) for text in args.budget]
  named = ([('--reference-arm', label) for label in args.reference_arm]
           + [('--claim', label) for label, _, _ in claims]
           + [('--budget', label) for pair in budgets for label in pair])
  for flag, label in named:
    if label not in arms:
      raise ValueError(f'{flag} {label!r}: not an --arm label; labels: {", ".join(arms)}')
  return claims, budgets


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  try:
    arms, runs = read_arms(args.arm, args.key, args.target)
  except ValueError as exc:
    print(f'error: {exc}', file=sys.stderr)
    return 2
  try:
    claims, budgets = checked_targets(args, arms)
  except ValueError as exc:
    print(f'error: {exc}', file=sys.stderr)
    return 2
  if args.best_lr is not None:
    if len(arms) != 1:
      print('error: --best-lr takes exactly one --arm', file=sys.stderr)
      return 2
    lr = study.best_lr(runs, args.key, args.best_lr)
    if lr is None:
      return 3
    print(f'{lr:g}')
    return 0
  if args.best_arm is not None:
    best = study.best_arm(runs, args.key, arms, args.best_arm)
    if best is None:
      return 3
    print(best[0])
    return 0
  if not runs:
    print(f'error: no finished or failed runs under {", ".join(args.arm)}', file=sys.stderr)
    return 2
  os.makedirs(args.out, exist_ok=True)
  for run in runs:
    run['set'] = study.overrides_text(run['setting'])
  report.write_csv(runs, ['arm', args.key, 'seed', 'status', 'lr', 'set', 'accuracy', 'top5', 'loss',
                          'steps', 'steps_to_target', 'seconds_to_target', 'wall_s', 'machine',
                          'logdir', 'error'], os.path.join(args.out, 'study.csv'))
  table = markdown(runs, args.key, arms, args.target, args.baseline, args.reference_arm)
  target_text = ''.join(line + '\n' for line in targets.report_lines(
      runs, args.key, claims, budgets, args.baseline, args.reference_arm or arms,
      args.seeds_wanted, args.budget_points))
  table += target_text
  with open(os.path.join(args.out, 'study.md'), 'w', encoding='utf-8') as f:
    f.write(table)
  plotted = figures.plot(runs, args.key, arms, os.path.join(args.out, 'study.png'), args.title)
  # The steps figure compares optimizers at one budget: the reference arms only,
  # not a half-budget check or an ablation.
  plotted_steps = figures.plot_steps(runs, args.key, args.reference_arm or arms,
                             os.path.join(args.out, 'steps.png'),
                             args.title, args.target)
  images = (copy_images(args.doc_images, args.out, plotted, plotted_steps, args.target)
            if args.doc_images else [])
  glance = (summary(runs, args.key, arms, args.baseline, args.reference_arm) + target_text
            if args.summary else '')
  written = [('--doc', args.doc, table, images, (DOC_BEGIN, DOC_END)),
             ('--summary', args.summary, glance, (), (SUMMARY_BEGIN, SUMMARY_END))]
  for flag, path, text, linked, markers in written:
    if path:
      try:
        write_into_doc(path, text, linked, markers)
      except (OSError, ValueError) as exc:
        print(f'error: {flag}: {exc}', file=sys.stderr)
        return 2
  print(table, end='')
  print(f'wrote {os.path.join(args.out, "study.csv")}, study.md'
        + (', study.png' if plotted else ' (nothing to plot)')
        + (', steps.png' if plotted_steps else ' (no run reached the target)'))
  return 0


if __name__ == '__main__':
  sys.exit(main())
