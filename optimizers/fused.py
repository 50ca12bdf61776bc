"""Building blocks for the fused optimizer paths: fast norms and one-launch XLA updates.

An update written as a Python loop over variables runs several small tf ops
per variable, and each op reads and writes a whole tensor; for ResNet-50's 161
variables that is several times the memory traffic the math needs. The fused
paths of ``LARSOptimizer``, ``LAMB``, ``MomentumOptimizer`` and the LARC stage
split an update into the two kinds of work this CPU does well:

* Norms: ``tf.nn.l2_loss`` computes Σx²/2 in one vectorised, multi-threaded
  pass without a temporary. ``tf.norm`` materialises x² first, and an XLA
  reduction keeps the sequential order of the float sum and is not vectorised:
  both are 2-5x slower on CPU (see docs/performance.md).
* Element-wise updates: ``tf.function(jit_compile=True)`` over many
  variables, so XLA fuses each variable's arithmetic into one or two loops
  and a whole group of variables is one launch.

The two are memory-bound passes; ``pipelined`` overlaps the norms of one
group of variables with the XLA update of the previous group.

The math stays in the plain tensor functions of ``lars.py``, ``lamb.py`` and
``stages.py``; the fused paths call the same functions, so they differ from
the per-variable reference paths only in the rounding of the norms.
"""

import tensorflow as tf


# Groups of variables whose norms and updates are overlapped (``pipelined``):
# three measured best on ResNet-50 (docs/performance.md); 1 turns it off.
PIPELINE_GROUPS = 3


def _dense_float32(tensor):
  if isinstance(tensor, tf.IndexedSlices):
    tensor = tensor.values
  return tf.cast(tensor, tf.float32)


def squared_norms(tensors):
  """Σx² of each tensor, in float32, as one vector.

  Args:
    tensors: tensors or variables (``tf.IndexedSlices``: of their values).

  Returns:
    A float32 vector with one entry per tensor (shape ``[0]`` for none).
  """
  if not tensors:
    return tf.zeros([0], tf.float32)
  # 2·(Σx²/2) is exact in binary floating point.
  return tf.stack([2.0 * tf.nn.l2_loss(_dense_float32(t)) for t in tensors])


def norms(tensors):
  """L2 norms of each tensor, in float32, as one vector (see ``squared_norms``)."""
  return tf.sqrt(squared_norms(tensors))


def global_norm(tensors):
  """The float32 L2 norm of all the tensors together (0 when there are none)."""
  return tf.sqrt(tf.reduce_sum(squared_norms(tensors)))


def split_by_size(tensors, parts):
  """Splits ``range(len(tensors))`` into up to ``parts`` consecutive groups of about equal size.

  Returns:
    A list of non-empty lists of indices, in order.
  """
  sizes = [max(1, int(t.shape.num_elements() or 1)) for t in tensors]
  total = float(sum(sizes))
  groups, current, seen = [], [], 0
  for i, size in enumerate(sizes):
    current.append(i)
    seen += size
    if seen >= total * (len(groups) + 1) / parts and len(groups) < parts - 1:
      groups.append(current)
      current = []
  if current:
    groups.append(current)
  return groups


def pipelined(groups, norms_fn, update_fn):
  """Runs ``update_fn(i, group, norms_fn(group))`` group by group, norms overlapping updates.

  Inside a ``tf.function`` the norms of group i + 1 are ordered only after
  those of group i, and the update of group i only after that of group i − 1,
  so the norm kernels of the next group run while XLA updates the current one.
  Each pass alone leaves part of the memory bandwidth unused; together they
  fill more of it. Eagerly, the groups simply run in turn.

  Args:
    groups: lists of indices (see ``split_by_size``).
    norms_fn: ``group -> nest of tensors``, the norms one update needs.
    update_fn: ``(i, group, norms) -> tensor`` (a result to order the next update by).
  """
  norm_deps, update_deps = [], []
  for i, group in enumerate(groups):
    with tf.control_dependencies(norm_deps):
      group_norms = norms_fn(group)
    with tf.control_dependencies(update_deps):
      result = update_fn(i, group, group_norms)
    norm_deps = tf.nest.flatten(group_norms)
    update_deps = tf.nest.flatten(result)


def fusable(grads):
  """Whether the fused path applies: every gradient dense and no tf.distribute strategy.

  Under a ``tf.distribute`` strategy Keras routes each variable's update
  through the strategy, which the per-variable path keeps doing.
  """
  if tf.distribute.has_strategy():
    return False
  return all(not isinstance(g, tf.IndexedSlices) for g in grads)


def jit(fn):
  """``fn`` as a ``tf.function`` that XLA compiles into one launch.

  Called from inside another ``tf.function`` (a train step, ``model.fit``)
  it becomes one compiled cluster of that graph. Lists of variables may be
  passed as arguments, and one trace serves every step.
  """
  return tf.function(fn, jit_compile=True, autograph=False)


def jit_for(owner, fn, name=None):
  """``jit(fn)`` private to ``owner`` (an optimizer), created on first use.

  A trace keeps weak references to the variables it was traced with and marks
  them as accessed whenever it is called from another graph, so a trace must
  not be shared between the variables of two models: once the first model is
  deleted, the second one's call fails. One function per optimizer keeps each
  trace with the variables it was made for. The functions are held in a plain
  dict so checkpoint and SavedModel tracking do not see them.
  """
  functions = owner.__dict__.get('_fused_functions')
  if functions is None:
    functions = {}
    object.__setattr__(owner, '_fused_functions', functions)
  key = name or fn.__name__
  if key not in functions:
    functions[key] = jit(fn)
  return functions[key]
