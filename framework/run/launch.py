"""One run of a config: load it, check the run directory, build the trainer, run the mode.

``run.py`` parses the command line, loads the configs with
``framework.config.validation.load_configs`` (which scripts use too) and calls :func:`launch`::

  configs = config.load_configs('configs/fashion_mnist_lars.py', 'train_eval', ['max_steps=100'])
  status = launch(options, configs, resume='python run.py ... --continue_learning')

``options`` are run.py's parsed flags (see ``run.parse_args``): ``config``,
``mode``, ``logdir``, ``continue_learning``, ``auto_resume``, ``bench_steps``, ``set`` (the
overrides), ``export_dir``, ``checkpoint``, ``init_checkpoint``,
``init_optimizer_state``, ``infer_input`` and ``infer_output_file``.

A mistake (config, data, logdir) or a failed run raises :class:`LaunchError`
with the one line to print and the exit status; nothing is built before the
config is valid, and a failure says what was kept. TensorFlow and the trainer
are imported only where a run needs them.
"""

import contextlib
import copy
import os
import sys

from framework.config import config_file
from framework.config.config_file import CHECKPOINT_MODES  # noqa: F401  (run.py's flags)
from framework.config.config_file import MODES  # noqa: F401  (run.py's choices)
from framework.config.config_file import READING_MODES
from framework.config.config_file import TRAINING_MODES
from framework.run import session
from framework.run.resume import LaunchError
from framework.run.resume import auto_resume
from framework.run.resume import auto_resume_line
from framework.run.resume import check_logdir
from framework.run.resume import check_resume_config
from framework.run.resume import record_configs
from framework.run.resume import undo_refused_start


def main_config(configs):
  """The config that describes the run: the train view, else the eval view."""
  return configs['train'] if configs['train'] is not None else configs['eval']


def choose_logdir(options, cfg):
  """``--logdir``, else the config's logdir, else ``runs/<config file stem>``."""
  logdir = options.logdir or cfg['logdir']
  if logdir is None:
    stem = os.path.splitext(os.path.basename(options.config))[0]
    logdir = os.path.join('runs', stem)
  return logdir


def launch(options, configs, resume, notes=(), output=None):
  """Starts the multi-worker engine, checks the logdir and runs the mode.

  Args:
    options: run.py's parsed flags (see the module docstring).
    configs: from ``framework.config.validation.load_configs``.
    resume: the command line that resumes the run, printed when a signal
      stops training.
    notes: the one-line notes of loading the configs (``load_configs``'s
      ``notes``), said once by the chief.
    output: where infer writes its lines (default: stdout, while every other
      line of an infer run goes to stderr).

  Returns:
    The exit status: 0, or 128 + the signal number after a signal stopped
    training and a checkpoint was saved.

  Raises:
    LaunchError: a mistake or a failed run.
  """
  if options.mode == 'infer' and output is None:
    # infer's lines are what it outputs on stdout: the run's own lines (the
    # config's notes, the learning rate's scaling, warnings) go to stderr.
    output = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
      return launch(options, configs, resume, notes, output)
  cfg = main_config(configs)
  auto = None
  if options.mode in TRAINING_MODES and (getattr(options, 'auto_resume', False)
                                         or cfg['auto_resume']):
    # Decided before the engine starts: no worker of this job can have written to the
    # logdir yet (the chief writes only after every worker has met the others), so
    # every worker sees it alike and all take the same way.
    auto = auto_resume(choose_logdir(options, cfg))
    options = copy.copy(options)
    options.continue_learning = auto[0]
  distributed = start_engine(cfg)
  for note in notes:
    distributed.log(note)
  if auto is not None and distributed.is_chief():
    distributed.log(auto_resume_line(choose_logdir(options, cfg), auto))
  configs = scale_learning_rates(configs, distributed)
  configs, dtype_line = resolve_dtype(configs, distributed)
  cfg = main_config(configs)
  check_with_owners(configs)
  logdir = choose_logdir(options, cfg)
  if options.mode == 'critical_batch':
    # A warm-up and branches, each a run with its own logdir checks, lock and stops.
    from framework.run import critical_batch  # pylint: disable=import-outside-toplevel
    return critical_batch.launch(options, configs, logdir, resume, dtype_line)
  if options.mode == 'export':
    check_export_dir(options.export_dir)
  lock = check_logdir(logdir, options, distributed.is_chief())
  if options.mode not in TRAINING_MODES:
    # No StopRequest takes the stop signals over: they end the mode as at start-up.
    from core import signals  # pylint: disable=import-outside-toplevel
    signals.describe_phase(f'during --mode={options.mode}', 'no checkpoint of the run was changed')
  with session.holding(lock, lambda held: undo_refused_start(logdir, held)):
    return run(options, configs, logdir, resume, output, dtype_line)


def check_export_dir(export_dir):
  """Refuses, in one line, an ``--export_dir`` the SavedModel cannot be written to."""
  from framework.tasks import export as export_lib  # pylint: disable=import-outside-toplevel
  try:
    export_lib.check_export_dir(export_dir)
  except export_lib.ExportError as exc:
    raise LaunchError(str(exc)) from None


def scale_learning_rates(configs, distributed):
  """The configs with their lr_scaling rules resolved for the workers of this run, logged."""
  from optimizers import allreduce  # pylint: disable=import-outside-toplevel
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  configs, how = config_lib.scale_learning_rates(configs, allreduce.size())
  if how is not None:
    distributed.log(f'learning rate (lr_scaling): {how}')
  return configs


def resolve_dtype(configs, distributed):
  """The configs with ``dtype: auto`` resolved for this machine, said once (chief).

  Resolved before the run directory is compared or written, so that a resume
  compares the dtype the run computes in with the one its checkpoints were
  trained in, and ``config.yaml`` records it.

  Returns:
    ``(configs, the line that says what auto chose, or None when no view asks for auto)``.
  """
  from core import precision  # pylint: disable=import-outside-toplevel
  from framework.engines import hardware  # pylint: disable=import-outside-toplevel
  resolved, dtype, line = {}, None, None
  for view, cfg in configs.items():
    if cfg is not None and cfg['dtype'] == precision.AUTO:
      if dtype is None:
        dtype, line = hardware.resolve_dtype(precision.AUTO)
      cfg = dict(cfg, dtype=dtype)
    resolved[view] = cfg
  if line is not None:
    distributed.log(line)
  return resolved, line


def check_with_owners(configs):
  """The config checks that construct the optimizer and lr policy (TensorFlow), as one line."""
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  try:
    config_lib.check_with_owners(configs)
  except ConfigError as exc:
    raise LaunchError(config_file.format_error(exc)) from None


def start_engine(cfg):
  """Starts the run's multi-worker engine (before any other TensorFlow op); returns the module.

  With two or more workers, a stop signal is deferred from here on: the
  workers stop together (the train loop's ``StopRequest`` takes it).

  Raises:
    LaunchError: a choice the environment cannot honour, or a cluster that cannot start.
  """
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  from framework.engines import tf_import  # pylint: disable=import-outside-toplevel
  tf_import.import_tensorflow()  # without its start-up banner, before the engine imports it
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  from optimizers import allreduce  # pylint: disable=import-outside-toplevel
  choice = cfg['distribution']
  if cfg['use_horovod'] and choice == distributed.AUTO:
    choice = 'horovod'
  try:
    engine = distributed.start(choice, cfg['distribution_params'])
  except distributed.PeersMissing as exc:
    raise LaunchError(str(exc), status=1) from None
  except (ConfigError, RuntimeError) as exc:
    raise LaunchError(str(exc)) from None
  if allreduce.size() > 1:
    # Before the engine line: a stop that comes as soon as a worker says its cluster has
    # started must already be kept for the trainer, or this worker alone would end.
    from core import signals  # pylint: disable=import-outside-toplevel
    signals.defer_stops()  # the workers stop together from here (run() takes it)
  if engine != 'none':
    distributed.log(f'engine: {allreduce.engine_name()}, {allreduce.size()} workers; '
                    f'{allreduce.describe()}')
  return distributed


def run(options, configs, logdir, resume, output=None, dtype_line=None):
  """Builds the trainer and runs the mode; returns the exit status (see :func:`launch`).

  ``dtype_line``: what ``dtype: auto`` resolved to (:func:`resolve_dtype`), for config.yaml.
  """
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  from optimizers import allreduce  # pylint: disable=import-outside-toplevel
  from framework.run import checkpoints  # pylint: disable=import-outside-toplevel
  from framework.run import stopping  # pylint: disable=import-outside-toplevel
  from framework.run.trainer import RunStopped, Trainer  # pylint: disable=import-outside-toplevel
  training = options.mode in TRAINING_MODES
  trainer = None
  # From here a stop signal is the trainer's: it saves, or takes a stop that came just
  # before as pending (core.signals raised it before).
  with session.stop_signals(logdir, training) as stop:
    try:
      if training and options.continue_learning:
        check_resume_config(logdir, main_config(configs))
      trainer = Trainer(configs['train'], configs['eval'], logdir, overrides=options.set)
      return run_mode(trainer, options, configs, logdir, stop, output, dtype_line)
    except RunStopped as exc:
      stop.saved = exc.checkpoint
      if distributed.is_chief():
        print(f'stopped by {stop.name or "a signal to another worker"} at step {exc.step} of '
              f'{trainer.max_steps}: saved {exc.checkpoint}; resume with: {resume}'
              + (_same_launch(allreduce.engine_name()) if trainer.num_workers > 1 else ''),
              flush=True)
      return stopping.exit_status(exc.signum)
    except checkpoints.LogdirRemoved as exc:
      if distributed.is_chief():
        # The new directory resumes like the old one: its config goes back beside the checkpoint.
        record_configs(options, dict(configs, train=trainer.config), logdir, exc.step, dtype_line)
      raise LaunchError(str(exc), status=1) from None
    except Exception as exc:  # pylint: disable=broad-except
      session.raise_one_line(exc, logdir, trainer, options.mode)


def _same_launch(engine):
  if engine == 'horovod':
    return ' (under the same horovodrun launch)'
  if os.environ.get('LARGEBATCH_NUM_WORKERS'):
    return ''
  return ' (with the same launcher and TF_CONFIG or srun)'


def check_memory(trainer):
  """Refuses a training run whose one step cannot fit in the machine's memory (``framework.run.memory``)."""
  from framework.run import memory  # pylint: disable=import-outside-toplevel
  refusal = memory.check_fits(trainer)
  if refusal is not None:
    raise LaunchError(refusal)


def run_mode(trainer, options, configs, logdir, stop, output=None, dtype_line=None):
  """Runs the mode on a built trainer; returns the exit status (``output``: infer's stream)."""
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  from framework.run import train_loop  # pylint: disable=import-outside-toplevel
  if options.mode == 'benchmark':
    from framework.run import benchmark  # pylint: disable=import-outside-toplevel
    benchmark.run(trainer, options.bench_steps)
    return 0
  restored = restore(trainer, options, logdir)
  if options.mode == 'export':
    export(trainer, options.export_dir, restored)
    return 0
  if options.mode == 'infer':
    infer(trainer, options, output)
    return 0
  chief = distributed.is_chief()
  training = options.mode in TRAINING_MODES
  if training:
    check_memory(trainer)  # before the run is recorded: a refusal leaves the logdir as it was
    if trainer.batch_control is not None:
      trainer.batch_control.check_restored(trainer.steps_per_epoch)
  if chief and training and options.continue_learning and restored is None:
    print(f'no checkpoint in {logdir} yet: starting at step 0', flush=True)
  if training and trainer.global_step >= trainer.max_steps:
    if not train_loop.ending_pending(logdir, trainer.global_step):
      if chief:
        print(f'nothing to do: the checkpoint is at step {trainer.global_step} and the run ends '
              f'at step {trainer.max_steps}; raise max_steps (or num_epochs) to train further',
              flush=True)
      return 0
    if chief:
      print(f'a signal cut off the end of training at step {trainer.global_step}: doing it now '
            '(precise batch norm, last checkpoint, last evaluation)', flush=True)
  if training and chief:
    # The trainer's train view: a warm-up it shortened to fit the run is recorded so.
    record_configs(options, dict(configs, train=trainer.config), logdir, trainer.global_step,
                   dtype_line)
  trainer.begin()
  if options.mode == 'eval':
    trainer.evaluate_and_report()
    return 0
  evaluate_every = None
  if options.mode == 'train_eval':
    # Every epoch: its updates rounded down (3 of 3.5), at least 1.
    evaluate_every = (main_config(configs)['eval_steps']
                      or max(1, int(trainer.steps_per_epoch)))
  metrics = trainer.train(evaluate_every=evaluate_every, stop=stop)
  if chief:
    report_end(trainer, metrics, logdir)
  return 0


def noise_scale_line(noise, unit, global_batch, decay):
  """``noise scale (B_simple): N <unit> (...)``: the run's last estimate (``Trainer.noise_scale``)."""
  from core import noise_scale as formulas  # pylint: disable=import-outside-toplevel
  window = min(noise['updates'], round(1.0 / (1.0 - decay)))
  return (f'noise scale (B_simple): {formulas.describe(noise["b_simple"], unit)} '
          f'(global batch {global_batch}; the last ~{window} of {noise["updates"]} '
          'measured updates weigh)')


def report_end(trainer, metrics, logdir):
  """The last lines of a training run: the final metric, checkpoints, TensorBoard.

  The final line is the task's (``final test accuracy: ...`` for images,
  ``final test wer: ...`` for sequences), naming the split and the step its
  numbers come from: the last evaluation, or the best checkpoint's on the
  final split when the run has one (``evaluation.final_line``).
  """
  from framework.run import evaluation  # pylint: disable=import-outside-toplevel
  if metrics is not None:
    print(evaluation.final_line(trainer.task, metrics, trainer.global_step), flush=True)
  noise = trainer.noise_scale()
  if noise is not None:
    print(noise_scale_line(noise, trainer.task.example_unit, trainer.current_batch(),
                           trainer.config['noise_scale_params']['decay']), flush=True)
  if trainer.batch_control is not None:
    print(trainer.batch_control.summary_line(int(trainer.pipeline.global_step.numpy())),
          flush=True)
  best = os.path.abspath(os.path.join(logdir, 'best'))
  print(f'checkpoints: {os.path.abspath(logdir)}'
        + (f'  (best by eval {trainer.task.BEST_METRIC} in {best})' if os.path.isdir(best)
           else ''), flush=True)
  print(f'TensorBoard: tensorboard --logdir {os.path.abspath(logdir)}', flush=True)


def restore(trainer, options, logdir):
  """Restores what the mode starts from; returns the checkpoint restored or None.

  Eval and export read ``--checkpoint`` of the logdir; training resumes the
  logdir's own checkpoint, else starts from ``--init_checkpoint`` if given.
  """
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  from framework.run import warm_start  # pylint: disable=import-outside-toplevel
  chief = distributed.is_chief()
  if options.mode in READING_MODES:
    restored = trainer.restore(warm_start.choose(logdir, options.checkpoint,
                                                    trainer.task.BEST_METRIC))
    if restored is None:
      raise LaunchError(f'no checkpoint found in {logdir}')
  else:
    restored = trainer.restore() if options.continue_learning else None
  if restored and chief:
    # infer may write its output on stdout: the note goes to stderr there.
    print(f'restored {restored} (step {trainer.global_step})', flush=True,
          file=sys.stderr if options.mode == 'infer' else sys.stdout)
  if options.init_checkpoint is None:
    return restored
  if restored is not None:
    if chief:
      print(f'--init_checkpoint {options.init_checkpoint} not used: resuming the run\'s own '
            'checkpoint', flush=True)
    return restored
  items = trainer.pipeline.checkpoint_items() if options.init_optimizer_state else None
  loaded = warm_start.warm_start(options.init_checkpoint, trainer.model, items)
  if chief:
    what = 'model weights and optimizer state' if items is not None else 'model weights'
    print(f'initialized from {loaded} ({what}); starting at step {trainer.global_step}',
          flush=True)
  return None


def export(trainer, export_dir, checkpoint):
  """Writes the restored model as a SavedModel (chief only) and says how to load it."""
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  from framework.tasks import export as export_lib  # pylint: disable=import-outside-toplevel
  if not distributed.is_chief():
    return
  task, data = trainer.task, trainer.eval_data
  try:
    export_lib.export_saved_model(trainer.model, export_dir,
                                  {'checkpoint': os.path.abspath(checkpoint),
                                   'step': trainer.global_step, 'task': task.NAME,
                                   **task.export_info(data)},
                                  serve=task.serving_function(trainer.model, data),
                                  assets=task.export_assets(data))
  except export_lib.ExportError as exc:
    raise LaunchError(str(exc)) from None
  except OSError as exc:
    raise LaunchError(f'--export_dir {export_dir}: cannot write the SavedModel '
                      f'({exc.strerror or exc}); nothing was exported', status=1) from None
  print(f'exported {checkpoint} (step {trainer.global_step}) to {os.path.abspath(export_dir)}: '
        f'signature {export_lib.SIGNATURE!r} {trainer.task.describe_export(trainer.eval_data)}; '
        'load with tf.saved_model.load', flush=True)


def infer(trainer, options, output=None):
  """``--mode=infer``: the task's outputs for the inputs of ``--infer_input`` (chief only).

  The task reads ``--infer_input`` (``Task.infer_inputs``: the lines of a
  file or of stdin, ``-``, for a sequence model; image files, a folder of
  them or a list of their paths for an image classifier) and gives one line
  per input (``word<TAB>phones``, ``path<TAB>class<TAB>probability...``),
  written to ``--infer_output_file``, or ``output`` (default stdout).

  Raises:
    LaunchError: an input that cannot be read or an output that cannot be
      written (naming the file), or a task without an infer mode.
  """
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  from data.base import DataError  # pylint: disable=import-outside-toplevel
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  if not distributed.is_chief():
    return
  try:
    inputs = trainer.task.infer_inputs(options.infer_input)
    outputs = trainer.task.infer(trainer.model, trainer.eval_data, inputs,
                                 trainer.eval_config['batch_size_per_gpu'])
  except (ConfigError, DataError) as exc:
    raise LaunchError(str(exc)) from None
  text = ''.join(line + '\n' for line in outputs)
  if options.infer_output_file is None:
    output = output or sys.stdout
    output.write(text)
    output.flush()
    return
  try:
    with open(options.infer_output_file, 'w', encoding='utf-8') as f:
      f.write(text)
  except OSError as exc:
    raise LaunchError(f'--infer_output_file {options.infer_output_file}: cannot be written '
                      f'({exc.strerror or exc})', status=1) from None
  print(f'wrote {len(outputs)} lines to {os.path.abspath(options.infer_output_file)}',
        file=sys.stderr, flush=True)
