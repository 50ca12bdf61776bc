"""Package attributes that are imported on first access (PEP 562).

``optimizers``, ``models`` and ``data`` export classes and functions that need
TensorFlow, yet the config layer imports these packages for their registries
before TensorFlow is loaded. A package therefore names its exports as
``"module:attribute"`` and loads each one the first time it is read, so
``from optimizers import LARSOptimizer`` works and ``import optimizers``
costs nothing.
"""

from core.registry import load_attribute


def lazy_exports(package, exports, namespace):
  """Returns the ``__getattr__`` and ``__dir__`` of a package with lazy exports.

  Args:
    package: the package's ``__name__``, for the AttributeError message.
    exports: public name -> ``"module:attribute"``.
    namespace: the package's ``globals()``; a loaded export is stored there,
      so later reads do not come back to ``__getattr__``.

  Returns:
    ``(__getattr__, __dir__)`` to assign at module level.
  """

  def __getattr__(name):  # pylint: disable=invalid-name
    target = exports.get(name)
    if target is None:
      raise AttributeError(f'module {package!r} has no attribute {name!r}')
    value = load_attribute(target)
    namespace[name] = value
    return value

  def __dir__():  # pylint: disable=invalid-name
    return sorted(set(namespace) | set(exports))

  return __getattr__, __dir__
