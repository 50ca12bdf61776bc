"""scripts/horovodrun.py, the environment's horovodrun: Horovod's launcher without TensorFlow's
start-up lines."""

import os
import subprocess
import sys

import pytest

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
