"""framework/engines/tf_import.py: TensorFlow imported without its start-up lines, afresh."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def stderr_of(code, **env):
  environ = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  result = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                          env={**environ, 'PYTHONPATH': ROOT, **env}, timeout=300, check=True)
  return result.stderr


def test_the_start_up_lines_are_held_back_unless_asked_for():
  quiet = 'from framework.engines import tf_import; tf_import.import_tensorflow()'
  assert stderr_of(quiet) == ''
  # TF_CPP_MIN_LOG_LEVEL=0 asks for TensorFlow's own logs: what it prints by itself is shown.
  shown = stderr_of(quiet, TF_CPP_MIN_LOG_LEVEL='0')
  assert 'oneDNN' in shown or 'absl' in shown, shown
