"""How far one update's Python code wanders: project files entered and hops between them.

Traces one step of ``optimize_loss`` (LARS, LARC in clip mode, Backoff loss
scaling, global-norm clipping, ``iter_size`` 2) while TensorFlow builds its
graph, with ``sys.setprofile`` watching every Python call and return. The
pipeline is created by a first trace; a second ``tf.function`` of the same
step is then traced under the profiler, so what is counted is the code of a
step, not the one-off construction of the optimizer and its slots.

A *hop* is a call from code of one project file into code of another (the
innermost running project frame changes file at a call; the returns back are
not counted again); frames of TensorFlow, Keras or the standard library do
not count and do not break a stay. Usage::

  python scripts/trace_update.py            # prints the files and the counts
  python scripts/trace_update.py --check    # exits 1 when over the limits

It also measures how deep the package's modules import one another
(``import_depth``): the modules on the longest chain of module-level imports
among the files of ``optimizers/`` (the package's ``__init__``, which every
import of a submodule runs first, is not a link of the chain).

tests/optimizers/test_update_chain.py runs ``measure`` and holds the limits.
"""

import argparse
import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

# The limits the chain is held to (it entered 14 files with 50 hops before the update
# had a seam of its own, and 7 with 16 while the step's form was chosen at every update).
MAX_FILES = 5
MAX_HOPS = 8
# The modules on the longest chain of imports inside optimizers/ (it was 9).
MAX_IMPORT_DEPTH = 5
# Only the package's own code is followed: tests and scripts are the caller.
PACKAGES = ('optimizers', 'core')


def project_file(filename, packages=PACKAGES):
  """The repository-relative path of a file of ``packages``, or None (scripts/trace_config.py too)."""
  path = os.path.abspath(filename)
  if not path.startswith(ROOT + os.sep):
    return None
  relative = os.path.relpath(path, ROOT)
  return relative if relative.split(os.sep)[0] in packages else None


def _step_fn():
  """A fresh ``tf.function`` of one micro-step of the chain, and its variables."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  from optimizers import optimize_loss  # pylint: disable=import-outside-toplevel

  kernel = tf.Variable(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3), name='kernel')
  bias = tf.Variable(np.array([0.1, -0.2, 0.3], np.float32), name='bias')
  x = tf.constant(np.linspace(-2.0, 2.0, 20, dtype=np.float32).reshape(5, 4))
  y = tf.constant(np.linspace(1.0, -1.0, 15, dtype=np.float32).reshape(5, 3))
  kwargs = dict(optimizer='LARS', optimizer_params={'learning_rate': 0.1, 'momentum': 0.9},
                learning_rate_decay_fn=None, var_list=[kernel, bias], clip_gradients=1.0,
                larc_params={'larc_eta': 1e-3, 'larc_mode': 'clip'}, loss_scaling='Backoff',
                iter_size=2)

  def make():
    # AutoGraph off: its converted copies of the project's functions run from
    # generated files, which would hide where the code lives. The package
    # writes its control flow with tf.cond, so the path is the same.
    @tf.function(autograph=False)
    def step():
      loss = lambda: tf.reduce_mean(tf.square(tf.matmul(x, kernel) + bias - y))
      return optimize_loss(loss, **kwargs)
    return step
  return make


def measure():
  """Traces one step of the chain; returns (files in order of first entry, hops)."""
  make = _step_fn()
  make().get_concrete_function()  # creates the pipeline, its optimizer and slots
  step = make()
  files, hops = [], []
  stack = []  # the project file of each frame on the profiled stack (None: not ours)

  def current():
    for entry in reversed(stack):
      if entry is not None:
        return entry
    return None

  def profile(frame, event, arg):
    del arg
    if event not in ('call', 'return'):
      return
    before = current()
    if event == 'call':
      stack.append(project_file(frame.f_code.co_filename))
    elif stack:
      stack.pop()
    after = current()
    if after is not None and after not in files:
      files.append(after)
    if event == 'call' and before is not None and after is not None and after != before:
      hops.append((before, after))

  sys.setprofile(profile)
  try:
    step.get_concrete_function()
  finally:
    sys.setprofile(None)
  return files, hops


def _module_imports(path, modules):
  """The modules of ``modules`` that the file at ``path`` imports at its top level."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  found = set()
  for node in tree.body:
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names if alias.name in modules)
    elif isinstance(node, ast.ImportFrom) and node.module:
      named = {f'{node.module}.{alias.name}' for alias in node.names} & set(modules)
      found.update(named or ({node.module} & set(modules)))
  return found


def import_depth(package='optimizers'):
  """(modules on the longest chain of imports inside ``package``, that chain)."""
  modules = {}
  for folder, _, names in os.walk(os.path.join(ROOT, package)):
    for name in names:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, '.')
        modules[module.removesuffix('.__init__')] = path
  imports = {m: _module_imports(p, modules) - {m, package} for m, p in modules.items()}
  chains = {}

  def longest(module):
    if module not in chains:
      chains[module] = [module]  # a cycle ends the chain
      below = [longest(m) for m in sorted(imports[module])]
      chains[module] = [module] + max(below, key=len, default=[])
    return chains[module]

  chain = max((longest(m) for m in sorted(modules)), key=len)
  return len(chain), chain


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--check', action='store_true', help='exit 1 when over the limits')
  args = parser.parse_args(argv)
  files, hops = measure()
  for name in files:
    print(name)
  print(f'{len(files)} project files, {len(hops)} hops between files '
        f'(limits {MAX_FILES} and {MAX_HOPS})')
  depth, chain = import_depth()
  print(f'import depth inside optimizers/: {depth} modules (limit {MAX_IMPORT_DEPTH}): '
        + ' -> '.join(chain))
  if args.check and (len(files) > MAX_FILES or len(hops) > MAX_HOPS
                     or depth > MAX_IMPORT_DEPTH):
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
