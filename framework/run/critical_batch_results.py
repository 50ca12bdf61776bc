"""The records and the summary of ``--mode=critical_batch``; no TensorFlow.

The mode (``framework.run.critical_batch``) branches from points of the
config's run at 1x, 2x, 4x, ... its global batch and fits S(B) at each
(``core.critical_batch``). This module holds what needs no model:

- the ladder of batches (:func:`branch_batches`);
- the records, each written whole (a branch is finished or absent), and the
  settings a re-run must share with a finished branch (:func:`settings_change`);
- the summary: the table, ``critical_batch.json``, ``critical_batch.png``,
  the schedule snippet and the last lines.
"""

import json
import math
import os

from core.files import write_atomically
from core.files import write_text_atomically

# The directory of the mode's records inside the run directory.
RESULTS_DIR = 'critical_batch'
SUMMARY_NAME = 'critical_batch.json'
PLOT_NAME = 'critical_batch.png'
# The growing batch the measurement proposes, as a config snippet.
SCHEDULE_NAME = 'critical_batch_schedule.yaml'
# Written before the mode trains the config's run to its points: the run's
# checkpoints are then this mode's, to go on with after a stop.
WARMUP_NAME = 'warmup.json'
# The loss curve of the run this mode trained, looked at as it trained: the 1x branch.
RUN_CURVE_NAME = 'run_curve.json'
# Per point: the held-out loss at its checkpoint and the config it was measured with.
START_NAME = 'start.json'

# What a re-run must share with a finished branch for its result to stand.
SETTINGS = ('checkpoint', 'checkpoint_step', 'window', 'fewest', 'most', 'eval_every',
            'heldout_batches', 'branch_loss', 'batch_size_per_gpu', 'ramp_updates')


class ResultsError(Exception):
  """A request the branches cannot meet, or records that do not fit it: one line."""


def branch_batches(base, max_batch):
  """The branches' global batches: ``base``, 2·base, 4·base, ... up to ``max_batch``.

  Raises:
    ResultsError: ``max_batch`` below twice ``base`` (one batch fits nothing).
  """
  if max_batch < 2 * base:
    raise ResultsError(f'--max_batch: {max_batch} leaves only the config\'s global batch {base} '
                       f'to branch at, and a fit needs two batches or more; allowed: {2 * base} '
                       f'or more (the branches run at 1x, 2x, 4x, ... of it; the default is '
                       f'{16 * base}, 16x)')
  batches = [base]
  while batches[-1] * 2 <= max_batch:
    batches.append(batches[-1] * 2)
  return batches


def point_dir(root, step):
  return os.path.join(root, f'step_{step}')


def branch_path(directory, batch):
  return os.path.join(directory, f'branch_{batch}.json')


def read_json(path):
  """A JSON file's dict, or None (none, or one left unreadable by a failed disk)."""
  try:
    with open(path, encoding='utf-8') as f:
      value = json.load(f)
  except (OSError, ValueError):
    return None
  return value if isinstance(value, dict) else None


def read_branch(directory, batch):
  """A finished branch's record, or None."""
  record = read_json(branch_path(directory, batch))
  return record if record is not None and 'settings' in record and 'curve' in record else None


def settings_change(record, settings):
  """The first setting a finished branch's record has otherwise than ``settings``, or None."""
  saved = record.get('settings', {})
  for key in SETTINGS:
    old, new = saved.get(key), settings.get(key)
    same = (math.isclose(old, new, rel_tol=1e-9) if isinstance(old, float)
            and isinstance(new, float) else old == new)
    if not same:
      return f'{key} {old!r}, now {new!r}'
  return None


def plain(value):
  """``value`` as strict JSON takes it: infinities and NaN as None, in dicts and lists too."""
  if isinstance(value, float):
    return value if math.isfinite(value) else None
  if isinstance(value, dict):
    return {str(k): plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [plain(v) for v in value]
  return value


def write_json(path, value):
  """``value`` as indented JSON, written whole or not at all."""
  write_text_atomically(path, json.dumps(plain(value), indent=2, allow_nan=False) + '\n')


def finite_or_none(value):
  return value if value is not None and math.isfinite(value) else None


def describe_batch(value):
  """A measured batch in few digits and thousands: ``4,281``, ``12.4``, ``-3.1e-07``."""
  return f'{value:,.0f}' if abs(value) >= 100 else f'{value:.3g}'


def describe_interval(interval, largest):
  """``2,700-6,300``; an open end past the ladder as ``more than 4,096``."""
  if not interval or interval[0] is None:
    return 'no interval'
  low = describe_batch(interval[0])
  high = interval[1]
  if high is None or math.isinf(high):
    return f'{low} to more than {largest:,}'
  return f'{low}-{describe_batch(high)}'


def open_above(point):
  """Whether a point's fit says nothing of where the updates level off: past its largest branch."""
  if not point.get('measured', True):
    return False
  if point.get('b_crit') is None:
    return point.get('shape') == 'no_level'
  interval = point.get('interval')
  return bool(interval) and (interval[1] is None or math.isinf(interval[1]))


def describe_estimate(point, largest):
  """A point's B_crit with its interval, or why it has none (``largest``: the point's own, if it says)."""
  largest = point.get('largest_batch') or largest
  if not point.get('measured', True):
    return 'not measured'
  if point.get('b_crit') is None:
    shape = point.get('shape')
    if shape == 'no_level':
      return f'more than {largest:,} (the updates still halve at the largest branch)'
    if shape == 'no_gain':
      return 'below the 1x batch (a larger batch saves no updates)'
    return 'no fit (fewer than two branches reached the target)'
  return (f'{describe_batch(point["b_crit"])} '
          f'({describe_interval(point.get("interval"), largest)})')


def table_lines(points, batches, unit, summary=None):
  """The table of the points, one line each: updates to the target by batch, the fit, B_simple.

  With the ``summary``, a last row for the whole run: its updates at each
  batch every point reached (the parts' summed) and their fit, the answer.
  """
  head = f'{"step":>7} {"of run":>6} ' + ' '.join(f'{b:>7}' for b in batches)
  lines = [head + f'  {"B_crit (90% interval)":<28} {"B_simple":>9} {"ratio":>6}']
  for point in points:
    cells = []
    for batch in batches:
      if str(batch) not in point['updates'] and batch not in point['updates']:
        cells.append(f'{"":>7}')  # not run from this point: past its ladder
        continue
      updates = point['updates'].get(str(batch), point['updates'].get(batch))
      cells.append(f'{"-" if updates is None else f"{updates:.1f}":>7}')
    noise = point.get('b_simple')
    ratio = (noise / point['b_crit'] if noise is not None and point.get('b_crit')
             else None)
    lines.append(f'{point["step"]:>7} {100 * point["share_of_run"]:>5.0f}% ' + ' '.join(cells)
                 + f'  {describe_estimate(point, batches[-1]):<28} '
                 f'{"-" if noise is None else describe_batch(noise):>9} '
                 f'{"-" if ratio is None else f"{ratio:.2f}":>6}')
  if summary is not None and summary.get('run_updates'):
    updates = summary['run_updates']
    cells = [f'{f"{updates[str(b)]:.0f}" if str(b) in updates else "":>7}' for b in batches]
    lines.append(f'{"run":>7} {"":>6} ' + ' '.join(cells) + f'  {describe_run(summary)}')
  return [line.rstrip() for line in lines] + [
      f'(updates to each point\'s target by global batch in {unit}, "-": not reached within the '
      'cap, blank: not run; ratio: B_simple / B_crit'
      + ('; run: the whole run\'s updates, its parts\' summed, at the batches every point '
         'reached, and their fit' if summary is not None and summary.get('run_updates') else '')
      + ')']


def run_largest(summary):
  """The largest batch the whole run's fit has (every point reached it): what an open upper
  end of its interval is "more than"; the ladder's top before any was measured."""
  return max([int(b) for b in summary.get('run_updates') or {}] or [summary['batches'][-1]])


def describe_run(summary):
  """The whole run's B_crit with its interval, or why it has none."""
  if summary['critical_batch'] is not None:
    return (f'{describe_batch(summary["critical_batch"])} '
            f'({describe_interval(summary.get("interval"), run_largest(summary))})')
  if summary.get('critical_batch_at_least'):
    return (f'more than {describe_batch(summary["critical_batch_at_least"])} '
            '(a lower bound: the run\'s updates still halve there)')
  if (summary.get('run_fit') or {}).get('shape') == 'no_gain':
    return 'below the 1x batch (a larger batch saves the run no updates)'
  return 'no fit (fewer than two batches reached every point\'s target)'



def plot(path, points, run_answer, unit, title):
  """``critical_batch.png``: B_crit and B_simple along the run, and each point's S(B) with its fit.

  Written through a temporary file, so a failed write leaves no partial plot.
  """
  # pylint: disable=import-outside-toplevel
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  figure = Figure(figsize=(10.0, 4.2))
  FigureCanvasAgg(figure)
  along, fits = figure.subplots(1, 2)
  shares = [100 * p['share_of_run'] for p in points]
  measured = [(s, p) for s, p in zip(shares, points) if p.get('b_crit') is not None]
  if measured:
    xs = [s for s, _ in measured]
    ys = [p['b_crit'] for _, p in measured]
    low = [max(y - (p['interval'][0] if p.get('interval') else y), 0) for y, (_, p)
           in zip(ys, measured)]
    high = [((p['interval'][1] if p['interval'][1] is not None else y) - y)
            if p.get('interval') else 0 for y, (_, p) in zip(ys, measured)]
    along.errorbar(xs, ys, yerr=[low, high], fmt='o-', color='tab:blue', capsize=3,
                   label='B_crit (90% interval)')
  noise = [(s, p['b_simple']) for s, p in zip(shares, points) if p.get('b_simple')]
  if noise:
    along.plot(*zip(*noise), 's--', color='tab:orange', label='B_simple')
  if run_answer is not None:
    along.axhline(run_answer, color='tab:green', linewidth=1.2,
                  label=f'whole run {describe_batch(run_answer)}')
  along.set_yscale('log', base=2)
  along.set_xlim(0, 100)
  along.set_xlabel('point of the run (% of its steps)')
  along.set_ylabel(f'batch ({unit}, log2 axis)')
  along.grid(True, alpha=0.3)
  along.legend(fontsize=8)
  for point in points:
    steps = [(int(b), u) for b, u in point['updates'].items() if u is not None]
    if not steps:
      continue
    steps.sort()
    line = fits.plot(*zip(*steps), 'o', label=f'step {point["step"]}')[0]
    if point.get('b_crit') is not None:
      batches = [steps[0][0] * 2 ** (k / 8) for k in range(8 * 6)]
      batches = [b for b in batches if b <= steps[-1][0] * 1.01]
      fits.plot(batches, [point['s_min'] * (1 + point['b_crit'] / b) for b in batches], '-',
                color=line.get_color(), linewidth=1)
  fits.set_xscale('log', base=2)
  fits.set_yscale('log')
  fits.set_xlabel(f'global batch ({unit}, log2 axis)')
  fits.set_ylabel('updates to the point\'s target')
  fits.grid(True, alpha=0.3)
  fits.legend(fontsize=8)
  figure.suptitle(title, fontsize=9)
  figure.tight_layout()
  write_atomically(path, lambda temp: figure.savefig(temp, dpi=110), suffix='.png')


def schedule_text(batches, boundaries, config):
  """The proposed growing batch as a config snippet (YAML), headed by where it comes from."""
  return (f'# The growing batch --mode=critical_batch proposes for {config}: from each measured\n'
          '# point on, the largest power-of-two multiple of the batch not above the lower end\n'
          '# of the point\'s interval of B_crit. Add these keys to the config, or pass them\n'
          '# with --set (critical_batch.json has them as "schedule").\n'
          'batch_policy: steps\n'
          f'batch_policy_params: {{batches: [{", ".join(map(str, batches))}], '
          f'boundaries: [{", ".join(map(str, boundaries))}]}}\n')


def set_arguments(batches, boundaries):
  """The ``--set`` arguments that run the proposed schedule."""
  return (f"--set batch_policy=steps --set 'batch_policy_params={{batches: "
          f"[{', '.join(map(str, batches))}], boundaries: [{', '.join(map(str, boundaries))}]}}'")


def points_text(measured, points):
  """``3 points``, ``1 point``, or ``2 of 3 points`` where some measured nothing."""
  return (f'{measured} of ' if measured < points else '') + f'{points} point' + (
      's' if points > 1 else '')


def last_lines(summary):
  """The measurement's last lines: the fixed batch, the growing batch, the noise scale."""
  unit = summary['unit']
  answer = summary['critical_batch']
  measured = [p for p in summary['points'] if p.get('measured', True)]
  if not measured:
    first = ('critical batch: none measured (at no point did the 1x branch learn enough to '
             'measure anything: ' + summary['points'][0]['why'] + ')'
             if summary['points'] and summary['points'][0].get('why') else
             'critical batch: none measured')
  elif answer is None and summary.get('critical_batch_at_least'):
    first = (f'critical batch: more than {describe_batch(summary["critical_batch_at_least"])} '
             f'{unit} for a fixed batch over the whole run, a lower bound (the run\'s updates, '
             'its parts\' summed, still halve at the largest batch every point reached), from '
             f'{points_text(len(measured), len(summary["points"]))}')
  elif answer is None:
    first = f'critical batch: no fit for the whole run ({describe_run(summary)})'
  else:
    first = (f'critical batch: {describe_batch(answer)} {unit} '
             f'({describe_interval(summary["interval"], run_largest(summary))}) for a fixed '
             f'batch over the whole run, from {points_text(len(measured), len(summary["points"]))}')
  schedule = summary.get('schedule')
  if schedule is None:
    second = (f'growing batch: none proposed (no point measured a critical batch of '
              f'{2 * summary["base_batch"]:,} {unit} or more)')
  else:
    second = (f'growing batch: {" -> ".join(f"{b:,}" for b in schedule["batches"])} {unit} at '
              f'steps {", ".join(map(str, schedule["boundaries"]))}: '
              f'{set_arguments(schedule["batches"], schedule["boundaries"])}')
  noise = [p for p in summary['points'] if p.get('b_simple') is not None]
  if noise:
    third = ('noise scale (B_simple): ' + ', '.join(
        f'{describe_batch(p["b_simple"])} at step {p["step"]}' for p in noise) + f' {unit}')
  elif summary.get('noise_scale_setting') is False:
    third = 'noise scale (B_simple): not measured (the config says noise_scale: false)'
  else:
    third = 'noise scale (B_simple): not measured (no branch measured a finite estimate)'
  return [first, second, third]
