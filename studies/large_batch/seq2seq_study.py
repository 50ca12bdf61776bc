"""The sequence-to-sequence large-batch study (docs/large_batch_seq2seq.md): every run, in order, resumable.

  .venv/bin/python studies/large_batch/seq2seq_study.py              # run or resume; then the page
  .venv/bin/python studies/large_batch/seq2seq_study.py --dry-run    # every run and its state
  .venv/bin/python studies/large_batch/seq2seq_study.py --report-only

A small Transformer on CMUdict at global batches from 256 to 16384 words, three
optimizers each with its learning rate tuned: the runs and their order are
:mod:`studies.large_batch.seq2seq_plan`'s; this script runs them.

Every run is one point of ``scripts/sweep.py`` in ``OUT/<sweep>/<point>``
(the sweep is the arm's name, ``<arm>_half`` for the budget check,
``<arm>_warmup<F>`` for the warm-up), with its evaluation cadence set so that
each run evaluates the dev split about ``EVALS_PER_RUN`` times and
saves a checkpoint at each; a run cut off resumes from its checkpoint. As a
run finishes, its result.json goes to ``ARCHIVE/<sweep>/<point>.json`` (a
failed run's last line to ``<point>.error``), and the study is planned again
from the archive alone: a finished run is never run again, in this checkout
or a fresh one, and the grids grow from the archived results. SIGINT or
SIGTERM stops the run under way after it saves (``scripts/sweep.py``), and
the study with 130 or 143; running the command again resumes it.

At the end (and with ``--report-only`` at once) studies/large_batch/seq2seq_report.py
writes the page from the archive.
"""

import argparse
import fcntl
import os
import shutil
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from core import signals  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep import runner  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep.results import ERROR_FILE  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep.results import read_error  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep.results import read_result  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch import study  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import CONFIGS  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import DEFAULT_ARCHIVE  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import DEFAULT_OUT  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import EPOCHS  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import PAGE  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import Pending  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import Results  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import Run  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import STUDY  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import eval_steps  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import micro_batches  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import plan  # noqa: E402  pylint: disable=wrong-import-position
from studies.large_batch.seq2seq_plan import updates  # noqa: E402  pylint: disable=wrong-import-position

# The lock a study holds on its OUT while it runs: one study per directory.
LOCK_FILE = '.study.lock'


def sweep_command(runs, out, archive, python=sys.executable, extra=()):
  """The scripts/sweep.py command of ``runs`` (one sweep, batch, seed and sets; several rates).

  ``extra``: ``--set`` overrides given to every run after the study's own (a smoke test's).
  """
  first = runs[0]
  micro, iter_size = micro_batches(first.batch)
  epochs = EPOCHS
  for text in first.sets:
    if text.startswith('num_epochs='):
      epochs = float(text.split('=', 1)[1])
  cadence = eval_steps(first.batch, epochs)
  command = [python, os.path.join(ROOT, 'scripts', 'sweep.py'),
             '--config', os.path.join(ROOT, CONFIGS, f'{first.arm}.py'),
             '--out', os.path.join(out, first.sweep),
             '--grid', f'batch_size_per_gpu={micro}', '--grid', f'iter_size={iter_size}',
             '--grid', 'lr_policy_params.learning_rate=' + ','.join(f'{r.lr:g}' for r in runs),
             '--seeds', str(first.seed),
             '--derive', f'eval_steps={cadence}', '--derive', f'save_checkpoint_steps={cadence}',
             '--archive', os.path.join(archive, first.sweep)]
  for text in list(first.sets) + list(extra):
    command += ['--set', text]
  return command


def next_group(steps, results):
  """The first runs of the plan that have no result: the first one's sweep, batch, seed and sets."""
  todo = [s for s in steps if isinstance(s, Run) and results.get(s) is None]
  if not todo:
    return []
  first = todo[0]
  return [r for r in todo if (r.sweep, r.batch, r.seed, r.sets)
          == (first.sweep, first.batch, first.seed, first.sets)]


def archive_failures(out, archive):
  """Each failed point of OUT (error.txt, no result) into ARCHIVE as ``<point>.error``."""
  for sweep in sorted(os.listdir(out)) if os.path.isdir(out) else []:
    if not os.path.isdir(os.path.join(out, sweep)):
      continue  # the lock file
    for point in sorted(os.listdir(os.path.join(out, sweep))):
      logdir = os.path.join(out, sweep, point)
      if not os.path.isdir(logdir) or read_result(logdir) is not None:
        continue
      error = read_error(logdir)
      if error is not None:
        os.makedirs(os.path.join(archive, sweep), exist_ok=True)
        shutil.copyfile(os.path.join(logdir, ERROR_FILE),
                        os.path.join(archive, sweep, point + study.ARCHIVED_ERROR))


def describe(step, results):
  """A line of the dry run: the run, its config and overrides, and its state."""
  if isinstance(step, Pending):
    return f'later   {step.sweep:<16} B={step.batch:<6} {step.what}'
  found = results.get(step)
  if found is None:
    state = 'to run '
  elif found['status'] == 'ok':
    state = 'done   '
  else:
    state = 'failed '
  micro, iter_size = micro_batches(step.batch)
  epochs = EPOCHS
  for text in step.sets:
    if text.startswith('num_epochs='):
      epochs = float(text.split('=', 1)[1])
  line = (f'{state} {step.sweep:<16} B={step.batch:<6} lr={step.lr:<8g} seed={step.seed} '
          f'configs/{STUDY}/{step.arm}.py batch_size_per_gpu={micro} iter_size={iter_size} '
          f'eval_steps={eval_steps(step.batch, epochs)} updates={updates(step.batch, epochs)}')
  line += ''.join(f' {text}' for text in step.sets)
  if found is not None:
    line += (f'  -> test WER {found["wer"] * 100:.2f} %' if found.get('wer') is not None
             else f'  -> {found["error"]}')
  return line


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', default=DEFAULT_OUT, help='the run directories (default %(default)s)')
  parser.add_argument('--archive', default=DEFAULT_ARCHIVE,
                      help='the finished runs, kept under version control (default %(default)s)')
  parser.add_argument('--dry-run', action='store_true',
                      help='list every run of the study with its config and state, run nothing')
  parser.add_argument('--report-only', action='store_true', help='write the page and stop')
  parser.add_argument('--no-report', action='store_true', help='do not write the page at the end')
  parser.add_argument('--max-runs', type=int, default=None,
                      help='stop after starting this many sweeps (default: until the plan is done)')
  parser.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                      help='an override for every run, after the study\'s (a smoke test: '
                           '--set max_steps=20 with a scratch --out and --archive)')
  return parser.parse_args(argv)


def report(archive):
  """Writes the page from the archive (studies/large_batch/seq2seq_report.py); its exit status."""
  os.makedirs(archive, exist_ok=True)  # a study that has archived nothing yet has an empty page
  command = [sys.executable, os.path.join(ROOT, 'studies', 'large_batch', 'seq2seq_report.py'),
             '--archive', archive, '--page', os.path.join(ROOT, PAGE)]
  return subprocess.run(command, cwd=ROOT, check=False).returncode


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if args.dry_run:
    results = Results(args.archive)
    steps = plan(results)
    for step in steps:
      print(describe(step, results))
    left = sum(1 for s in steps if isinstance(s, Run) and results.get(s) is None)
    print(f'{len(results.runs)} run(s) archived, {left} to run now, '
          f'{sum(isinstance(s, Pending) for s in steps)} step(s) the results decide later')
    return 0
  if args.report_only:
    return report(args.archive)
  os.makedirs(args.out, exist_ok=True)
  # Two studies on one OUT would run the same points at once: the second is refused.
  lock = open(os.path.join(args.out, LOCK_FILE), 'w', encoding='utf-8')  # pylint: disable=consider-using-with
  try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    print(f'error: --out {args.out}: another seq2seq_study.py is running on it (it holds '
          f'{LOCK_FILE}); let it finish or stop it (SIGTERM) first', file=sys.stderr)
    return 2
  stopped = []
  child = []

  def stop(signum, _):
    stopped.append(signum)
    if child and child[0].poll() is None:
      child[0].send_signal(signum)  # the sweep stops its run after it saves

  for signum in signals.STOP_SIGNALS:
    signal.signal(signum, stop)
  started = 0
  status = 0
  while not stopped and (args.max_runs is None or started < args.max_runs):
    results = Results(args.archive)
    group = next_group(plan(results), results)
    if not group:
      break
    command = sweep_command(group, args.out, args.archive, extra=args.set)
    runner.log(f'study: {group[0].sweep} at batch {group[0].batch}, seed {group[0].seed}, '
               f'rates {", ".join(f"{r.lr:g}" for r in group)}')
    child[:] = [subprocess.Popen(command, cwd=ROOT)]
    code = child[0].wait()
    started += 1
    archive_failures(args.out, args.archive)
    if code not in (0, 1):  # 1: a point failed, and is archived as such
      status = code
      break
    if Results(args.archive).runs == results.runs:
      runner.log('study: the sweep archived nothing new; stopping (see its output above)')
      status = 1
      break
  if stopped:
    return signals.exit_status(stopped[0])
  if not args.no_report:
    status = status or report(args.archive)
  return status


if __name__ == '__main__':
  sys.exit(main())
