"""One update's Python code stays in few files: scripts/trace_update.py, held to its limits.

The chain (``optimize_loss`` with LARS, LARC, Backoff loss scaling, clipping
and ``iter_size`` 2) once entered 14 files with 40 calls from one file into
another while one step was traced; with the forms of its stages chosen when
it is built, a step runs in the pipeline, its stages, the loss scaler and
the optimizer.
"""

from scripts import trace_update


def test_one_traced_step_enters_few_files_with_few_hops():
  files, hops = trace_update.measure()
  assert files == ['optimizers/compat/openseq2seq.py', 'optimizers/pipeline.py',
                   'optimizers/automatic_loss_scaler.py', 'optimizers/stages.py',
                   'optimizers/lars.py']
  assert len(files) <= trace_update.MAX_FILES, files
  assert len(hops) <= trace_update.MAX_HOPS, hops


def test_the_package_imports_itself_no_deeper_than_its_limit():
  depth, chain = trace_update.import_depth()
  assert depth <= trace_update.MAX_IMPORT_DEPTH, chain
  # The measure follows real imports: OpenSeq2Seq's path imports optimize_loss from the
  # compatibility room, which builds the pipeline, which checks its settings.
  assert chain[:3] == ['optimizers.optimizers', 'optimizers.compat.openseq2seq',
                       'optimizers.pipeline'] and depth >= 4


def test_no_class_of_the_package_has_more_than_two_project_bases():
  import optimizers  # pylint: disable=import-outside-toplevel
  for name in ('LARSOptimizer', 'LAMB', 'MomentumOptimizer'):
    cls = getattr(optimizers, name)
    project = [b for b in cls.__bases__ if b.__module__.split('.')[0] == 'optimizers']
    assert len(project) <= 2, (name, project)


def test_the_chain_is_built_once_and_every_update_runs_the_stages_it_chose(monkeypatch):
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  from optimizers import stages  # pylint: disable=import-outside-toplevel
  from optimizers import native  # pylint: disable=import-outside-toplevel
  from optimizers.pipeline import GradientPipeline  # pylint: disable=import-outside-toplevel
  from optimizers.settings import UpdateSettings  # pylint: disable=import-outside-toplevel

  assert native.load() is not None, native.error()
  asked = []
  choose = stages.step_stages
  monkeypatch.setattr(stages, 'step_stages', lambda *a, **k: asked.append(1) or choose(*a, **k))
  kernel = tf.Variable(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3), name='kernel')
  bias = tf.Variable(np.zeros(3, np.float32), name='bias')
  x = tf.constant(np.linspace(-2.0, 2.0, 20, dtype=np.float32).reshape(5, 4))
  pipeline = GradientPipeline([kernel, bias], UpdateSettings(
      'LARS', {'learning_rate': 0.1, 'momentum': 0.9}, clip_gradients=1.0,
      loss_scaling='Backoff', iter_size=2, larc_params={'larc_eta': 1e-3, 'larc_mode': 'clip'}))
  loss = lambda: tf.reduce_mean(tf.square(tf.matmul(x, kernel) + bias))
  step = tf.function(lambda: pipeline(loss)['applied'])
  applied = [bool(step()) for _ in range(4)] + [bool(pipeline(loss)['applied']) for _ in range(2)]
  # Six micro-steps, three updates: traced once in the graph, then eagerly; one choice.
  assert applied == [False, True, False, True, False, True] and asked == [1]
  assert int(pipeline.global_step) == 3
  assert pipeline.describe_chain() == (
      'accumulate(2) → backoff → clip(1) → larc(clip) → lars(native)')
