"""Every module is imported by the path of its file, and the paths users are promised import.

No import hook and no lazy package attribute stands for a module path that
names no file, so grep and go-to-definition find whatever a line imports.
The paths users are promised are real modules: OpenSeq2Seq's
``optimizers.optimizers`` and ``optimizers.lr_policies``, the names of
``optimizers.__all__``, and every module path and import line of README.md
and docs/*.md.
"""

import ast
import glob
import importlib
import importlib.util
import os
import re
import sys

import pytest

import optimizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The packages a user imports; the docs name their modules.
LIBRARIES = ('core', 'data', 'framework', 'models', 'optimizers')
SKIPPED_DIRS = {'.git', '.venv', '__pycache__', 'build'}

# Module paths that name no file of the repository. Each reads like a module
# (the code it suggests lives at the path on the right), and none may import.
NO_FILE = {
    **{f'framework.{name}': f'framework.config.{name}' for name in (
        'argument_checks', 'config_file', 'config_resolve', 'schedule',
        'schema')},
    'framework.check_configs': 'framework.sweep.check_configs',
    **{f'framework.{name}': f'framework.run.{name}' for name in (
        'checkpoints', 'divergence', 'evaluation', 'launch', 'resume',
        'run_outputs', 'rundir', 'stopping', 'summaries', 'train_loop', 'trainer', 'warm_start')},
    **{f'framework.{name}': f'framework.engines.{name}' for name in (
        'console', 'distributed', 'hardware', 'horovod_launcher', 'local_cluster',
        'start_watch', 'tf_import')},
    'framework.export': 'framework.tasks.export',
    'framework.precise_bn': 'framework.tasks.image_precise_bn',
    'optimizers.dispatch': 'optimizers.backend',
    'optimizers.fused': 'optimizers.backend',
    'optimizers.keras_adapter': 'optimizers.backend',
    'optimizers.tf1_compat': 'optimizers.backend',
    'optimizers.momentum': 'optimizers.lars',
    'optimizers.muon': 'optimizers.catalog',
    'optimizers.loss_scale_optimizer': 'optimizers.compat.loss_scale_optimizer',
    'optimizers.mp_wrapper': 'optimizers.compat.loss_scale_optimizer',
    'optimizers.openseq2seq': 'optimizers.compat.openseq2seq',
}
# ``framework.config`` is a package of modules; these names are each one of its modules'.
CONFIG_MODULE_NAMES = {
    **{name: 'validation' for name in (
        'SUMMARY_NAMES', 'TRAINER_SUMMARIES', 'check_jit_compile', 'check_with_owners',
        'default_registries', 'load_configs', 'scale_learning_rates', 'scaled_learning_rate',
        'validate')},
    **{name: 'config_file' for name in (
        'MODES', 'format_error', 'load_config_file', 'run_config', 'run_config_yaml', 'to_yaml',
        'write_config', 'write_run_config')},
    **{name: 'config_resolve' for name in ('durations_given', 'resolve', 'resolve_modes')},
    'epochs_to_steps': 'schedule',
}


def module_file(dotted, root=ROOT):
  """The file (or namespace directory) of a module path in the repository, or None."""
  path = os.path.join(root, *dotted.split('.'))
  for candidate in (path + '.py', os.path.join(path, '__init__.py')):
    if os.path.isfile(candidate):
      return candidate
  return path if os.path.isdir(path) else None


def repository_files(root=ROOT):
  """Relative paths of every Python file of the repository (the environment aside)."""
  for directory, dirs, names in os.walk(root):
    dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith('.'))
    for name in sorted(names):
      if name.endswith('.py'):
        yield os.path.relpath(os.path.join(directory, name), root)


def top_level_names(root=ROOT):
  """The repository's top-level module names (packages, namespace directories, run.py)."""
  return {name[:-3] if name.endswith('.py') else name for name in os.listdir(root)
          if not name.startswith('.') and (name.endswith('.py') or module_file(name, root))
          and name not in SKIPPED_DIRS}


def unresolved_imports(relative_path, source, tops, root=ROOT):
  """``file:line: module`` of each import of a repository module that names no file.

  ``from package import name`` passes when ``name`` is a module file of the
  package or one of its attributes (a package's lazy exports are listed by
  its ``__dir__``).
  """
  problems = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      modules = [(alias.name, None) for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
      modules = [(node.module, alias.name) for alias in node.names]
    else:
      continue
    for module, name in modules:
      if module.split('.')[0] not in tops:
        continue
      if module_file(module, root) is None:
        problems.append(f'{relative_path}:{node.lineno}: {module}')
      elif name is not None and name != '*' and module_file(f'{module}.{name}', root) is None:
        package = module_file(module, root)
        if package.endswith('__init__.py') and name not in dir(importlib.import_module(module)):
          problems.append(f'{relative_path}:{node.lineno}: {module}.{name}')
  return problems


def test_every_import_in_the_repository_names_a_module_file():
  tops = top_level_names()
  problems = []
  for relative_path in repository_files():
    with open(os.path.join(ROOT, relative_path), encoding='utf-8') as f:
      problems += unresolved_imports(relative_path, f.read(), tops)
  assert not problems, 'imports of paths that name no file:\n' + '\n'.join(problems)


def test_the_check_finds_an_import_of_a_path_with_no_file(tmp_path):
  (tmp_path / 'pkg').mkdir()
  (tmp_path / 'pkg' / '__init__.py').write_text('')
  (tmp_path / 'pkg' / 'real.py').write_text('')
  source = 'import pkg.real\nimport pkg.gone\nfrom pkg.gone import x\nfrom pkg import real\n'
  assert unresolved_imports('x.py', source, {'pkg'}, str(tmp_path)) == [
      'x.py:2: pkg.gone', 'x.py:3: pkg.gone']


@pytest.mark.parametrize('path, home', sorted(NO_FILE.items()))
def test_a_path_that_names_no_file_does_not_import(path, home):
  assert module_file(path) is None and module_file(home) is not None
  with pytest.raises(ModuleNotFoundError):
    importlib.import_module(path)


def test_no_import_hook_of_the_repository_is_installed():
  importlib.import_module('framework')
  importlib.import_module('framework.config')
  tops = top_level_names()
  hooks = [finder for finder in sys.meta_path + sys.path_hooks
           if getattr(finder, '__module__', '').split('.')[0] in tops]
  assert not hooks


def test_framework_config_is_a_package_of_modules_with_no_names_of_its_own():
  config = importlib.import_module('framework.config')
  assert not hasattr(config, '__getattr__')
  for name, module in sorted(CONFIG_MODULE_NAMES.items()):
    assert not hasattr(config, name), name
    assert hasattr(importlib.import_module(f'framework.config.{module}'), name), name


def test_openseq2seqs_module_paths_are_files():
  # OpenSeq2Seq's open_seq2seq.optimizers.optimizers and .lr_policies, with the package prefix changed.
  for path in ('optimizers.optimizers', 'optimizers.lr_policies'):
    module = importlib.import_module(path)
    assert module.__spec__.name == path
    assert module.__file__ == os.path.join(ROOT, *path.split('.')) + '.py'
  # pylint: disable=import-outside-toplevel
  from optimizers.lr_policies import poly_decay
  from optimizers.optimizers import optimize_loss
  assert optimize_loss is optimizers.optimize_loss and callable(poly_decay)


@pytest.mark.parametrize('name', optimizers.__all__)
def test_every_name_of_optimizers_all_is_read_from_a_module_file(name):
  module = getattr(getattr(optimizers, name), '__module__', None)
  assert module is None or module_file(module) is not None, (name, module)


# A dotted path of the libraries in the docs' text, not part of a longer name
# (``keras.optimizers.SGD``, ``docs/optimizers.md``).
DOTTED = re.compile(r'(?<![\w./\-])((?:%s)(?:\.[A-Za-z_]\w*)+)' % '|'.join(LIBRARIES))
FROM_IMPORT = re.compile(r'\bfrom ((?:%s)(?:\.\w+)*) import (\w+(?:, \w+)*)' % '|'.join(LIBRARIES))
FILE_SUFFIXES = ('.md', '.py', '.yaml', '.png', '.json')


def documented_paths(root=ROOT):
  """``{dotted path: page}`` of every library path README.md and docs/*.md name."""
  found = {}
  for page in [os.path.join(root, 'README.md')] + sorted(glob.glob(os.path.join(root, 'docs', '*.md'))):
    with open(page, encoding='utf-8') as f:
      text = f.read()
    name = os.path.relpath(page, root)
    for match in DOTTED.finditer(text):
      if not match.group(1).endswith(FILE_SUFFIXES):
        found.setdefault(match.group(1), name)
    for module, names in FROM_IMPORT.findall(text):
      for imported in names.split(', '):
        found.setdefault(f'{module}.{imported}', name)
  return found


def resolve(dotted):
  """The object a documented path names: its longest module prefix with a file, then attributes."""
  parts = dotted.split('.')
  for end in range(len(parts), 0, -1):
    module = '.'.join(parts[:end])
    if module_file(module) is not None:
      value = importlib.import_module(module)
      for attribute in parts[end:]:
        value = getattr(value, attribute)
      return value
  raise ModuleNotFoundError(dotted)


def test_the_docs_name_some_library_paths():
  paths = documented_paths()
  assert {'optimizers.optimizers.optimize_loss', 'optimizers.lr_policies.poly_decay',
          'core.params.Param'} <= set(paths)


def test_every_library_path_the_docs_name_is_a_module_file_or_its_attribute():
  failures = []
  for path, page in sorted(documented_paths().items()):
    try:
      resolve(path)
    except (ImportError, AttributeError) as exc:
      failures.append(f'{page}: {path}: {exc}')
  assert not failures, '\n'.join(failures)
