"""The framework's CPU kernels for LARS, Momentum + LARC and LAMB, built from source.

``optimizers/kernels/largebatch_ops.cc`` holds two TensorFlow ops that update
many float32 variables and their slots in place, taking each variable's norms
and applying its update while the variable is still in the cache (see the
file for the math). LARS and Momentum + LARC then move about the bytes of a
plain momentum step, where the XLA path (``backend.py``) needs 1.5-1.7x that
(docs/performance.md).

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
def applies(variables, slots, grads):
  """Whether the kernels can update these: all float32, dense, on the CPU, and they load.

  Inside an XLA-compiled function (``jit_compile=True``) they cannot run, and
  the optimizers take the XLA path. Only dtypes and types are read, so Keras
  variables may stand for the tf.Variables behind them.
  """
  if tf.config.list_logical_devices('GPU') or tf.distribute.has_strategy():
    return False
  if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
    return False
  for tensor in list(variables) + list(slots) + list(grads):
    if isinstance(tensor, tf.IndexedSlices) or tensor.dtype != tf.float32:
      return False
  return load() is not None


def trust_momentum(variables, slots, grads, learning_rate, adapt, mode, momentum,
                   weight_decay=0.0, eeta=0.001, epsilon=0.0, min_update=0.0,
                   use_nesterov=False, decay=None):
  """Runs the LargebatchTrustMomentum op (see largebatch_ops.cc for the math).

  Args:
    variables: float32 tf.Variables (resource variables), updated in place.
    slots: their momentum tf.Variables.
    grads: their dense float32 gradients.
    learning_rate: scalar base learning rate.
    adapt: one bool per variable; False for one that keeps the base lr (no
      trust ratio or LARC factor).
    mode: 'lars' (LARSOptimizer's update), 'larc_clip' or 'larc_scale' (the
      LARC stage followed by Keras' momentum SGD).
    momentum, weight_decay, eeta, epsilon, min_update, use_nesterov: as the
      optimizer and ``larc_params`` (eeta is larc_eta for the LARC modes).
    decay: in 'lars' mode, one bool per variable, whether it gets weight
      decay; None: the same as ``adapt``.

  Returns:
    A float32 vector: each variable's trust ratio or LARC factor (1 if skipped).
  """
  module = load()
  if module is None:
    raise RuntimeError(f'native kernel unavailable: {error()}')
  return module.largebatch_trust_momentum(
      variables=[v.handle for v in variables], slots=[s.handle for s in slots],
      gradients=[tf.convert_to_tensor(g) for g in grads],
      learning_rate=tf.cast(learning_rate, tf.float32), adapt=[bool(a) for a in adapt],
      decay=[bool(d) for d in (adapt if decay is None else decay)], mode=mode, momentum=float(momentum), weight_decay=float(weight_decay), eeta=float(eeta),
      epsilon=float(epsilon), min_update=float(min_update), use_nesterov=bool(use_nesterov))


def lamb(variables, first_moments, second_moments, grads, learning_rate, step, decay, adapt,
         beta_1, beta_2, epsilon, weight_decay):
  """Runs the LargebatchLamb op: ``LAMB``'s update of many variables (see largebatch_ops.cc).

  Args:
    variables, first_moments, second_moments: float32 tf.Variables, updated in place.
    grads: the dense float32 gradients.
    learning_rate: scalar learning rate.
    step: the 1-based step t (float32 scalar); the bias corrections 1 − β^t
      are computed here with the same tf ops as ``LAMB.update_step``.
    decay, adapt: one bool per variable: weight decay in u, trust ratio.
    beta_1, beta_2, epsilon, weight_decay: as ``LAMB``.

  Returns:
    A float32 vector, the trust ratio of each variable (1 where not adapted).
  """
  module = load()
  if module is None:
    raise RuntimeError(f'native kernel unavailable: {error()}')
  corrections = tf.stack([1.0 - tf.pow(beta_1, step), 1.0 - tf.pow(beta_2, step)])
  return module.largebatch_lamb(
      variables=[v.handle for v in variables], first_moments=[m.handle for m in first_moments],
      second_moments=[v.handle for v in second_moments],
      gradients=[tf.convert_to_tensor(g) for g in grads],
      learning_rate=tf.cast(learning_rate, tf.float32), corrections=corrections,
      decay=[bool(d) for d in decay], adapt=[bool(a) for a in adapt], beta_1=float(beta_1),
      one_minus_beta_1=1.0 - beta_1, beta_2=float(beta_2), one_minus_beta_2=1.0 - beta_2,
      epsilon=float(epsilon), weight_decay=float(weight_decay))


@tf.autograph.experimental.do_not_convert
def gradient_stats_where_applies(grads):
  """``gradient_stats(grads)`` where the kernels apply to ``grads`` (``applies``), else None."""
  if not applies([], [], grads):
    return None
  return gradient_stats(grads)


def gradient_stats(grads):
  """Runs the LargebatchGradientStats op on dense float32 gradients.

  Returns:
    (has_nan, amax, global_norm): a bool scalar, True when any element is NaN
    or infinite; the largest |g| as float32 (+inf when has_nan, 0 for no
    elements); the float32 L2 norm of all the gradients together (summed in
    double).
  """
  module = load()
  if module is None:
    raise RuntimeError(f'native kernel unavailable: {error()}')
  all_finite, amax, norm = module.largebatch_gradient_stats(
      gradients=[tf.convert_to_tensor(g) for g in grads])
  return tf.logical_not(all_finite), amax, norm


if __name__ == '__main__':
  # Building ahead of time: python -m optimizers.native [--force]
  print(build(force='--force' in sys.argv[1:]))
