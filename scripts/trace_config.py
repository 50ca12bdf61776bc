"""How one config's loading wanders: project files entered and returns to files already left.

Loads configs the way run.py does (``load_configs(path, 'train', [],
construct=False)``: the checks a config makes by itself, no TensorFlow) under
``sys.setprofile``, which sees every Python call and return. Each config is
loaded once untraced first, so that what is counted is the loading, not the
one-off imports of the registries' modules and lazy entries.

Only the frames of the project's packages (``PACKAGES``) are followed; frames
of the standard library, PyYAML or site-packages neither count nor break a
stay. A *call* from file A into file B is a call at which the innermost
running project frame changes from A to B. It is a **return to a module
already left** when B was entered earlier during this load and is not on the
stack at the call (the stack went back out of it): a file called again for a
second piece of work after it had handed its result back. Each such call is
counted once per call site (A's file and line, and B), so a loop over a
config's keys is one return, not one per key. A call back into a file still
on the stack (a check function a caller handed down) is not a return, and
neither is a call into a *leaf*: a file that, during the load, calls no
project file that is not already on the stack (``core/registry.py``'s
lookups, ``schedule.py``'s arithmetic): going down into a leaf and back is
reading a helper, not going back up the chain. A load that goes in one
direction, each step calling only the next or such leaves, has few returns.

Counted so, the main job's config goes back 3 times (14 files): to
``config_resolve`` for the mode's durations and again for its names
(``config_resolve.resolve_names``, once, before the checks, which read what
the names declare and never ask the registries again), and to the task's
keys. A load that asked the registries at each check went back 23 times.

Usage::

  python scripts/trace_config.py            # prints the files, the returns and the counts
  python scripts/trace_config.py --check    # exits 1 when the main job's config is over the limits

tests/framework/config/test_config_trace.py runs ``measure`` and holds the
limits.
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
from scripts.trace_update import project_file  # noqa: E402  pylint: disable=wrong-import-position

# The configs traced: the main job's first (the one the limits hold), then the
# ResNet-50 config as a Python file and as YAML.
MAIN_CONFIG = 'configs/fashion_mnist_lars.py'
CONFIGS = (MAIN_CONFIG, 'configs/resnet50_lars.py', 'configs/resnet50_lars.yaml')
# The limits the main job's load is held to (before the load went in one
# direction it entered 17 files with 23 returns to files already left).
MAX_FILES = 17
MAX_RETURNS = 10
# Only the project's own code is followed: tests and scripts are the caller.
PACKAGES = ('framework', 'core', 'data', 'models', 'optimizers')


def measure(path=MAIN_CONFIG):
  """Traces one load of ``path``; returns (files in order of first entry, returns).

  Each return is ``(caller's file and line, callee's file)``, once per call site.
  """
  from framework.config.validation import load_configs  # pylint: disable=import-outside-toplevel
  cwd = os.getcwd()
  os.chdir(ROOT)  # run.py's configs are named relative to the checkout
  try:
    load_configs(path, 'train', [], construct=False)  # imports what the load imports
    files, calls = [], []
    stack = []  # (project file or None, frame) of each frame on the profiled stack
    callers = set()  # files that called a project file not on the stack: not leaves

    def current():
      for name, frame in reversed(stack):
        if name is not None:
          return name, frame
      return None, None

    def profile(frame, event, arg):
      del arg
      if event not in ('call', 'return'):
        return
      before, caller = current()
      if event == 'call':
        callee = project_file(frame.f_code.co_filename, PACKAGES)
        if before is not None and callee is not None and callee != before:
          running = {name for name, _ in stack}
          if callee not in running:
            callers.add(before)
            if callee in files:
              calls.append((f'{before}:{caller.f_lineno}', callee))
        stack.append((callee, frame))
      elif stack:
        stack.pop()
      after, _ = current()
      if after is not None and after not in files:
        files.append(after)

    sys.setprofile(profile)
    try:
      load_configs(path, 'train', [], construct=False)
    finally:
      sys.setprofile(None)
  finally:
    os.chdir(cwd)
  returns = list(dict.fromkeys(call for call in calls if call[1] in callers))
  return files, returns


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--check', action='store_true',
                      help=f'exit 1 when {MAIN_CONFIG} is over the limits')
  parser.add_argument('configs', nargs='*', default=list(CONFIGS), help='the configs to trace')
  args = parser.parse_args(argv)
  status = 0
  for path in args.configs:
    files, returns = measure(path)
    print(f'== {path}')
    for name in files:
      print(f'  {name}')
    for caller, callee in returns:
      print(f'  return: {caller} -> {callee}')
    print(f'{path}: {len(files)} project files, {len(returns)} returns to files already left '
          f'(limits {MAX_FILES} and {MAX_RETURNS} for {MAIN_CONFIG})')
    if path == MAIN_CONFIG and (len(files) > MAX_FILES or len(returns) > MAX_RETURNS):
      status = 1
  return status if args.check else 0


if __name__ == '__main__':
  sys.exit(main())
