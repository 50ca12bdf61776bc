"""tests/conftest.py under pytest-xdist: each file on one worker, the two-worker files together, the costly first.

The suite's own files run in a pytest of their own here, on a copy of the
conftest and a tree of small files named like the suite's, so what is checked
is the scheduling scripts/test.sh gets (``-n 2 --dist loadfile``).
"""

import os
import shutil
import sys

from tests.processes import Child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each test writes its file's name and the worker it ran on, in the order the tests ran.
RECORDER = '''
import os, fcntl

def record(name):
  with open(os.environ['RECORD'], 'a') as out:
    fcntl.flock(out, fcntl.LOCK_EX)
    out.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''

PYTEST_INI = '''[pytest]
addopts = --strict-markers -p no:cacheprovider
markers =
    slow: end to end
    multiprocess: several processes
'''


def write_file(tree, name, tests, mark=None):
  """A test file of ``tests`` tests, each recording itself; marked ``mark`` when given."""
  lines = ['import pytest', 'from recorder import record', '']
  for index in range(tests):
    if mark:
      lines.append(f'@pytest.mark.{mark}')
    lines += [f'def test_{index}():', f'  record("{name}")', '']
  (tree / name).write_text('\n'.join(lines))


def test_files_stay_on_one_worker_the_two_worker_files_share_one_and_the_costly_go_first(
    tmp_path):
  tree = tmp_path / 'tests'
  tree.mkdir()
  shutil.copy(os.path.join(ROOT, 'tests', 'conftest.py'), tree / 'conftest.py')
  (tree / 'recorder.py').write_text(RECORDER)
  (tmp_path / 'pytest.ini').write_text(PYTEST_INI)
  # Many quick tests (pytest-xdist's own order would send these first), few slow ones.
  write_file(tree, 'test_many_quick.py', 40)
  write_file(tree, 'test_also_quick.py', 30)
  write_file(tree, 'test_trainings.py', 3, mark='slow')
  write_file(tree, 'test_horovod.py', 2, mark='multiprocess')
  write_file(tree, 'test_multi_worker.py', 2, mark='multiprocess')
  record = tmp_path / 'record.txt'
  env = {**os.environ, 'RECORD': str(record), 'PYTHONPATH': str(tree)}
  with Child([sys.executable, '-m', 'pytest', '-q', '-n', '2', '--dist', 'loadfile', 'tests'],
             cwd=tmp_path, env=env) as child:
    out, err = child.communicate(timeout=300)
  assert child.returncode == 0, out + err
  runs = [line.split() for line in record.read_text().splitlines()]
  assert len(runs) == 40 + 30 + 3 + 2 + 2
  workers = {}
  for name, worker in runs:
    workers.setdefault(name, set()).add(worker)
  # Each file on one worker; the two files of the two-worker cases on the same one.
  assert all(len(on) == 1 for on in workers.values()), workers
  assert workers['test_horovod.py'] == workers['test_multi_worker.py']
  # The two costly groups (the two-worker files: 2 + 2 slow tests; the slow file: 3) go
  # out first, one to each worker, before any file of quick tests (each worker's own
  # record is in the order it ran its tests).
  for worker in {'gw0', 'gw1'}:
    ran = [name for name, on in runs if on == worker]
    assert ran and ran[0] in ('test_horovod.py', 'test_trainings.py'), (worker, ran[:3])
  assert workers['test_horovod.py'] != workers['test_trainings.py']


def test_the_conftest_groups_by_file_and_puts_the_two_worker_files_together():
  from tests import conftest  # pylint: disable=import-outside-toplevel
  assert conftest.group_of('tests/test_run.py::test_a[x::y]') == 'tests/test_run.py'
  assert (conftest.group_of('tests/test_horovod.py::test_a')
          == conftest.group_of('tests/test_multi_worker.py::test_b') == 'two_worker_cases')
  assert conftest.group_of('tests/scripts/test_sweep.py') == 'tests/scripts/test_sweep.py'


def test_the_test_command_runs_two_workers_by_file():
  # --dist loadfile is what tests/conftest.py's scheduler takes over; --dist loadgroup
  # would leave every test a group of its own (pytest 9 ignores the nodeid suffix
  # pytest-xdist 3.8's groups are made of).
  text = open(os.path.join(ROOT, 'scripts', 'test.sh'), encoding='utf-8').read()
  assert '-n "$workers" --dist loadfile' in text
