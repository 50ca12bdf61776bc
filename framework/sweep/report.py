"""The results of a sweep: ``results.csv``, ``results.md`` and ``accuracy.png``, and its best point.

Rows are read back from the point directories (``result.json``,
``error.txt``), so a report covers points finished by earlier sweeps too.
With seeds, the table has one line per grid point with the mean and standard
deviation over its seeds; the plot draws final accuracy against the first
grid key, one line per value of the other keys, failed points as red crosses.

The best point (:func:`choose_best`, the ``best`` column of results.csv, the
mark in results.md, ``scripts/sweep.py --best OUT``) is chosen by the runs'
own metric (the first of their final line: accuracy for an image
classifier, higher is better; wer for a sequence model, lower is better):
among the finished points whose metric is a finite number, the grid point
(all seeds of one configuration) with the best mean over its finished seeds,
then its seed with the best value. Ties go to the run directory whose name
sorts first.
"""

import collections
import csv
import json
import math
import os
import statistics

from framework.sweep.grid import is_number
from framework.sweep.results import HIGHER_IS_BETTER
from framework.sweep.results import METRICS
from framework.sweep.results import format_metric
from framework.sweep.results import NOISE_SCALE
from framework.sweep.results import RUN_FACTS
from framework.sweep.results import UPDATES
from framework.sweep.results import read_error
from framework.sweep.results import read_result
from framework.sweep.runner import log

# Columns of results.csv after the swept keys; best: 1 on the best point (choose_best), else 0.
RESULT_COLUMNS = ['seed', 'status', 'best', 'accuracy', 'top5', 'loss', 'steps', 'noise_scale',
                  'updates',
                  'wall_s', 'logdir', 'error']

# The best point of a sweep (choose_best): its run directory, the metric and its
# direction, the run's value, and the mean and number of its configuration's seeds.
Best = collections.namedtuple('Best', 'logdir metric higher value mean seeds')


def choose_best(runs):
  """The best point of a sweep (see the module docstring), or None when none can be chosen.

  Args:
    runs: ``[(group, logdir, result)]``: the configuration a run belongs to
      (hashable; runs that differ only by seed share it), its run directory
      and its result.json (None: not finished).

  Returns:
    A :class:`Best`, or None when no finished run has a finite value of the
    metric, or the metric has no known direction.
  """
  finished = [(g, d, r) for g, d, r in sorted(runs, key=lambda run: run[1]) if r is not None]
  if not finished:
    return None
  metric = finished[0][2].get('curve_metric') or 'accuracy'
  higher = HIGHER_IS_BETTER.get(metric)
  if higher is None:
    return None
  groups = {}
  for group, logdir, result in finished:
    value = (result.get('metrics') or {}).get(metric)
    if isinstance(value, (int, float)) and math.isfinite(value):
      groups.setdefault(group, []).append((logdir, float(value)))
  if not groups:
    return None
  sign = 1.0 if higher else -1.0
  # max() keeps the first of equals: the groups and their runs are in directory order.
  seeds = max(groups.values(), key=lambda members: sign * statistics.fmean(v for _, v in members))
  logdir, value = max(seeds, key=lambda member: sign * member[1])
  return Best(logdir, metric, higher, value, statistics.fmean(v for _, v in seeds), len(seeds))


def best_of_directory(out):
  """The best point among the finished runs in the sweep directory ``out`` (``--best``), or None.

  A run is a subdirectory with a ``result.json``; runs whose grid values
  (``point`` in result.json) are equal are seeds of one configuration.
  """
  runs = []
  for name in sorted(os.listdir(out)):
    logdir = os.path.join(out, name)
    result = read_result(logdir) if os.path.isdir(logdir) else None
    if result is not None:
      group = json.dumps(result.get('point'), sort_keys=True, default=str)
      runs.append((group, logdir, result))
  return choose_best(runs)


def best_of_sweep(sweep):
  """The best point of a sweep's points (:func:`choose_best`), or None."""
  return choose_best([(p.group(), sweep.logdir(p), read_result(sweep.logdir(p)))
                      for p in sweep.points])


def describe_best(best):
  """The line under results.md's table: the best run, its metric and direction, its seeds' mean."""
  line = (f'Best by {best.metric} ({"higher" if best.higher else "lower"} is better): '
          f'`{os.path.basename(best.logdir)}`, {format_metric(best.value)}')
  if best.seeds > 1:
    line += (f', the best seed of the configuration with the best mean over its {best.seeds} '
             f'finished seeds ({format_metric(best.mean)})')
  return line + '.'


def write_results(sweep):
  """Writes results.csv, results.md and accuracy.png into the sweep's directory."""
  points, args = sweep.points, sweep.args
  rows = collect_rows(sweep)
  best = best_of_sweep(sweep)
  for row in rows:
    row['best'] = int(best is not None and row['logdir'] == best.logdir)
  swept = list(points[0].grid) + list(points[0].derived)
  write_csv(rows, swept + result_columns(rows), os.path.join(sweep.out, 'results.csv'))
  header = (f'# Sweep of {os.path.relpath(sweep.config)} ({args.mode})\n\n'
            + '\n'.join(f'- `--set {s}`' for s in args.set))
  with open(os.path.join(sweep.out, 'results.md'), 'w', encoding='utf-8') as f:
    f.write(markdown(rows, points, swept, args.seeds is not None, header.rstrip(), best))
  title = f'{os.path.basename(args.config)}: {os.path.basename(sweep.out)}'
  plotted = plot_accuracy(points, rows, os.path.join(sweep.out, 'accuracy.png'), title)
  log(f'wrote {os.path.join(sweep.out, "results.csv")}, results.md'
      + (', accuracy.png' if plotted else ' (no accuracy to plot)'))


def collect_rows(sweep):
  """One dict per point, in grid order, from the result.json / error.txt on disk."""
  rows = []
  for point in sweep.points:
    logdir = sweep.logdir(point)
    result = read_result(logdir)
    row = {key: text for key, (text, _) in point.grid.items()}
    row.update({key: value for key, value in point.derived.items()})
    row['seed'] = '' if point.seed is None else point.seed
    metrics = dict.fromkeys(METRICS)
    if result is not None:
      status, error, wall = 'ok', '', result.get('wall_s')
      metrics.update(result.get('metrics') or {})
      if metrics.get(UPDATES) is None:
        # Without a batch policy's line the batch stayed fixed: an update per step.
        metrics[UPDATES] = metrics['steps']
    else:
      error = sweep.errors.get(point.name) or read_error(logdir)
      status, wall = ('failed' if error else 'not run'), None
    row.update(status=status, **metrics, wall_s=wall, logdir=logdir, error=error or '',
               task_metrics=tuple(metrics))
    rows.append(row)
  return rows


def task_metrics(rows):
  """The metrics the rows' runs report beyond an image classifier's (``ser``, ``wer``, ...), in order."""
  names = []
  for row in rows:
    names += [k for k in row.get('task_metrics', ())
              if k not in METRICS and k not in RUN_FACTS and k not in names]
  return names


def result_columns(rows):
  """results.csv's columns after the swept keys: ``RESULT_COLUMNS``, the task's metrics after loss."""
  at = RESULT_COLUMNS.index('loss') + 1
  return RESULT_COLUMNS[:at] + task_metrics(rows) + RESULT_COLUMNS[at:]


def write_csv(rows, columns, path):
  """Writes ``rows`` (dicts) as CSV with ``columns``; None becomes an empty cell."""
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    for row in rows:
      writer.writerow({c: ('' if row.get(c) is None else row.get(c)) for c in columns})


def mean_std(values):
  """(mean, sample standard deviation) of the values that are not None; None where undefined."""
  values = [v for v in values if v is not None]
  if not values:
    return None, None
  std = statistics.stdev(values) if len(values) > 1 else None
  return statistics.fmean(values), std


def mean_std_text(values, digits=4, scale=1.0):
  """``mean ± std`` (``mean`` alone for one value, 'n/a' for none), each times ``scale``.

  The mean is taken of the values as they are, then scaled, so it reads the same as
  that mean scaled anywhere else (fractions shown in %).
  """
  mean, std = mean_std(values)
  if mean is None:
    return 'n/a'
  return (f'{mean * scale:.{digits}f}'
          + (f' ± {std * scale:.{digits}f}' if std is not None else ''))


def group_rows(points, rows):
  """``[(representative row, [rows of its seeds])]`` in grid order."""
  groups = {}
  for point, row in zip(points, rows):
    groups.setdefault(point.group(), []).append(row)
  return list(groups.values())


def markdown(rows, points, swept, with_seeds, header, best=None):
  """A markdown table of the results; with seeds, one line per grid point with mean ± std.

  ``best`` (:func:`choose_best`) is marked in the last column (with seeds, on
  its configuration's line, naming the seed) and said under the table.
  """
  lines = [header, '']
  best_logdir = best.logdir if best is not None else None
  lines += (_seed_table(rows, points, swept, best_logdir) if with_seeds
            else _run_table(rows, swept, best_logdir))
  if best is not None:
    lines += ['', describe_best(best)]
  failed = [r for r in rows if r['status'] != 'ok']
  if failed:
    lines += ['', 'Not finished:', '']
    lines += [f'- `{os.path.basename(r["logdir"])}`: {r["status"]}'
              + (f' — {r["error"]}' if r['error'] else '') for r in failed]
  return '\n'.join(lines) + '\n'


def table_lines(columns, cells):
  """A markdown table: the header of ``columns``, then a line per row of string ``cells``."""
  return (['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
          + ['| ' + ' | '.join(row) + ' |' for row in cells])


def measured_noise(rows):
  """``['noise scale']`` when a row's run measured the gradient noise scale, else ``[]``: its column."""
  return ['noise scale'] if any(r.get(NOISE_SCALE) is not None for r in rows) else []


def grown(rows):
  """``['updates']`` when a row's run grew its batch (fewer updates than steps), else ``[]``."""
  return ['updates'] if any(r.get(UPDATES) not in (None, r.get('steps')) for r in rows) else []


def _seed_table(rows, points, swept, best_logdir=None):
  noise, updates = measured_noise(rows), grown(rows)
  columns = swept + ['seeds ok', 'accuracy', 'top-5', 'loss', 'steps', *noise, *updates,
                     'wall (s)', 'failed seeds', 'best']
  cells = []
  for group in group_rows(points, rows):
    ok = [r for r in group if r['status'] == 'ok']
    steps = sorted({r['steps'] for r in ok if r['steps'] is not None})
    failed_seeds = [str(r['seed']) for r in group if r['status'] == 'failed']
    best_seeds = [r['seed'] for r in group if r['logdir'] == best_logdir]
    cells.append([str(group[0][k]) for k in swept] + [
        f'{len(ok)}/{len(group)}',
        mean_std_text([r['accuracy'] for r in ok]),
        mean_std_text([r['top5'] for r in ok]),
        mean_std_text([r['loss'] for r in ok]),
        ', '.join(map(str, steps)) or 'n/a',
        *[mean_std_text([r.get(NOISE_SCALE) for r in ok], 0) for _ in noise],
        *[mean_std_text([r.get(UPDATES) for r in ok], 0) for _ in updates],
        mean_std_text([r['wall_s'] for r in ok], 1),
        ', '.join(failed_seeds) or '',
        f'**best** (seed {best_seeds[0]})' if best_seeds else ''])
  return table_lines(columns, cells)


def _run_table(rows, swept, best_logdir=None):
  extra = task_metrics(rows)
  noise, updates = measured_noise(rows), grown(rows)
  columns = swept + ['status', 'accuracy', 'top-5', 'loss', *extra, 'steps', *noise, *updates,
                     'wall (s)', 'best']
  cells = [[str(row[k]) for k in swept] + [
      row['status'], format_metric(row['accuracy']), format_metric(row['top5']),
      format_metric(row['loss']), *(format_metric(row.get(k)) for k in extra),
      'n/a' if row['steps'] is None else str(row['steps']),
      *[format_metric(row.get(NOISE_SCALE), 0) for _ in noise],
      *[format_metric(row.get(UPDATES), 0) for _ in updates], format_metric(row['wall_s'], 1),
      '**best**' if row['logdir'] == best_logdir else '']
      for row in rows]
  return table_lines(columns, cells)


def is_batch_like(key):
  """True for keys that count examples or micro-batches (batch sizes, iter_size)."""
  name = key.rsplit('.', 1)[-1] if key else ''
  return 'batch' in name or name == 'iter_size'


def x_scale(values, key=None):
  """The x axis for ``values`` of the grid key ``key``.

  'log' for positive numbers spanning more than a factor of 10, or of a
  batch-like key (batch sizes grow by factors, so equal ratios get equal
  spacing); 'linear' for other numbers; 'category' for anything else.
  """
  if not values or not all(is_number(v) for v in values):
    return 'category'
  if min(values) > 0 and (max(values) / min(values) > 10
                          or (is_batch_like(key) and max(values) > min(values))):
    return 'log'
  return 'linear'


def pyplot():
  """matplotlib.pyplot drawing to files (the Agg backend), imported on first use."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


def style_x_axis(axes, scale, values, labels):
  """A log axis ticked at ``values``, or categories at 0..n-1, each tick labelled."""
  if scale == 'log':
    axes.set_xscale('log')
    axes.set_xticks(values)
    axes.set_xticklabels(labels)
    axes.minorticks_off()
  elif scale == 'category':
    axes.set_xticks(range(len(labels)))
    axes.set_xticklabels(labels)


def save_figure(plt, figure, path):
  """Writes the figure as a PNG of 100 dpi and frees it."""
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def plot_accuracy(points, rows, path, title):
  """Final accuracy against the first grid key, one line per value of the other keys.

  Error bars are the standard deviation over seeds. Returns False (and writes
  nothing) when no point has an accuracy.
  """
  if not any(r['status'] == 'ok' and r['accuracy'] is not None for r in rows):
    return False
  plt = pyplot()
  keys = list(points[0].grid)
  if keys:
    x_key, line_keys = keys[0], keys[1:]
    x_of = lambda p: p.grid[x_key]
  else:
    x_key, line_keys = 'seed', []
    x_of = lambda p: (str(p.seed), p.seed)
  x_values = []
  for point in points:
    if x_of(point) not in x_values:
      x_values.append(x_of(point))
  scale = x_scale([v for _, v in x_values], x_key)
  position = {text: (value if scale != 'category' else i)
              for i, (text, value) in enumerate(x_values)}
  lines, failed = _accuracy_lines(points, rows, x_of, line_keys)

  figure, axes = plt.subplots(figsize=(7, 4.5))
  for label, by_x in lines.items():
    xs = [text for text, _ in x_values if text in by_x]
    if not xs:
      continue
    means = [statistics.fmean(by_x[x]) for x in xs]
    stds = [statistics.stdev(by_x[x]) if len(by_x[x]) > 1 else 0.0 for x in xs]
    # Lines between categories would suggest an order that is not there.
    axes.errorbar([position[x] for x in xs], means, yerr=stds, marker='o', capsize=4,
                  linestyle='none' if scale == 'category' else '-', label=label or None)
  if failed:
    # At the foot of the axes, whatever the accuracies: a failed point has none.
    axes.plot([position[x] for x in failed], [0.02] * len(failed), linestyle='none', marker='x',
              markersize=9, color='red', transform=axes.get_xaxis_transform(),
              label=f'failed ({len(failed)})')
  style_x_axis(axes, scale, [v for _, v in x_values], [text for text, _ in x_values])
  axes.set_xlabel(x_key)
  axes.set_ylabel('final test accuracy (top-1)')
  axes.set_title(title)
  axes.grid(True, alpha=0.3)
  if line_keys or failed:
    axes.legend()
  save_figure(plt, figure, path)
  return True


def _accuracy_lines(points, rows, x_of, line_keys):
  """``({line label: {x text: [accuracies]}}, [x text of each failed point])``."""
  lines, failed = {}, []
  for point, row in zip(points, rows):
    label = ', '.join(f'{k}={point.grid[k][0]}' for k in line_keys)
    by_x = lines.setdefault(label, {})
    if row['status'] == 'ok' and row['accuracy'] is not None:
      by_x.setdefault(x_of(point)[0], []).append(row['accuracy'])
    elif row['status'] == 'failed':
      failed.append(x_of(point)[0])
  return lines, failed
