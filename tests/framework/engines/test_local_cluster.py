"""run.py --num_workers: the workers' environments and the launcher's exit rules (no TensorFlow)."""

import json
import signal
import sys
import time

from framework.engines import local_cluster
from tests.processes import Child


def test_each_worker_gets_the_cluster_its_index_and_a_share_of_the_cores(monkeypatch):
  monkeypatch.setattr(local_cluster.os, 'cpu_count', lambda: 8)
  envs = local_cluster.worker_environments(2, {'PATH': '/bin'}, ports=[5001, 5002], gpus=0)
  for index, env in enumerate(envs):
    spec = json.loads(env['TF_CONFIG'])
    assert spec == {'cluster': {'worker': ['localhost:5001', 'localhost:5002']},
                    'task': {'type': 'worker', 'index': index}}
    assert env['TF_NUM_INTRAOP_THREADS'] == env['OMP_NUM_THREADS'] == '4'  # 8 cores / 2
    assert env['TF_NUM_INTEROP_THREADS'] == '1'
    assert env['LARGEBATCH_NUM_WORKERS'] == '2' and env['PATH'] == '/bin'
    assert 'CUDA_VISIBLE_DEVICES' not in env


def test_the_user_s_thread_and_gpu_settings_are_kept():
  envs = local_cluster.worker_environments(
      3, {'TF_NUM_INTRAOP_THREADS': '6', 'CUDA_VISIBLE_DEVICES': '2'}, ports=[1, 2, 3], gpus=8)
  assert [e['TF_NUM_INTRAOP_THREADS'] for e in envs] == ['6'] * 3
  assert [e['CUDA_VISIBLE_DEVICES'] for e in envs] == ['2'] * 3


def test_one_gpu_per_worker_when_there_are_enough():
  assert [e['CUDA_VISIBLE_DEVICES'] for e in
          local_cluster.worker_environments(4, {}, ports=[1, 2, 3, 4], gpus=4)] == \
      ['0', '1', '2', '3']
  assert all('CUDA_VISIBLE_DEVICES' not in e
             for e in local_cluster.worker_environments(4, {}, ports=[1, 2, 3, 4], gpus=2))


def test_free_ports_are_distinct_and_the_flag_is_dropped_in_both_spellings():
  ports = local_cluster.free_ports(4)
  assert len(set(ports)) == 4 and all(0 < p < 65536 for p in ports)
  argv = ['--config', 'c.py', '--num_workers', '2', '--set', 'a=1', '--num_workers=3']
  assert local_cluster.without_flag(argv, '--num_workers') == ['--config', 'c.py', '--set', 'a=1']


def _cluster(*codes):
  """A LocalCluster of one Python process per snippet (no TF_CONFIG needed for these)."""
  cluster = local_cluster.LocalCluster.__new__(local_cluster.LocalCluster)
  cluster.processes = [local_cluster.subprocess.Popen([sys.executable, '-c', c]) for c in codes]
  cluster.forwarded = None
  return cluster


def test_a_failed_worker_ends_the_others_and_the_job_takes_its_status(capfd):
  cluster = _cluster('import sys, time; time.sleep(0.5); sys.exit(3)', 'import time; time.sleep(60)')
  start = time.monotonic()
  assert cluster.wait() == 3
  assert time.monotonic() - start < 30  # the sleeper was ended, not waited for
  assert cluster.processes[1].returncode is not None
  assert 'error: worker 0 of 2 exited with status 3; ending the others' in capfd.readouterr().err


def test_a_worker_killed_by_a_signal_makes_the_job_fail():
  cluster = _cluster('import os, signal, time; time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)',
                     'import time; time.sleep(60)')
  assert cluster.wait() == 1


def test_a_clean_stop_of_one_worker_waits_for_the_others_and_keeps_its_status():
  # A worker that stopped on a signal (143) is waited out with the others, which stop too.
  cluster = _cluster('import sys; sys.exit(143)', 'import time, sys; time.sleep(1.5); sys.exit(143)')
  assert cluster.wait() == 143
  assert all(p.returncode == 143 for p in cluster.processes)


def test_signals_are_forwarded_and_the_job_exits_with_their_status():
  handler = ('import signal, sys, time\n'
             'signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n'
             'time.sleep(60)\n')
  cluster = _cluster(handler, handler)
  time.sleep(1.0)  # both handlers installed
  cluster.forward(signal.SIGTERM)
  assert cluster.wait() == 143
  assert [p.returncode for p in cluster.processes] == [143, 143]


def test_every_worker_done_is_success():
  assert _cluster('pass', 'pass').wait() == 0


def test_a_worker_gets_sigterm_when_its_launcher_dies_and_keeps_it_across_exec(tmp_path):
  # A stand-in launcher starts a worker as LocalCluster does, which execs itself once more
  # (as run.py does under tcmalloc), then dies of SIGKILL; the worker records the SIGTERM.
  import os  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  got = tmp_path / 'got'
  worker = ('import os, signal, sys, time\n'
            'if len(sys.argv) == 1:\n'
            '  os.execv(sys.executable, [sys.executable, "-c", sys.orig_argv[2], "again"])\n'
            f'signal.signal(signal.SIGTERM, lambda *a: (open({str(got)!r}, "w").write("TERM"), '
            'sys.exit(143)))\n'
            'print(os.getpid(), flush=True)\n'
            'time.sleep(60)\n')
  launcher = ('import os, signal, subprocess, sys\n'
              'from framework.engines import local_cluster\n'
              f'subprocess.Popen([sys.executable, "-c", {worker!r}], '
              'preexec_fn=local_cluster.ends_with_parent())\n'
              'sys.stdin.readline()\n'
              'os.kill(os.getpid(), signal.SIGKILL)\n')
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))
  with Child([sys.executable, '-c', launcher], stdin=subprocess.PIPE, cwd=root,
             env=dict(os.environ, PYTHONPATH=root)) as proc:
    # The worker's pid, once its handler is installed (it writes to the inherited pipe).
    pid = int(proc.wait_for_line(lambda line: True, timeout=30)[0])
    try:
      proc.stdin.write('\n')
      proc.stdin.flush()
      assert proc.wait(timeout=30) == -signal.SIGKILL
      deadline = time.monotonic() + 30
      # The file exists from the worker's open() on, before "TERM" is in it.
      while not (got.exists() and got.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
      assert got.exists() and got.read_text() == 'TERM'
    finally:
      try:
        os.kill(pid, signal.SIGKILL)  # the worker is no child of this process: Child cannot
      except ProcessLookupError:
        pass
