"""Precision names, ``dtype: auto``, and warnings for half precision on a CPU that emulates it.

The config's ``dtype`` and ``optimize_loss``'s ``dtype`` take Keras' dtype
policy names: ``float32``, ``float16``, ``bfloat16`` (variables and compute in
that type), ``mixed_float16`` and ``mixed_bfloat16`` (float32 variables,
half-precision compute). OpenSeq2Seq's ``mixed`` is another name of
``mixed_float16``. The config also takes ``auto``: mixed bfloat16 where the
hardware computes bfloat16 natively, float32 elsewhere (:func:`auto_dtype`,
given what the machine has; ``framework.engines.hardware`` asks TensorFlow about the
GPUs and resolves it for a run). This module imports no TensorFlow, so the
config layer can use it before TensorFlow is loaded.
"""

import re
import sys

from core.params import ConfigError
from core.params import type_name
from core.registry import closest

# Each accepted name -> the Keras dtype policy it selects.
POLICIES = {
    'float32': 'float32',
    'float16': 'float16',
    'bfloat16': 'bfloat16',
    'mixed_float16': 'mixed_float16',
    'mixed_bfloat16': 'mixed_bfloat16',
    'mixed': 'mixed_float16',
}
# The config's name of "the fast precision of this machine", resolved before a run builds anything.
AUTO = 'auto'
DTYPE_NAMES = tuple(POLICIES) + (AUTO,)
# CPU flags (Linux /proc/cpuinfo) of native float16 arithmetic.
FLOAT16_CPU_FLAGS = ('avx512_fp16', 'amx_fp16')
# CPU flags of native bfloat16 arithmetic (dot products in AVX512-BF16, tiles in AMX-BF16).
BFLOAT16_CPU_FLAGS = ('avx512_bf16', 'amx_bf16')
# NVIDIA GPUs compute bfloat16 natively from compute capability 8.0 (Ampere) on.
BFLOAT16_GPU_CAPABILITY = (8, 0)
# Emulated bfloat16, measured: configs/cmudict_transformer_lamb.py's train step
# on an Intel Xeon without AVX512-BF16 (2 cores), words/sec in mixed_bfloat16
# and in float32.
EMULATED_BFLOAT16_WORDS_PER_SEC = (171, 442)
EMULATED_BFLOAT16_SLOWDOWN = EMULATED_BFLOAT16_WORDS_PER_SEC[1] / EMULATED_BFLOAT16_WORDS_PER_SEC[0]
# Names of other number types (float64, int32): the closest accepted spelling
# would name a different precision, so none is suggested for them.
_OTHER_TYPE = re.compile(r'(b?float|u?int|complex)[0-9]+')


def check_dtype(dtype, path='dtype'):
  """Returns ``dtype`` when it is an accepted name; the one check of a dtype name.

  A misspelling gets the closest accepted name (``flaot16``: did you mean
  ``float16``); the name of another number type does not (``float64`` is
  not a misspelled ``float16``).

  Raises:
    ConfigError: (a ValueError) starting with ``path`` and listing the
      accepted names.
  """
  if not isinstance(dtype, str):
    raise ConfigError(f'{path}: expected {type_name(str)}, got {dtype!r} ({type(dtype).__name__})',
                      path, 'invalid')
  if dtype not in DTYPE_NAMES:
    guess = None if _OTHER_TYPE.fullmatch(dtype) else closest(dtype, DTYPE_NAMES)
    hint = f' (did you mean {guess!r}?)' if guess is not None else ''
    raise ConfigError(f'{path}: {dtype!r} is not allowed{hint}; allowed: '
                      f'{", ".join(repr(n) for n in DTYPE_NAMES)}', path, 'invalid')
  return dtype


def policy_name(dtype):
  """The Keras dtype policy name for an accepted ``dtype`` name (``mixed`` is ``mixed_float16``).

  Raises:
    ValueError: for a name that is not accepted, listing the accepted ones,
      and for ``auto``, which names a policy only once resolved for a machine.
  """
  if check_dtype(dtype) == AUTO:
    raise ConfigError("dtype: 'auto' names no policy until it is resolved for the machine "
                      '(framework.engines.hardware.resolve_dtype)', 'dtype', 'invalid')
  return POLICIES[dtype]


def variable_dtype(dtype):
  """The dtype a policy keeps the variables in: float32 unless it is pure half precision.

  Two policies with the same variable dtype write the same checkpoints
  (``float32`` and ``mixed_bfloat16`` alike): a run trained in one can resume
  in the other.
  """
  name = policy_name(dtype)
  return name if name in ('float16', 'bfloat16') else 'float32'


def computes_in_float16(dtype):
  """Whether the policy of ``dtype`` computes in float16."""
  return policy_name(dtype) in ('float16', 'mixed_float16')


def computes_in_bfloat16(dtype):
  """Whether the policy of ``dtype`` computes in bfloat16."""
  return policy_name(dtype) in ('bfloat16', 'mixed_bfloat16')


def auto_dtype(gpus, cpu_flags):
  """What ``dtype: auto`` resolves to on a machine, and the one line that says why.

  Mixed bfloat16 where the hardware computes bfloat16 natively: every GPU
  TensorFlow sees has compute capability 8.0 or more, or, with no GPU, the CPU
  has ``avx512_bf16`` or ``amx_bf16``. float32 elsewhere: emulated bfloat16
  costs more than it saves (:data:`EMULATED_BFLOAT16_SLOWDOWN`).

  Args:
    gpus: the GPUs the run computes on, as ``(name, compute capability as
      (major, minor), or None when the GPU reports none)``; empty for none.
    cpu_flags: the CPU's feature flags (``cpu_info()[1]``), read when there is no GPU.

  Returns:
    ``(dtype name, the line)``, e.g. ``('float32', 'dtype auto: float32 (this
    CPU has no avx512_bf16/amx_bf16; ...)')``.
  """
  if gpus:
    slow = [(name, capability) for name, capability in gpus
            if capability is None or tuple(capability) < BFLOAT16_GPU_CAPABILITY]
    names = ', '.join(sorted({name for name, _ in gpus}))
    if not slow:
      return 'mixed_bfloat16', (f'dtype auto: mixed_bfloat16 (GPU {names}: compute capability '
                                f'{_capabilities(gpus)}, which computes bfloat16 natively)')
    name, capability = slow[0]
    has = ('reports no compute capability' if capability is None
           else f'has compute capability {_capabilities([slow[0]])}')
    needed = '.'.join(map(str, BFLOAT16_GPU_CAPABILITY))
    return 'float32', (f'dtype auto: float32 (GPU {name} {has}, below the {needed} of native '
                       'bfloat16; mixed_float16 with loss scaling is the fast precision of such '
                       'a GPU)')
  native = [flag for flag in BFLOAT16_CPU_FLAGS if flag in cpu_flags]
  if native:
    return 'mixed_bfloat16', (f'dtype auto: mixed_bfloat16 (this CPU computes bfloat16 '
                              f'natively: {"/".join(native)})')
  return 'float32', (f'dtype auto: float32 (this CPU has no {"/".join(BFLOAT16_CPU_FLAGS)}; '
                     f'mixed_bfloat16 would run about {EMULATED_BFLOAT16_SLOWDOWN:.1f}x slower '
                     'here)')


def _capabilities(gpus):
  found = sorted({'.'.join(map(str, capability)) for _, capability in gpus})
  return '/'.join(found)


def cpu_info(path='/proc/cpuinfo'):
  """The CPU's model name and flags, from /proc/cpuinfo (Linux; unknown and none elsewhere)."""
  model, flags = 'unknown CPU', set()
  try:
    with open(path, encoding='utf-8') as f:
      for line in f:
        key, _, value = line.partition(':')
        if key.strip() == 'model name':
          model = value.strip()
        elif key.strip() == 'flags':
          flags = set(value.split())
  except OSError:
    pass
  return model, flags


def float16_cpu_warning(dtype, has_gpu, cpu_flags):
  """The one-line warning for float16 compute on a CPU without float16 arithmetic, or None.

  Args:
    dtype: the accepted dtype name of the run.
    has_gpu: whether TensorFlow sees a GPU (float16 then runs there).
    cpu_flags: the CPU's feature flags (``cpu_info()[1]``).
  """
  if not computes_in_float16(dtype) or has_gpu:
    return None
  if any(flag in cpu_flags for flag in FLOAT16_CPU_FLAGS):
    return None
  return (f'warning: dtype {dtype}: computing in float16 on this CPU, which has no float16 '
          'arithmetic (no AVX512-FP16/AMX-FP16), so TensorFlow emulates it, often 10x slower '
          'than float32; float16 with loss scaling is for GPUs: use float32 on this CPU, or '
          'dtype auto (mixed_bfloat16 where the CPU computes bfloat16 natively)')


def bfloat16_cpu_warning(dtype, has_gpu, cpu_flags):
  """The one-line warning for bfloat16 compute on a CPU without bfloat16 arithmetic, or None.

  Args:
    dtype: the accepted dtype name of the run (resolved: not ``auto``).
    has_gpu: whether TensorFlow sees a GPU (bfloat16 then runs there).
    cpu_flags: the CPU's feature flags (``cpu_info()[1]``).
  """
  if not computes_in_bfloat16(dtype) or has_gpu:
    return None
  if any(flag in cpu_flags for flag in BFLOAT16_CPU_FLAGS):
    return None
  slow, fast = EMULATED_BFLOAT16_WORDS_PER_SEC
  return (f'warning: dtype {dtype}: computing in bfloat16 on this CPU, which has no bfloat16 '
          'arithmetic (no AVX512-BF16/AMX-BF16), so TensorFlow emulates it: the CMUdict '
          f'Transformer trained {EMULATED_BFLOAT16_SLOWDOWN:.1f}x slower in mixed_bfloat16 than '
          f'in float32 ({slow} vs {fast} words/sec on an Intel Xeon without AVX512-BF16, 2 '
          'cores); use float32 (or dtype auto) on this CPU')


def cpu_warning(dtype, has_gpu, cpu_flags):
  """The one-line warning for half precision this CPU emulates (float16 or bfloat16), or None."""
  return (float16_cpu_warning(dtype, has_gpu, cpu_flags)
          or bfloat16_cpu_warning(dtype, has_gpu, cpu_flags))


def warn_emulated_on_cpu(dtype, has_gpu, stream=None):
  """Prints ``cpu_warning`` for this machine's CPU to ``stream`` (stderr) when it applies."""
  message = cpu_warning(dtype, has_gpu, cpu_info()[1])
  if message is not None:
    print(message, file=stream or sys.stderr, flush=True)
  return message
