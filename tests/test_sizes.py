"""The size goals of the code outside tests/, as a warning: no file over 500 lines, no function over 70.

A function counts from its first decorator to its last line, docstring included.
A size is a smell detector, not a rule to trim to: a file or function over its
limit is named in pytest's warnings summary (``SizeWarning``), and the cure is
a split by meaning (a module per concern, a function by naming its steps),
never shorter docstrings. The counting itself is tested.
"""

import ast
import os
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 70
SKIPPED_DIRS = {'tests', '.venv', '.git', '__pycache__'}


class SizeWarning(UserWarning):
  """A file or function over its size goal."""


def python_files(root=ROOT):
  """Relative paths of the project's Python files, tests and the virtualenv aside."""
  for directory, dirs, files in os.walk(root):
    dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith('.'))
    for name in sorted(files):
      if name.endswith('.py'):
        yield os.path.relpath(os.path.join(directory, name), root)


def oversized(source, path):
  """``[(what, lines)]`` of ``source`` over a limit: the file itself, then its functions."""
  found = []
  lines = len(source.splitlines())
  if lines > MAX_FILE_LINES:
    found.append((path, lines))
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      first = min([node.lineno] + [d.lineno for d in node.decorator_list])
      length = node.end_lineno - first + 1
      if length > MAX_FUNCTION_LINES:
        found.append((f'{path}:{node.name}', length))
  return found


def test_files_and_functions_over_their_limit_are_named_as_warnings():
  over = []
  for path in python_files():
    with open(os.path.join(ROOT, path), encoding='utf-8') as f:
      over += oversized(f.read(), path.replace(os.sep, '/'))
  for what, lines in over:
    limit = MAX_FUNCTION_LINES if ':' in what else MAX_FILE_LINES
    warnings.warn(f'{what}: {lines} lines, over the goal of {limit}; split it by meaning',
                  SizeWarning)
  # The walk read the project: its largest packages are there.
  assert {'run.py', 'optimizers/pipeline.py', 'framework/run/trainer.py'} <= set(
      p.replace(os.sep, '/') for p in python_files())


def test_the_count_includes_decorators_and_docstrings():
  body = '\n'.join(['  x = 1'] * 66)
  source = f'@decorator\ndef f():\n  """Doc."""\n{body}\n  return x\n'  # 70 lines
  assert not oversized(source, 'a.py')
  assert oversized('@decorator\n' + source, 'a.py') == [('a.py:f', 71)]
  assert oversized('\n' * 501, 'b.py') == [('b.py', 501)]
