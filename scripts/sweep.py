"""Run a grid of run.py configurations, one run directory per point, and collect the results.

  python scripts/sweep.py --config configs/fashion_mnist_lars.py --out runs/sweep_bs \\
      --grid optimizer=Momentum,LARS --grid batch_size_per_gpu=256,1024,4096 \\
      --derive 'lr_policy_params.learning_rate=0.1*batch_size_per_gpu/256' --seeds 0,1

  python scripts/sweep.py --config configs/fashion_mnist_lars.py --grid-file grid.yaml \\
      --out runs/sweep_bs

  python scripts/sweep.py --best runs/sweep_bs    # the best point's run directory

A grid file is a YAML mapping from config key paths to lists of values, with
optional ``derived`` values computed from each point::

  optimizer: [Momentum, LARS]
  batch_size_per_gpu: [256, 1024, 4096]
  derived:
    lr_policy_params.learning_rate: 0.1 * batch_size_per_gpu / 256  # linear scaling

A point is one element of the cartesian product of the grid (times the seeds
of ``--seeds``, given to the run as ``random_seed``; a grid or derived
``random_seed`` together with ``--seeds`` is refused, since the points would
repeat one another). It runs as

  python run.py --config CONFIG --mode MODE --logdir OUT/<point> --continue_learning \\
      --set <--set args> --set <grid values> --set <derived values> [--set random_seed=<seed>] \\
      [the flags after the sweep's own ``--``]

(``--mode critical_batch`` goes on from its records by itself and gets no
``--continue_learning``; its flags follow ``--``, e.g. ``-- --points 0.5``)

with its output in ``OUT/<point>/run.log``. On success the sweep writes
``OUT/<point>/result.json`` (the metrics of run.py's last lines and the wall
time) and a later sweep with the same ``--out`` skips the point; with
``--archive DIR`` a copy goes to ``DIR/<point>.json`` at once, so what a sweep
cut off has finished outlives its run directories. A failed point
gets ``error.txt`` (the last line it printed). Next time, a point that saved
a checkpoint resumes from it (``--continue_learning``, its output appended to
run.log), a point that finished but whose result was never written is
recorded from its run.log without running, and only a point that saved
nothing starts again from an empty directory. At the end the sweep writes
``results.csv``, ``results.md`` (mean and standard deviation over seeds) and
``accuracy.png`` to OUT, and exits with status 1 when a point failed (2 for a
mistake in the sweep's own arguments). SIGINT (Ctrl-C) or SIGTERM passes the
signal on to the runs under way, once (each run has a process group of its
own, so a Ctrl-C at the terminal does not reach it twice): each finishes its
step, saves a checkpoint and stops, and resumes from it next time; a run that
ended well meanwhile is recorded as finished. The sweep then ends with status
128 + the signal (130, 143), also where it was started with SIGINT ignored
(``cmd &`` in a script). A second signal makes the runs exit at once, without
saving. Failed points are listed in the tables and marked with a red cross on
the plot; its x axis is logarithmic for batch-like keys.

The best point is marked: ``best`` is 1 on its row of results.csv (0 on the
others), results.md marks it and names it under the table, and ``--best OUT``
prints its run directory, one line, from the ``result.json`` files in OUT
(exit status 1 and one line on stderr when OUT has no finished point with a
metric). It is chosen by the runs' own metric, in its direction (accuracy:
higher is better; a sequence model's wer: lower): with seeds, the
configuration with the best mean over its finished seeds, then that
configuration's best seed; ties go to the directory name that sorts first
(``framework.sweep.report.choose_best``).

Before any point runs, every point's config is resolved and validated as
run.py would do it (all in one process, ``python -m framework.sweep.check_configs``):
a point run.py would refuse stops the sweep with exit status 2 and one line
per such point, naming it and the key. ``--dry-run`` prints the commands
without checking them.

Derived values are arithmetic on the point's numbers only (``+ - * / // % **``,
parentheses, ``min max abs round int float sqrt log log2 exp``); names are the
grid's key paths, the derived keys defined before, and ``seed``.
"""

import argparse
import os
import shlex
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from core import signals  # noqa: E402  pylint: disable=wrong-import-position
from framework.config import config_file  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep import report  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep import results  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep import runner  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep.grid import SweepError  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep.grid import load_grid_file  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep.grid import make_points  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep.grid import parse_derive_argument  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep.grid import parse_grid_argument  # noqa: E402  pylint: disable=wrong-import-position
from framework.sweep.grid import split_top_level  # noqa: E402  pylint: disable=wrong-import-position

# Eval and export read the checkpoints of an existing run; a sweep makes new runs.
SWEEP_MODES = tuple(m for m in config_file.MODES if m not in config_file.READING_MODES)


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', help='the config file given to run.py (required)')
  parser.add_argument('--out', help='the sweep directory; one run directory per point (required)')
  parser.add_argument('--best', metavar='OUT',
                      help="print the run directory of OUT's best finished point and exit "
                           '(given alone)')
  parser.add_argument('--grid', action='append', default=[], metavar='KEY.PATH=V1,V2,...',
                      help='values of one config key (each read as YAML); repeatable; '
                           "replaces that key's values from --grid-file")
  parser.add_argument('--grid-file',
                      help='YAML file: {key.path: [values]}, optional derived: {key.path: expr}')
  parser.add_argument('--derive', action='append', default=[], metavar='KEY.PATH=EXPRESSION',
                      help="a value computed from the point, e.g. "
                           "'lr_policy_params.learning_rate=0.1*batch_size_per_gpu/256'")
  parser.add_argument('--mode', default='train_eval', choices=SWEEP_MODES)
  parser.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                      help='an override given to every run, before the grid values')
  parser.add_argument('--seeds', help='comma-separated random seeds; each point runs once per seed')
  parser.add_argument('--archive', metavar='DIR',
                      help="a copy of each point's result.json goes to DIR/<point>.json as soon as "
                           'the point finishes (e.g. a directory under version control)')
  parser.add_argument('--jobs', type=int, default=1,
                      help='runs at the same time (each run.py uses all cores it sees)')
  parser.add_argument('--dry-run', action='store_true', help='print the commands and exit')
  argv = list(argv)
  run_flags = argv[argv.index('--') + 1:] if '--' in argv else []
  args = parser.parse_args(argv[:argv.index('--')] if '--' in argv else argv)
  args.run_flags = run_flags
  if args.best is not None:
    given = [flag for flag, value in (('--config', args.config), ('--out', args.out),
                                      ('--grid', args.grid), ('--grid-file', args.grid_file),
                                      ('--derive', args.derive), ('--seeds', args.seeds),
                                      ('--set', args.set), ('--dry-run', args.dry_run)) if value]
    if given:
      parser.error(f'--best reads a finished sweep and takes no other flag ({", ".join(given)} '
                   'given)')
  else:
    missing = [flag for flag in ('--config', '--out') if getattr(args, flag[2:]) is None]
    if missing:
      parser.error(f'the following arguments are required: {", ".join(missing)}')
  return args


def print_best(out):
  """``--best OUT``: prints the run directory of the sweep's best point; returns the exit status."""
  if not os.path.isdir(out):
    print(f'error: --best {out}: no such directory', file=sys.stderr)
    return 1
  for name in sorted(os.listdir(out)):
    problem = results.result_problem(os.path.join(out, name))
    if problem is not None:
      print(f'error: --best {out}: {problem}; its point may be the best: restore the file, or '
            'run the sweep again, which records a finished point again from its run.log',
            file=sys.stderr)
      return 1
  best = report.best_of_directory(out)
  if best is None:
    print(f'error: --best {out}: no finished point with a metric to compare (no run directory '
          'with a result.json holding its accuracy or wer)', file=sys.stderr)
    return 1
  print(os.path.abspath(best.logdir))
  return 0


def build_points(args):
  """The points the arguments describe (nothing runs)."""
  grid, derivations = {}, []
  if args.grid_file:
    grid, derivations = load_grid_file(args.grid_file)
  given = set()
  for text in args.grid:
    key, values = parse_grid_argument(text)
    if key in given:
      raise SweepError(f'--grid {key}: the key is given twice')
    given.add(key)
    grid[key] = values  # replaces the grid file's values of that key, in place
  derivations += [parse_derive_argument(text) for text in args.derive]
  seeds = None
  if args.seeds is not None:
    try:
      seeds = [int(s) for s in split_top_level(args.seeds)]
    except ValueError:
      raise SweepError(f'--seeds {args.seeds!r}: expected comma-separated integers') from None
    if len(set(seeds)) != len(seeds):
      raise SweepError(f'--seeds {args.seeds!r}: a seed is given twice')
  if not grid and not seeds:
    raise SweepError('nothing to sweep: give --grid, --grid-file or --seeds')
  return make_points(grid, derivations, seeds)


def check_arguments(args):
  """The points of valid arguments (nothing runs).

  Raises:
    SweepError: a mistake in the arguments or the grid.
  """
  if args.jobs < 1:
    raise SweepError(f'--jobs: must be >= 1, got {args.jobs}')
  if not os.path.isfile(args.config):
    raise SweepError(f'--config {args.config}: file not found')
  if args.archive and os.path.exists(args.archive) and not os.path.isdir(args.archive):
    raise SweepError(f'--archive {args.archive}: not a directory (it receives one '
                     '<point>.json per finished point)')
  return build_points(args)


def main(argv=None):
  """Runs the sweep ``argv`` describes; returns the exit status (see the module docstring)."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if args.best is not None:
    return print_best(args.best)
  try:
    points = check_arguments(args)
  except SweepError as exc:
    print(f'error: {exc}', file=sys.stderr)
    return 2
  sweep = runner.Sweep(args, points)
  if args.dry_run:
    for point in points:
      print(shlex.join(sweep.command(point)))
    return 0
  try:
    sweep.check_points()
  except SweepError as exc:
    print('\n'.join(f'error: {line}' for line in str(exc).splitlines()), file=sys.stderr)
    return 2
  runner.log(f'{len(points)} point(s) in {sweep.out}, all configs valid')
  stopped_by = []

  def stop(signum, _):
    # Only noted here: the sweep's loop stops the runs (an exception raised at
    # any point of the loop could leave a run started and not yet known).
    stopped_by.append(signum)
    if len(stopped_by) == 1:
      sweep.stop_signal = signum
      return
    # A second signal while the runs save: passed on, they exit at once without saving.
    runner.log(f'second {signal.Signals(signum).name}: the runs under way exit at once, '
               'without saving')
    sweep.signal_runs(signum)

  # Installed here, not left to Python, which leaves SIGINT ignored when the
  # sweep starts with it ignored, and ends on SIGTERM with the runs left going.
  for signum in signals.STOP_SIGNALS:
    signal.signal(signum, stop)
  try:
    failed = sweep.run()
  except KeyboardInterrupt:
    return signals.exit_status(stopped_by[0] if stopped_by else signal.SIGINT)
  except SweepError as exc:
    print(f'error: {exc}', file=sys.stderr)
    return 2
  report.write_results(sweep)
  if stopped_by:
    return signals.exit_status(stopped_by[0])  # it came as the last run ended
  if failed:
    runner.log(f'{len(failed)} of {len(points)} point(s) failed:')
    for name in failed:
      runner.log(f'  {name}: {sweep.errors[name]}')
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
