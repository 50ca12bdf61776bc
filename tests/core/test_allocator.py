"""Tests of core/allocator.py: run.py restarts itself under tcmalloc, once, and only when asked."""

import os
import subprocess
import sys

import pytest

from core import allocator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TCMALLOC = allocator.library({})

# What the restarted process reports: its pid, its preload and whether tcmalloc is mapped.
PROBE = ('import os, sys; sys.path.insert(0, {root!r}); from core import allocator; '
         'print(os.getpid(), flush=True); allocator.reexec_under_tcmalloc(); '
         'mapped = "tcmalloc" in open("/proc/self/maps").read(); '
         'print(os.getpid(), os.environ.get("LD_PRELOAD", ""), mapped, sys.argv[1:])')


def probe(**env):
  environ = {k: v for k, v in os.environ.items() if k not in ('LD_PRELOAD', allocator.SWITCH)}
  environ.update(env)
  result = subprocess.run([sys.executable, '-c', PROBE.format(root=ROOT), 'a', '--b=c'],
                          env=environ, capture_output=True, text=True, timeout=60, check=True)
  *starts, last = result.stdout.splitlines()
  pid, preload, mapped, argv = last.split(' ', 3)
  return starts, pid, preload, mapped == 'True', argv


def test_the_process_restarts_under_tcmalloc_with_the_same_pid_and_arguments():
  assert TCMALLOC is not None, 'libtcmalloc-minimal4 is not installed (scripts/setup.sh installs it)'
  starts, pid, preload, mapped, argv = probe()
  # Started twice (the second time already under tcmalloc), always the same process.
  assert starts == [pid, pid] and preload == TCMALLOC and mapped
  assert argv == "['a', '--b=c']"
  # Already preloaded (a restarted process, or a user's own LD_PRELOAD): no second restart.
  assert allocator.tcmalloc_environ({'LD_PRELOAD': TCMALLOC}) is None


def test_system_keeps_glibc_and_a_wrong_choice_is_refused():
  starts, pid, preload, mapped, _ = probe(LARGEBATCH_ALLOCATOR='system')
  assert starts == [pid] and preload == '' and not mapped
  with pytest.raises(ValueError, match=r"LARGEBATCH_ALLOCATOR='jemalloc': expected one of "
                                       'tcmalloc, system'):
    allocator.tcmalloc_environ({'LARGEBATCH_ALLOCATOR': 'jemalloc'})


def test_no_library_no_restart(tmp_path):
  assert allocator.tcmalloc_environ({'LARGEBATCH_TCMALLOC': str(tmp_path / 'missing.so')}) is None
  fake = tmp_path / 'libtcmalloc_minimal.so.4'
  fake.write_bytes(b'')
  environ = allocator.tcmalloc_environ({'LARGEBATCH_TCMALLOC': str(fake),
                                        'LD_PRELOAD': '/opt/libother.so'})
  # Put first, the user's preload kept, tcmalloc's reports of large allocations silenced.
  assert environ['LD_PRELOAD'] == f'{fake} /opt/libother.so'
  assert environ['TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD'] == str(2 ** 40)


def test_run_py_refuses_a_wrong_allocator_in_one_line():
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'run.py'), '--config',
                           os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py'), '--print_config'],
                          env=dict(os.environ, LARGEBATCH_ALLOCATOR='fast'), capture_output=True,
                          text=True, timeout=60, check=False)
  assert result.returncode == 2 and result.stdout == ''
  assert result.stderr == ("error: LARGEBATCH_ALLOCATOR='fast': expected one of tcmalloc, "
                           'system\n')
