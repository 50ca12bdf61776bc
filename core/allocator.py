"""Run the process under tcmalloc, which keeps large tensors' pages between steps.

TensorFlow's CPU allocator takes every tensor from ``malloc``. glibc serves
an allocation above 32 MB with a fresh ``mmap`` and returns it with
``munmap`` when it is freed, so a large-batch step that creates and frees
hundreds of such tensors (a 16-channel activation of 8192 28x28 images is
411 MB) has the kernel map and zero the same gigabytes again at every step.
At batch 8K that is a third of the machine's time, spent in the kernel.
tcmalloc keeps freed memory for the next allocation of that size.

:func:`reexec_under_tcmalloc` restarts the current command, same process id,
with ``libtcmalloc_minimal.so.4`` (Debian's ``libtcmalloc-minimal4``) in
``LD_PRELOAD``. It is a no-op when the library is already loaded, when it is
not installed, or when ``LARGEBATCH_ALLOCATOR=system``; where the interpreter
cannot be executed again (a noexec mount), the command goes on with the
system allocator after one line saying so. The allocator changes
where tensors live, not what is computed: results are the same to the bit.
"""

import os
import sys

LIBRARY = 'libtcmalloc_minimal.so.4'
# Where Debian and most distributions put it; LARGEBATCH_TCMALLOC names another.
SEARCH_PATH = ('/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib')
SWITCH = 'LARGEBATCH_ALLOCATOR'  # 'system' keeps glibc's malloc
CHOICES = ('tcmalloc', 'system')
# tcmalloc reports every allocation above 1 GB on stderr; a 16K batch makes some.
QUIET = {'TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD': str(1 << 40)}


def library(environ=None):
  """The path of the tcmalloc library to preload, or None when there is none."""
  environ = os.environ if environ is None else environ
  named = environ.get('LARGEBATCH_TCMALLOC')
  candidates = [named] if named else [os.path.join(d, LIBRARY) for d in SEARCH_PATH]
  return next((path for path in candidates if os.path.isfile(path)), None)


def preloaded(environ=None):
  """Whether ``LD_PRELOAD`` already names a tcmalloc library."""
  environ = os.environ if environ is None else environ
  return any('tcmalloc' in os.path.basename(entry)
             for entry in environ.get('LD_PRELOAD', '').replace(':', ' ').split())


def tcmalloc_environ(environ=None):
  """The environment to restart with, or None when the process should go on as it is.

  Raises:
    ValueError: ``LARGEBATCH_ALLOCATOR`` is neither 'tcmalloc' nor 'system'.
  """
  environ = dict(os.environ if environ is None else environ)
  choice = environ.get(SWITCH, 'tcmalloc')
  if choice not in CHOICES:
    raise ValueError(f'{SWITCH}={choice!r}: expected one of {", ".join(CHOICES)}')
  path = library(environ)
  if choice == 'system' or path is None or preloaded(environ):
    return None
  environ['LD_PRELOAD'] = ' '.join(filter(None, [path, environ.get('LD_PRELOAD', '')]))
  for key, value in QUIET.items():
    environ.setdefault(key, value)
  return environ


def reexec_under_tcmalloc():
  """Restarts this command under tcmalloc when :func:`tcmalloc_environ` says so.

  Call it first thing, before TensorFlow (or anything that allocates much) is
  imported. The command line, interpreter flags included, stays the same.
  """
  environ = tcmalloc_environ()
  if environ is not None:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
      os.execve(sys.executable, [sys.executable] + sys.orig_argv[1:], environ)
    except OSError as exc:
      # The interpreter cannot be executed again by this process (a noexec mount,
      # another user's file without the x bit for us): the command goes on as it is.
      print(f'note: not restarted under tcmalloc ({exc.strerror or exc}: {sys.executable}); '
            f'going on with the system allocator, slower at large batches ({SWITCH}=system '
            'skips the restart)', file=sys.stderr, flush=True)
