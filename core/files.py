"""Files written whole or not at all; no TensorFlow.

The run directory, the checkpoints' state file and the run's config are
written here, so that a failed write never leaves half a file behind.
"""

import os
import tempfile


def write_text_atomically(path, text):
  """Writes ``text`` to ``path`` through a temporary file and a rename.

  A failed write (no space, read-only) leaves neither a partial ``path`` nor the
  temporary file; an existing ``path`` keeps its content.
  """
  directory = os.path.dirname(path) or '.'
  fd, temp = tempfile.mkstemp(dir=directory, prefix='.' + os.path.basename(path) + '.')
  try:
    # mkstemp creates the file for its owner only; give it the mode open() would.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temp, 0o666 & ~umask)
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(temp, path)
  except BaseException:
    try:
      os.remove(temp)
    except OSError:
      pass
    raise
