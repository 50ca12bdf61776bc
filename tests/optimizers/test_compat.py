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
  # at the path the seeds promise; no core module imports it.
  outside = ('__init__.py', 'optimizers.py')
  core = [name for name in os.listdir(PACKAGE) if name.endswith('.py') and name not in outside]
  # 15 files outside compat once the update became a chain of stages, one more for the
  # noise scale's stage (its state, its estimators, its place in the chain) and one for
  # the update's settings (UpdateSettings); the declared arguments are data, not a module.
  assert len(core) <= 16, sorted(core)
  for name in core:
    for module in _imports(os.path.join(PACKAGE, name)):
      assert not module.startswith('optimizers.compat'), (name, module)
      assert module != 'optimizers.optimizers', (name, module)


def test_openseq2seq_names_are_mapped_by_optimize_loss_alone():
  import pytest  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from optimizers.compat import openseq2seq  # pylint: disable=import-outside-toplevel
  from optimizers.settings import UpdateSettings  # pylint: disable=import-outside-toplevel
  # The pipeline's settings have one name for each thing ...
  for old in ({'on_horovod': False}, {'horovod_params': {'compression': 'fp16'}}):
    with pytest.raises(TypeError, match='unexpected keyword argument'):
      UpdateSettings('SGD', {'learning_rate': 0.1}, **old)
  assert UpdateSettings('SGD', {'learning_rate': 0.1}).compression == 'none'
  # ... and OpenSeq2Seq's are read where its signature is kept.
  var = tf.Variable([1.0, 2.0])
  pipeline = openseq2seq.get_pipeline('SGD', {'learning_rate': 0.1}, None, var_list=[var],
                                      on_horovod=False, horovod_params={'compression': 'fp16'})
  openseq2seq.clear_pipelines()
  assert pipeline.settings.multi_worker is False and pipeline.settings.compression == 'fp16'
