"""OpenSeq2Seq's ``optimize_loss`` in TF 2, the pipeline it keeps per model, and its helpers.

The update itself reads top to bottom in ``pipeline.GradientPipeline``. In TF 2
there is no graph to hold state between calls, so the first call of
``optimize_loss`` for a model (or variable list) creates its pipeline
(``get_pipeline``) and later calls reuse it; they must pass the same
arguments: a later call with others would silently train with the first ones,
so the arguments are compared value by value (``_same``) and a call with
others is a ValueError naming each of them. Wrap the whole step in one
``tf.function``; it traces once. The framework's trainer builds and calls its
own ``GradientPipeline`` instead.

``_clip_by_global_norm``, ``_clip_gradients_by_norm`` and
``get_regularization_loss`` are OpenSeq2Seq's helpers of the same names.
Ported code that imports from OpenSeq2Seq's module path
(``open_seq2seq.optimizers.optimizers``) finds all of these at
``optimizers.optimizers`` too.
"""

import functools
import numbers
import types

import tensorflow as tf

from optimizers import exclusions
from optimizers import stages
from optimizers.pipeline import GradientPipeline
from optimizers.settings import UpdateSettings
from optimizers.settings import normalize_dtype


def _clip_by_global_norm(t_list, clip_norm, use_norm, name=None):
  """Clips tensors by the ratio clip_norm / max(use_norm, clip_norm), with a precomputed norm.

  Args:
    t_list: tensors (None entries pass through).
    clip_norm: the largest global norm allowed.
    use_norm: the global norm of ``t_list``, already computed.
    name: accepted for compatibility.

  Returns:
    (clipped tensors, use_norm).
  """
  del name
  return stages.clip_by_global_norm(t_list, clip_norm, use_norm)


def _clip_gradients_by_norm(grads_and_vars, clip_gradients):
  """Clips the gradients of (gradient, variable) pairs by their global norm."""
  grads, variables = zip(*grads_and_vars)
  clipped, _ = stages.clip_by_global_norm(list(grads), clip_gradients)
  return list(zip(clipped, variables))


def get_regularization_loss(scope=None, name='total_regularization_loss'):
  """The sum of the regularization losses of a Keras model or layer.

  TF 2 keeps no global collection of regularization losses; they live on the
  layers (``model.losses``), so ``scope`` names where to look.

  Args:
    scope: a Keras layer or model, or a list of them.
    name: the name of the returned tensor.

  Returns:
    A float32 scalar: the sum of their losses (0 when there are none).

  Raises:
    ValueError: when scope is None or not a layer.
  """
  if scope is None:
    raise ValueError('get_regularization_loss: pass the Keras model (or layers) whose '
                     'regularization losses to sum; TF 2 has no global collection')
  layers = scope if isinstance(scope, (list, tuple)) else [scope]
  losses = []
  for layer in layers:
    if not hasattr(layer, 'losses'):
      raise ValueError(f'get_regularization_loss: scope must be a Keras layer or model, got {layer!r}')
    losses.extend(tf.cast(l, tf.float32) for l in layer.losses)
  if not losses:
    return tf.constant(0.0, name=name)
  return tf.add_n(losses, name=name)


# ---------------------------------------------------------------------------
# The pipelines optimize_loss keeps, and whether a call passes the arguments of its pipeline

# The optimize_loss arguments a pipeline is built from (``loss`` and
# ``skip_update_ph`` change every call; ``log_global_norm`` only adds a log).
PIPELINE_ARGUMENTS = ('optimizer', 'optimizer_params', 'learning_rate_decay_fn', 'var_list',
                      'dtype', 'clip_gradients', 'summaries', 'larc_params', 'loss_scaling',
                      'loss_scaling_params', 'on_horovod', 'iter_size', 'horovod_params')


def _snapshot(value):
  """``value`` with its dicts, lists and tuples copied, so later edits by the caller show."""
  if isinstance(value, dict):
    return {k: _snapshot(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return type(value)(_snapshot(v) for v in value)
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


def _check_same_arguments(created, given):
  """Raises ValueError naming each argument that differs from the pipeline's own."""
  changed = [name for name in PIPELINE_ARGUMENTS if not _same(created[name], given[name])]
  if changed:
    details = ', '.join(f'{name} (created with {created[name]!r}, now {given[name]!r})'
                        for name in changed)
    raise ValueError(
        f'optimize_loss: called again for the same model with different arguments: {details}. '
        'Its optimizer, slots, global step and loss scaler were built from the first call; pass '
        'the same arguments, or call optimizers.clear_pipelines() to build a new pipeline.')


_PIPELINES = {}


def _check_same_variables(key, var_list, what):
  """Raises ValueError when the variables of a call differ from those its pipeline trains.

  A model's pipeline trains the variables the model had at the first call: one
  created or made trainable since would never be trained. A ``var_list``
  that shares variables with an earlier call's but differs would build a
  second pipeline beside the first: a new global step, schedule and optimizer state.

  Args:
    key: the call's key in ``_PIPELINES``.
    var_list: the variables it trains.
    what: how the message names them.
  """
  if key in _PIPELINES:
    before = _PIPELINES[key][1].var_list
    if [id(v) for v in before] == [id(v) for v in var_list]:
      return
  else:
    ids = {id(v) for v in var_list}
    before = next((entry[1].var_list for other, entry in _PIPELINES.items()
                   if other[0] == 'vars' and ids & set(other[1:])), None)
    if before is None:
      return
  raise ValueError(
      f'optimize_loss: {what} changed since the first call built the pipeline '
      f'({_difference(before, var_list)}); its optimizer, slots and global step are for the '
      'first ones. Allowed: the same variables at every call (create them all before the '
      'first call), or optimizers.clear_pipelines() to build a new pipeline.')


def _difference(before, now):
  """``new: [...]; gone: [...]`` (or their order) between two lists of variables, by name."""
  old_ids, new_ids = {id(v) for v in before}, {id(v) for v in now}
  parts = [f'{label}: {[exclusions.variable_name(v) for v in found]}' for label, found in (
      ('new', [v for v in now if id(v) not in old_ids]),
      ('gone', [v for v in before if id(v) not in new_ids])) if found]
  return '; '.join(parts) or 'the same variables in another order'


def _key(model, var_list):
  if model is not None:
    return ('model', id(model))
  return ('vars',) + tuple(id(v) for v in var_list)


def get_pipeline(optimizer, optimizer_params, learning_rate_decay_fn, var_list=None,
                 dtype=tf.float32, clip_gradients=None, summaries=None, larc_params=None,
                 loss_scaling=1.0, loss_scaling_params=None, on_horovod=False, iter_size=1,
                 model=None, horovod_params=None, log_global_norm=False):
  """The GradientPipeline ``optimize_loss`` uses for ``model`` (or ``var_list``), created on first use.

  Call it eagerly with the same arguments as ``optimize_loss`` to get the
  pipeline (its ``global_step``, ``optimizer``, ``loss_scaler``, ``learning_rate()``)
  before the first step, e.g. to restore a checkpoint; ``find_pipeline`` looks
  an existing one up by model alone.

  Raises:
    ValueError: when a pipeline exists for ``model`` (or ``var_list``) and was
      created with different arguments; the message names each of them.
  """
  if var_list is None and model is None:
    raise ValueError('optimize_loss: pass var_list or model (TF 2 has no global collection '
                     'of trainable variables)')
  given = {name: value for name, value in locals().items() if name in PIPELINE_ARGUMENTS}
  if var_list is None:
    var_list = model.trainable_variables
  key = _key(model, var_list)
  _check_same_variables(key, var_list, "the model's trainable variables"
                        if given['var_list'] is None else 'var_list')
  if key in _PIPELINES:
    _, pipeline, created = _PIPELINES[key]
    # The dtype as given the first time needs no normalising ('mixed' is 'mixed_float16').
    same_as_given = _same(created['given dtype'], dtype)
    given['dtype'] = created['dtype'] if same_as_given else normalize_dtype(dtype)
    _check_same_arguments(created, given)
    return pipeline
  given['dtype'] = normalize_dtype(dtype)
  # OpenSeq2Seq's names: on_horovod is multi_worker, horovod_params holds the compression.
  pipeline = GradientPipeline(var_list, UpdateSettings(
      optimizer, optimizer_params, learning_rate_decay_fn, dtype=dtype,
      clip_gradients=clip_gradients, summaries=summaries, larc_params=larc_params,
      loss_scaling=loss_scaling, loss_scaling_params=loss_scaling_params,
      multi_worker=on_horovod, iter_size=iter_size,
      compression=(horovod_params or {}).get('compression', 'none'),
      log_global_norm=log_global_norm))
  # The owner is kept alive with the entry so its id cannot be reused.
  created = {name: _snapshot(value) for name, value in given.items()}
  created['given dtype'] = dtype
  _PIPELINES[key] = (model if model is not None else list(var_list), pipeline, created)
  return pipeline


def find_pipeline(model=None, var_list=None):
  """The pipeline ``optimize_loss`` created for ``model`` (or ``var_list``), or None."""
  if model is None and var_list is None:
    raise ValueError('find_pipeline: pass model or var_list')
  entry = _PIPELINES.get(_key(model, var_list))
  return entry[1] if entry is not None else None


def clear_pipelines():
  """Forgets every cached pipeline (the next optimize_loss call starts afresh)."""
  _PIPELINES.clear()


def optimize_loss(loss, optimizer, optimizer_params, learning_rate_decay_fn, var_list=None,
                  dtype=tf.float32, clip_gradients=None, summaries=None, larc_params=None,
                  loss_scaling=1.0, loss_scaling_params=None, on_horovod=False, iter_size=1,
                  skip_update_ph=None, model=None, horovod_params=None):
  """Performs one micro-step of training: scaling, accumulation, allreduce, clipping, LARC, update.

  Args:
    loss: zero-argument callable returning the (float32 or half) loss of one micro-batch.
    optimizer: a name in ``OPTIMIZER_CLS_NAMES``, a Keras optimizer class, or an instance.
    optimizer_params: keyword arguments for the optimizer class (``learning_rate``
      only when ``learning_rate_decay_fn`` is None).
    learning_rate_decay_fn: ``f(global_step) -> lr``, e.g. a partial of an lr policy.
    var_list: variables to train; defaults to ``model.trainable_variables``.
    dtype: a tf.DType or a Keras dtype policy name: ``'float32'``, ``'float16'``,
      ``'bfloat16'``, ``'mixed_float16'`` (also called ``'mixed'``) or
      ``'mixed_bfloat16'`` (the mixed ones keep float32 master copies of
      half-precision variables).
    clip_gradients: clip the global gradient norm to this value (None: no clipping).
    summaries: names from ``OPTIMIZER_SUMMARIES`` written with ``tf.summary``.
    larc_params: dict with ``larc_eta`` and optional ``larc_mode`` ('clip' or
      'scale'), ``min_update``, ``epsilon``, ``skip_list`` or its synonym
      ``exclude_from_layer_adaptation``.
    loss_scaling: a number (static), ``'Backoff'``, ``'LogMax'`` or ``'dynamic'``.
    loss_scaling_params: parameters of the automatic loss scaler.
    on_horovod: average gradients over Horovod workers once per applied update.
    iter_size: micro-batches accumulated per update.
    skip_update_ph: optional boolean tensor; True accumulates without updating.
      When None, the micro-step count decides.
    model: the Keras model being trained (keys the pipeline state).
    horovod_params: ``{'compression': 'fp16'}`` to send float16 in the allreduce.

  Returns:
    The loss of this micro-batch (float32, unscaled). The pipeline's state
    (global step, learning rate, loss scale) is read from ``get_pipeline`` /
    ``find_pipeline``; calling the pipeline returns it with every micro-step.

  Raises:
    ValueError: for any invalid hyperparameter, naming it and what is allowed,
      and when called again for the same model (or variables) with different
      arguments, naming each of them (``clear_pipelines`` starts afresh).
  """
  pipeline = get_pipeline(optimizer, optimizer_params, learning_rate_decay_fn, var_list=var_list,
                          dtype=dtype, clip_gradients=clip_gradients, summaries=summaries,
                          larc_params=larc_params, loss_scaling=loss_scaling,
                          loss_scaling_params=loss_scaling_params, on_horovod=on_horovod,
                          iter_size=iter_size, model=model, horovod_params=horovod_params)
  return pipeline(loss, skip_update=skip_update_ph)['loss']
