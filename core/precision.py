"""Precision names and a warning for float16 compute on a CPU that emulates it.

The config's ``dtype`` and ``optimize_loss``'s ``dtype`` take Keras' dtype
policy names: ``float32``, ``float16``, ``bfloat16`` (variables and compute in
that type), ``mixed_float16`` and ``mixed_bfloat16`` (float32 variables,
half-precision compute). OpenSeq2Seq's ``mixed`` is kept as another name of
``mixed_float16``. This module imports no TensorFlow, so the config layer can
use it before TensorFlow is loaded.
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
DTYPE_NAMES = tuple(POLICIES)
# CPU flags (Linux /proc/cpuinfo) of native float16 arithmetic.
FLOAT16_CPU_FLAGS = ('avx512_fp16', 'amx_fp16')
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
  if dtype not in POLICIES:
    guess = None if _OTHER_TYPE.fullmatch(dtype) else closest(dtype, DTYPE_NAMES)
    hint = f' (did you mean {guess!r}?)' if guess is not None else ''
    raise ConfigError(f'{path}: {dtype!r} is not allowed{hint}; allowed: '
                      f'{", ".join(repr(n) for n in DTYPE_NAMES)}', path, 'invalid')
  return dtype


def policy_name(dtype):
  """The Keras dtype policy name for an accepted ``dtype`` name (``mixed`` is ``mixed_float16``).

  Raises:
    ValueError: for a name that is not accepted, listing the accepted ones.
  """
  return POLICIES[check_dtype(dtype)]


def computes_in_float16(dtype):
  """Whether the policy of ``dtype`` computes in float16."""
  return policy_name(dtype) in ('float16', 'mixed_float16')


def cpu_info():
  """The CPU's model name and flags, from /proc/cpuinfo (Linux; unknown and none elsewhere)."""
  model, flags = 'unknown CPU', set()
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
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
          'than float32; float16 with loss scaling is for GPUs: use float32 (or mixed_bfloat16 '
          'where bfloat16 is fast) on this CPU')


def warn_float16_on_cpu(dtype, has_gpu, stream=None):
  """Prints ``float16_cpu_warning`` for this machine's CPU to ``stream`` (stderr) when it applies."""
  message = float16_cpu_warning(dtype, has_gpu, cpu_info()[1])
  if message is not None:
    print(message, file=stream or sys.stderr, flush=True)
  return message
