"""Combine the sweeps of a study (one sweep directory per arm) into one table and one plot.

  python scripts/study_report.py --arm 'SGD, linear lr'=runs/large_batch/sgd \\
      --arm 'LARS'=runs/large_batch/lars --key batch_size_per_gpu --out runs/large_batch

Reads every finished point (``result.json``) and failed point (``error.txt``)
of each sweep directory written by ``scripts/sweep.py``, whichever sweep
invocation ran it (so seeds added later count), groups them by the value of
``--key`` and writes to ``--out``:

- ``study.csv``: one row per run (arm, key value, seed, learning rate, metrics, wall time);
- ``study.md``: one row per arm and key value: mean ± std of the test accuracy
  over seeds, the learning rate, the steps and the wall time per run;
- ``study.png``: accuracy against the key, one line per arm, std error bars.
"""

import argparse
import csv
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  pylint: disable=wrong-import-position

LR_KEY = 'lr_policy_params.learning_rate'


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--arm', action='append', required=True, metavar='LABEL=DIR',
                      help='a sweep directory and its label; repeatable, in table order')
  parser.add_argument('--key', required=True, help='the swept config key to group by')
  parser.add_argument('--out', required=True, help='where study.csv/.md/.png go')
  parser.add_argument('--title', default='', help='plot title')
  return parser.parse_args(argv)


def _number(text):
  try:
    return float(text)
  except (TypeError, ValueError):
    return None


def read_runs(label, directory, key):
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
                   key: _value_from_name(logdir, key), 'seed': _value_from_name(logdir, 'seed')})
      continue
    values = dict(result.get('point') or {})
    values.update(result.get('derived') or {})
    for override in result.get('overrides') or []:
      name, _, text = override.partition('=')
      values.setdefault(name, sweep.parse_value(text))
    metrics = result.get('metrics') or {}
    runs.append({'arm': label, 'status': 'ok', 'error': '', 'logdir': logdir,
                 key: values.get(key), 'seed': result.get('seed'), 'lr': values.get(LR_KEY),
                 'accuracy': metrics.get('accuracy'), 'top5': metrics.get('top5'),
                 'loss': metrics.get('loss'), 'steps': metrics.get('steps'),
                 'wall_s': result.get('wall_s')})
  runs.sort(key=lambda r: (_number(r[key]) or 0.0, r['seed'] if r['seed'] is not None else -1))
  return runs


def _value_from_name(logdir, name):
  """A value from a point directory name such as ``batch_size_per_gpu=256__seed=0``."""
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


def markdown(runs, key, arms):
  lines = [f'| {key} | arm | learning rate | seeds ok | test accuracy | steps | wall (s) per run |',
           '|---|---|---|---|---|---|---|']
  grouped = groups(runs, key)
  values = sorted({run[key] for run in runs}, key=lambda v: _number(v) or 0.0)
  for value in values:
    for arm in arms:
      members = grouped.get((arm, value))
      if not members:
        continue
      ok = [r for r in members if r['status'] == 'ok']
      lrs = sorted({round(r['lr'], 4) for r in ok if r.get('lr') is not None})
      steps = sorted({r['steps'] for r in ok if r.get('steps') is not None})
      lines.append('| ' + ' | '.join([
          str(value), arm, ', '.join(f'{lr:g}' for lr in lrs) or 'n/a',
          f'{len(ok)}/{len(members)}',
          sweep._mean_std_text([r['accuracy'] for r in ok]),  # pylint: disable=protected-access
          ', '.join(map(str, steps)) or 'n/a',
          sweep._mean_std_text([r['wall_s'] for r in ok], 0)]) + ' |')  # pylint: disable=protected-access
  failed = [r for r in runs if r['status'] != 'ok']
  if failed:
    lines += ['', 'Failed runs:', '']
    lines += [f'- {r["arm"]}, `{os.path.basename(r["logdir"])}`: {r["error"]}' for r in failed]
  return '\n'.join(lines) + '\n'


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
    runs += read_runs(label, directory, args.key)
  if not runs:
    print(f'error: no finished or failed runs under {", ".join(args.arm)}', file=sys.stderr)
    return 2
  os.makedirs(args.out, exist_ok=True)
  columns = ['arm', args.key, 'seed', 'status', 'lr', 'accuracy', 'top5', 'loss', 'steps',
             'wall_s', 'logdir', 'error']
  with open(os.path.join(args.out, 'study.csv'), 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    for run in runs:
      writer.writerow({c: '' if run.get(c) is None else run.get(c) for c in columns})
  table = markdown(runs, args.key, arms)
  with open(os.path.join(args.out, 'study.md'), 'w', encoding='utf-8') as f:
    f.write(table)
  plotted = plot(runs, args.key, arms, os.path.join(args.out, 'study.png'), args.title)
  print(table, end='')
  print(f'wrote {os.path.join(args.out, "study.csv")}, study.md'
        + (', study.png' if plotted else ' (nothing to plot)'))
  return 0


if __name__ == '__main__':
  sys.exit(main())
