"""scripts/horovodrun.py, the environment's horovodrun: Horovod's launcher without TensorFlow's
start-up lines, and with the stop and exit status of framework/engines/horovod_launcher.py."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.processes import Child

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALLED = os.path.join(os.path.dirname(sys.executable), 'horovodrun')

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize('launcher', [[sys.executable, os.path.join(ROOT, 'scripts', 'horovodrun.py')],
                                      [INSTALLED]], ids=['script', 'installed'])
def test_a_launch_prints_its_workers_output_alone(launcher):
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  result = subprocess.run([*launcher, '-np', '2', '--gloo', '-H', 'localhost:2', sys.executable,
                           '-c', 'print("hello")'], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
  assert result.returncode == 0, result.stdout + result.stderr
  assert sorted(result.stdout.splitlines()) == ['[0]<stdout>:hello', '[1]<stdout>:hello']
  assert result.stderr == ''


def test_setup_makes_the_installed_horovodrun_this_launcher():
  with open(INSTALLED, encoding='utf-8') as f:
    assert os.path.join(ROOT, 'scripts', 'horovodrun.py') in f.read()


def test_a_failed_worker_ends_the_job_with_its_status_in_one_line():
  result = subprocess.run([INSTALLED, '-np', '2', '--gloo', '-H', 'localhost:2', sys.executable, '-c',
                           'import os, sys, time; rank = int(os.environ["HOROVOD_RANK"]); '
                           'time.sleep(0 if rank else 300); sys.exit(3)'],
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 3, result.stdout + result.stderr
  assert result.stderr.splitlines()[-1] == ('horovodrun: worker 1 of 2 exited with status 3; '
                                            'the others were ended')
  assert 'Traceback' not in result.stderr


SLOW_TO_STOP = """
import os, signal, sys, time
rank = os.environ['HOROVOD_RANK']
def stop(signum, frame):
  if stop.count:
    print(f'rank {rank}: second signal', flush=True)
    os._exit(128 + signum)
  stop.count += 1
  print(f'rank {rank}: saving', flush=True)
stop.count = 0
signal.signal(signal.SIGTERM, stop)
print(f'rank {rank}: ready', flush=True)
while not stop.count:
  time.sleep(0.05)
time.sleep(float(sys.argv[1]))  # the save
print(f'rank {rank}: saved', flush=True)
sys.exit(143)
"""


def _slow_to_stop(tmp_path, save_seconds):
  """horovodrun of two workers that take ``save_seconds`` to save after a SIGTERM."""
  script = tmp_path / 'slow_to_stop.py'
  script.write_text(SLOW_TO_STOP)
  cmd = [INSTALLED, '-np', '2', '--gloo', '-H', 'localhost:2', sys.executable, '-u', str(script),
         str(save_seconds)]
  return Child(cmd, cwd=ROOT, stderr=subprocess.STDOUT, start_new_session=True)


def _both(proc, word, timeout):
  lines = proc.wait_for_line(lambda line: word in line, timeout=timeout)
  return lines + proc.wait_for_line(lambda line: word in line, timeout=60)


def test_horovodrun_gives_the_workers_time_to_save_past_horovods_five_seconds(tmp_path):
  with _slow_to_stop(tmp_path, 7.0) as proc:
    _both(proc, 'ready', 300)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
  assert proc.returncode == 143, out
  assert out.count(': saved') == 2 and time.monotonic() - started >= 7.0, out


def test_a_second_signal_to_horovodrun_ends_every_worker_at_once(tmp_path):
  with _slow_to_stop(tmp_path, 300.0) as proc:
    _both(proc, 'ready', 300)
    proc.send_signal(signal.SIGTERM)
    saving = _both(proc, 'saving', 60)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
  out = ''.join(saving) + out
  assert proc.returncode == 143, out
  assert out.count('second signal') == 2 and ': saved' not in out, out
  assert time.monotonic() - started < 60
