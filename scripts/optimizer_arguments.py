"""Writes optimizers/optimizer_arguments.json: each registered optimizer's keyword arguments, read from its class.

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
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from core import files  # noqa: E402  pylint: disable=wrong-import-position
from core.registry import load_attribute  # noqa: E402  pylint: disable=wrong-import-position

PATH = os.path.join('optimizers', 'optimizer_arguments.json')
COMMAND = '.venv/bin/python scripts/optimizer_arguments.py'

ABOUT = ("Each registered optimizer's keyword arguments, as its class declares them: written by "
         'scripts/optimizer_arguments.py from the classes under the Keras version below; do not '
         'edit. optimizers/registry.py declares them to the config layer, which checks '
         'optimizer_params before TensorFlow is loaded.')


def render():
  """The file's text, from the classes the registry names (imports Keras and TensorFlow)."""
  from framework.config.argument_checks import _keyword_arguments  # pylint: disable=import-outside-toplevel
  from optimizers import registry  # pylint: disable=import-outside-toplevel
  arguments = {}
  for name, target in registry.OPTIMIZER_TARGETS:
    cls = load_attribute(target)
    names, required, accepts_any = _keyword_arguments(cls)
    if accepts_any:
      raise ValueError(f'{target}: takes any keyword; its arguments cannot be declared')
    arguments[name] = {'class': cls.__name__, 'names': list(names), 'required': list(required)}
  data = {'about': ABOUT, 'keras_version': importlib.metadata.version('keras'),
          'arguments': arguments}
  return json.dumps(data, indent=1) + '\n'


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--check', action='store_true',
                      help='only say whether the file is up to date (exit 1 when it is not)')
  args = parser.parse_args(argv)
  path = os.path.join(ROOT, PATH)
  text = render()
  current = None
  if os.path.exists(path):
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
