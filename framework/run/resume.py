"""Starting or resuming a run in its directory: the checks before anything is written, and its record.

A training run enters its logdir through :func:`check_logdir` (a file in its
place, a missing directory on resume, another live run, a new run in a
directory that is not empty: one line each, and the lock taken);
``--auto_resume`` decides between a start and a resume
(:func:`auto_resume`); a resume compares the config with the one the
checkpoints were trained with (:func:`check_resume_config`), and the data
position with the workers and batch it counts (:func:`check_data_layout`).
:func:`record_configs` writes what the next start compares with.

A refusal raises :class:`LaunchError` with its one line and exit status.
"""

import os
import re

from framework.config import config_file
from framework.config.config_file import READING_MODES
from framework.config.config_file import TRAINING_MODES


class LaunchError(Exception):
  """A mistake or a failed run, as one line, and the exit status it ends with.

  Attributes:
    status: 2 for a config, data or logdir mistake, 1 for a run that failed.
  """

  def __init__(self, message, status=2):
    super().__init__(message)
    self.status = status


def auto_resume(logdir):
  """What ``--auto_resume`` (config ``auto_resume: true``) does with ``logdir``.

  A scheduler that requeues a job (Slurm ``--requeue``, a Kubernetes Job
  restarting its pod) runs the same command again: a logdir that does not
  exist or is empty (a stale ``run.lock`` alone counts as empty) starts a new
  run; one that holds a run (checkpoints or the config a start wrote) is
  resumed as ``--continue_learning`` resumes it, with the same checks.

  Returns:
    ``(resume, the one line that says which)``.

  Raises:
    LaunchError: the logdir holds files that are no run (status 2).
  """
  from framework.run import rundir  # pylint: disable=import-outside-toplevel
  if not os.path.isdir(logdir):
    # A file in its place is refused by check_logdir, as without the flag.
    return False, f'auto_resume: {logdir} is new; starting'
  try:
    names = [n for n in os.listdir(logdir) if n != rundir.LOCK_NAME]
  except OSError as exc:
    raise LaunchError(f'logdir {logdir} cannot be read: {exc.strerror or exc}') from None
  if not names:
    return False, f'auto_resume: {logdir} is empty; starting'
  steps = [int(m.group(1)) for m in map(re.compile(r'^ckpt-(\d+)\.index$').match, names) if m]
  if steps:
    return True, f'auto_resume: {logdir} holds ckpt-{max(steps)}; resuming'
  run_files = sorted(n for n in names if n in (rundir.CONFIG_NAME, 'checkpoint')
                     or n.startswith('ckpt-'))
  run_files += [os.path.basename(p) for p in rundir.start_config_paths(logdir)]
  if run_files:
    return True, (f'auto_resume: {logdir} holds a run with no checkpoint yet ({run_files[0]}); '
                  'resuming')
  raise LaunchError(f'--auto_resume: logdir {logdir} is not empty and holds no run (no '
                    f'checkpoint, no {rundir.CONFIG_NAME}; it holds {sorted(names)[0]}'
                    f'{" and more" if len(names) > 1 else ""}); choose another --logdir, or '
                    'empty it')


def auto_resume_line(logdir, auto):
  """The line of :func:`auto_resume`'s choice, said once its checkpoint has been read.

  ``auto_resume`` decides before the multi-worker engine starts, when no
  checkpoint may be read yet, and names the newest one. When that one is
  damaged, the resume falls back to the newest intact one: the line says so
  first, rather than naming a checkpoint that will not be resumed.

  Args:
    logdir: the run directory.
    auto: what :func:`auto_resume` returned, ``(resume, line)``.
  """
  resume, line = auto
  named = re.search(r' holds ckpt-(\d+); resuming$', line)
  if not resume or named is None:
    return line
  from framework.run import checkpoints  # pylint: disable=import-outside-toplevel
  newest = f'ckpt-{named.group(1)}'
  if checkpoints.verify(os.path.join(logdir, newest)) is None:
    return line
  try:
    intact, _ = checkpoints.newest_intact(logdir)
  except checkpoints.CheckpointError:
    intact = None
  if intact is None:
    return f'auto_resume: {logdir} holds {newest}, which is damaged, and no intact checkpoint'
  return (f'auto_resume: {logdir} holds {newest}, which is damaged; resuming from '
          f'{os.path.basename(intact)}, the newest intact checkpoint')


def remove_if_empty(logdir):
  """Removes a logdir this launch made when a refusal or failure left it empty."""
  try:
    os.rmdir(logdir)
  except OSError:
    pass  # it holds files: they stay


def undo_refused_start(logdir, lock):
  """Leaves a logdir as a start found it when the start was refused before the run was recorded.

  A start writes a few files before its first step (the data layer's
  ``image_statistics.json`` or ``vocabulary.json``, the event files) and
  only then records the run (``config.yaml``, then checkpoints). A start
  refused in between (a model of the wrong shape, a weights file that does
  not fit, a memory estimate that cannot fit) would leave them, and the same
  command would then be refused for a logdir that is not empty. So when the
  logdir was empty as the start found it (apart from the lock) and holds no
  record of a run now, what the start wrote is removed, and the logdir too
  when the start made it. Called after the lock is released.

  Args:
    logdir: the run directory.
    lock: the start's ``rundir.RunLock``, with ``found_empty`` and ``made_logdir``.
  """
  import shutil  # pylint: disable=import-outside-toplevel
  from framework.run import rundir  # pylint: disable=import-outside-toplevel
  if not getattr(lock, 'found_empty', False):
    return
  try:
    names = [n for n in os.listdir(logdir) if n != rundir.LOCK_NAME]
  except OSError:
    return
  if (any(n in (rundir.CONFIG_NAME, 'checkpoint') or n.startswith('ckpt-') for n in names)
      or rundir.start_config_paths(logdir)):
    return  # the run was recorded: a failed run keeps what it wrote
  for name in names:
    path = os.path.join(logdir, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      try:
        os.remove(path)
      except OSError:
        pass
  if lock.made_logdir:
    remove_if_empty(logdir)


def check_logdir(logdir, options, chief):
  """Refuses a logdir that is a file, missing on resume, busy or (new run) not empty.

  Returns:
    The lock taken on the logdir (training chief), or None.
  """
  from framework.run import rundir  # pylint: disable=import-outside-toplevel
  if os.path.exists(logdir) and not os.path.isdir(logdir):
    raise LaunchError(f'logdir {logdir} is a file, not a directory; choose another --logdir')
  if options.mode in READING_MODES and not os.path.isdir(logdir):
    raise LaunchError(f'logdir {logdir} does not exist; {options.mode} needs a run directory '
                      'with checkpoints')
  if options.mode not in TRAINING_MODES:
    return None
  if options.continue_learning and not os.path.isdir(logdir):
    raise LaunchError(f'--continue_learning: logdir {logdir} does not exist, there is nothing to '
                      'resume (check the path, or drop --continue_learning to start a new run)')
  if not chief:
    return None
  lock = rundir.RunLock(logdir)
  # A logdir made here and left empty by a refusal is removed again (launch()).
  lock.made_logdir = not os.path.isdir(logdir)
  # What a refused start wrote into a logdir it found empty is removed again (undo_refused_start).
  lock.found_empty = lock.made_logdir or not [n for n in os.listdir(logdir)
                                              if n != rundir.LOCK_NAME]
  if os.path.isdir(logdir):
    holder = lock.live_holder()
    if holder is not None:
      raise LaunchError(lock.busy_message(holder))
    if (not options.continue_learning
        and [n for n in os.listdir(logdir) if n != rundir.LOCK_NAME]):
      raise LaunchError(f'logdir {logdir} is not empty; pass --continue_learning to resume from '
                        'it, or choose another --logdir')
  return take_lock(logdir, lock)


def enter_logdir(logdir, chief):
  """Refuses a logdir that is a file or in use; takes its lock (chief), making it if new.

  For a mode that trains in a logdir of its own making (``--mode=critical_batch``):
  unlike ``check_logdir``, a logdir that holds files is not refused here.
  """
  from framework.run import rundir  # pylint: disable=import-outside-toplevel
  if os.path.exists(logdir) and not os.path.isdir(logdir):
    raise LaunchError(f'logdir {logdir} is a file, not a directory; choose another --logdir')
  if not chief:
    return None
  lock = rundir.RunLock(logdir)
  lock.made_logdir = not os.path.isdir(logdir)
  if not lock.made_logdir:
    holder = lock.live_holder()
    if holder is not None:
      raise LaunchError(lock.busy_message(holder))
  return take_lock(logdir, lock)


def take_lock(logdir, lock):
  """Makes ``logdir`` when it is new and takes ``lock`` (a ``rundir.RunLock``) on it; returns it.

  Raises:
    LaunchError: the lock is held, or the logdir cannot be written; in one line.
  """
  from framework.run import rundir  # pylint: disable=import-outside-toplevel
  try:
    os.makedirs(logdir, exist_ok=True)
    lock.acquire()
  except rundir.RunDirError as exc:
    raise LaunchError(str(exc)) from None
  except OSError as exc:
    raise LaunchError(f'cannot write to logdir {logdir}: {exc.strerror or exc}; nothing was '
                      'written') from None
  return lock


def check_resume_config(logdir, cfg):
  """Compares the config with the one the logdir was trained with; one line either way."""
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  from optimizers import allreduce  # pylint: disable=import-outside-toplevel
  from framework.run import rundir  # pylint: disable=import-outside-toplevel
  saved, path, problems = rundir.newest_saved_config(logdir)
  if saved is None:
    if any(n.startswith('ckpt-') for n in os.listdir(logdir)):
      # Without the config the checkpoints were written with, a change they cannot
      # take (another model or optimizer) would go through unseen.
      raise LaunchError(
          f'--continue_learning: no readable config in {logdir} to compare this config with '
          f'({"; ".join(problems)}); nothing was changed. Put the config the checkpoints were '
          f'written with back as {os.path.join(logdir, rundir.CONFIG_NAME)}, or start a new run '
          'in another --logdir')
    return
  if problems and distributed.is_chief():
    print(f'warning: {"; ".join(problems)}; comparing with {path}, the newest readable config '
          'of the run', flush=True)
  # The rate an lr_scaling rule gave is compared as the number it is recorded as.
  fixed, free = rundir.config_changes(saved, as_recorded_data(cfg))
  if fixed:
    raise LaunchError(
        f'--continue_learning: the checkpoints in {logdir} cannot take these changes: '
        f'{rundir.describe_changes(fixed)} (saved in {path}); '
        'resume with the saved values, or start a new run in another --logdir')
  check_data_layout(logdir, saved, cfg)
  # How the run is started is no setting of the run (configs before it lack the key).
  free = [change for change in free if change[0] != 'auto_resume']
  if free and distributed.is_chief():
    # A dtype change here keeps the variables' dtype: the checkpoints resume as they are.
    same = (' (the variables are float32 in both dtypes)'
            if any(key == 'dtype' for key, _, _ in free) else '')
    print(f'resuming with changed settings: {rundir.describe_changes(free)}{same}', flush=True)


def check_data_layout(logdir, saved, cfg):
  """Refuses a resume whose workers or batch per worker differ from the newest checkpoint's.

  The data position a checkpoint holds counts one worker's batches, and the
  data layers deal each epoch to the workers in whole batches: with other
  workers or another batch the same position names other examples (some read
  twice, some never), so the resume is refused in one line, before anything
  is built (``Trainer.restore`` checks the checkpoint it restores again). A
  checkpoint written before checkpoints recorded their workers is checked for
  its batch (from ``saved``, the config of the run) and resumed with a note.

  Args:
    logdir: the run directory.
    saved: the train view of the run's newest readable config.
    cfg: this run's config.
  """
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  from optimizers import allreduce  # pylint: disable=import-outside-toplevel
  from framework.run import checkpoints  # pylint: disable=import-outside-toplevel
  workers, batch = allreduce.size(), cfg['batch_size_per_gpu']
  prefix, layout = checkpoints.newest_data_layout(logdir)
  if prefix is None:
    return  # no readable checkpoint: the restore says what there is
  if layout is None:
    layout = (None, saved.get('batch_size_per_gpu'))
    if not isinstance(layout[1], int):
      return  # a config that names no batch: nothing to compare
    if layout[1] == batch and distributed.is_chief():
      print(f'note: {prefix} does not record the workers it was trained with (written before '
            f'checkpoints did): resume it with as many as then ({workers} now), or its data '
            'position names other examples', flush=True)
  refusal = checkpoints.layout_change(prefix, layout, workers, batch)
  if refusal is not None:
    raise LaunchError(refusal)


def record_configs(options, configs, logdir, step, dtype_line=None):
  """Writes the run's train view and eval view into ``<logdir>/config.yaml``.

  The dtype recorded is the one the run computes in; ``dtype_line`` (what
  ``dtype: auto`` resolved to, or None) is kept beside it as a comment.
  """
  from core import precision  # pylint: disable=import-outside-toplevel
  from framework.run import checkpoints  # pylint: disable=import-outside-toplevel
  from framework.run import rundir  # pylint: disable=import-outside-toplevel
  train, rule = as_recorded(configs['train'])
  evaluation, _ = as_recorded(recorded_eval_view(options, configs))
  if evaluation is not None and evaluation['dtype'] == precision.AUTO:
    # The eval view read again from a train-only run's file: it evaluates as the run trained.
    evaluation = dict(evaluation, dtype=train['dtype'])
  text = config_file.run_config_yaml(train, evaluation, recorded_infer_section(options))
  if dtype_line is not None:
    text = (f'# {dtype_line}; the config asked for dtype: auto, this file records the dtype '
            'the run computes in\n' + text)
  if rule is not None:
    text = (f'# lr_policy_params.learning_rate: {train["lr_policy_params"]["learning_rate"]!r} '
            f'was resolved from lr_scaling: {rule} for this run\'s global batch; run with '
            'lr_scaling instead to rescale it\n' + text)
  try:
    rundir.write_start_configs(logdir, text, step)
  except OSError as exc:
    raise LaunchError(f'cannot write the config to {exc.filename or logdir}: '
                      f'{exc.strerror or exc}; kept: '
                      f'{checkpoints.latest_listed(logdir) or "no checkpoint"}', status=1) from None


def as_recorded(cfg):
  """``cfg`` as config.yaml records it.

  An lr_scaling rule is replaced by the rate it gave (kept as the rule where the batch
  grows, which rescales the rate by it), and the directories the
  config's own code (``"module:name"``, or an object of a Python config) is
  imported from are added to ``import_paths``, so the run directory re-runs
  itself from anywhere.

  Returns:
    (config, the rule or None).
  """
  from framework.config import config_file  # pylint: disable=import-outside-toplevel
  if cfg is None:
    return cfg, None
  from core import batch_policy  # pylint: disable=import-outside-toplevel
  cfg = config_file.with_code_roots(config_file.plain(cfg))
  if cfg['lr_scaling'] is None:
    return cfg, None
  if not batch_policy.is_fixed(cfg):
    # A growing batch rescales the rate by the rule at each change: the rule is kept.
    params = {k: v for k, v in cfg['lr_policy_params'].items() if k != 'learning_rate'}
    return dict(cfg, lr_policy_params=params), None
  return dict(cfg, lr_scaling=None), dict(cfg['lr_scaling'])


def as_recorded_data(cfg):
  """``cfg`` as config.yaml records it (:func:`as_recorded`), as the plain data read back from it."""
  import yaml  # pylint: disable=import-outside-toplevel
  return yaml.safe_load(config_file.to_yaml(as_recorded(cfg)[0]))


def recorded_infer_section(options):
  """The config file's ``infer_params`` (OpenSeq2Seq's), kept in ``<logdir>/config.yaml``; None without.

  The keys the section gives are recorded with the values of the validated
  infer view (paths made absolute, defaults filled in), so that the run
  directory infers as the config file does, from anywhere.
  """
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  from framework.config import config_resolve  # pylint: disable=import-outside-toplevel
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  path, overrides = getattr(options, 'config', None), list(getattr(options, 'set', None) or ())
  if path is None:
    return None  # a run started from Python, with no config file to read it from
  try:
    with open(path, encoding='utf-8', errors='replace') as f:
      named = config_file.INFER_KEY in f.read()
  except OSError:
    named = False
  if not named and not any(str(s).startswith(config_file.INFER_KEY) for s in overrides):
    return None  # the file is read again only when it can hold the section
  try:
    section = config_resolve.infer_section(config_file.load_config_file(path), overrides)
  except ConfigError:
    return None
  if not section:
    return None
  try:
    view = config_lib.load_configs(path, 'infer', overrides, construct=False)['eval']
  except ConfigError:
    return section  # infer will say what is wrong with it; the section is kept as given
  return {key: view[key] for key in section if key in view}


def recorded_eval_view(options, configs):
  """The eval view written into ``<logdir>/config.yaml`` beside the train view.

  A train-only run records the config file's eval view too, so that the run
  directory can be evaluated from its own config; None when that view is not
  valid (the record then holds the train view only).
  """
  if configs['eval'] is not None:
    return configs['eval']
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  try:
    return config_lib.load_configs(options.config, 'eval', options.set)['eval']
  except ConfigError:
    return None
