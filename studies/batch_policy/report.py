"""The batch that grows against the fixed batch: archives runs, draws them, writes their table.

  # archive a finished run from its run directory (its record, metrics.jsonl), with its log
  .venv/bin/python studies/batch_policy/report.py archive NAME RUNDIR [--log LOG] [--note TEXT]
  .venv/bin/python studies/batch_policy/report.py           # the plots and the page's block
  .venv/bin/python studies/batch_policy/report.py --check   # exit 1 when the page is stale

A run is archived as ``docs/results/batch_policy/<NAME>.json`` (with its
console log beside it as ``<NAME>.log`` when given), read from its record
(``metrics.jsonl``, docs/running.md): its start (steps, starting batch,
policy), each change of batch, each evaluation, its final numbers and its
updates. The wall time is from its first start to its end in the record
(time between attempts included). A name is ``<workload>.<arm>``:
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
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from core import files  # noqa: E402  pylint: disable=wrong-import-position
from framework.run import record  # noqa: E402  pylint: disable=wrong-import-position

ARCHIVE = os.path.join('docs', 'results', 'batch_policy')
PAGE = os.path.join('docs', 'critical_batch.md')
COMMAND = '.venv/bin/python studies/batch_policy/report.py'
BEGIN = '<!-- batch-policy:begin -->'
END = '<!-- batch-policy:end -->'

def from_record(events):
  """What a run's record says: start, changes, evaluations, final numbers, updates, wall time.

  Raises:
    ValueError: a record without a start, or of a run that did not end with its final numbers.
  """
  start, final, end = (record.last(events, kind) for kind in ('start', 'final', 'end'))
  if start is None or final is None or end is None:
    raise ValueError('not the record of a finished train_eval run (no start, final or end in '
                     f'its {record.RECORD_NAME})')
  # The metric the curve follows: a sequence model's wer, else an image classifier's accuracy.
  metric = 'wer' if 'wer' in final['metrics'] else 'accuracy'
  first = next(e for e in events if e['kind'] == 'start')
  return {
      'batches': [[0, start['start_batch']]] + [[e['step'], e['new']] for e in events
                                                if e['kind'] == 'batch'],
      'eval': [[e['step'], e['metrics'][metric]] for e in events if e['kind'] == 'eval'],
      'steps': start['max_steps'], 'steps_per_epoch': start['steps_per_epoch'],
      'start_batch': start['start_batch'], 'policy': start['batch_policy'],
      'final_split': final['split'], 'metric': metric, 'final': final['metrics'][metric],
      'final_step': final['step'], 'updates': end['updates'],
      'wall_s': round(end['time'] - first['time'], 1)}


def archive(name, logdir, log=None, note='', root=ROOT):
  """Writes ``<ARCHIVE>/<name>.json`` from a finished run's record, and ``<name>.log`` from its log."""
  if '.' not in name:
    raise ValueError(f'{name}: a name is <workload>.<arm>, e.g. fashion_mnist_lars.fixed')
  run = dict(from_record(record.read(logdir)), name=name, note=note)
  directory = os.path.join(root, ARCHIVE)
  os.makedirs(directory, exist_ok=True)
  if log is not None:
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
  add.add_argument('logdir', help='the run directory, whose metrics.jsonl is read')
  add.add_argument('--log', help='its console log, kept beside the archive for people')
  add.add_argument('--note', default='')
  parser.add_argument('--check', action='store_true',
                      help='only say whether the page is up to date (exit 1 when it is not)')
  args = parser.parse_args(argv)
  if args.command == 'archive':
    run = archive(args.name, args.logdir, args.log, args.note)
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
