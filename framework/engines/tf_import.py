"""Importing TensorFlow without its start-up lines on the console.

TensorFlow writes native start-up messages ("oneDNN custom operations are
on", the absl notice "All log messages before absl::InitializeLog() is called
are written to STDERR") straight to file descriptor 2 while its libraries
load, before any Python logging setting applies; ``TF_CPP_MIN_LOG_LEVEL``
does not silence them. They would stand in front of every one-line error the
command line prints and in every tool's output. :func:`import_tensorflow`
captures them while TensorFlow loads and shows them only when the import
fails, or when ``TF_CPP_MIN_LOG_LEVEL=0`` asks for TensorFlow's own logs.

Every process of the project imports TensorFlow through it first: run.py's
path (the config checks, the engine's start), scripts/sweep.py's check of its
points and its reading of the runs' events, the plots and the config
reference, scripts/setup.sh's kernel build, and horovodrun's launcher
(scripts/horovodrun.py, which setup.sh makes the environment's horovodrun).
"""

import os
import sys
import tempfile


def import_tensorflow():
  """Imports tensorflow with file descriptor 2 captured; returns the module."""
  if 'tensorflow' in sys.modules or os.environ.get('TF_CPP_MIN_LOG_LEVEL') == '0':
    import tensorflow  # pylint: disable=import-outside-toplevel
    return tensorflow
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile(mode='w+b') as capture:
    os.dup2(capture.fileno(), 2)
    try:
      import tensorflow  # pylint: disable=import-outside-toplevel
    except BaseException as exc:
      os.dup2(saved, 2)
      if isinstance(exc, Exception):  # not a stop signal (core.signals): the import failed
        capture.seek(0)
        sys.stderr.write(capture.read().decode(errors='replace'))
      raise
    finally:
      os.dup2(saved, 2)
      os.close(saved)
  return tensorflow
