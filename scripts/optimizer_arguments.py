"""Writes optimizers/optimizer_arguments.py: each registered optimizer's keyword arguments, read from its class.

  .venv/bin/python scripts/optimizer_arguments.py           # rewrite the file
  .venv/bin/python scripts/optimizer_arguments.py --check   # exit 1 when it is stale

The config layer checks the names of ``optimizer_params`` before TensorFlow is
loaded, so the registry (optimizers/registry.py) needs each optimizer's
arguments without importing it. They are read here from the classes
themselves, Keras' own and the package's, with the Keras version they hold
for; the registry uses them under that version only. The suite regenerates the
file and compares (tests/optimizers/test_declared_arguments.py), so a Keras
upgrade or a changed signature shows as a stale file, not as a wrong list.
"""

import argparse
import importlib.metadata
import os
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from core import files  # noqa: E402  pylint: disable=wrong-import-position
from core.registry import load_attribute  # noqa: E402  pylint: disable=wrong-import-position

PATH = os.path.join('optimizers', 'optimizer_arguments.py')
COMMAND = '.venv/bin/python scripts/optimizer_arguments.py'

HEADER = '''"""Each registered optimizer's keyword arguments, as its class declares them (a generated file).

Written by scripts/optimizer_arguments.py from the classes under Keras
{version}; do not edit. optimizers/registry.py declares them to the config
layer, which checks ``optimizer_params`` before TensorFlow is loaded.
"""

KERAS_VERSION = {version!r}

# optimizer: (class name, keyword arguments in signature order, required ones)
ARGUMENTS = {{
'''


def render():
  """The file's text, from the classes the registry names (imports Keras and TensorFlow)."""
  from framework.config.argument_checks import _keyword_arguments  # pylint: disable=import-outside-toplevel
  from optimizers import registry  # pylint: disable=import-outside-toplevel
  lines = [HEADER.format(version=importlib.metadata.version('keras'))]
  for name, target in registry.OPTIMIZER_TARGETS:
    cls = load_attribute(target)
    names, required, accepts_any = _keyword_arguments(cls)
    if accepts_any:
      raise ValueError(f'{target}: takes any keyword; its arguments cannot be declared')
    lines.append(f'    {name!r}: ({cls.__name__!r},\n'
                 f'{_wrapped(names)},\n'
                 f'{_wrapped(required)}),\n')
  lines.append('}\n')
  return ''.join(lines)


def _wrapped(names):
  """A tuple of names as Python source, in lines of at most 100 characters."""
  if not names:
    return '        ()'
  body = textwrap.fill(', '.join(repr(n) for n in names) + ',', width=100,
                       initial_indent='        (', subsequent_indent='         ',
                       break_long_words=False, break_on_hyphens=False)
  return body + ')'


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--check', action='store_true',
                      help='only say whether the file is up to date (exit 1 when it is not)')
  args = parser.parse_args(argv)
  path = os.path.join(ROOT, PATH)
  text = render()
  with open(path, encoding='utf-8') as f:
    current = f.read()
  if current == text:
    print(f'{PATH} is up to date')
    return 0
  if args.check:
    print(f'{PATH} is out of date: run {COMMAND}', file=sys.stderr)
    return 1
  files.write_text_atomically(path, text)
  print(f'wrote {PATH}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
