"""Combine the sweeps of a study (one sweep directory per arm) into one table and one plot.

  python scripts/study_report.py --arm 'SGD, linear lr'=runs/large_batch/sgd \\
      --arm 'LARS'=runs/large_batch/lars --key batch_size_per_gpu --out runs/large_batch

Reads every finished point (``result.json``) and failed point (``error.txt``)
of each sweep directory written by ``scripts/sweep.py``, whichever sweep
invocation ran it (so seeds added later count), groups them by the value of
``--key`` and writes to ``--out``:

- ``study.csv``: one row per run (arm, key value, seed, learning rate, metrics,
  updates and wall time to the target accuracy, wall time);
- ``study.md``: one row per arm and key value: mean ± std of the test accuracy
  over seeds, its gap to the best result at the smallest key value, the
  learning rate, the updates, the updates and wall time to first reach
  ``--target`` test accuracy, and the wall time per run. Where an arm ran
  several learning rates at one key value (a tuning grid), the row is the
  learning rate with the best mean accuracy, and a second table lists the grid;
- ``study.png``: accuracy against the key, one line per arm, std error bars;
- ``steps.png``: updates to the target against the key, log-log, one line per
  arm (for a tuning grid, the fewest mean updates over its learning rates, as
  Shallue et al. 2019 measure steps to result), with the line of perfect scaling.

The updates to the target come from the ``eval at step N: ... top-1 A`` lines
of each run's ``run.log`` (the first evaluation with ``A >= target``), the wall
time from the same evaluation's TensorBoard event, counted from the first event
the run wrote (the start of training).
"""

import argparse
import csv
import glob
import json
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  pylint: disable=wrong-import-position

LR_KEY = 'lr_policy_params.learning_rate'
DEFAULT_TARGET = 0.90
# Not a config key: batch_size_per_gpu x iter_size (one worker), so that 16K
# run as two micro-batches of 8K is told apart from 8K.
GLOBAL_BATCH = 'global_batch'
DOC_BEGIN = '<!-- study_report: begin -->'
DOC_END = '<!-- study_report: end -->'


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--arm', action='append', required=True, metavar='LABEL=DIR',
                      help='a sweep directory and its label; repeatable, in table order')
  parser.add_argument('--key', required=True,
                      help=f'the swept config key to group by, or {GLOBAL_BATCH} '
                           '(batch_size_per_gpu x iter_size)')
  parser.add_argument('--out', required=True, help='where study.csv/.md/.png go')
  parser.add_argument('--title', default='', help='plot title')
  parser.add_argument('--target', type=float, default=DEFAULT_TARGET,
                      help='test accuracy (a fraction) for updates and time to accuracy')
  parser.add_argument('--doc', metavar='FILE.md',
                      help=f'also put the table into FILE.md, between the lines {DOC_BEGIN} '
                           f'and {DOC_END}')
  parser.add_argument('--doc-images', metavar='PREFIX',
                      help='also copy the plots to PREFIX_accuracy.png and PREFIX_steps.png')
  parser.add_argument('--best-lr', metavar='VALUE',
                      help='print only the learning rate with the best mean accuracy at this '
                           'key value (one --arm), and exit (status 3 when none finished)')
  return parser.parse_args(argv)


def _number(text):
  try:
    return float(text)
  except (TypeError, ValueError):
    return None


def eval_curve(logdir):
  """``[(step, top-1 accuracy)]`` of every evaluation in the run's ``run.log``."""
  try:
    with open(os.path.join(logdir, sweep.LOG_FILE), encoding='utf-8', errors='replace') as f:
      lines = f.read().splitlines()
  except OSError:
    return []
  matches = (sweep.EVAL_RE.match(line.strip()) for line in lines)
  return [(int(m.group(1)), float(m.group(3))) for m in matches if m]


def eval_seconds(logdir):
  """``{step: seconds from the run's first event to that evaluation's event}``, or {}."""
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=import-outside-toplevel
  starts, times = [], {}
  for directory, tag in ((logdir, None), (os.path.join(logdir, 'eval'), 'accuracy')):
    if not os.path.isdir(directory):
      return {}
    events = event_accumulator.EventAccumulator(directory, size_guidance={'tensors': 0})
    events.Reload()
    if tag is None:
      starts.append(events.FirstEventTimestamp())
    elif tag in events.Tags()['tensors']:
      times = {e.step: e.wall_time for e in events.Tensors(tag)}
  return {step: wall - starts[0] for step, wall in times.items()}


def to_target(logdir, target):
  """(updates, seconds) to the first evaluation with accuracy >= target; None where not reached."""
  reached = [step for step, accuracy in eval_curve(logdir) if accuracy >= target]
  if not reached:
    return None, None
  try:
    seconds = eval_seconds(logdir).get(reached[0])
  except (ValueError, OSError):
    seconds = None
  return reached[0], seconds


def read_runs(label, directory, key, target=DEFAULT_TARGET):
  """One dict per run directory of a sweep (finished or failed), sorted by key value and seed."""
  runs = []
  for logdir in sorted(glob.glob(os.path.join(directory, '*', ''))):
    logdir = logdir.rstrip(os.sep)
    result = sweep.read_result(logdir)
    if result is None:
      error = sweep.read_error(logdir)
      if error is None:
        continue  # running or never started
      runs.append({'arm': label, 'status': 'failed', 'error': error, 'logdir': logdir,
                   key: _value_from_name(logdir, key), 'seed': _value_from_name(logdir, 'seed'),
                   'lr': _value_from_name(logdir, LR_KEY)})
      continue
    values = dict(result.get('point') or {})
    values.update(result.get('derived') or {})
    for override in result.get('overrides') or []:
      name, _, text = override.partition('=')
      values.setdefault(name, sweep.parse_value(text))
    metrics = result.get('metrics') or {}
    steps_to, seconds_to = to_target(logdir, target)
    runs.append({'arm': label, 'status': 'ok', 'error': '', 'logdir': logdir,
                 key: _key_value(values, key), 'seed': result.get('seed'),
                 'lr': values.get(LR_KEY),
                 'accuracy': metrics.get('accuracy'), 'top5': metrics.get('top5'),
                 'loss': metrics.get('loss'), 'steps': metrics.get('steps'),
                 'steps_to_target': steps_to, 'seconds_to_target': seconds_to,
                 'wall_s': result.get('wall_s')})
  runs.sort(key=lambda r: (_number(r[key]) or 0.0, r['seed'] if r['seed'] is not None else -1))
  return runs


def _key_value(values, key):
  if key != GLOBAL_BATCH:
    return values.get(key)
  batch = values.get('batch_size_per_gpu')
  return None if batch is None else int(batch) * int(values.get('iter_size') or 1)


def _value_from_name(logdir, name):
  """A value from a point directory name such as ``batch_size_per_gpu=256__seed=0``."""
  if name == GLOBAL_BATCH:
    return _key_value({k: _value_from_name(logdir, k) for k in ('batch_size_per_gpu', 'iter_size')},
                      name)
  for part in os.path.basename(logdir).split('__'):
    key, _, text = part.partition('=')
    if key == name:
      return sweep.parse_value(text)
  return None


def groups(runs, key):
  """``{(arm, key value): [runs]}`` in arm order, then key order."""
  result = {}
  for run in runs:
    result.setdefault((run['arm'], run[key]), []).append(run)
  return result


def by_learning_rate(members):
  """``{lr: [runs]}`` of one arm at one key value; failed runs under the lr their name gives."""
  result = {}
  for run in members:
    lr = run.get('lr')
    result.setdefault(None if lr is None else round(lr, 6), []).append(run)
  return result


def _accuracy_mean(runs):
  values = [r['accuracy'] for r in runs if r['status'] == 'ok' and r['accuracy'] is not None]
  return statistics.fmean(values) if values else None


def chosen(members):
  """The runs of the learning rate with the best mean accuracy (more seeds break ties)."""
  grid = by_learning_rate(members)
  means = {lr: _accuracy_mean(runs) for lr, runs in grid.items()}
  scored = [(mean, len(grid[lr]), lr) for lr, mean in means.items() if mean is not None]
  if not scored:
    return members
  best = max(scored, key=lambda t: (t[0], t[1]))[2]
  return grid[best] + (grid.get(None, []) if best is not None else [])


def _reached_text(runs, field, digits):
  ok = [r for r in runs if r['status'] == 'ok']
  values = [r[field] for r in ok if r.get(field) is not None]
  if not values:
    return 'not reached' if ok else 'n/a'
  text = sweep._mean_std_text(values, digits)  # pylint: disable=protected-access
  return text if len(values) == len(ok) else f'{text} ({len(values)}/{len(ok)} reached)'


def _ordered_values(runs, key):
  return sorted({run[key] for run in runs}, key=lambda v: _number(v) or 0.0)


def best_at_smallest(runs, key, arms):
  """The best mean accuracy over the arms at the smallest key value, or None."""
  grouped = groups(runs, key)
  values = _ordered_values(runs, key)
  means = [_accuracy_mean(chosen(grouped[(arm, values[0])])) for arm in arms
           if values and (arm, values[0]) in grouped]
  means = [m for m in means if m is not None]
  return max(means) if means else None


def markdown(runs, key, arms, target=DEFAULT_TARGET):
  percent = f'{target * 100:g} %'
  lines = [f'| {key} | arm | learning rate | seeds ok | test accuracy | gap (points) | steps '
           f'| steps to {percent} | wall to {percent} (s) | wall (s) per run |',
           '|---|---|---|---|---|---|---|---|---|---|']
  grouped = groups(runs, key)
  reference = best_at_smallest(runs, key, arms)
  tuned = []
  for value in _ordered_values(runs, key):
    for arm in arms:
      members = grouped.get((arm, value))
      if not members:
        continue
      if len([lr for lr in by_learning_rate(members) if lr is not None]) > 1:
        tuned.append((value, arm, members))
      rows = chosen(members)
      ok = [r for r in rows if r['status'] == 'ok']
      lrs = sorted({round(r['lr'], 4) for r in ok if r.get('lr') is not None})
      steps = sorted({r['steps'] for r in ok if r.get('steps') is not None})
      mean = _accuracy_mean(rows)
      gap = 'n/a' if mean is None or reference is None else f'{(mean - reference) * 100:+.2f}'
      lines.append('| ' + ' | '.join([
          str(value), arm, ', '.join(f'{lr:g}' for lr in lrs) or 'n/a',
          f'{len(ok)}/{len(rows)}',
          sweep._mean_std_text([r['accuracy'] for r in ok]),  # pylint: disable=protected-access
          gap, ', '.join(map(str, steps)) or 'n/a',
          _reached_text(rows, 'steps_to_target', 0), _reached_text(rows, 'seconds_to_target', 0),
          sweep._mean_std_text([r['wall_s'] for r in ok], 0)]) + ' |')  # pylint: disable=protected-access
  if tuned:
    lines += ['', 'Learning-rate grids (the row above is the learning rate in bold):', '',
              f'| {key} | arm | learning rate | seeds ok | test accuracy | steps to {percent} |',
              '|---|---|---|---|---|---|']
    for value, arm, members in tuned:
      best = {r['logdir'] for r in chosen(members)}
      for lr, lr_runs in sorted(by_learning_rate(members).items(),
                                key=lambda item: -1.0 if item[0] is None else item[0]):
        ok = [r for r in lr_runs if r['status'] == 'ok']
        label = 'n/a' if lr is None else f'{lr:g}'
        if best & {r['logdir'] for r in lr_runs} and lr is not None:
          label = f'**{label}**'
        lines.append('| ' + ' | '.join([
            str(value), arm, label, f'{len(ok)}/{len(lr_runs)}',
            sweep._mean_std_text([r['accuracy'] for r in ok]),  # pylint: disable=protected-access
            _reached_text(lr_runs, 'steps_to_target', 0)]) + ' |')
  failed = [r for r in runs if r['status'] != 'ok']
  if failed:
    lines += ['', 'Failed runs:', '']
    lines += [f'- {r["arm"]}, `{os.path.basename(r["logdir"])}`: {r["error"]}' for r in failed]
  return '\n'.join(lines) + '\n'


def steps_to_target(members):
  """Fewest mean updates to the target over an arm's learning rates at one key value, or None.

  A learning rate counts only when every finished seed reached the target.
  """
  best = None
  for lr_runs in by_learning_rate(members).values():
    ok = [r for r in lr_runs if r['status'] == 'ok']
    steps = [r['steps_to_target'] for r in ok if r.get('steps_to_target') is not None]
    if ok and len(steps) == len(ok):
      mean = statistics.fmean(steps)
      best = mean if best is None else min(best, mean)
  return best


def plot(runs, key, arms, path, title):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  grouped = groups([r for r in runs if r['status'] == 'ok' and r['accuracy'] is not None], key)
  if not grouped:
    return False
  values = sorted({v for _, v in grouped}, key=lambda v: _number(v) or 0.0)
  scale = sweep.x_scale(values)
  figure, axes = plt.subplots(figsize=(7, 4.5))
  for arm in arms:
    xs = [v for v in values if (arm, v) in grouped]
    if not xs:
      continue
    accuracy = [[r['accuracy'] * 100.0 for r in grouped[(arm, v)]] for v in xs]
    means = [statistics.fmean(a) for a in accuracy]
    stds = [statistics.stdev(a) if len(a) > 1 else 0.0 for a in accuracy]
    positions = xs if scale != 'category' else [values.index(v) for v in xs]
    axes.errorbar(positions, means, yerr=stds, marker='o', capsize=4, label=arm)
  if scale == 'log':
    axes.set_xscale('log')
    axes.set_xticks(values)
    axes.set_xticklabels([str(v) for v in values])
    axes.minorticks_off()
  elif scale == 'category':
    axes.set_xticks(range(len(values)))
    axes.set_xticklabels([str(v) for v in values])
  axes.set_xlabel(key)
  axes.set_ylabel('test accuracy, top-1 (%)')
  if title:
    axes.set_title(title)
  axes.grid(True, alpha=0.3)
  axes.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)
  return True


def plot_steps(runs, key, arms, path, title, target):
  """Updates to the target against the key, log-log, with the line of perfect scaling."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  grouped = groups(runs, key)
  values = [v for v in _ordered_values(runs, key) if _number(v)]
  series = {}
  for arm in arms:
    points = [(_number(v), steps_to_target(grouped[(arm, v)])) for v in values
              if (arm, v) in grouped]
    points = [(x, y) for x, y in points if y is not None]
    if points:
      series[arm] = points
  if not series:
    return False
  figure, axes = plt.subplots(figsize=(7, 4.5))
  for arm, points in series.items():
    axes.plot([x for x, _ in points], [y for _, y in points], marker='o', label=arm)
  x0 = min(x for points in series.values() for x, _ in points)
  y0 = min(y for points in series.values() for x, y in points if x == x0)
  xs = [_number(v) for v in values]
  axes.plot(xs, [y0 * x0 / x for x in xs], linestyle='--', color='grey',
            label='perfect scaling (updates ∝ 1/batch)')
  axes.set_xscale('log')
  axes.set_yscale('log')
  axes.set_xticks(xs)
  axes.set_xticklabels([str(v) for v in values])
  axes.minorticks_off()
  axes.set_xlabel(key)
  axes.set_ylabel(f'updates to {target * 100:g} % test accuracy')
  if title:
    axes.set_title(title)
  axes.grid(True, which='both', alpha=0.3)
  axes.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)
  return True


def write_into_doc(path, table, images=()):
  """Replaces the text between the DOC_BEGIN and DOC_END lines of ``path`` with ``table``.

  ``images``: ``(alt text, image path)`` pairs, linked after the table
  relative to the page.

  Raises:
    ValueError: when the file lacks the two lines, in that order.
  """
  with open(path, encoding='utf-8') as f:
    text = f.read()
  begin, end = text.find(DOC_BEGIN), text.find(DOC_END)
  if begin < 0 or end < begin:
    raise ValueError(f'{path}: no {DOC_BEGIN} ... {DOC_END} block to write the table into')
  begin += len(DOC_BEGIN)
  links = ''.join(f'\n![{alt}]({os.path.relpath(image, os.path.dirname(os.path.abspath(path)))})\n'
                  for alt, image in images)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(text[:begin] + '\n' + table + links + text[end:])


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  arms, runs = [], []
  for text in args.arm:
    label, sep, directory = text.partition('=')
    if not sep or not label or not directory:
      print(f'error: --arm {text!r}: expected LABEL=DIR', file=sys.stderr)
      return 2
    if not os.path.isdir(directory):
      print(f'error: --arm {text!r}: {directory} is not a directory', file=sys.stderr)
      return 2
    arms.append(label)
    runs += read_runs(label, directory, args.key, args.target)
  if args.best_lr is not None:
    if len(arms) != 1:
      print('error: --best-lr takes exactly one --arm', file=sys.stderr)
      return 2
    members = [r for r in runs if str(r[args.key]) == args.best_lr]
    best = [r['lr'] for r in chosen(members) if r['status'] == 'ok' and r.get('lr') is not None]
    if not best:
      return 3
    print(f'{best[0]:g}')
    return 0
  if not runs:
    print(f'error: no finished or failed runs under {", ".join(args.arm)}', file=sys.stderr)
    return 2
  os.makedirs(args.out, exist_ok=True)
  columns = ['arm', args.key, 'seed', 'status', 'lr', 'accuracy', 'top5', 'loss', 'steps',
             'steps_to_target', 'seconds_to_target', 'wall_s', 'logdir', 'error']
  with open(os.path.join(args.out, 'study.csv'), 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    for run in runs:
      writer.writerow({c: '' if run.get(c) is None else run.get(c) for c in columns})
  table = markdown(runs, args.key, arms, args.target)
  with open(os.path.join(args.out, 'study.md'), 'w', encoding='utf-8') as f:
    f.write(table)
  plotted = plot(runs, args.key, arms, os.path.join(args.out, 'study.png'), args.title)
  plotted_steps = plot_steps(runs, args.key, arms, os.path.join(args.out, 'steps.png'),
                             args.title, args.target)
  images = []
  if args.doc_images:
    for name, alt, plotted_now in (('accuracy', 'test accuracy against batch size', plotted),
                                   ('steps', f'updates to {args.target * 100:g} % test accuracy '
                                             'against batch size', plotted_steps)):
      if plotted_now:
        image = f'{args.doc_images}_{name}.png'
        shutil.copyfile(os.path.join(args.out, 'study.png' if name == 'accuracy' else 'steps.png'),
                        image)
        images.append((alt, os.path.abspath(image)))
  if args.doc:
    try:
      write_into_doc(args.doc, table, images)
    except (OSError, ValueError) as exc:
      print(f'error: --doc: {exc}', file=sys.stderr)
      return 2
  print(table, end='')
  print(f'wrote {os.path.join(args.out, "study.csv")}, study.md'
        + (', study.png' if plotted else ' (nothing to plot)')
        + (', steps.png' if plotted_steps else ' (no run reached the target)'))
  return 0


if __name__ == '__main__':
  sys.exit(main())
