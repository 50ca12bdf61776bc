"""The figures of a study: accuracy against the key, and updates (or seconds) to a target.

Drawn from the runs :mod:`studies.large_batch.study` reads, one line per arm;
studies/large_batch/report.py and seq2seq_report.py put them beside their tables.
matplotlib is imported only where a figure is drawn.
"""

import statistics

from framework.sweep import report
from studies.large_batch import study


def accuracy_series(runs, key, arms):
  """``{arm: [(key value, mean %, std %)]}``: the table's rows, at each value the chosen rate's runs.

  Where an arm's learning rate was tuned on a grid, only the runs of the rate
  the table shows count, not the whole grid.
  """
  grouped = study.groups(runs, key)
  series = {}
  for arm in arms:
    for value in study.ordered_values(runs, key):
      accuracy = [r['accuracy'] * 100.0 for r in study.chosen(grouped.get((arm, value), []))
                  if r['status'] == 'ok' and r['accuracy'] is not None]
      if accuracy:
        std = statistics.stdev(accuracy) if len(accuracy) > 1 else 0.0
        series.setdefault(arm, []).append((value, statistics.fmean(accuracy), std))
  return series


def plot(runs, key, arms, path, title):
  """Test accuracy against the key, one line per arm, std error bars; False if nothing to plot."""
  series = accuracy_series(runs, key, arms)
  if not series:
    return False
  values = sorted({v for points in series.values() for v, _, _ in points},
                  key=lambda v: study.number(v) or 0.0)
  scale = report.x_scale(values)
  plt = report.pyplot()
  figure, axes = plt.subplots(figsize=(7, 4.5))
  for arm, points in series.items():
    xs, means, stds = zip(*points)
    positions = xs if scale != 'category' else [values.index(v) for v in xs]
    axes.errorbar(positions, means, yerr=stds, marker='o', capsize=4, label=arm)
  report.style_x_axis(axes, scale, values, [str(v) for v in values])
  axes.set_xlabel(key)
  axes.set_ylabel('test accuracy, top-1 (%)')
  if title:
    axes.set_title(title)
  axes.grid(True, alpha=0.3)
  axes.legend()
  report.save_figure(plt, figure, path)
  return True


# An arm's marker and its size, by its place among the arms: where two arms
# have the same point, the smaller marker shows inside the larger.
MARKERS = (('o', 9), ('s', 6.5), ('D', 4.5), ('v', 3.5))
# What a run's budget bounds, for each figure's field: a run that never reached
# the target would have needed more updates (more seconds) than it ran.
RUN_LENGTH = {'steps_to_target': 'steps', 'seconds_to_target': 'wall_s'}


def ticker():
  """matplotlib.ticker, imported with pyplot (only where a figure is drawn)."""
  import matplotlib.ticker  # pylint: disable=import-outside-toplevel
  return matplotlib.ticker


def unreached(grouped, arms, values, field='steps_to_target'):
  """Where an arm ran but never reached the target: ``{arm: [(x, lower bound)]}``.

  At such a key value, every finished run stopped short of the target, so the
  fewest updates (seconds) to it over the arm's settings exceed the shortest
  of those runs' updates (wall seconds): that is the bound.
  """
  length = RUN_LENGTH[field]
  bounds = {}
  for arm in arms:
    for value in values:
      members = grouped.get((arm, value), [])
      ok = [r[length] for r in members if r['status'] == 'ok' and r.get(length)]
      if ok and study.steps_to_target(members, field) is None:
        bounds.setdefault(arm, []).append((study.number(value), min(ok)))
  return bounds


def steps_series(runs, key, arms, values=None, field='steps_to_target'):
  """``{arm: [(key value, updates to the target)]}`` of the arms that reached it at some value.

  What :func:`plot_steps` draws (nothing when this is empty); ``field``
  and ``values`` as there.
  """
  grouped = study.groups(runs, key)
  values = [v for v in (values or study.ordered_values(runs, key)) if study.number(v)]
  series = {}
  for arm in arms:
    points = [(study.number(v), study.steps_to_target(grouped[(arm, v)], field)) for v in values
              if (arm, v) in grouped]
    points = [(x, y) for x, y in points if y is not None]
    if points:
      series[arm] = points
  return series


def plot_steps(runs, key, arms, path, title, target, ylabel=None, xlabel=None,
               field='steps_to_target', perfect=True, labels=None, values=None, bounds=False):
  """Updates to the target against the key, log-log, with the line of perfect scaling.

  ``ylabel`` and ``xlabel`` name the axes (default: updates to the target
  test accuracy, and the key); ``labels`` the arms in the legend (default:
  their own names). ``field='seconds_to_target'`` with ``perfect=False``
  draws the wall time to the target instead, without the line. ``values``:
  the key values of the x axis, and of the line (default: the runs').
  ``bounds``: where an arm ran without reaching the target, a hollow
  triangle in its colour at the length of its runs (:func:`unreached`).
  """
  grouped = study.groups(runs, key)
  values = [v for v in (values or study.ordered_values(runs, key)) if study.number(v)]
  series = steps_series(runs, key, arms, values, field)
  if not series:
    return False
  plt = report.pyplot()
  colours = plt.rcParams['axes.prop_cycle'].by_key()['color']
  figure, axes = plt.subplots(figsize=(7, 4.5))
  for i, arm in enumerate(arms):
    marker, size = MARKERS[i % len(MARKERS)]
    if arm in series:
      points = series[arm]
      axes.plot([x for x, _ in points], [y for _, y in points], marker=marker, markersize=size,
                color=colours[i % len(colours)], label=(labels or {}).get(arm, arm))
  if bounds:
    unit = 'update' if field == 'steps_to_target' else 'second'
    legend = f'not reached: more than the run\'s last {unit}'
    bounded = unreached(grouped, arms, values, field)
    for i, arm in enumerate(arms):
      points = bounded.get(arm)
      if points:
        axes.plot([x for x, _ in points], [y for _, y in points], linestyle='none', marker='^',
                  markersize=11 - 2 * (i % len(MARKERS)), markerfacecolor='none',
                  color=colours[i % len(colours)], label=legend)
        legend = None  # one legend entry for every arm's triangles
  xs = [study.number(v) for v in values]
  if perfect:
    x0 = min(x for points in series.values() for x, _ in points)
    y0 = min(y for points in series.values() for x, y in points if x == x0)
    axes.plot(xs, [y0 * x0 / x for x in xs], linestyle='--', color='grey',
              label='perfect scaling (updates ∝ 1/batch)')
  axes.set_yscale('log')
  report.style_x_axis(axes, 'log', xs, [str(v) for v in values])  # (minor ticks off, both axes)
  # The y axis's 2..9 ticks back, labelled within two decades: a short axis reads without a ruler.
  axes.yaxis.set_minor_locator(ticker().LogLocator(subs='auto'))
  axes.yaxis.set_minor_formatter(ticker().LogFormatterSciNotation(
      labelOnlyBase=False, minor_thresholds=(2, 1)))
  axes.set_xlabel(xlabel or key)
  axes.set_ylabel(ylabel or f'updates to {target * 100:g} % test accuracy')
  if title:
    axes.set_title(title)
  axes.grid(True, which='both', alpha=0.3)
  axes.legend()
  report.save_figure(plt, figure, path)
  return True
