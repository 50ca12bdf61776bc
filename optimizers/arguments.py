"""Whether two calls of ``optimize_loss`` pass the same arguments.

``optimize_loss`` builds its state from the first call for a model and reuses
it; a later call with other arguments would silently train with the first
ones, so ``check_same_arguments`` compares them value by value and names each
one that differs, touching no TensorFlow state.
"""

import functools
import numbers
import types

import tensorflow as tf

# The optimize_loss arguments a pipeline is built from (``loss`` and
# ``skip_update_ph`` change every call; ``log_global_norm`` only adds a log).
PIPELINE_ARGUMENTS = ('optimizer', 'optimizer_params', 'learning_rate_decay_fn', 'var_list',
                      'dtype', 'clip_gradients', 'summaries', 'larc_params', 'loss_scaling',
                      'loss_scaling_params', 'on_horovod', 'iter_size', 'horovod_params')


def snapshot(value):
  """``value`` with its dicts, lists and tuples copied, so later edits by the caller show."""
  if isinstance(value, dict):
    return {k: snapshot(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return type(value)(snapshot(v) for v in value)
  return value


def _same(a, b, depth=0):
  """Whether two optimize_loss argument values mean the same.

  Containers compare item by item; variables and other objects by identity;
  functions by their code, defaults and closure values, so a lambda or
  ``functools.partial`` re-created on every call with the same content is
  the same argument.
  """
  if a is b:
    return True
  # 5 and 5.0, or a numpy and a Python float, are the same value; True is not 1.
  numeric = (numbers.Number, tf.DType)
  if (isinstance(a, numeric) and isinstance(b, numeric)
      and not isinstance(a, bool) and not isinstance(b, bool)):
    return a == b
  if depth > 8 or type(a) is not type(b):
    return False
  if isinstance(a, dict):
    return a.keys() == b.keys() and all(_same(a[k], b[k], depth + 1) for k in a)
  if isinstance(a, (list, tuple)):
    return len(a) == len(b) and all(_same(x, y, depth + 1) for x, y in zip(a, b))
  if isinstance(a, functools.partial):
    return (_same(a.func, b.func, depth + 1) and _same(a.args, b.args, depth + 1)
            and _same(a.keywords, b.keywords, depth + 1))
  if isinstance(a, types.MethodType):
    return a.__func__ is b.__func__ and a.__self__ is b.__self__
  if isinstance(a, types.FunctionType):
    return (a.__code__ == b.__code__ and _same(a.__defaults__, b.__defaults__, depth + 1)
            and _same(a.__kwdefaults__, b.__kwdefaults__, depth + 1)
            and _same(_closure_values(a), _closure_values(b), depth + 1))
  if isinstance(a, (str, bytes)):
    return a == b
  return False


def _closure_values(function):
  """The values a function closes over, without AutoGraph's own.

  Inside a ``tf.function`` AutoGraph converts a lambda into one that also
  closes over its module and a scope object made anew on every trace (and a
  ``tf.function`` traces twice when the first trace creates variables).
  """
  values = []
  for cell in function.__closure__ or ():
    try:
      value = cell.cell_contents
    except ValueError:  # a cell not assigned yet
      value = cell
    if isinstance(value, types.ModuleType) or type(value).__module__.startswith(
        'tensorflow.python.autograph'):
      continue
    values.append(value)
  return tuple(values)


def check_same_arguments(created, given):
  """Raises ValueError naming each argument that differs from the pipeline's own."""
  changed = [name for name in PIPELINE_ARGUMENTS if not _same(created[name], given[name])]
  if changed:
    details = ', '.join(f'{name} (created with {created[name]!r}, now {given[name]!r})'
                        for name in changed)
    raise ValueError(
        f'optimize_loss: called again for the same model with different arguments: {details}. '
        'Its optimizer, slots, global step and loss scaler were built from the first call; pass '
        'the same arguments, or call optimizers.clear_pipelines() to build a new pipeline.')
