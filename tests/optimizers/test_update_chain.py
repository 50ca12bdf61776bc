"""One update's Python code stays in few files: scripts/trace_update.py, held to its limits.

Issue 45 measured the chain (``optimize_loss`` with LARS, LARC, Backoff loss
scaling, clipping and ``iter_size`` 2) entering 14 files with 40 calls from
one file into another while one step was traced; the seam of ``backend.py``
brought it to 7 and 16.
"""

from scripts import trace_update


def test_one_traced_step_enters_few_files_with_few_hops():
  files, hops = trace_update.measure()
  assert 'optimizers/backend.py' in files and 'optimizers/lars.py' in files
  assert len(files) <= trace_update.MAX_FILES, files
  assert len(hops) <= trace_update.MAX_HOPS, hops


def test_no_class_of_the_package_has_more_than_two_project_bases():
  import optimizers  # pylint: disable=import-outside-toplevel
  for name in ('LARSOptimizer', 'LAMB', 'MomentumOptimizer'):
    cls = getattr(optimizers, name)
    project = [b for b in cls.__bases__ if b.__module__.split('.')[0] == 'optimizers']
    assert len(project) <= 2, (name, project)
