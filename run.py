"""Train, evaluate, benchmark or export a model described by a config file.

  python run.py --config=configs/fashion_mnist_lars.py --mode=train_eval --logdir=runs/fm_lars
  python run.py --config=configs/resnet50_lars.py --mode=benchmark --bench_steps=20
  python run.py --config=runs/fm_lars/config.yaml --mode=eval --logdir=runs/fm_lars --checkpoint=best
  python run.py --config=runs/fm_lars/config.yaml --mode=export --logdir=runs/fm_lars \
      --export_dir=exports/fm_lars
  echo tomato | python run.py --config=runs/g2p/config.yaml --mode=infer --logdir=runs/g2p
  python run.py --config=runs/fm_lars/config.yaml --mode=infer --logdir=runs/fm_lars \
      --infer_input=images/    # path<TAB>class<TAB>probability<TAB>2nd:p<TAB>3rd:p per image
  python run.py --config=configs/fashion_mnist_lars.py --mode=critical_batch --logdir=runs/fm_cb
  python run.py --config=configs/fashion_mnist_lars.py --num_workers=2   # tf.distribute, this machine
  horovodrun -np 2 --gloo -H localhost:2 python run.py --config=... --mode=train_eval

Exit status: 0 done (or nothing to do); 2 a config, data or logdir mistake, in
one line naming the key path, file or directory (nothing is built before the
config is valid); 1 the run failed (non-finite values, a write that failed, no
intact checkpoint to resume, a second stop signal before the stop was saved), in
one line saying what was kept; 128 + the signal number (143 SIGTERM, 130 SIGINT)
after a signal stopped training and a checkpoint was saved (resume with
--continue_learning, or run the same command with --auto_resume again), or
stopped the start-up before anything had run.

This file is the command line only: the flags, their one-line checks and the
exit. Loading the config and running the mode is framework/run/launch.py's work.
"""

import argparse
import os
import shlex
import signal
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from core import allocator  # noqa: E402  pylint: disable=wrong-import-position
from core import signals  # noqa: E402  pylint: disable=wrong-import-position

if __name__ == '__main__':
  # A stop signal waits, blocked (kept pending across the exec below), until main()
  # has its handler: until then it would kill the process unhandled.
  signal.pthread_sigmask(signal.SIG_BLOCK, signals.STOP_SIGNALS)
  # Before anything allocates: large batches run 1.4x faster under tcmalloc
  # (core/allocator.py); LARGEBATCH_ALLOCATOR=system keeps glibc's malloc.
  try:
    allocator.reexec_under_tcmalloc()
  except ValueError as exc:
    print(f'error: {exc}', file=sys.stderr)
    sys.exit(2)

from framework.run import launch as launch_lib  # noqa: E402  pylint: disable=wrong-import-position


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', required=True, help='a .py or .yaml/.yml config file')
  parser.add_argument('--mode', default='train_eval', choices=launch_lib.MODES)
  parser.add_argument('--logdir', default=None, help='run directory (overrides the config)')
  parser.add_argument('--continue_learning', action='store_true',
                      help='resume from the latest checkpoint in logdir')
  parser.add_argument('--auto_resume', action='store_true',
                      help='train: resume when logdir holds a run, start one when it is new or '
                           'empty (the same command again after a requeue)')
  parser.add_argument('--bench_steps', type=int, default=20,
                      help='timed steps in benchmark mode (after the warm-up)')
  parser.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                      help='override a config key (value parsed as YAML); repeatable')
  parser.add_argument('--print_config', action='store_true',
                      help='print the resolved config and exit')
  parser.add_argument('--export_dir', default=None,
                      help='export mode: the new directory of the SavedModel')
  parser.add_argument('--checkpoint', default='latest', metavar='latest|best|PATH',
                      help='eval, export and infer: the latest checkpoint of logdir, the best '
                           "by the task's eval metric (logdir/best), or a checkpoint path")
  parser.add_argument('--init_checkpoint', default=None, metavar='LOGDIR_OR_CHECKPOINT',
                      help="train: start from another run's model weights (its newest "
                           'checkpoint, or the one named)')
  parser.add_argument('--init_optimizer_state', action='store_true',
                      help='with --init_checkpoint: load its optimizer state too (slots, loss '
                           'scale); the step still starts at 0')
  parser.add_argument('--infer_input', default=None, metavar='PATH|-',
                      help="infer mode: a sequence model's words, one a line; an image "
                           'classifier\'s image file, folder of images or list of image paths '
                           "one a line; '-' or none: stdin")
  parser.add_argument('--infer_output_file', default=None, metavar='FILE',
                      help='infer mode: where the outputs go, one line per input (default stdout)')
  parser.add_argument('--num_workers', type=int, default=1, metavar='N',
                      help='start N workers of this run on this machine (the '
                           'multi_worker_mirrored engine, under TF_CONFIG); see docs/distributed.md')
  parser.add_argument('--points', default=None, metavar='F,F,...',
                      help="critical_batch: the shares of the config's run the branches start "
                           'from (default 0.25,0.5,0.75)')
  parser.add_argument('--max_batch', type=int, default=None, metavar='N',
                      help="critical_batch: the largest branch's global batch (default 16x the "
                           "config's)")
  parser.add_argument('--branch_examples', type=int, default=None, metavar='N',
                      help="critical_batch: the 1x branch's window, whose loss at its end is the "
                           "target (examples, words or tokens; default: where the run's loss has "
                           "fallen by more than its noise, from a 16th to a quarter of the run)")
  parser.add_argument('--branch_loss', default=None, choices=('online', 'heldout'),
                      help="critical_batch: the loss a branch's curve is read from: the eval "
                           "split's first --heldout_examples (heldout, the default) or each "
                           "training micro-batch's before its update (online, no pass)")
  parser.add_argument('--heldout_examples', type=int, default=None, metavar='N',
                      help="critical_batch: the eval split's first examples each evaluation of "
                           'a branch reads (default 2048, in whole eval batches)')
  return parser.parse_args(argv)


def fail(message, status=2):
  """Prints ``error: message`` on a line of its own and exits with ``status``."""
  from framework.engines import console  # pylint: disable=import-outside-toplevel
  signals.ending()  # the status is decided: a stop signal now would only hide the line
  console.end_progress()  # a run stopped mid-training: the error gets a line of its own
  print(message if message.startswith('error:') else f'error: {message}', file=sys.stderr)
  sys.exit(status)


def modes_text(modes):
  """``train or train_eval``; ``eval, export, infer or critical_batch``."""
  return ' or '.join([', '.join(modes[:-1]), modes[-1]] if len(modes) > 1 else modes)


def check_flags(args):
  """Refuses flags out of range or given to a mode that does not use them, in one line."""
  if args.bench_steps < 1:
    fail(f'--bench_steps: must be >= 1, got {args.bench_steps}')
  if (args.mode == 'export') != (args.export_dir is not None):
    fail('--export_dir: required with --mode=export' if args.export_dir is None
         else f'--export_dir: only used with --mode=export, not --mode={args.mode}')
  if args.checkpoint != 'latest' and args.mode not in launch_lib.CHECKPOINT_MODES:
    fail(f'--checkpoint: only used with --mode={modes_text(launch_lib.CHECKPOINT_MODES)}, not '
         f'--mode={args.mode} (to start from another run, use --init_checkpoint)')
  from framework.run import critical_branches  # pylint: disable=import-outside-toplevel
  problem = critical_branches.flag_problem(args)
  if problem is not None:
    fail(problem)
  if args.continue_learning and args.mode == 'critical_batch':
    fail('--continue_learning: not used with --mode=critical_batch, which goes on from its '
         'records and checkpoints by itself: give the same command again')
  training = modes_text(launch_lib.TRAINING_MODES)
  if args.init_checkpoint is not None and args.mode not in launch_lib.TRAINING_MODES:
    fail(f'--init_checkpoint: only used with --mode={training}, not --mode={args.mode}')
  if args.auto_resume and args.mode not in launch_lib.TRAINING_MODES:
    fail(f'--auto_resume: only used with --mode={training}, not --mode={args.mode}')
  for flag in ('infer_input', 'infer_output_file'):
    if getattr(args, flag) is not None and args.mode != 'infer':
      fail(f'--{flag}: only used with --mode=infer, not --mode={args.mode}')
  if args.mode == 'infer' and args.infer_input is None:
    args.infer_input = '-'
  if args.init_optimizer_state and args.init_checkpoint is None:
    fail('--init_optimizer_state: only used with --init_checkpoint')
  if args.num_workers < 1:
    fail(f'--num_workers: must be >= 1, got {args.num_workers}')
  if args.num_workers > 1 and args.print_config:
    fail('--num_workers: not used with --print_config')
  if args.num_workers > 1 and os.environ.get('TF_CONFIG', '').strip():
    fail('--num_workers: TF_CONFIG is set already (this process is a worker of a cluster); '
         'drop --num_workers, or unset TF_CONFIG to start a local cluster')
  if args.num_workers > 1:
    from framework.engines import local_cluster  # pylint: disable=import-outside-toplevel
    most, what = local_cluster.most_workers()
    if args.num_workers > most:
      fail(f'--num_workers: {args.num_workers} workers on this machine, which has {what}: each '
           'worker is a whole process with its own copy of the model, useful up to one per '
           f'{"GPU" if "GPU" in what else "core"}; allowed: 1 to {most}. For more, start one '
           'worker per machine with TF_CONFIG, srun or horovodrun')


def resume_command(argv, again=False):
  """The command line that resumes this run (``again``: the same command, which goes on itself)."""
  args = list(argv) + ([] if again or '--continue_learning' in argv else ['--continue_learning'])
  workers = os.environ.get('LARGEBATCH_NUM_WORKERS')
  if workers:  # a worker started by --num_workers: resume the whole local job
    args.append(f'--num_workers={workers}')
  return ' '.join(shlex.quote(a) for a in ['python', sys.argv[0] or 'run.py'] + args)


def main(argv=None, whole_process=False):
  """Runs the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status.

  From the parsed flags to the end, a stop signal (SIGTERM, SIGINT) is never
  fatal unhandled: before training starts it ends the run in one line with
  128 + the signal, nothing having run (``core.signals``); during training the
  trainer's handler saves (``framework.run.stopping``); after the run has ended it
  is ignored, the process ending with its status.

  Args:
    whole_process: run.py's own process: the signals were blocked until now
      (see the top of this file), and stay ignored until the process exits.
      Otherwise (a caller in Python) its handlers are put back at the end.
  """
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  previous = signals.guard_start()
  try:
    if whole_process:  # a signal kept pending is answered here
      signal.pthread_sigmask(signal.SIG_UNBLOCK, signals.STOP_SIGNALS)
    return _main(args, argv)
  except signals.StartupStopped as exc:
    signals.ending()
    from framework.engines import console  # pylint: disable=import-outside-toplevel
    console.end_progress()
    # infer's stdout carries its outputs only.
    print(exc.line(), flush=True, file=sys.stderr if args.mode == 'infer' else sys.stdout)
    return exc.status
  finally:
    if whole_process:
      # Python puts its handlers back to the default (fatal) one as it shuts down, and
      # TensorFlow's teardown takes a while after that: the ending stays ignored so.
      signals.restore({s: signal.SIG_IGN for s in signals.STOP_SIGNALS})
    else:
      signals.restore(previous)


def _main(args, argv):
  """main() once its signal handlers are installed."""
  check_flags(args)
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  from framework.config import config_file  # pylint: disable=import-outside-toplevel
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  try:
    # The checks that import TensorFlow (the optimizer's and lr policy's
    # arguments) wait: --print_config answers at once without them, and a run
    # makes them once its multi-worker engine has started (framework/run/launch.py).
    notes = []
    configs = config_lib.load_configs(args.config, args.mode, args.set, construct=False,
                                      notes=notes)
  except ConfigError as exc:
    fail(config_file.format_error(exc))
  if args.print_config:
    for note in notes:
      print(note, file=sys.stderr)
    if configs['train'] is not None:
      from framework.run import update_chain  # pylint: disable=import-outside-toplevel
      print(f'update chain: {update_chain.planned_chain(configs["train"])}', file=sys.stderr)
    print(config_file.to_yaml(launch_lib.main_config(configs)), end='')
    return 0
  from framework.config import openseq2seq  # pylint: disable=import-outside-toplevel
  try:  # OpenSeq2Seq's num_gpus: the workers started here, as --num_workers
    args.num_workers, line = openseq2seq.local_workers(launch_lib.main_config(configs),
                                                       args.mode, args.num_workers)
  except ConfigError as exc:
    fail(config_file.format_error(exc))
  if line is not None:
    print(line, flush=True, file=sys.stderr if args.mode == 'infer' else sys.stdout)
  if args.num_workers > 1:
    from framework.engines import local_cluster  # pylint: disable=import-outside-toplevel
    command = [sys.executable, os.path.abspath(__file__),
               *local_cluster.without_flag(argv, '--num_workers')]
    return local_cluster.run(command, args.num_workers)
  try:
    return launch_lib.launch(args, configs,
                             resume_command(argv, again=args.mode == 'critical_batch'), notes)
  except launch_lib.LaunchError as exc:
    fail(str(exc), status=exc.status)
  except KeyboardInterrupt:
    fail('interrupted', status=130)
  return 0


if __name__ == '__main__':
  sys.exit(main(whole_process=True))
