"""Old import paths of moved modules, answered with the modules themselves.

A package whose modules moved keeps a table ``{old path: new path}`` and
hands it to :func:`redirect`. An import of an old path then gives the very
module object of the new one (not a copy, not a wrapper), so code and
monkeypatches written against the old path act on the module the package
uses, and ``python -m <old path>`` runs the module at the new one. No TensorFlow: the target is imported only when an old path is.
"""

import importlib
import importlib.abc
import importlib.util
import sys


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Answers an import of a moved module's old path with the module at its new path.

  Args:
    moved: ``{old dotted path: new dotted path}``; read at each import, so
      the package may keep adding to it.
  """

  def __init__(self, moved):
    self.moved = moved

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname not in self.moved:
      return None
    # The new file as the origin: python -m <old path> sets sys.argv[0] from it.
    found = importlib.util.find_spec(self.moved[fullname])
    return importlib.util.spec_from_loader(fullname, self, origin=found and found.origin)

  def create_module(self, spec):
    module = importlib.import_module(self.moved[spec.name])
    spec.loader_state = module.__spec__
    return module

  def exec_module(self, module):
    # The import machinery stamped the old path's spec on the module; give it back its own.
    module.__spec__ = module.__spec__.loader_state

  def get_code(self, fullname):
    """The code of the module at the new path, for ``python -m <old path>`` (``runpy``)."""
    new = self.moved[fullname]
    return importlib.util.find_spec(new).loader.get_code(new)


def redirect(moved):
  """Installs the finder of the table ``moved`` once (a reloaded package adds no second one)."""
  if not any(isinstance(f, MovedModuleFinder) and f.moved == moved for f in sys.meta_path):
    # Last on the path: a module that exists where the old path points is found first.
    sys.meta_path.append(MovedModuleFinder(moved))
