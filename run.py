"""Train, evaluate, benchmark or export a model described by a config file.

  python run.py --config=configs/fashion_mnist_lars.py --mode=train_eval --logdir=runs/fm_lars
  python run.py --config=configs/resnet50_lars.py --mode=benchmark --bench_steps=20
  python run.py --config=runs/fm_lars/config.yaml --mode=eval --logdir=runs/fm_lars --checkpoint=best
  python run.py --config=runs/fm_lars/config.yaml --mode=export --logdir=runs/fm_lars \
      --export_dir=exports/fm_lars
  horovodrun -np 2 --gloo -H localhost:2 python run.py --config=... --mode=train_eval

Exit status: 0 done (or nothing to do); 2 a config, data or logdir mistake, in
one line naming the key path, file or directory (nothing is built before the
config is valid); 1 the run failed (non-finite values, a write that failed, no
intact checkpoint to resume), in one line saying what was kept; 128 + the signal
number (143 SIGTERM, 130 SIGINT) after a signal stopped training and a
checkpoint was saved: resume with --continue_learning.
"""

import argparse
import os
import shlex
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODES = ('train', 'eval', 'train_eval', 'benchmark', 'export')
# Modes that read the checkpoints of an existing run directory.
READING_MODES = ('eval', 'export')


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', required=True, help='a .py or .yaml/.yml config file')
  parser.add_argument('--mode', default='train_eval', choices=MODES)
  parser.add_argument('--logdir', default=None, help='run directory (overrides the config)')
  parser.add_argument('--continue_learning', action='store_true',
                      help='resume from the latest checkpoint in logdir')
  parser.add_argument('--bench_steps', type=int, default=20,
                      help='timed steps in benchmark mode (after the warm-up)')
  parser.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                      help='override a config key (value parsed as YAML); repeatable')
  parser.add_argument('--print_config', action='store_true',
                      help='print the resolved config and exit')
  parser.add_argument('--export_dir', default=None,
                      help='export mode: the new directory of the SavedModel')
  parser.add_argument('--checkpoint', default='latest', metavar='latest|best|PATH',
                      help='eval and export: the latest checkpoint of logdir, the best by eval '
                           'accuracy (logdir/best), or a checkpoint path')
  parser.add_argument('--init_checkpoint', default=None, metavar='LOGDIR_OR_CHECKPOINT',
                      help="train: start from another run's model weights (its newest "
                           'checkpoint, or the one named)')
  parser.add_argument('--init_optimizer_state', action='store_true',
                      help='with --init_checkpoint: load its optimizer state too (slots, loss '
                           'scale); the step still starts at 0')
  return parser.parse_args(argv)


def fail(message, status=2):
  from framework import console  # pylint: disable=import-outside-toplevel
  console.end_progress()  # a run stopped mid-training: the error gets a line of its own
  print(message if message.startswith('error:') else f'error: {message}', file=sys.stderr)
  sys.exit(status)


def load(args):
  """Reads, overlays, overrides and validates the config(s) for the mode."""
  from framework import config as config_lib  # pylint: disable=import-outside-toplevel
  registries = registries_for_config()
  raw = config_lib.load_config_file(args.config)
  # An export serves the model as it is evaluated: the eval view of the config.
  configs = config_lib.resolve_modes(raw, 'eval' if args.mode == 'export' else args.mode, args.set)
  return {mode: (config_lib.validate(cfg, registries, mode) if cfg is not None else None)
          for mode, cfg in configs.items()}


def registries_for_config():
  from data import DATA_LAYERS  # pylint: disable=import-outside-toplevel
  from models import MODELS  # pylint: disable=import-outside-toplevel
  from optimizers.lr_policies import LR_POLICIES  # pylint: disable=import-outside-toplevel
  from optimizers.optimizers import OPTIMIZER_CLS_NAMES  # pylint: disable=import-outside-toplevel
  return {'model': MODELS, 'data_layer': DATA_LAYERS, 'optimizer': OPTIMIZER_CLS_NAMES,
          'lr_policy': LR_POLICIES}


def choose_logdir(args, cfg):
  logdir = args.logdir or cfg['logdir']
  if logdir is None:
    stem = os.path.splitext(os.path.basename(args.config))[0]
    logdir = os.path.join('runs', stem)
  return logdir


def recorded_eval_view(args, configs):
  """The eval view written into ``<logdir>/config.yaml`` beside the train view.

  A train-only run records the config file's eval view too, so that the run
  directory can be evaluated from its own config; None when that view is not
  valid (the record then holds the train view only).
  """
  if configs['eval'] is not None:
    return configs['eval']
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  try:
    return load(argparse.Namespace(config=args.config, mode='eval', set=args.set))['eval']
  except ConfigError:
    return None


def check_flags(args):
  """Refuses flags given to a mode that does not use them, in one line."""
  if (args.mode == 'export') != (args.export_dir is not None):
    fail('--export_dir: required with --mode=export' if args.export_dir is None
         else f'--export_dir: only used with --mode=export, not --mode={args.mode}')
  if args.checkpoint != 'latest' and args.mode not in READING_MODES:
    fail(f'--checkpoint: only used with --mode=eval or export, not --mode={args.mode} '
         '(to start from another run, use --init_checkpoint)')
  if args.init_checkpoint is not None and args.mode not in ('train', 'train_eval'):
    fail(f'--init_checkpoint: only used with --mode=train or train_eval, not --mode={args.mode}')
  if args.init_optimizer_state and args.init_checkpoint is None:
    fail('--init_optimizer_state: only used with --init_checkpoint')


def restore(trainer, args, logdir):
  """Restores what the mode starts from; returns the checkpoint restored or None.

  Eval and export read ``--checkpoint`` of the logdir; training resumes the
  logdir's own checkpoint, else starts from ``--init_checkpoint`` if given.
  """
  from framework import distributed  # pylint: disable=import-outside-toplevel
  from framework import warm_start  # pylint: disable=import-outside-toplevel
  chief = distributed.is_chief()
  if args.mode in READING_MODES:
    restored = trainer.restore(warm_start.choose(logdir, args.checkpoint))
    if restored is None:
      fail(f'no checkpoint found in {logdir}')
  else:
    restored = trainer.restore() if args.continue_learning else None
  if restored and chief:
    print(f'restored {restored} (step {trainer.global_step})', flush=True)
  if args.init_checkpoint is None:
    return restored
  if restored is not None:
    if chief:
      print(f'--init_checkpoint {args.init_checkpoint} not used: resuming the run\'s own '
            'checkpoint', flush=True)
    return restored
  items = trainer.pipeline.checkpoint_items() if args.init_optimizer_state else None
  loaded = warm_start.warm_start(args.init_checkpoint, trainer.model, items)
  if chief:
    what = 'model weights and optimizer state' if items is not None else 'model weights'
    print(f'initialized from {loaded} ({what}); starting at step {trainer.global_step}',
          flush=True)
  return None


def export(trainer, export_dir, checkpoint):
  """Writes the restored model as a SavedModel (chief only) and says how to load it."""
  from framework import distributed  # pylint: disable=import-outside-toplevel
  from framework import export as export_lib  # pylint: disable=import-outside-toplevel
  if not distributed.is_chief():
    return
  try:
    export_lib.export_saved_model(trainer.model, trainer.eval_data, export_dir,
                                  {'checkpoint': os.path.abspath(checkpoint),
                                   'step': trainer.global_step})
  except export_lib.ExportError as exc:
    fail(str(exc))
  except OSError as exc:
    fail(f'--export_dir {export_dir}: cannot write the SavedModel ({exc.strerror or exc}); '
         'nothing was exported', status=1)
  spec, _ = trainer.eval_data.serving_input()
  print(f'exported {checkpoint} (step {trainer.global_step}) to {os.path.abspath(export_dir)}: '
        f'signature {export_lib.SIGNATURE!r} takes {spec.dtype.name} images '
        f'{list(spec.shape)}, returns probabilities and classes; load with '
        f'tf.saved_model.load', flush=True)


def resume_command(argv):
  """The command line that resumes this run."""
  args = list(argv) + ([] if '--continue_learning' in argv else ['--continue_learning'])
  return ' '.join(shlex.quote(a) for a in ['python', sys.argv[0] or 'run.py'] + args)


def check_logdir(logdir, args, training, chief):
  """Refuses a logdir that is a file, missing on resume, busy or (new run) not empty.

  Returns:
    The lock taken on the logdir (training chief), or None.
  """
  from framework import rundir  # pylint: disable=import-outside-toplevel
  if os.path.exists(logdir) and not os.path.isdir(logdir):
    fail(f'logdir {logdir} is a file, not a directory; choose another --logdir')
  if args.mode in READING_MODES and not os.path.isdir(logdir):
    fail(f'logdir {logdir} does not exist; {args.mode} needs a run directory with checkpoints')
  if not training:
    return None
  if args.continue_learning and not os.path.isdir(logdir):
    fail(f'--continue_learning: logdir {logdir} does not exist, there is nothing to resume '
         '(check the path, or drop --continue_learning to start a new run)')
  if not chief:
    return None
  lock = rundir.RunLock(logdir)
  if os.path.isdir(logdir):
    holder = lock.live_holder()
    if holder is not None:
      fail(lock.busy_message(holder))
    if not args.continue_learning and [n for n in os.listdir(logdir) if n != rundir.LOCK_NAME]:
      fail(f'logdir {logdir} is not empty; pass --continue_learning to resume from it, '
           'or choose another --logdir')
  try:
    os.makedirs(logdir, exist_ok=True)
    lock.acquire()
  except rundir.RunDirError as exc:
    fail(str(exc))
  except OSError as exc:
    fail(f'cannot write to logdir {logdir}: {exc.strerror or exc}; nothing was written')
  return lock


def check_resume_config(logdir, cfg):
  """Compares the config with the one the logdir was trained with; one line either way."""
  from framework import config as config_lib  # pylint: disable=import-outside-toplevel
  from framework import distributed  # pylint: disable=import-outside-toplevel
  from framework import rundir  # pylint: disable=import-outside-toplevel
  import yaml  # pylint: disable=import-outside-toplevel
  saved, problem = rundir.read_saved_config(logdir)
  if saved is None:
    if distributed.is_chief() and any(n.startswith('ckpt-') for n in os.listdir(logdir)):
      print(f'warning: {problem}: the config cannot be compared with the one the checkpoints '
            'were written with', flush=True)
    return
  fixed, free = rundir.config_changes(saved, yaml.safe_load(config_lib.to_yaml(cfg)))
  if fixed:
    fail(f'--continue_learning: the checkpoints in {logdir} cannot take these changes: '
         f'{rundir.describe_changes(fixed)} (saved in {os.path.join(logdir, rundir.CONFIG_NAME)}); '
         'resume with the saved values, or start a new run in another --logdir')
  if free and distributed.is_chief():
    print(f'resuming with changed settings: {rundir.describe_changes(free)}', flush=True)


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  if args.bench_steps < 1:
    fail(f'--bench_steps: must be >= 1, got {args.bench_steps}')
  check_flags(args)
  from framework import quiet  # pylint: disable=import-outside-toplevel
  quiet.import_tensorflow()
  from framework import config as config_lib  # pylint: disable=import-outside-toplevel
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  try:
    configs = load(args)
  except ConfigError as exc:
    fail(config_lib.format_error(exc))
  main_cfg = configs['train'] if configs['train'] is not None else configs['eval']
  if args.print_config:
    print(config_lib.to_yaml(main_cfg), end='')
    return 0

  from framework import distributed  # pylint: disable=import-outside-toplevel
  if main_cfg['use_horovod'] or distributed.launched_by_horovodrun():
    try:
      distributed.init()
    except RuntimeError as exc:
      fail(str(exc))
  logdir = choose_logdir(args, main_cfg)
  training = args.mode in ('train', 'train_eval')
  chief = distributed.is_chief()
  if args.mode == 'export':
    from framework import export as export_lib  # pylint: disable=import-outside-toplevel
    try:
      export_lib.check_export_dir(args.export_dir)
    except export_lib.ExportError as exc:
      fail(str(exc))
  lock = check_logdir(logdir, args, training, chief)
  try:
    return run(args, argv, configs, main_cfg, logdir, training)
  except KeyboardInterrupt:
    fail('interrupted', status=130)
  finally:
    if lock is not None:
      lock.release()
  return 0


def run(args, argv, configs, main_cfg, logdir, training):
  """Builds the trainer and runs the mode; returns the exit status."""
  from framework import checkpoints  # pylint: disable=import-outside-toplevel
  from framework import config as config_lib  # pylint: disable=import-outside-toplevel
  from framework import distributed  # pylint: disable=import-outside-toplevel
  from framework import rundir  # pylint: disable=import-outside-toplevel
  from framework import stopping  # pylint: disable=import-outside-toplevel
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  from framework.trainer import RunStopped, Trainer, TrainingError  # pylint: disable=import-outside-toplevel
  from data.base import DataError  # pylint: disable=import-outside-toplevel
  chief = distributed.is_chief()
  stop = stopping.StopRequest().install() if training else None
  try:
    if training and args.continue_learning:
      check_resume_config(logdir, main_cfg)
    trainer = Trainer(configs['train'], configs['eval'], logdir, overrides=args.set)
    if args.mode == 'benchmark':
      trainer.begin()
      result = trainer.benchmark(args.bench_steps)
      if chief:
        print(f'benchmark: {result["images_per_sec"]:.1f} images/sec, '
              f'{result["ms_per_step"]:.1f} ms/step over {args.bench_steps} steps '
              f'(global batch {trainer.batch_size * trainer.num_workers}, '
              f'{trainer.num_workers} worker(s))', flush=True)
      return 0
    restored = restore(trainer, args, logdir)
    if args.mode == 'export':
      export(trainer, args.export_dir, restored)
      return 0
    if chief and training and args.continue_learning and restored is None:
      print(f'no checkpoint in {logdir} yet: starting at step 0', flush=True)
    if training and trainer.global_step >= trainer.max_steps:
      if chief:
        print(f'nothing to do: the checkpoint is at step {trainer.global_step} and the run ends '
              f'at step {trainer.max_steps}; raise max_steps (or num_epochs) to train further',
              flush=True)
      return 0
    if training and chief:
      text = config_lib.run_config_yaml(configs['train'], recorded_eval_view(args, configs))
      try:
        rundir.write_start_configs(logdir, text, trainer.global_step)
      except OSError as exc:
        fail(f'cannot write the config to {exc.filename or logdir}: {exc.strerror or exc}; '
             f'kept: {checkpoints.latest_listed(logdir) or "no checkpoint"}', status=1)
    trainer.begin()
    if args.mode == 'eval':
      trainer.evaluate_and_report()
      return 0
    evaluate_every = None
    if args.mode == 'train_eval':
      evaluate_every = main_cfg['eval_steps'] or trainer.steps_per_epoch
    metrics = trainer.train(evaluate_every=evaluate_every, stop=stop)
    if chief:
      if metrics is not None:
        print(f'final test accuracy: {metrics["accuracy"]:.4f} (top-5 {metrics["top5_accuracy"]:.4f}, '
              f'loss {metrics["loss"]:.4f}) at step {trainer.global_step}', flush=True)
      best = os.path.abspath(os.path.join(logdir, 'best'))
      print(f'checkpoints: {os.path.abspath(logdir)}'
            + (f'  (best by eval accuracy in {best})' if os.path.isdir(best) else ''), flush=True)
      print(f'TensorBoard: tensorboard --logdir {os.path.abspath(logdir)}', flush=True)
  except RunStopped as exc:
    if chief:
      print(f'stopped by {stop.name or "a signal to another worker"} at step {exc.step} of '
            f'{trainer.max_steps}: saved {exc.checkpoint}; resume with: {resume_command(argv)}'
            + (' (under the same horovodrun launch)' if trainer.num_workers > 1 else ''),
            flush=True)
    return stopping.exit_status(exc.signum)
  except (ConfigError, DataError) as exc:
    fail(config_lib.format_error(exc) if isinstance(exc, ConfigError) else str(exc))
  except (TrainingError, checkpoints.CheckpointError) as exc:
    fail(str(exc), status=1)
  finally:
    if stop is not None:
      stop.uninstall()
  return 0


if __name__ == '__main__':
  sys.exit(main())
