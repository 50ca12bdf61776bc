"""The layers import one way: run.py -> framework -> optimizers, models, data -> core.

The test parses every module (``ast``, nothing is imported), takes each import
statement, including those inside functions, maps the imported module to its
layer and fails listing every edge the rules forbid, as ``file:line: from ->
to``. docs/architecture.md gives the rules and their reasons.
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The layers whose modules are checked: a package directory, or run.py.
LAYERS = ('run', 'framework', 'optimizers', 'models', 'data', 'core', 'scripts', 'studies')

# Which repository layers each layer may import (its own always).
ALLOWED = {
    'run': {'framework', 'optimizers', 'models', 'data', 'core'},
    'framework': {'optimizers', 'models', 'data', 'core'},
    'optimizers': {'core'},
    'models': {'core'},
    'data': {'core'},
    'core': set(),
    'scripts': {'framework', 'optimizers', 'models', 'data', 'core'},
    'studies': {'framework', 'optimizers', 'models', 'data', 'core'},
}

# Third-party packages a layer must not import: the ground stays TensorFlow-free
# so that config errors answer before TensorFlow is loaded.
FORBIDDEN_EXTERNAL = {
    'core': {'tensorflow', 'keras', 'horovod'},
}

# Edges that exist today and are being removed by work in progress; each entry
# is (file, imported module). The list is emptied once that work is merged, and
# must stay empty from then on.
KNOWN_EDGES = frozenset()


def repository_names(root=ROOT):
  """The top-level module names of the repository (packages and root-level modules)."""
  names = set()
  for entry in os.listdir(root):
    path = os.path.join(root, entry)
    if entry.endswith('.py'):
      names.add(entry[:-3])
    elif os.path.isdir(path) and not entry.startswith('.') and any(
        name.endswith('.py') for name in os.listdir(path)):
      names.add(entry)
  return names


def layer_of(relative_path):
  """The layer of a file given relative to the root ('run' for run.py), or None."""
  parts = relative_path.replace(os.sep, '/').split('/')
  if len(parts) == 1:
    return parts[0][:-3] if parts[0].endswith('.py') else None
  return parts[0]


def imported_modules(source, package):
  """Yields (line, absolute module name) for every import statement in ``source``.

  ``from a import b`` yields ``a``: the rules speak of top-level names, and
  ``b`` lives in ``a``. Relative imports are resolved against ``package``, the
  dotted package of the file.
  """
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = package.split('.')[:len(package.split('.')) - node.level + 1]
        module = '.'.join(base + ([node.module] if node.module else []))
      else:
        module = node.module
      yield node.lineno, module


def forbidden_edges(relative_path, source, repo_names):
  """The forbidden imports of one file, as ``file:line: layer -> module`` strings."""
  layer = layer_of(relative_path)
  package = os.path.dirname(relative_path).replace(os.sep, '.') or layer
  allowed = ALLOWED[layer] | {layer}
  external = FORBIDDEN_EXTERNAL.get(layer, set())
  problems = []
  for line, module in imported_modules(source, package):
    top = module.split('.')[0]
    if top in repo_names:
      bad = top not in allowed
    else:
      bad = top in external
    if bad:
      problems.append((f'{relative_path}:{line}: {layer} -> {module}', (relative_path, top)))
  return problems


def layer_files(root=ROOT):
  """Every .py file of the checked layers, relative to ``root``."""
  files = []
  for layer in LAYERS:
    if layer == 'run':
      files.append('run.py')
      continue
    for directory, subdirectories, names in os.walk(os.path.join(root, layer)):
      subdirectories[:] = sorted(d for d in subdirectories if not d.startswith(('.', '__')))
      files += [os.path.relpath(os.path.join(directory, n), root)
                for n in sorted(names) if n.endswith('.py')]
  return files


def layer_sources(root=ROOT, layer=None):
  """Yields (relative path, source) of every checked file, or of ``layer``'s alone."""
  for relative_path in layer_files(root):
    if layer is None or layer_of(relative_path) == layer:
      with open(os.path.join(root, relative_path), encoding='utf-8') as f:
        yield relative_path, f.read()


def all_forbidden_edges(root=ROOT):
  repo_names = repository_names(root)
  problems = []
  for relative_path, source in layer_sources(root):
    problems += forbidden_edges(relative_path, source, repo_names)
  return problems


def test_the_layers_import_one_way():
  problems = all_forbidden_edges()
  unexpected = [text for text, edge in problems if edge not in KNOWN_EDGES]
  assert not unexpected, 'forbidden imports:\n' + '\n'.join(unexpected)


def test_every_known_edge_still_exists():
  # An edge removed from the code must leave the list too, so the list only shrinks.
  present = {edge for _, edge in all_forbidden_edges()}
  assert sorted(KNOWN_EDGES - present) == []


def test_every_layer_holds_modules():
  files = layer_files()
  for layer in LAYERS:
    assert any(layer_of(f) == layer for f in files), layer


SYNTHETIC = '''
import os
import tensorflow as tf
from core.registry import Registry
from optimizers import stages


def build():
  from framework import distributed
  import run
  from . import sibling
  return distributed
'''


@pytest.mark.parametrize('path, expected', [
    ('optimizers/x.py', ['optimizers/x.py:9: optimizers -> framework',
                         'optimizers/x.py:10: optimizers -> run']),
    ('core/x.py', ['core/x.py:3: core -> tensorflow', 'core/x.py:5: core -> optimizers',
                   'core/x.py:9: core -> framework', 'core/x.py:10: core -> run']),
    ('models/x.py', ['models/x.py:5: models -> optimizers', 'models/x.py:9: models -> framework',
                     'models/x.py:10: models -> run']),
    ('scripts/x.py', ['scripts/x.py:10: scripts -> run']),
    ('studies/x.py', ['studies/x.py:10: studies -> run']),
    ('framework/x.py', ['framework/x.py:10: framework -> run']),
    ('run.py', []),
])
def test_the_checker_finds_forbidden_edges_at_module_level_and_in_functions(path, expected):
  repo_names = {'run', 'framework', 'optimizers', 'models', 'data', 'core', 'scripts', 'studies'}
  found = [text for text, _ in forbidden_edges(path, SYNTHETIC, repo_names)]
  assert found == expected


def test_relative_imports_resolve_against_the_package():
  source = 'from .. import framework\nfrom . import stages\nfrom .sub import thing\n'
  assert list(imported_modules(source, 'optimizers.inner')) == [
      (1, 'optimizers'), (2, 'optimizers.inner'), (3, 'optimizers.inner.sub')]
  found = [text for text, _ in forbidden_edges('data/x.py', 'from ..framework import config\n',
                                               {'data', 'framework'})]
  assert found == ['data/x.py:1: data -> framework']


# Inside framework/, the rooms in order, top first: each imports only the rooms
# after it (and core and the libraries), never one before it. docs/architecture.md
# draws them.
FRAMEWORK_ROOMS = ('sweep', 'run', 'config', 'tasks', 'engines')


def room_of(module):
  """The room of a dotted ``framework.<room>...`` module name, or None outside the rooms."""
  parts = module.split('.')
  if parts[0] != 'framework' or len(parts) < 2 or parts[1] not in FRAMEWORK_ROOMS:
    return None
  return parts[1]


def upward_room_edges(relative_path, source):
  """The imports of one framework file that point at its own room's superiors, as strings."""
  package = os.path.dirname(relative_path).replace(os.sep, '.')
  own = room_of(package)
  if own is None:
    return []
  below = set(FRAMEWORK_ROOMS[FRAMEWORK_ROOMS.index(own) + 1:]) | {own}
  problems = []
  for line, module in imported_modules(source, package):
    target = room_of(module)
    if module.split('.')[0] == 'framework' and target is None and module != 'framework':
      problems.append(f'{relative_path}:{line}: {own} -> {module} (a module outside the rooms)')
    elif target is not None and target not in below:
      problems.append(f'{relative_path}:{line}: {own} -> {module}')
  return problems


def test_the_framework_rooms_import_one_way():
  problems = []
  for relative_path, source in layer_sources(layer='framework'):
    problems += upward_room_edges(relative_path, source)
  assert not problems, 'imports up the framework rooms:\n' + '\n'.join(problems)


def test_every_framework_module_is_in_a_room():
  top = [f for f in layer_files()
         if layer_of(f) == 'framework' and f.replace(os.sep, '/').count('/') == 1]
  outside = [f for f in top if f != os.path.join('framework', '__init__.py')]
  assert outside == []
  for room in FRAMEWORK_ROOMS:
    assert os.path.isfile(os.path.join(ROOT, 'framework', room, '__init__.py')), room


ROOM_SYNTHETIC = '''
from framework.config.schema import SCHEMA
from framework.engines import distributed


def build():
  from framework.run import rundir
  return rundir
'''


@pytest.mark.parametrize('path, expected', [
    ('framework/engines/x.py', ['framework/engines/x.py:2: engines -> framework.config.schema',
                                'framework/engines/x.py:7: engines -> framework.run']),
    ('framework/config/x.py', ['framework/config/x.py:7: config -> framework.run']),
    ('framework/run/x.py', []),
    ('framework/sweep/x.py', []),
])
def test_the_room_checker_finds_imports_up(path, expected):
  assert upward_room_edges(path, ROOM_SYNTHETIC) == expected
