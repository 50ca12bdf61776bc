"""Files written whole or not at all; no TensorFlow.

The run directory, the checkpoints' state file and the run's config are
written here, so that a failed write never leaves half a file behind.
"""

import os
import sys
import tempfile


def write_text_atomically(path, text):
  """Writes ``text`` to ``path`` through a temporary file and a rename.

  A failed write (no space, read-only) leaves neither a partial ``path`` nor the
  temporary file; an existing ``path`` keeps its content.
  """
  def write(temp):
    with open(temp, 'w', encoding='utf-8') as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())

  write_atomically(path, write)


def write_atomically(path, write, suffix=''):
  """Has ``write(temp)`` fill a temporary file beside ``path``, then renames it to ``path``.

  As ``write_text_atomically``, for any writer (a figure's ``savefig``);
  ``suffix`` ends the temporary file's name, for a writer that reads the format
  from it.
  """
  directory = os.path.dirname(path) or '.'
  fd, temp = tempfile.mkstemp(dir=directory, prefix='.' + os.path.basename(path) + '.',
                              suffix=suffix)
  os.close(fd)
  try:
    # mkstemp creates the file for its owner only; give it the mode open() would.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temp, 0o666 & ~umask)
    write(temp)
    os.replace(temp, path)
  except BaseException:
    try:
      os.remove(temp)
    except OSError:
      pass
    raise


def refresh_generated_page(page, generate, check, command):
  """Rewrites the generated part of a page, or with ``check`` only says whether it is current.

  For the pages whose tables a script writes (docs/config.md, docs/critical_batch.md,
  docs/large_batch_seq2seq.md).

  Args:
    page: the page's path.
    generate: ``f(text) -> text``, the page with its generated part made anew;
      raises OSError or ValueError when it cannot be (no markers, unreadable inputs).
    check: write nothing; a page that would change is an error.
    command: the command that writes the page, named when it is out of date.

  Returns:
    The exit status: 0 current (or written), 1 out of date under ``check``, 2 an error,
    each said in one line (errors on stderr).
  """
  try:
    with open(page, encoding='utf-8') as f:
      text = f.read()
    updated = generate(text)
  except (OSError, ValueError) as exc:
    print(f'error: {page}: {exc}', file=sys.stderr)
    return 2
  if updated == text:
    print(f'{page} is up to date')
    return 0
  if check:
    print(f'{page} is out of date: run {command}', file=sys.stderr)
    return 1
  with open(page, 'w', encoding='utf-8') as f:
    f.write(updated)
  print(f'wrote {page}')
  return 0
