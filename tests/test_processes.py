"""tests/processes.py: every wait on a child ends by its deadline, also when the child is silent."""

import subprocess
import sys
import time

import pytest

from tests.processes import Child, ChildTimeout

# A child that prints two lines, then nothing for a minute.
TWO_LINES_THEN_SILENT = ('import sys, time\n'
                         'print("step 1", flush=True)\n'
                         'print("step 2", flush=True)\n'
                         'print("to stderr", file=sys.stderr, flush=True)\n'
                         'time.sleep(60)\n')


def test_a_line_is_found_and_the_rest_is_left_for_communicate():
  code = 'print("a"); print("step 3 x"); print("b"); print("c")'
  with Child([sys.executable, '-c', code]) as child:
    assert child.wait_for_line(lambda line: line.startswith('step 3 '), timeout=60) == [
        'a\n', 'step 3 x\n']
    out, err = child.communicate(timeout=60)
  assert (child.returncode, out, err) == (0, 'b\nc\n', '')


def test_a_silent_child_fails_the_wait_at_its_deadline_with_what_it_printed():
  with Child([sys.executable, '-c', TWO_LINES_THEN_SILENT]) as child:
    started = time.monotonic()
    with pytest.raises(ChildTimeout) as failure:
      child.wait_for_line(lambda line: line.startswith('step 3'), timeout=3)
    waited = time.monotonic() - started
    assert 3 <= waited < 20  # the deadline, not the child's minute of silence
    assert 'step 1\nstep 2\n' in str(failure.value) and 'to stderr' in str(failure.value)
    with pytest.raises(subprocess.TimeoutExpired):
      child.communicate(timeout=1)
  assert child.returncode == -9  # killed when the block was left


def test_a_child_that_ends_before_the_line_fails_at_once():
  with Child([sys.executable, '-c', 'print("only line")'], stderr=subprocess.STDOUT) as child:
    started = time.monotonic()
    with pytest.raises(ChildTimeout, match='ended its output before the awaited line'):
      child.wait_for_line(lambda line: 'never' in line, timeout=120)
    assert time.monotonic() - started < 60
    assert child.communicate(timeout=60) == ('', None)


def test_a_new_session_is_killed_whole_grandchildren_too(tmp_path):
  # The child starts a grandchild that holds the pipe and outlives it, as a
  # horovodrun worker can; leaving the block ends both.
  pid_file = tmp_path / 'grandchild'
  code = ('import subprocess, sys\n'
          'p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])\n'
          f'open({str(pid_file)!r}, "w").write(str(p.pid))\n'
          'print("started", flush=True)\n')
  with Child([sys.executable, '-c', code], start_new_session=True) as child:
    child.wait_for_line(lambda line: line == 'started\n', timeout=60)
    child.wait(timeout=60)
    with pytest.raises(subprocess.TimeoutExpired):
      child.communicate(timeout=1)  # the grandchild still holds stdout
    grandchild = int(pid_file.read_text())
    assert alive(grandchild)
  deadline = time.monotonic() + 30
  while alive(grandchild):
    assert time.monotonic() < deadline, f'the grandchild {grandchild} outlived the block'
    time.sleep(0.1)


def alive(pid):
  """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
  try:
    with open(f'/proc/{pid}/stat', encoding='utf-8') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except FileNotFoundError:
    return False


def test_communicate_needs_a_deadline():
  with Child([sys.executable, '-c', 'pass']) as child:
    with pytest.raises(TypeError, match='needs a timeout'):
      child.communicate()
