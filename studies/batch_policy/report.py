"""The batch that grows against the fixed batch: archives runs, draws them, writes their table.

  # archive a finished run: its console log (and run directory, for its wall time)
  .venv/bin/python studies/batch_policy/report.py archive NAME LOG [--logdir RUNDIR] [--note TEXT]
  .venv/bin/python studies/batch_policy/report.py           # the plots and the page's block
  .venv/bin/python studies/batch_policy/report.py --check   # exit 1 when the page is stale

A run is archived as ``docs/results/batch_policy/<NAME>.json`` (with its log
beside it as ``<NAME>.log``), read from the lines run.py printed: its start
(``training ... global batch B``), each change of batch, each evaluation, the
final line and, for a growing batch, its updates. The wall time is from the
first to the last event of its run directory (the start of training to its last
evaluation), when the directory is given. A name is ``<workload>.<arm>``:
the runs of one workload are drawn together, ``batch_policy_<workload>.png``:
the global batch against the run's step, and the eval metric against the
examples seen. The block between ``<!-- batch-policy:begin -->`` and
``<!-- batch-policy:end -->`` in docs/critical_batch.md is their table,
made from the archives alone.
"""

import argparse
import glob
import json
import os
import re
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from core import files  # noqa: E402  pylint: disable=wrong-import-position

ARCHIVE = os.path.join('docs', 'results', 'batch_policy')
PAGE = os.path.join('docs', 'critical_batch.md')
COMMAND = '.venv/bin/python studies/batch_policy/report.py'
BEGIN = '<!-- batch-policy:begin -->'
END = '<!-- batch-policy:end -->'

START_RE = re.compile(r'^training \S+ for (\d+) steps \((\S+) steps/epoch\), global batch (\d+) '
                      r'.*?(?:; batch policy (\S+) from|$)')
CHANGE_RE = re.compile(r'^batch (\d+) -> (\d+) at step (\d+)')
EVAL_RE = re.compile(r'^eval at step (\d+): (.*?) \((\d+) (\w+)\)')
FINAL_RE = re.compile(r'^final (\S+) (\w+): ([\d.]+) ')
UPDATES_RE = re.compile(r'^batch policy \S+: (\d+) updates to step (\d+)')
PAIR_RE = re.compile(r'(top-1|wer) ([\d.]+)')


def parse_log(text):
  """What a run's console log says: start, changes, evaluations, final line, updates.

  Raises:
    ValueError: a log without the line that starts training, or without a final line.
  """
  run = {'batches': [], 'eval': []}
  for line in text.splitlines():
    line = line.strip()
    start, change, evaluation = START_RE.match(line), CHANGE_RE.match(line), EVAL_RE.match(line)
    final, updates = FINAL_RE.match(line), UPDATES_RE.match(line)
    if start and 'steps' not in run:
      run.update(steps=int(start.group(1)), steps_per_epoch=float(start.group(2)),
                 start_batch=int(start.group(3)), policy=start.group(4) or 'fixed')
      run['batches'].append([0, run['start_batch']])
    elif change:
      run['batches'].append([int(change.group(3)), int(change.group(2))])
    elif evaluation:
      metric = PAIR_RE.search(evaluation.group(2))
      run['eval'].append([int(evaluation.group(1)), float(metric.group(2))])
    elif final:
      run.update(final_split=final.group(1), metric=final.group(2),
                 final=float(final.group(3)), final_line=line)
    elif updates:
      run['updates'] = int(updates.group(1))
  if 'steps' not in run or 'final' not in run:
    raise ValueError('not a finished run.py training log (no "training ..." or no final line)')
  run.setdefault('updates', run['steps'])
  return run


def wall_seconds(logdir):
  """Seconds from the first to the last event of a run directory (its train and eval events)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  times = []
  for path in glob.glob(os.path.join(logdir, '**', 'events.out.tfevents.*'), recursive=True):
    if path.endswith('.run_config'):
      continue
    times += [event.wall_time for event in tf.compat.v1.train.summary_iterator(path)]
  return round(max(times) - min(times), 1) if times else None


def archive(name, log, logdir=None, note='', root=ROOT):
  """Writes ``<ARCHIVE>/<name>.json`` and ``<name>.log`` from a finished run."""
  if '.' not in name:
    raise ValueError(f'{name}: a name is <workload>.<arm>, e.g. fashion_mnist_lars.fixed')
  with open(log, encoding='utf-8') as f:
    run = parse_log(f.read())
  run.update(name=name, note=note, wall_s=wall_seconds(logdir) if logdir else None)
  directory = os.path.join(root, ARCHIVE)
  os.makedirs(directory, exist_ok=True)
  shutil.copyfile(log, os.path.join(directory, f'{name}.log'))
  files.write_text_atomically(os.path.join(directory, f'{name}.json'),
                              json.dumps(run, indent=1) + '\n')
  return run


def load(root=ROOT):
  """``{workload: [run, ...]}`` of the archive, each workload's fixed run first."""
  found = {}
  for path in sorted(glob.glob(os.path.join(root, ARCHIVE, '*.json'))):
    with open(path, encoding='utf-8') as f:
      run = json.load(f)
    found.setdefault(run['name'].split('.', 1)[0], []).append(run)
  for runs in found.values():
    runs.sort(key=lambda r: (r['policy'] != 'fixed', r['name']))
  return found


def draw(workload, runs, path):
  """The workload's figure: batch against step, eval metric against examples seen."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  from matplotlib import pyplot  # pylint: disable=import-outside-toplevel
  figure, (left, right) = pyplot.subplots(1, 2, figsize=(10, 3.8))
  for run in runs:
    label = run['name'].split('.', 1)[1]
    steps = [s for s, _ in run['batches']] + [run['steps']]
    batches = [b for _, b in run['batches']]
    left.step(steps, batches + batches[-1:], where='post', label=label)
    right.plot([s * run['start_batch'] for s, _ in run['eval']], [v for _, v in run['eval']],
               marker='o', label=label)
  metric = runs[0]['metric']
  left.set(xlabel='run step (examples / starting batch)', ylabel='global batch', yscale='log',
           title=f'{workload}: the batch')
  right.set(xlabel='examples seen', ylabel=f'eval {"top-1 accuracy" if metric == "accuracy" else metric}',
            title=f'{workload}: eval {metric}')
  left.legend(fontsize=8)
  right.legend(fontsize=8)
  figure.tight_layout()
  files.write_atomically(path, lambda f: figure.savefig(f, format='png', dpi=90, metadata={'Software': None}),
                         suffix='.png')
  pyplot.close(figure)


def block(found):
  """The page's table: per run, its final metric, updates and wall time against its fixed run."""
  lines = ['| run | policy | final metric | vs fixed | updates | fewer updates | wall time |',
           '|---|---|---|---|---|---|---|']
  for workload, runs in found.items():
    fixed = next((r for r in runs if r['policy'] == 'fixed'), None)
    for run in runs:
      delta = fewer = ''
      if fixed is not None and run is not fixed:
        sign = 100 * (run['final'] - fixed['final'])
        delta = f'{sign:+.2f} points'
        fewer = f'{100 * (1 - run["updates"] / fixed["updates"]):.0f} %'
      wall = f'{run["wall_s"] / 60:.1f} min' if run.get('wall_s') else 'not recorded'
      lines.append(f'| `{run["name"]}` | {run["policy"]} | {run["final_split"]} {run["metric"]} '
                   f'{100 * run["final"]:.2f} % | {delta} | {run["updates"]} | {fewer} | {wall} |')
  lines.append('')
  for workload, runs in found.items():
    for run in runs:
      if run.get('note'):
        lines.append(f'- `{run["name"]}`: {run["note"]}')
    lines.append(f'\n![{workload}](results/batch_policy/batch_policy_{workload}.png)\n')
  return '\n'.join(lines)


def page_with(text, generated):
  begin, end = text.find(BEGIN), text.find(END)
  if begin < 0 or end < begin:
    raise ValueError(f'no {BEGIN} ... {END} block')
  return text[:begin + len(BEGIN)] + '\n' + generated + '\n' + text[end:]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  sub = parser.add_subparsers(dest='command')
  add = sub.add_parser('archive', help='archive a finished run')
  add.add_argument('name')
  add.add_argument('log')
  add.add_argument('--logdir')
  add.add_argument('--note', default='')
  parser.add_argument('--check', action='store_true',
                      help='only say whether the page is up to date (exit 1 when it is not)')
  args = parser.parse_args(argv)
  if args.command == 'archive':
    run = archive(args.name, args.log, args.logdir, args.note)
    print(f'archived {run["name"]}: {run["metric"]} {run["final"]}, {run["updates"]} updates')
    return 0
  found = load()
  if not args.check:
    for workload, runs in found.items():
      draw(workload, runs, os.path.join(ROOT, ARCHIVE, f'batch_policy_{workload}.png'))
  return files.refresh_generated_page(os.path.join(ROOT, PAGE),
                                      lambda text: page_with(text, block(found)), args.check,
                                      COMMAND)


if __name__ == '__main__':
  sys.exit(main())
