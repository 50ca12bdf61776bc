"""The run directory: one run at a time, the configs of every start, resume compatibility.

``RunLock`` keeps a second training run off a directory that one is writing.
Every start writes its resolved config as ``config-<step>.yaml`` (the step it
starts at) and as ``config.yaml`` (the latest), so the config of an earlier
start is never lost; a resume compares its config with ``config.yaml`` (or,
when that cannot be read, the newest readable per-start copy) before anything
is restored or written (:func:`config_changes`).
"""

import fcntl
import os
import re
import socket

import yaml

from core import precision
from core.files import write_text_atomically

LOCK_NAME = 'run.lock'
# The log of run.py's output a sweep (scripts/sweep.py) keeps in each point's run directory.
SWEEP_LOG_NAME = 'run.log'
CONFIG_NAME = 'config.yaml'
_START_CONFIG = re.compile(r'^config-(\d+)(?:-(\d+))?\.yaml$')

# Keys a checkpoint cannot follow a change of: they set the variables and their
# shapes, the optimizer and its slots, the variables' dtype, the accumulators,
# the loss scaler's state, and whether the batch grows (a growing batch counts its
# run step in examples and checkpoints it; a fixed one counts updates). A change of
# dtype that keeps the variables' dtype (float32 <-> mixed_bfloat16, as dtype auto
# may resolve on another machine) changes only the arithmetic: it is free, and so
# is a change from one growing batch policy to another, which go on from the
# checkpoint's batch and step.
FIXED_ON_RESUME = ('model', 'model_params', 'optimizer', 'agn_params', 'dtype', 'iter_size',
                   'batch_policy',
                   'loss_scaling', 'loss_scaling_params')
# Entries below those keys that change no variable (only the arithmetic from now on).
FREE_ON_RESUME = ('model_params.weight_decay', 'model_params.bn_momentum',
                  'model_params.bn_epsilon', 'model_params.ghost_batch_size')


class RunDirError(RuntimeError):
  """The run directory cannot be used as asked; the message is one line for the user."""


def _pid_alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


class RunLock:
  """An exclusive lock on the run directory: ``run.lock``, locked with ``flock`` and holding ``pid host``.

  The lock is the kernel's ``flock`` on the file, taken before the owner is
  written, so two runs starting together can never both hold it (a second one
  is refused even while the first has not written its pid yet), and it ends
  with its process, however that dies. The file's ``pid host`` names the owner
  in messages; a file left by a process that no longer runs on this host
  (killed with SIGKILL, machine restarted) is stale and taken over, with a line
  saying so. A file naming a live process of this host, or any process of
  another host, counts as held even where its ``flock`` is not (a lock written
  by hand, or on a file system that does not share locks between hosts).

  Args:
    logdir: the run directory (must exist).
    log: ``f(message)`` for the stale-lock line.
    name: the lock file's name (a sweep's directory is locked as ``sweep.lock``).
  """

  def __init__(self, logdir, log=print, name=LOCK_NAME):
    self.path = os.path.join(logdir, name)
    self.log = log
    self.held = False
    self._fd = None

  def holder(self):
    """``(pid, host)`` of the lock's owner, or None when there is no lock."""
    try:
      with open(self.path, encoding='utf-8') as f:
        fields = f.read().split()
    except FileNotFoundError:
      return None
    except OSError:
      fields = []
    pid = int(fields[0]) if fields and fields[0].isdigit() else 0
    return pid, (fields[1] if len(fields) > 1 else '?')

  def live_holder(self):
    """``(pid, host)`` of a run holding the lock now, or None (no lock, or a stale one)."""
    holder = self.holder()
    if holder is None:
      return None
    pid, host = holder
    if pid <= 0 or (host == socket.gethostname() and not _pid_alive(pid)):
      return None  # no owner written yet or ever, or its process is gone
    return holder

  def acquire(self):
    """Takes the lock.

    Raises:
      RunDirError: when another run holds it.
      OSError: when the lock file cannot be written.
    """
    for _ in range(3):
      fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        os.close(fd)
        # Held by a live process, which may not have written its pid yet.
        raise RunDirError(self.busy_message(self.holder() or (0, '?'))) from None
      except OSError:
        os.close(fd)
        raise
      if not self._is_the_file(fd):
        os.close(fd)  # released and removed between open and flock: lock the file there now
        continue
      try:
        self._take(fd)
      except BaseException:
        os.close(fd)
        raise
      self._fd = fd
      self.held = True
      return
    raise RunDirError(f'could not take the lock {self.path}: another run keeps taking it')

  def _is_the_file(self, fd):
    try:
      return os.fstat(fd).st_ino == os.stat(self.path).st_ino
    except FileNotFoundError:
      return False

  def _take(self, fd):
    """Writes this process as the owner of a locked file, unless the file names a live one."""
    holder = self.live_holder()
    if holder is not None and holder != (os.getpid(), socket.gethostname()):
      raise RunDirError(self.busy_message(holder))
    stale = self.holder()
    if stale is not None and stale[0] > 0 and stale[0] != os.getpid():
      self.log(f'removing the stale lock {self.path} of a run that is gone (pid {stale[0]})')
    os.ftruncate(fd, 0)
    os.pwrite(fd, f'{os.getpid()} {socket.gethostname()}\n'.encode(), 0)

  def busy_message(self, holder):
    pid, host = holder
    owner = f'pid {pid} on {host}' if pid > 0 else 'a process that is starting'
    return (f'logdir {os.path.dirname(self.path)} is in use by another run ({owner}); '
            f'wait for it to end, or choose another --logdir (if that run is gone, delete '
            f'{self.path})')

  def release(self):
    if self.held:
      self.held = False
      try:
        # Removed while still locked, so a run that opens it now finds another file at the path.
        os.remove(self.path)
      except OSError:
        pass
      os.close(self._fd)
      self._fd = None


def write_start_configs(logdir, text, step):
  """Writes the config of a start at ``step``: ``config-<step>.yaml`` and ``config.yaml``.

  Returns:
    The path of the per-start copy (``config-<step>-<n>.yaml`` when an earlier
    start at the same step with another config is there already).
  """
  name, n = f'config-{step}.yaml', 1
  while True:
    path = os.path.join(logdir, name)
    if not os.path.exists(path):
      break
    with open(path, encoding='utf-8') as f:
      if f.read() == text:
        break
    n += 1
    name = f'config-{step}-{n}.yaml'
  write_text_atomically(path, text)
  write_text_atomically(os.path.join(logdir, CONFIG_NAME), text)
  return path


def read_saved_config(logdir):
  """The train view of ``<logdir>/config.yaml`` as plain data, or (None, reason)."""
  return read_config_file(os.path.join(logdir, CONFIG_NAME))


def read_config_file(path):
  """The train view of a config a start wrote, as plain data, or (None, reason).

  The file holds ``base_params``, ``train_params`` and ``eval_params`` (the
  layout ``--config`` reads); the train view is the first two merged. A flat
  file (no ``base_params``) is read as that view itself.
  """
  try:
    with open(path, encoding='utf-8') as f:
      saved = yaml.safe_load(f)
  except FileNotFoundError:
    return None, f'{path} is missing'
  except (OSError, ValueError, yaml.YAMLError) as exc:
    # ValueError: bytes that are not UTF-8.
    return None, f'{path} cannot be read ({type(exc).__name__})'
  if not isinstance(saved, dict):
    return None, f'{path} holds no config'
  if isinstance(saved.get('base_params'), dict):
    saved = {**saved['base_params'], **(saved.get('train_params') or {})}
  return saved, None


def start_config_paths(logdir):
  """The per-start copies ``config-<step>[-<n>].yaml``, newest first (by step, then n)."""
  found = []
  for name in os.listdir(logdir):
    match = _START_CONFIG.match(name)
    if match:
      found.append((int(match.group(1)), int(match.group(2) or 1), os.path.join(logdir, name)))
  return [path for _, _, path in sorted(found, reverse=True)]


def newest_saved_config(logdir):
  """The train view of the newest readable config of the run directory.

  ``config.yaml`` is the latest start's; when it cannot be read, the per-start
  copies stand in for it, newest first, so that a damaged ``config.yaml``
  never lets a change through that the checkpoints cannot take.

  Returns:
    ``(config or None, the path it was read from or None, [why each newer file
    could not be read, ...])``.
  """
  problems = []
  for path in [os.path.join(logdir, CONFIG_NAME)] + start_config_paths(logdir):
    saved, problem = read_config_file(path)
    if saved is not None:
      return saved, path, problems
    problems.append(problem)
  return None, None, problems


def _flatten(value, path=''):
  if isinstance(value, dict) and value:
    items = {}
    for key, item in value.items():
      items.update(_flatten(item, f'{path}.{key}' if path else str(key)))
    return items
  return {path: value}


def config_changes(saved, new):
  """Compares the saved config with the new one, both as plain data.

  Returns:
    ``(fixed, free)``: lists of ``(key path, saved value, new value)``; a
    change in ``fixed`` is one the checkpoint cannot take.
  """
  old_items, new_items = _flatten(saved), _flatten(new)
  fixed, free = [], []
  for path in sorted(set(old_items) | set(new_items)):
    old, value = old_items.get(path), new_items.get(path)
    if old == value:
      continue
    top = path.split('.', 1)[0]
    target = fixed if top in FIXED_ON_RESUME and path not in FREE_ON_RESUME else free
    if path == 'dtype' and _same_variables(old, value):
      target = free
    if path == 'batch_policy' and 'fixed' not in (old, value):
      target = free
    target.append((path, old, value))
  return fixed, free


def _same_variables(dtype, other):
  """Whether two dtypes keep the variables in the same dtype (False for a name of no dtype)."""
  try:
    return precision.variable_dtype(dtype) == precision.variable_dtype(other)
  except ValueError:
    return False


def describe_changes(changes):
  return ', '.join(f'{path}: {old!r} -> {new!r}' for path, old, new in changes)
