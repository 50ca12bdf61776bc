"""The compatibility room: the core never imports it, and the pipeline still reads its old names."""

import ast
import os

import optimizers

PACKAGE = os.path.dirname(optimizers.__file__)


def _imports(path):
  tree = ast.parse(open(path, encoding='utf-8').read())
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      yield node.module
      yield from (f'{node.module}.{alias.name}' for alias in node.names)


def test_the_core_never_imports_the_compatibility_room():
  # optimizers.py is OpenSeq2Seq's module path, a file of the compatibility room's
  # at the path the seeds promise; no core module imports it. optimizer_arguments.py
  # is data, generated from the optimizers' classes (scripts/optimizer_arguments.py).
  outside = ('__init__.py', 'optimizers.py', 'optimizer_arguments.py')
  core = [name for name in os.listdir(PACKAGE) if name.endswith('.py') and name not in outside]
  # 15 files outside compat once the update became a chain of stages, and one more
  # for the noise scale's stage (its state, its estimators, its place in the chain).
  assert len(core) + 1 <= 16, sorted(core)
  for name in core:
    for module in _imports(os.path.join(PACKAGE, name)):
      assert not module.startswith('optimizers.compat'), (name, module)
      assert module != 'optimizers.optimizers', (name, module)


def test_multi_worker_is_the_pipelines_name_and_on_horovod_is_still_read():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from optimizers.pipeline import GradientPipeline  # pylint: disable=import-outside-toplevel
  var = tf.Variable([1.0, 2.0])
  for kwargs in ({}, {'multi_worker': False}, {'on_horovod': False}):
    pipeline = GradientPipeline([var], 'SGD', {'learning_rate': 0.1}, **kwargs)
    assert pipeline.multi_worker is False and pipeline.on_horovod is False
