"""What this machine computes fast: the GPUs TensorFlow sees, and ``dtype: auto`` resolved for it.

``core.precision`` decides from facts without TensorFlow (a GPU's compute
capability, the CPU's flags in /proc/cpuinfo); this module asks TensorFlow
for the GPUs and sets the run's Keras dtype policy. ``framework.run.launch``
resolves ``auto`` once, before the run directory is compared or written, so
that a resume compares, and ``config.yaml`` records, the dtype the run
computes in; :func:`set_precision` resolves it for a Trainer a script builds
itself.
"""

import keras
import tensorflow as tf

from core import precision


def gpus():
  """The GPUs TensorFlow sees, as ``(name, compute capability (major, minor) or None)``."""
  found = []
  for device in tf.config.list_physical_devices('GPU'):
    try:
      details = tf.config.experimental.get_device_details(device)
    except (ValueError, tf.errors.OpError):
      details = {}  # a device that reports nothing counts as one without native bfloat16
    capability = details.get('compute_capability')
    found.append((details.get('device_name') or device.name,
                  tuple(capability) if capability else None))
  return found


def resolve_dtype(dtype, gpu_list=None, cpu_flags=None):
  """``dtype`` for this machine: ``auto`` resolved by ``core.precision.auto_dtype``, others kept.

  Args:
    dtype: an accepted dtype name.
    gpu_list: the GPUs, as :func:`gpus` gives them (default: asked from TensorFlow).
    cpu_flags: the CPU's flags (default: read from /proc/cpuinfo).

  Returns:
    ``(dtype, the line that says what auto chose and why, or None for another name)``.
  """
  if precision.check_dtype(dtype) != precision.AUTO:
    return dtype, None
  return precision.auto_dtype(gpus() if gpu_list is None else gpu_list,
                              precision.cpu_info()[1] if cpu_flags is None else cpu_flags)


def set_precision(dtype, warn=True):
  """Sets Keras' global dtype policy for ``dtype``, resolving ``auto``; returns the dtype used.

  Args:
    dtype: an accepted dtype name; ``auto`` is resolved here (and said in
      one line) only when nothing resolved it before, as for a Trainer a
      script builds from a loaded config.
    warn: print the one-line warning for half precision this CPU emulates
      (the chief does; the other workers stay quiet).
  """
  dtype, line = resolve_dtype(dtype)
  if line is not None and warn:
    print(line, flush=True)
  keras.mixed_precision.set_dtype_policy(precision.policy_name(dtype))
  if warn:
    precision.warn_emulated_on_cpu(dtype, bool(tf.config.list_physical_devices('GPU')))
  return dtype
