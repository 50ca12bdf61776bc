"""What tests share: the time limit of the slow and multi-process tests, and the two-worker cases."""

import collections
import contextlib
import functools
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# pytest.ini's limit (300 s) is for unit tests; end-to-end and multi-process
# tests run whole trainings in children whose own deadlines go up to 600 s.
SLOW_TIMEOUT = 900


# The two files whose tests read the session's two-worker runs (horovod_cases,
# tf_config_cases): under pytest-xdist they go to one worker, so each runs once.
TWO_WORKER_FILES = ('test_horovod.py', 'test_multi_worker.py')


# What a file is expected to cost, in slow tests: a test marked slow or
# multiprocess starts whole trainings in children (seconds to a minute here),
# another takes a fraction of a second; the two-worker cases are two more.
FAST_TEST_COST = 0.02
TWO_WORKER_CASES_COST = 2.0


def group_of(nodeid):
  """The group of a test under pytest-xdist: its file, or one group for TWO_WORKER_FILES."""
  path = nodeid.split('::')[0]
  return 'two_worker_cases' if os.path.basename(path) in TWO_WORKER_FILES else path


def pytest_configure(config):
  """Under pytest-xdist, the files go out in the order the tests are sorted in (below).

  pytest-xdist's own order is by the number of tests in a file, which sends
  the files of many quick tests first and the few long trainings last, where
  one worker then runs them while the other waits.
  """
  if config.pluginmanager.hasplugin('xdist'):
    config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """``--dist loadfile`` (scripts/test.sh): each file on one worker, TWO_WORKER_FILES on one between them.

  So a module's fixtures are built once, and the session's two-worker runs
  (horovod_cases, tf_config_cases) run once.
  """
  if config.getvalue('dist') != 'loadfile':
    return None
  from xdist.scheduler import LoadScopeScheduling  # pylint: disable=import-outside-toplevel

  class FileGroups(LoadScopeScheduling):

    def _split_scope(self, nodeid):
      return group_of(nodeid)

  return FileGroups(config, log)


def pytest_collection_modifyitems(config, items):
  """Gives tests marked slow or multiprocess SLOW_TIMEOUT, unless they set a timeout of their own.

  On a pytest-xdist worker the files (groups, :func:`group_of`) are sorted by their
  expected cost, the largest first, each in its own order, so that the workers
  finish close together.
  """
  cost = collections.Counter()
  for item in items:
    marked = item.get_closest_marker('slow') or item.get_closest_marker('multiprocess')
    if marked and item.get_closest_marker('timeout') is None:
      item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
    cost[group_of(item.nodeid)] += 1.0 if marked else FAST_TEST_COST
  cost['two_worker_cases'] += TWO_WORKER_CASES_COST
  if hasattr(config, 'workerinput'):
    first = {}
    for index, item in enumerate(items):
      first.setdefault(group_of(item.nodeid), index)
    items.sort(key=lambda item: (-cost[group_of(item.nodeid)], first[group_of(item.nodeid)]))


def _run_cases(engine, out_dir):
  """Runs every case of tests/multi_worker_cases.py once under two workers of ``engine``."""
  sys.path.insert(0, os.path.join(ROOT, 'tests'))
  import multi_worker_cases  # pylint: disable=import-outside-toplevel
  from framework.engines import local_cluster  # pylint: disable=import-outside-toplevel
  from tests.processes import Child  # pylint: disable=import-outside-toplevel
  script = os.path.join(ROOT, 'tests', 'multi_worker_cases.py')
  env = {k: v for k, v in os.environ.items()
         if k not in ('TF_CONFIG', 'HOROVOD_CYCLE_TIME') and not k.startswith('SLURM_')}
  env.update(TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT, OMP_NUM_THREADS='1')
  if engine == 'horovod':
    horovodrun = os.path.join(os.path.dirname(sys.executable), 'horovodrun')
    jobs = [([horovodrun, '-np', '2', '--gloo', '-H', 'localhost:2', sys.executable, script,
              str(out_dir), *multi_worker_cases.ALL, *multi_worker_cases.HOROVOD_ONLY], env)]
  else:
    jobs = [([sys.executable, script, str(out_dir), *multi_worker_cases.ALL], worker_env)
            for worker_env in local_cluster.worker_environments(2, env)]
  with contextlib.ExitStack() as stack:
    children = [stack.enter_context(Child(command, env=e, cwd=ROOT, stderr=subprocess.STDOUT,
                                          start_new_session=True)) for command, e in jobs]
    for child in children:
      out, _ = child.communicate(timeout=600)
      if child.returncode != 0:
        raise AssertionError(f'{engine} cases exited {child.returncode}:\n{out[-4000:]}')
  return out_dir


@pytest.fixture(scope='session')
def horovod_cases(tmp_path_factory):
  """The directory of every two-worker case's results under horovodrun (``<case>.rank<r>.npz``)."""
  return _run_cases('horovod', tmp_path_factory.mktemp('horovod_cases'))


@pytest.fixture(scope='session')
def tf_config_cases(tmp_path_factory):
  """The same under two TF_CONFIG workers (the multi_worker_mirrored engine)."""
  return _run_cases('multi_worker_mirrored', tmp_path_factory.mktemp('tf_config_cases'))


@pytest.fixture
def run_main(monkeypatch):
  """run.py's ``main()`` in this process: ``run_main(*args)`` gives a ``CompletedProcess``.

  tests/in_process.py's ``run_py``, in an environment without cluster variables
  from the fixture's start, so that a test may set ``TF_CONFIG`` (by
  ``monkeypatch``) for the command to answer. What needs a real process
  (signals sent from outside, the exit of the process) stays in a child.
  """
  from tests import in_process  # pylint: disable=import-outside-toplevel
  in_process.drop_cluster_variables(monkeypatch)
  return functools.partial(in_process.run_py, single_process=False)
