"""The trainer's house: every attribute of its classes is created in ``__init__``.

An attribute first assigned in another method exists only after that method
ran, and the code then probes it with getattr/hasattr; these classes create
all of theirs in ``__init__`` (None until set).
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = ('trainer', 'train_loop', 'run_outputs', 'divergence', 'evaluation', 'checkpoints',
           'summaries', 'stopping')


def self_attributes(function):
  """The attributes ``function`` assigns on ``self``."""
  names = set()
  for node in ast.walk(function):
    targets = []
    if isinstance(node, ast.Assign):
      targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
      targets = [node.target]
    for target in targets:
      for item in ast.walk(target):
        if (isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name)
            and item.value.id == 'self'):
          names.add(item.attr)
  return names


def probes(tree):
  """Calls of getattr/hasattr on ``self``."""
  return [f'line {node.lineno}: {node.func.id}(self, ...)' for node in ast.walk(tree)
          if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id in ('getattr', 'hasattr') and node.args
          and isinstance(node.args[0], ast.Name) and node.args[0].id == 'self']


@pytest.mark.parametrize('module', MODULES)
def test_attributes_are_created_in_init_and_never_probed(module):
  path = os.path.join(ROOT, 'framework', 'run', f'{module}.py')
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  late = []
  for cls in [node for node in tree.body if isinstance(node, ast.ClassDef)]:
    methods = [node for node in cls.body if isinstance(node, ast.FunctionDef)]
    created = set().union(*[self_attributes(m) for m in methods if m.name == '__init__'])
    for method in methods:
      if method.name != '__init__':
        late += [f'{cls.name}.{name} (first in {method.name})'
                 for name in sorted(self_attributes(method) - created)]
  assert not late, f'{module}.py: attributes created outside __init__: {late}'
  assert not probes(tree), f'{module}.py: {probes(tree)}'


def test_the_check_finds_a_late_attribute():
  tree = ast.parse('class A:\n  def __init__(self):\n    self.a = None\n'
                   '  def later(self):\n    self.a, self.b = 1, 2\n    return hasattr(self, "c")\n')
  init, later = tree.body[0].body
  assert self_attributes(init) == {'a'}
  assert self_attributes(later) == {'a', 'b'}
  assert probes(tree) == ['line 6: hasattr(self, ...)']
