"""Writes the tables of docs/critical_batch.md: the studies' critical batches and the measurements.

  .venv/bin/python studies/large_batch/critical_table.py           # rewrite the block
  .venv/bin/python studies/large_batch/critical_table.py --check   # exit 1 when the page is stale

The block between the page's ``<!-- critical-table:begin -->`` and
``<!-- critical-table:end -->`` lines is made from archived files alone:

- the two large-batch studies' runs (docs/results/large_batch_e48 and
  docs/results/large_batch_seq2seq), to which S(B) = S_min·(1 + B_crit/B) is
  fitted per optimizer (studies/large_batch/critical_fit.py), on the updates at
  which each run first reached the study's target: 90 % test accuracy for the
  image study, 60 % dev WER for the sequence study;
- the measurements, one directory each under docs/results/critical_batch/:
  ``critical_batch.json``, written by ``run.py --mode=critical_batch`` (the
  critical batch of the whole run with its interval, and each point's, from
  branches fitted to the same law; B_simple where the config measures it). A
  directory ``<row>_<variant>`` (``fashion_mnist_lars_seed1``) measures a row
  again, with another seed or other flags, against the same study.

A row whose directory (:data:`ROWS` names them) holds none says "not
measured yet"; a directory of another name gets a row of its own, without a
study to hold it against. Nothing in the block is typed in by hand.
"""

import argparse
import collections
import glob
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from core import files  # noqa: E402  pylint: disable=wrong-import-position
from framework.config import config_file  # noqa: E402  pylint: disable=wrong-import-position
from framework.run import critical_batch_results as critical_results  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import critical_fit  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import seq2seq_plan  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import study  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_report import TARGET_WER  # noqa: E402  pylint: disable=wrong-import-position

BEGIN = '<!-- critical-table:begin -->'
END = '<!-- critical-table:end -->'
PAGE = os.path.join('docs', 'critical_batch.md')
MEASUREMENTS = os.path.join('docs', 'results', 'critical_batch')
COMMAND = '.venv/bin/python studies/large_batch/critical_table.py'
MEASURED_FILE = 'critical_batch.json'
# The image study's epochs at every batch, from its shared recipe (they name its archive).
IMAGE_EPOCHS = config_file.load_config_file(
    os.path.join(ROOT, 'configs', 'large_batch', 'common.py'))['base_params']['num_epochs']
# A measurement agrees with a study's fit when their ratio is within this factor either way.
WITHIN = 2.0

Study = collections.namedtuple('Study', [
    'name',        # the study's short name, as the block's lines give it
    'archive',     # its archived runs, relative to the repository
    'sweeps',      # ((arm, (glob of sweep directories, ...)), ...) in table order
    'metric',      # a study.Metric
    'target',      # the metric's target, a fraction
    'target_text',  # the target as the table says it
    'epochs',      # its epoch budget, the same at every batch
    'unit',        # its unit of batch
    'units',       # {unit a measurement may give: its size in the study's unit}
    'targets',     # the targets of the fits by target, around the study's own
])

IMAGE = Study(
    'image study', os.path.join('docs', 'results', f'large_batch_e{IMAGE_EPOCHS}'),
    (('SGD (lr tuned)', ('sgd',)), ('LARS (eeta tuned)', ('lars', 'lars_eeta*')),
     ('LAMB', ('lamb',))),
    study.ACCURACY, study.DEFAULT_TARGET, f'{study.DEFAULT_TARGET * 100:g} % test accuracy',
    IMAGE_EPOCHS, 'images', {'images': 1.0, 'examples': 1.0},
    (0.85, 0.88, 0.90, 0.91, 0.92))
SEQ2SEQ = Study(
    'sequence study', seq2seq_plan.DEFAULT_ARCHIVE,
    tuple((arm.label, (arm.name,)) for arm in seq2seq_plan.ARMS),
    study.WER, TARGET_WER, f'{TARGET_WER * 100:g} % dev WER', seq2seq_plan.EPOCHS, 'words',
    {'words': 1.0, 'examples': 1.0, 'sequences': 1.0,
     'tokens': 1.0 / seq2seq_plan.TOKENS_PER_WORD},
    (0.7, 0.65, 0.6, 0.55, 0.5))
STUDIES = (IMAGE, SEQ2SEQ)

Row = collections.namedtuple('Row', ['name', 'workload', 'study', 'arm'])
# Each row's measurement directory under MEASUREMENTS, its workload, and the study arm it is
# held against.
ROWS = (
    Row('fashion_mnist_sgd', 'Fashion-MNIST ResNet-8', IMAGE, 'SGD (lr tuned)'),
    Row('fashion_mnist_lars', 'Fashion-MNIST ResNet-8', IMAGE, 'LARS (eeta tuned)'),
    Row('fashion_mnist_lamb', 'Fashion-MNIST ResNet-8', IMAGE, 'LAMB'),
    Row('cmudict_lamb', 'CMUdict Transformer', SEQ2SEQ, 'LAMB'),
    Row('cmudict_adamw', 'CMUdict Transformer', SEQ2SEQ, 'AdamW'),
    Row('cmudict_muon', 'CMUdict Transformer', SEQ2SEQ, 'Muon'),
)


def read_study(st, root=ROOT):
  """Every archived run of a study's arms, labelled by arm, with their settings marked."""
  runs = []
  for arm, patterns in st.sweeps:
    for pattern in patterns:
      for directory in sorted(glob.glob(os.path.join(root, st.archive, pattern))):
        if os.path.isdir(directory):
          runs += study.read_runs(arm, directory, study.GLOBAL_BATCH, st.target, st.metric)
  return study.mark_settings(runs)


def study_cost(st, root=ROOT):
  """``(runs, hours)``: the study's archived runs (failed ones too) and their summed wall time."""
  runs = []
  for directory in sorted(glob.glob(os.path.join(root, st.archive, '*', ''))):
    runs += study.read_runs('', directory.rstrip(os.sep), study.GLOBAL_BATCH)
  return len(runs), sum(r.get('wall_s') or 0.0 for r in runs) / 3600.0


def fits(st, runs):
  """``{arm: (Fit interpolated, Fit at the evaluations)}`` of a study's arms to its target."""
  return {arm: tuple(critical_fit.fit_arm(runs, arm, study.GLOBAL_BATCH, st.target, st.metric,
                                          interpolate)
                     for interpolate in (True, False))
          for arm, _ in st.sweeps}


def by_target(st, runs):
  """The lines of a table of each arm's B_crit (interpolated) at each of the study's ``targets``."""
  percent = [f'{t * 100:g} %' for t in st.targets]
  lines = [f'| {st.name}, by {st.target_text.split(" ", 2)[-1]} | ' + ' | '.join(percent) + ' |',
           '|---|' + '---:|' * len(percent)]
  for arm, _ in st.sweeps:
    cells = []
    for target in st.targets:
      fit = critical_fit.fit_arm(runs, arm, study.GLOBAL_BATCH, target, st.metric)
      text = number_text(fit.b_crit) if fit.fitted else 'no fit'
      cells.append(f'{text} ({len(fit.steps)}{", ≤ at " if fit.bounded else ""}'
                   f'{", ".join(str(b) for b in fit.bounded)})')
    lines.append(f'| {arm} | ' + ' | '.join(cells) + ' |')
  return lines


def read_measurement(directory):
  """``critical_batch.json`` of a measurement's directory, or None without one.

  Raises:
    ValueError: a critical_batch.json that is not JSON.
  """
  path = os.path.join(directory, MEASURED_FILE)
  if not os.path.isfile(path):
    return None
  with open(path, encoding='utf-8') as f:
    try:
      return json.load(f)
    except ValueError as exc:
      raise ValueError(f'{path}: {exc}') from exc


def in_unit(value, unit, st):
  """``value`` of ``unit`` in the study's unit of batch, or None for a unit it has no size for."""
  if value is None or st is None:
    return None
  size = st.units.get((unit or st.unit).lower())
  return None if size is None else value * size


def number_text(value):
  """A batch or count as the table writes it: 4,281 (n/a for None)."""
  return 'n/a' if value is None else f'{value:,.0f}'


def ratio_text(value, reference):
  """``value / reference`` and whether it is within :data:`WITHIN` of 1; '' without both."""
  if value is None or not reference:
    return ''
  ratio = value / reference
  inside = 1.0 / WITHIN <= ratio <= WITHIN
  return f'{ratio:.2f} ' + ('(within 2x)' if inside else '(**not within 2x**)')


def hours_text(seconds, study_hours):
  """Wall seconds in hours, with their share of the study's hours."""
  if seconds is None:
    return 'n/a'
  share = f' ({seconds / 3600.0 / study_hours * 100:.1f} % of the study)' if study_hours else ''
  return f'{seconds / 3600.0:.2f} h' + share


def fit_table(all_fits):
  """The lines of the study fits' table."""
  lines = ['| workload | optimizer | target | updates to it, S(B), by batch | not reached '
           '(updates in the run) | S_min | B_crit | B_crit at the evaluations |',
           '|---|---|---|---|---|---:|---:|---:|']
  for st in STUDIES:
    for arm, _ in st.sweeps:
      fit, coarse = all_fits[st.name][arm]
      steps = ', '.join(f'{b}: {"≤" if b in fit.bounded else ""}{s:.0f}'
                        for b, s in fit.steps.items()) or 'none'
      missed = ', '.join(f'{b} ({s})' for b, s in fit.missed.items()) or 'none'
      b_crit = f'{number_text(fit.b_crit)} {st.unit}' if fit.fitted else 'no fit'
      lines.append(f'| {workload(st)} | {arm} | {st.target_text} | {steps} | {missed} | '
                   f'{number_text(fit.s_min)} | {b_crit} | '
                   f'{number_text(coarse.b_crit) if coarse.fitted else "no fit"} |')
  return lines


def workload(st):
  """The workload of a study's rows."""
  return next(row.workload for row in ROWS if row.study is st)


def largest_batch(measured):
  """The measurement's largest branch (its ladder's top)."""
  return (measured.get('batches') or [0])[-1]


def answer_cell(measured, st):
  """``(the whole run's critical batch with its interval, it in the study's unit or None)``."""
  unit, batch = measured.get('unit', ''), measured.get('critical_batch')
  bound = measured.get('critical_batch_at_least')
  if batch is None and bound:
    return f'more than {critical_results.describe_batch(bound)} {unit} (a lower bound)', None
  if batch is None:
    return 'none measured', None
  interval = critical_results.describe_interval(measured.get('interval'), largest_batch(measured))
  return (f'{critical_results.describe_batch(batch)} {unit} ({interval})',
          in_unit(batch, unit, st))


def interval_text(measured, st, reference):
  """How wide the whole run's interval is (high / low), and whether it holds the study's fit."""
  interval = measured.get('interval')
  if not interval or interval[0] is None:
    return ''
  low, high = interval
  if high is None or (isinstance(high, float) and math.isinf(high)):
    width = 'open above'
  else:
    width = f'{high / low:.1f}x wide' if low > 0 else 'open below'
  if reference is None:
    return width
  low_study = in_unit(low, measured.get('unit'), st)
  high_study = math.inf if high is None else in_unit(high, measured.get('unit'), st)
  holds = low_study is not None and low_study <= reference <= high_study
  return width + (', holds the fit' if holds else ', **misses the fit**')


def share_text(point):
  """Where a point is, as a share of the run: ``25 %``."""
  return f'{point.get("share_of_run", 0.0) * 100:.0f} %'


def along_cell(measured):
  """Each point's B_crit (interval), by its share of the run."""
  largest = largest_batch(measured)
  return '; '.join(f'{share_text(p)}: {critical_results.describe_estimate(p, largest)}'
                   for p in measured.get('points') or []) or 'no points'


def noise_ratio_cell(measured):
  """Each point's B_simple / B_crit, or why there is none."""
  parts = []
  for point in measured.get('points') or []:
    b_simple, b_crit = point.get('b_simple'), point.get('b_crit')
    if b_simple is None:
      continue
    ratio = f'{b_simple / b_crit:.2f}' if b_crit else 'no B_crit'
    parts.append(f'{share_text(point)}: {number_text(b_simple)} ({ratio})')
  if parts:
    return '; '.join(parts)
  return ('not measured (noise_scale: false)' if measured.get('noise_scale_setting') is False
          else 'not measured')


def same_study_row(name):
  """The row a directory ``<row>_<variant>`` measures again (another seed, other flags), or None."""
  rows = [row for row in ROWS if name.startswith(row.name + '_')]
  return max(rows, key=lambda row: len(row.name)) if rows else None


def measurement_rows(measurements, all_fits, costs):
  """The rows of the measurements' table, and the lines of detail under it."""
  named = {row.name for row in ROWS}
  others = sorted(os.path.basename(d.rstrip(os.sep))
                  for d in glob.glob(os.path.join(measurements, '*', ''))
                  if os.path.basename(d.rstrip(os.sep)) not in named)
  rows = list(ROWS)
  for name in others:
    row = same_study_row(name)
    rows.append(Row(name, row.workload, row.study, row.arm) if row else
                Row(name, None, None, None))
  lines = ['| workload | optimizer | measurement | study\'s B_crit (target) '
           '| critical batch, whole run (90 % interval) | measured / B_crit | the interval '
           '| B_crit along the run | B_simple (B_simple / B_crit) along the run '
           '| compute (runs of the config) | wall |',
           '|---|---|---|---|---|---|---|---|---|---:|---|']
  details = []
  for row in rows:
    measured = read_measurement(os.path.join(measurements, row.name))
    st = row.study
    fit = all_fits[st.name][row.arm][0] if st else None
    study_hours = costs[st.name][1] if st else None
    reference = fit.b_crit if fit else None
    if st is None:
      fitted = 'no study'
    elif reference is None:
      fitted = f'no fit ({st.target_text})'
    else:
      fitted = f'{number_text(reference)} {st.unit} ({st.target_text})'
    head = (f'| {row.workload or (measured or {}).get("config") or row.name} | '
            f'{row.arm or row.name} | `{row.name}` | {fitted} | ')
    if measured is None:
      lines.append(head + 'not measured yet | | | | | | |')
      continue
    answer, value = answer_cell(measured, st)
    compute = (measured.get('compute') or {}).get('runs')
    lines.append(head + f'{answer} | {ratio_text(value, reference)} | '
                 f'{interval_text(measured, st, reference)} | {along_cell(measured)} | '
                 f'{noise_ratio_cell(measured)} | '
                 f'{"n/a" if compute is None else f"{compute:.2f}"} | '
                 f'{hours_text(measured.get("wall_s"), study_hours)} |')
    details.append(detail_line(row, measured))
  return lines, details


def detail_line(row, measured):
  """One measured row's line under the table: its config and each point's updates by batch."""
  text = f'- `{row.name}`: `{config_name(measured.get("config"))}`'
  text += f', {measured.get("branch_loss", "?")} loss'
  points = []
  for point in measured.get('points') or []:
    updates = ', '.join(f'{number_text(int(b))}: {u:.1f}'
                        for b, u in (point.get('updates') or {}).items() if u is not None)
    points.append(f'step {point.get("step", "?")}: ' + (updates or point.get('why') or
                                                        'no branch reached the target'))
    points[-1] = points[-1].replace('|', '\\|')
  text += '; updates to the target by batch at ' + '; '.join(points) if points else ''
  schedule = measured.get('schedule')
  if schedule:
    text += (f'; proposed schedule: batches {schedule["batches"]} at steps '
             f'{schedule["boundaries"]}')
  return text + '.'


def config_name(path):
  """A config's path from its ``configs`` directory on (the mode records it absolute)."""
  if not path:
    return '?'
  parts = path.replace(os.sep, '/').split('/')
  if 'configs' not in parts:
    return path
  return '/'.join(parts[len(parts) - 1 - parts[::-1].index('configs'):])


def block(measurements=None, root=ROOT):
  """The generated block of the page (markdown, without the markers)."""
  measurements = measurements or os.path.join(root, MEASUREMENTS)
  runs = {st.name: read_study(st, root) for st in STUDIES}
  all_fits = {st.name: fits(st, runs[st.name]) for st in STUDIES}
  costs = {st.name: study_cost(st, root) for st in STUDIES}
  lines = ['', '### The studies\' fits', '']
  lines += fit_table(all_fits)
  lines += ['', 'S(B) is counted in updates, B in ' + ' and '.join(
      f'{st.unit} ({st.name})' for st in STUDIES) + '; the batches in the first column of '
      'numbers went into the fit. Every run of a study had the same epochs at every batch ('
      + ', '.join(f'{st.epochs:g} in the {st.name}' for st in STUDIES) + '), so a batch that '
      'would need more epochs than that to reach the target is only "not reached". A ≤ marks '
      'an S(B) reached at a run\'s first evaluation, with none before it to interpolate from: '
      'only an upper bound. The last column counts each run\'s updates at the first '
      'evaluation that reached the target instead of interpolating.']
  lines += ['', 'B_crit by target, from the same runs (interpolated; in brackets, how many '
               'batches reached the target and went into the fit, and the batches whose S(B) '
               'is only an upper bound), the study\'s own target among them:', '']
  for st in STUDIES:
    lines += by_target(st, runs[st.name]) + ['']
  lines += ['### The measurements against the fits', '']
  rows, details = measurement_rows(measurements, all_fits, costs)
  lines += rows + ['']
  lines.append('A ratio is the measurement over the study\'s B_crit; within 2x is the goal. '
               'The interval is the bootstrap\'s 5-95 % over each point\'s evaluations and '
               'fit (docs/math.md); the whole run\'s sums the points\' draws where the '
               'measurement fits the run\'s summed updates (its json has run_updates), and '
               'combines the points\' ends in the measurements before it; '
               'its width is its high end over its low. The compute is '
               'what the command trained and evaluated, in runs of the config. '
               'The studies\' cost, for comparison: ' + '; '.join(
                   f'the {st.name}, {costs[st.name][0]} runs, {costs[st.name][1]:.1f} hours'
                   for st in STUDIES)
               + ' (the sums of their archived runs\' wall times, on 2-core machines).')
  if details:
    lines += ['', 'Each measurement\'s points:', ''] + details
  lines.append('')
  return '\n'.join(lines)


def page_with(text, generated):
  """``text`` with the lines between the markers replaced by ``generated``.

  Raises:
    ValueError: when the text lacks the two markers, in that order.
  """
  begin, end = text.find(BEGIN), text.find(END)
  if begin < 0 or end < begin:
    raise ValueError(f'no {BEGIN} ... {END} block')
  return text[:begin + len(BEGIN)] + '\n' + generated + text[end:]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--check', action='store_true',
                      help='only say whether the page is up to date (exit 1 when it is not)')
  parser.add_argument('--page', default=os.path.join(ROOT, PAGE),
                      help=f'the page holding the block (default {PAGE})')
  parser.add_argument('--measurements', default=os.path.join(ROOT, MEASUREMENTS),
                      help=f'one directory per measurement (default {MEASUREMENTS})')
  parser.add_argument('--root', default=ROOT,
                      help='the checkout whose archived study runs are fitted (default: this one)')
  args = parser.parse_args(argv)
  return files.refresh_generated_page(args.page, lambda text: page_with(text, block(args.measurements, args.root)), args.check,
                                      COMMAND)

if __name__ == '__main__':
  sys.exit(main())
