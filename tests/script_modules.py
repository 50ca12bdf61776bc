"""The files of scripts/ loaded as modules for tests.

scripts/ is not a package: each file is loaded from its path, as
``<name>_under_test``, so that no other module named ``scripts`` can shadow it.
"""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(name):
  """The module of ``scripts/<name>.py``, loaded afresh."""
  spec = importlib.util.spec_from_file_location(f'{name}_under_test',
                                                os.path.join(ROOT, 'scripts', f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
