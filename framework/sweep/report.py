"""The results of a sweep: ``results.csv``, ``results.md`` and ``accuracy.png``.

Rows are read back from the point directories (``result.json``,
``error.txt``), so a report covers points finished by earlier sweeps too.
With seeds, the table has one line per grid point with the mean and standard
deviation over its seeds; the plot draws final accuracy against the first
grid key, one line per value of the other keys, failed points as red crosses.
"""

import csv
import os
import statistics

from framework.sweep.grid import is_number
from framework.sweep.runner import METRICS
from framework.sweep.runner import format_metric
from framework.sweep.runner import log
from framework.sweep.runner import read_error
from framework.sweep.runner import read_result

# Columns of results.csv after the swept keys.
RESULT_COLUMNS = ['seed', 'status', 'accuracy', 'top5', 'loss', 'steps', 'wall_s', 'logdir',
                  'error']


def write_results(sweep):
  """Writes results.csv, results.md and accuracy.png into the sweep's directory."""
  points, args = sweep.points, sweep.args
  rows = collect_rows(sweep)
  swept = list(points[0].grid) + list(points[0].derived)
  write_csv(rows, swept + RESULT_COLUMNS, os.path.join(sweep.out, 'results.csv'))
  header = (f'# Sweep of {os.path.relpath(sweep.config)} ({args.mode})\n\n'
            + '\n'.join(f'- `--set {s}`' for s in args.set))
  with open(os.path.join(sweep.out, 'results.md'), 'w', encoding='utf-8') as f:
    f.write(markdown(rows, points, swept, args.seeds is not None, header.rstrip()))
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
    else:
      error = sweep.errors.get(point.name) or read_error(logdir)
      status, wall = ('failed' if error else 'not run'), None
    row.update(status=status, **metrics, wall_s=wall, logdir=logdir, error=error or '')
    rows.append(row)
  return rows


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


def markdown(rows, points, swept, with_seeds, header):
  """A markdown table of the results; with seeds, one line per grid point with mean ± std."""
  lines = [header, '']
  lines += _seed_table(rows, points, swept) if with_seeds else _run_table(rows, swept)
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


def _seed_table(rows, points, swept):
  columns = swept + ['seeds ok', 'accuracy', 'top-5', 'loss', 'steps', 'wall (s)', 'failed seeds']
  cells = []
  for group in group_rows(points, rows):
    ok = [r for r in group if r['status'] == 'ok']
    steps = sorted({r['steps'] for r in ok if r['steps'] is not None})
    failed_seeds = [str(r['seed']) for r in group if r['status'] == 'failed']
    cells.append([str(group[0][k]) for k in swept] + [
        f'{len(ok)}/{len(group)}',
        mean_std_text([r['accuracy'] for r in ok]),
        mean_std_text([r['top5'] for r in ok]),
        mean_std_text([r['loss'] for r in ok]),
        ', '.join(map(str, steps)) or 'n/a',
        mean_std_text([r['wall_s'] for r in ok], 1),
        ', '.join(failed_seeds) or ''])
  return table_lines(columns, cells)


def _run_table(rows, swept):
  columns = swept + ['status', 'accuracy', 'top-5', 'loss', 'steps', 'wall (s)']
  cells = [[str(row[k]) for k in swept] + [
      row['status'], format_metric(row['accuracy']), format_metric(row['top5']),
      format_metric(row['loss']), 'n/a' if row['steps'] is None else str(row['steps']),
      format_metric(row['wall_s'], 1)] for row in rows]
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
