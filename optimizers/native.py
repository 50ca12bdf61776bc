"""The framework's CPU kernels for LARS, Momentum + LARC and LAMB, built from source.

``optimizers/kernels/largebatch_ops.cc`` holds two TensorFlow ops that update
many float32 variables and their slots in place, taking each variable's norms
and applying its update while the variable is still in the cache (see the
file for the math). LARS and Momentum + LARC then move about the bytes of a
plain momentum step, where the XLA path (``backend.py``) needs 1.5-1.7x that
(docs/performance.md).

Each op is called by the code of the math it computes: ``lars.trust_momentum``
(LARS; LARC followed by Momentum), ``lamb.lamb_kernel`` and the finite check's
``stages.gradient_statistics``; this module builds and loads the library and
says where it applies (``library_for``).

The library is compiled with the TensorFlow headers and flags of the running
installation (``tf.sysconfig``) into ``optimizers/kernels/build/``, keyed by a
hash of the source, the TensorFlow version and the compiler flags;
``scripts/setup.sh`` builds it, ``python -m optimizers.native`` builds it ahead
of time, and ``load`` builds it on first use when it is missing (10-40 s on
two cores), saying so in one line. Where it cannot be used (no C++ compiler, a
GPU, another dtype, an XLA-compiled train step, ``LARGEBATCH_NATIVE_KERNELS=0``)
the optimizers take the XLA path (``backend.py``), which has the same math.
"""

import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(_HERE, 'kernels', 'largebatch_ops.cc')
BUILD_DIR = os.path.join(_HERE, 'kernels', 'build')
ENV_SWITCH = 'LARGEBATCH_NATIVE_KERNELS'
# -march=native: the library is built on the machine that runs it (setup.sh,
# or first use). -ffp-contract=off keeps a·b + c as two roundings, as the
# reference tf ops compute it. -fno-math-errno lets sqrt vectorise (it is
# correctly rounded either way).
CXXFLAGS = ['-O3', '-march=native', '-ffp-contract=off', '-fno-math-errno', '-fPIC', '-shared',
            '-Wno-deprecated-declarations']
# Added when the compiler knows them. -mno-avx512fp16: on CPUs with AVX512-FP16
# (Intel Sapphire Rapids and later) -march=native enables it, and the Eigen
# headers TensorFlow 2.21 ships then fail to compile with GCC 12; the kernels
# compute in float32 and never need it.
OPTIONAL_CXXFLAGS = ['-mno-avx512fp16']

_state = {'module': None, 'error': None}


class BuildError(RuntimeError):
  """The kernel library could not be compiled."""


def _compiler():
  return os.environ.get('CXX') or shutil.which('g++') or shutil.which('c++')


def compile_flags(compiler):
  """CXXFLAGS, the OPTIONAL_CXXFLAGS ``compiler`` accepts, and TensorFlow's compile flags."""
  accepted = [flag for flag in OPTIONAL_CXXFLAGS if _accepts(compiler, flag)]
  return CXXFLAGS + accepted + tf.sysconfig.get_compile_flags()


def _accepts(compiler, flag):
  probe = subprocess.run([compiler, flag, '-x', 'c++', '-fsyntax-only', os.devnull],
                         capture_output=True, check=False)
  return probe.returncode == 0


def library_path():
  """Where the library for this source, TensorFlow and flags lives.

  The key names the optional flags as candidates: which of them the compiler
  accepts is asked only when the library is built, not at every load.
  """
  digest = hashlib.sha256()
  with open(SOURCE, 'rb') as f:
    digest.update(f.read())
  digest.update(tf.__version__.encode())
  digest.update(' '.join(CXXFLAGS + OPTIONAL_CXXFLAGS + tf.sysconfig.get_compile_flags()).encode())
  return os.path.join(BUILD_DIR, f'largebatch_ops_{digest.hexdigest()[:16]}.so')


@tf.autograph.experimental.do_not_convert
def build(force=False):
  """Compiles the library if it is missing (or ``force``); returns its path.

  Concurrent builders (several Horovod workers) wait on a lock file and the
  library appears atomically.

  Raises:
    BuildError: no C++ compiler, or the compiler failed (its output is kept in
      the message).
  """
  path = library_path()
  if os.path.exists(path) and not force:
    return path
  compiler = _compiler()
  if compiler is None:
    raise BuildError('no C++ compiler (g++) on PATH to build ' + SOURCE)
  os.makedirs(BUILD_DIR, exist_ok=True)
  with open(os.path.join(BUILD_DIR, '.lock'), 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.path.exists(path) and not force:
      return path
    # Said once, by the process that builds: the first step would otherwise
    # seem to hang for the length of the compile.
    print(f'building the native optimizer kernels (first use of this source, TensorFlow and '
          f'compiler; once, 10-40 s on two cores): {path}; build ahead of time with '
          f'`python -m optimizers.native`', file=sys.stderr, flush=True)
    partial = f'{path}.{os.getpid()}.tmp'
    command = ([compiler] + compile_flags(compiler) + [SOURCE, '-o', partial]
               + tf.sysconfig.get_link_flags())
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
      # The compiler's own error lines first: its warnings about TensorFlow's
      # headers can fill the tail.
      errors = [l for l in result.stderr.splitlines() if 'error' in l][:20]
      raise BuildError(f'building {SOURCE} failed:\n{shlex.join(command)}\n'
                       + '\n'.join(errors) + '\n...\n' + result.stderr[-2000:])
    os.replace(partial, path)
  return path


@tf.autograph.experimental.do_not_convert
def load():
  """The loaded op module, building the library first when needed (or None).

  None means the kernels are turned off (``LARGEBATCH_NATIVE_KERNELS=0``) or
  could not be built or loaded; ``error()`` says why.
  """
  if os.environ.get(ENV_SWITCH, '1') == '0':
    return None
  if _state['module'] is None and _state['error'] is None:
    try:
      _state['module'] = tf.load_op_library(build())
    except (BuildError, OSError, tf.errors.NotFoundError) as e:
      _state['error'] = str(e)
      print(f'warning: native optimizer kernels unavailable, using the XLA path: '
            f'{str(e).splitlines()[0]}', file=sys.stderr)
  return _state['module']


def error():
  """Why ``load`` returned None (None if it did not)."""
  if os.environ.get(ENV_SWITCH, '1') == '0':
    return f'{ENV_SWITCH}=0'
  return _state['error']


@tf.autograph.experimental.do_not_convert
def library_for(variables, slots, grads):
  """The loaded op library where the kernels can update these, else None.

  They can where all are float32, dense and on the CPU, outside XLA (inside
  an XLA-compiled function, ``jit_compile=True``, they cannot run) and not
  under a ``tf.distribute`` strategy, and the library loads. Only dtypes and
  types are read, so Keras variables may stand for the tf.Variables behind
  them. The chain asks once, when it is built (``stages.step_stages``), and
  its stages call the library's ops.
  """
  if tf.config.list_logical_devices('GPU') or tf.distribute.has_strategy():
    return None
  if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
    return None
  for tensor in list(variables) + list(slots) + list(grads):
    if isinstance(tensor, tf.IndexedSlices) or tensor.dtype != tf.float32:
      return None
  return load()


def applies(variables, slots, grads):
  """Whether the kernels can update these (``library_for`` is not None)."""
  return library_for(variables, slots, grads) is not None


if __name__ == '__main__':
  # Building ahead of time: python -m optimizers.native [--force]
  print(build(force='--force' in sys.argv[1:]))
