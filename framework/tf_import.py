"""Importing TensorFlow without its start-up lines on the console (was framework/quiet.py).

TensorFlow's native start-up messages ("oneDNN custom operations are on", the
absl logging notice) are written straight to file descriptor 2, before any
Python logging setting applies, and would stand in front of every one-line
error the CLI prints. They are captured while TensorFlow loads and shown only
if the import fails.
"""

import os
import sys
import tempfile


def import_tensorflow():
  """Imports tensorflow with fd 2 captured; returns the module."""
  if 'tensorflow' in sys.modules or os.environ.get('TF_CPP_MIN_LOG_LEVEL', '0') == '0':
    import tensorflow  # pylint: disable=import-outside-toplevel
    return tensorflow
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile(mode='w+b') as capture:
    os.dup2(capture.fileno(), 2)
    try:
      import tensorflow  # pylint: disable=import-outside-toplevel
    except BaseException:
      os.dup2(saved, 2)
      capture.seek(0)
      sys.stderr.write(capture.read().decode(errors='replace'))
      raise
    finally:
      os.dup2(saved, 2)
      os.close(saved)
  return tensorflow
