"""run.py's ``main()`` in the test's own process, as a user's command would run it in a child.

A child ``run.py`` pays Python's start-up, the allocator's re-exec and
TensorFlow's import before its first step: about 6 s here, more than a short
test training takes. :func:`run_py` runs the same command line through
``run.main`` in this process (TensorFlow already imported) and gives what a
child would: a ``subprocess.CompletedProcess`` with the exit status and what
was written on stdout and stderr, by Python and by TensorFlow's runtime
(``tf.print``, its log) alike, read from the file descriptors as a child's
pipes read them.

What a command leaves behind in the process is put back after it: the
environment, the working directory, the stop signals' handlers (``run.main``
restores its own), Keras' global state (``clear_session``), the global dtype
policy, op determinism, ``sys.path`` and the modules imported from a test's
own directories. What needs a real process stays in a child: stop
signals sent from outside, a kill, the exit of the process, several workers,
the allocator, and variables that are read as the process starts.
"""

import contextlib
import ctypes
import gc
import io
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What the environment may hold that would make run.py a worker of some cluster.
CLUSTER_VARIABLES = ('TF_CONFIG', 'HOROVOD_CYCLE_TIME', 'LARGEBATCH_NUM_WORKERS')


def drop_cluster_variables(environ):
  """Takes from ``environ`` (a mapping, or a test's ``monkeypatch``) what would make run.py a worker."""
  for name in list(os.environ if hasattr(environ, 'delenv') else environ):
    if name in CLUSTER_VARIABLES or name.startswith('SLURM_'):
      if hasattr(environ, 'delenv'):
        environ.delenv(name)
      else:
        del environ[name]


@contextlib.contextmanager
def _environment(extra, single_process):
  saved = dict(os.environ)
  if single_process:
    drop_cluster_variables(os.environ)
  os.environ.update({k: str(v) for k, v in (extra or {}).items()})
  try:
    yield
  finally:
    os.environ.clear()
    os.environ.update(saved)


@contextlib.contextmanager
def _imports():
  """Puts ``sys.path`` back, and forgets the modules the command imported from outside the
  checkout and the installed packages (a test's own model or data code, which the next test
  may write again under the same name elsewhere)."""
  path, modules = list(sys.path), set(sys.modules)
  kept = [ROOT, sys.prefix, sys.base_prefix]
  try:
    yield
  finally:
    sys.path[:] = path
    for name in set(sys.modules) - modules:
      where = getattr(sys.modules[name], '__file__', None) or ''
      if where and not any(os.path.abspath(where).startswith(k + os.sep) for k in kept):
        del sys.modules[name]


def _reset_process_state():
  """What one command set for the whole process, back to a new process's values."""
  import keras  # pylint: disable=import-outside-toplevel
  from tensorflow.python.framework import config as tf_config  # pylint: disable=import-outside-toplevel
  keras.backend.clear_session()
  keras.mixed_precision.set_dtype_policy('float32')
  if tf_config.is_op_determinism_enabled():
    tf_config.disable_op_determinism()
  gc.collect()


@contextlib.contextmanager
def _stdin(text):
  """``sys.stdin`` reading ``text`` (UTF-8, with the ``buffer`` a real stdin has), or as it is."""
  if text is None:
    yield
    return
  saved = sys.stdin
  sys.stdin = io.TextIOWrapper(io.BytesIO(text.encode('utf-8')), encoding='utf-8')
  try:
    yield
  finally:
    sys.stdin = saved


@contextlib.contextmanager
def _output():
  """stdout and stderr, Python's and the runtime's (``tf.print``, TensorFlow's own log,
  written to file descriptors 1 and 2), each in order in a file, as a child's pipes get
  them; yields ``[stdout, stderr]``, filled in as the block ends."""
  files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
  streams = sys.stdout, sys.stderr
  for stream in streams:
    stream.flush()
  saved = [os.dup(1), os.dup(2)]
  texts = []
  try:
    for fd, file in zip((1, 2), files):
      os.dup2(file.fileno(), fd)
    sys.stdout, sys.stderr = (
        io.TextIOWrapper(io.FileIO(fd, 'w', closefd=False), encoding='utf-8',
                         errors='backslashreplace', write_through=True) for fd in (1, 2))
    yield texts
  finally:
    for stream in (sys.stdout, sys.stderr):
      stream.flush()
    ctypes.CDLL(None).fflush(None)  # what C's stdio still holds
    sys.stdout, sys.stderr = streams
    for fd, copy in zip((1, 2), saved):
      os.dup2(copy, fd)
      os.close(copy)
    for file in files:
      file.seek(0)
      texts.append(file.read().decode('utf-8', errors='backslashreplace'))
      file.close()


def run_py(*args, env=None, cwd=ROOT, stdin=None, check=False, single_process=True):
  """``run.py ARGS`` in this process; a ``CompletedProcess`` of its status and output.

  Args:
    env: variables to set for the command (on top of this process's own, less
      any that would make it a cluster's worker).
    cwd: its working directory (the checkout, as the tests' children have it).
    stdin: text the command reads on its stdin, as ``subprocess.run``'s ``input``.
    check: raise AssertionError with the output when the status is not 0.
    single_process: run without the variables that would make the command a
      worker of a cluster; False keeps them (a test that sets ``TF_CONFIG`` to
      see the command's answer to it).

  An exception that escapes ``main()`` (a traceback in a child) propagates, so
  the test fails with it.
  """
  import run as run_module  # pylint: disable=import-outside-toplevel
  args = [str(a) for a in args]
  previous_cwd = os.getcwd()
  try:
    with _environment(env, single_process), _imports(), _stdin(stdin):
      os.chdir(cwd)
      with _output() as output:
        try:
          status = run_module.main(args)
        except SystemExit as exc:
          status = exc.code
  finally:
    os.chdir(previous_cwd)
    _reset_process_state()
  out, err = output
  if status is None:
    status = 0
  elif not isinstance(status, int):  # sys.exit('message') prints it and exits 1
    err += f'{status}\n'
    status = 1
  result = subprocess.CompletedProcess(['run.py', *args], status, out, err)
  if check and status != 0:
    raise AssertionError(f'run.py {" ".join(args)} exited {status}:\n{result.stdout}\n'
                         f'{result.stderr}')
  return result
