"""The points of a sweep: grid values, values derived from them, seeds.

A grid maps config key paths to lists of values, from ``--grid
key.path=v1,v2`` or a grid file; a point is one element of its cartesian
product (times the seeds), with the values derived from it by arithmetic
(:class:`Derivation`), e.g. the linear scaling rule::

  key, values = parse_grid_argument('batch_size_per_gpu=256,1024')
  derive = parse_derive_argument('lr_policy_params.learning_rate=0.1*batch_size_per_gpu/256')
  points = make_points({key: values}, [derive], seeds=[0, 1])
  points[0].overrides  # ['batch_size_per_gpu=256', 'lr_policy_params.learning_rate=0.1',
                       #  'random_seed=0']

Values are read as run.py's ``--set`` reads them (YAML, with ``1e-3`` a float).
Keys joined by ``+`` are set together, each value a list of one value per key,
so that a value of one goes with its value of the other instead of every one::

  --grid 'batch_policy+batch_policy_params=[fixed, {}],[noise_scale, {factor: 0.5}]'
"""

import ast
import hashlib
import itertools
import json
import math
import re

import yaml

from framework.config.config_file import load_yaml
from framework.config.config_resolve import override_value


class SweepError(ValueError):
  """A mistake in the sweep's own arguments or grid; nothing has run."""


# Between the keys of one grid key whose values set them together.
JOIN = '+'

# The key paths --seeds sets (a section prefix edits the same key of the train view).
SEED_KEYS = ('random_seed', 'base_params.random_seed', 'train_params.random_seed')



# ---------------------------------------------------------------------------
# Values

def parse_value(text):
  """Reads a grid value given as text, as run.py's ``--set`` reads it."""
  try:
    return override_value(text)  # a SafeLoader; punctuation alone is a string
  except yaml.YAMLError:
    return text.strip()


def value_text(value):
  """The ``--set`` spelling of a value read from a grid file or computed."""
  if isinstance(value, float):
    if math.isnan(value):
      return '.nan'
    if math.isinf(value):
      return '.inf' if value > 0 else '-.inf'
    return repr(value)
  text = yaml.safe_dump(value, default_flow_style=True, width=float('inf')).strip()
  if text.endswith('\n...'):
    text = text[:-4].strip()
  elif text.endswith('...'):
    text = text[:-3].strip()
  if isinstance(value, str) and parse_value(text) != value:
    # A string run.py would read as something else ('1e-3', 'null'): quote it.
    text = json.dumps(value)
  return text


def is_number(value):
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def split_top_level(text):
  """Splits ``text`` at the commas that are not inside brackets or quotes.

  ``'Momentum,LARS'`` gives two values and ``'{a: 1, b: 2},[1, 2]'`` two as well.
  """
  parts, depth, quote, start = [], 0, None, 0
  for i, char in enumerate(text):
    if quote:
      if char == quote:
        quote = None
    elif char in '\'"':
      quote = char
    elif char in '[{(':
      depth += 1
    elif char in ']})':
      depth -= 1
    elif char == ',' and depth == 0:
      parts.append(text[start:i])
      start = i + 1
  parts.append(text[start:])
  return [p.strip() for p in parts]


# ---------------------------------------------------------------------------
# Derived values: a small arithmetic evaluator over the point's numbers

_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_UNARY = {ast.UAdd: lambda a: +a, ast.USub: lambda a: -a}
_FUNCTIONS = {'min': min, 'max': max, 'abs': abs, 'round': round, 'int': int, 'float': float,
              'sqrt': math.sqrt, 'log': math.log, 'log2': math.log2, 'exp': math.exp}
# Bounds the exponent so that a typo such as 10**10**10 fails instead of hanging.
_MAX_EXPONENT = 1024


class Derivation:
  """A value computed from each point: ``key.path=expression``.

  Args:
    key: the config key path the value is given to.
    expression: arithmetic on numbers and names (see the module docstring).

  Raises:
    SweepError: when the expression does not parse or uses anything but
      numbers, names, arithmetic and the listed functions.
  """

  def __init__(self, key, expression):
    self.key = key
    self.expression = str(expression).strip()
    try:
      self.tree = ast.parse(self.expression, mode='eval')
    except SyntaxError as exc:
      raise SweepError(f'derived {key}: cannot parse {self.expression!r}: {exc.msg}') from None
    self.names = set()
    self._check(self.tree.body)

  def _check(self, node):
    if isinstance(node, ast.Constant):
      if not is_number(node.value):
        raise self._error(f'only numbers are allowed, got {node.value!r}')
    elif isinstance(node, ast.BinOp):
      if type(node.op) not in _BINARY and not isinstance(node.op, ast.Pow):
        raise self._error(f'operator {type(node.op).__name__} is not allowed')
      self._check(node.left)
      self._check(node.right)
    elif isinstance(node, ast.UnaryOp):
      if type(node.op) not in _UNARY:
        raise self._error(f'operator {type(node.op).__name__} is not allowed')
      self._check(node.operand)
    elif isinstance(node, (ast.Name, ast.Attribute)):
      self.names.add(self._dotted(node))
    elif isinstance(node, ast.Call):
      if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS or node.keywords:
        raise self._error(f'only calls of {", ".join(sorted(_FUNCTIONS))} with positional '
                          'arguments are allowed')
      for arg in node.args:
        self._check(arg)
    else:
      raise self._error(f'{type(node).__name__} is not allowed; use numbers, key paths and '
                        'arithmetic')

  def _dotted(self, node):
    """``a.b.c`` as written, for a key path; anything else in an attribute is refused."""
    parts = []
    while isinstance(node, ast.Attribute):
      parts.append(node.attr)
      node = node.value
    if not isinstance(node, ast.Name):
      raise self._error('attributes are only allowed in key paths (optimizer_params.momentum)')
    parts.append(node.id)
    return '.'.join(reversed(parts))

  def _error(self, message):
    return SweepError(f'derived {self.key}={self.expression}: {message}')

  def evaluate(self, values):
    """Returns the value for one point.

    Args:
      values: ``{name: number or other}`` of the point.

    Raises:
      SweepError: for an unknown or non-numeric name, a division by zero, an
        overflow or a result that is not a finite number.
    """
    for name in sorted(self.names):
      if name not in values:
        known = ', '.join(sorted(values)) or 'none'
        raise self._error(f'unknown name {name!r}; known: {known}')
      if not is_number(values[name]):
        raise self._error(f'{name} is {values[name]!r}, not a number')
    try:
      result = self._evaluate(self.tree.body, values)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
      raise self._error(f'{type(exc).__name__}: {exc}') from None
    if not is_number(result) or not math.isfinite(result):
      raise self._error(f'the result {result!r} is not a finite number')
    return result

  def _evaluate(self, node, values):
    if isinstance(node, ast.Constant):
      return node.value
    if isinstance(node, (ast.Name, ast.Attribute)):
      return values[self._dotted(node)]
    if isinstance(node, ast.UnaryOp):
      return _UNARY[type(node.op)](self._evaluate(node.operand, values))
    if isinstance(node, ast.Call):
      return _FUNCTIONS[node.func.id](*[self._evaluate(a, values) for a in node.args])
    left = self._evaluate(node.left, values)
    right = self._evaluate(node.right, values)
    if isinstance(node.op, ast.Pow):
      if abs(right) > _MAX_EXPONENT:
        raise OverflowError(f'exponent {right} is larger than {_MAX_EXPONENT}')
      return left ** right
    return _BINARY[type(node.op)](left, right)


# ---------------------------------------------------------------------------
# The grid

class Point:
  """One run of the sweep.

  Attributes:
    grid: ``{key: (text, value)}``, the point's grid values in grid order.
    derived: ``{key: value}`` computed from them.
    seed: the ``random_seed`` given to the run, or None to keep the config's.
    name: the run directory's name inside the sweep's output directory.
    overrides: the ``--set`` strings of the point (after the sweep's ``--set``).
  """

  def __init__(self, grid, derived, seed):
    self.grid = grid
    self.derived = derived
    self.seed = seed
    parts = [(key, text) for key, (text, _) in grid.items()]
    if seed is not None:
      parts.append(('seed', str(seed)))
    self.name = _directory_name(parts)
    self.overrides = ([o for key, (text, value) in grid.items() for o in _set(key, text, value)]
                      + [f'{key}={value_text(value)}' for key, value in derived.items()])
    if seed is not None:
      self.overrides.append(f'random_seed={seed}')

  def group(self):
    """The point without its seed: runs of one group differ only by seed."""
    return tuple(text for text, _ in self.grid.values())


def _set(key, text, value):
  """The ``--set`` strings of one grid value: ``key=text``, or one per key of keys joined by ``+``."""
  if JOIN not in key:
    return [f'{key}={text}']
  return [f'{part}={value_text(v)}' for part, v in zip(key.split(JOIN), value)]


def _named_values(key, value):
  """``{key: value}``, or each joined key's own value, as derivations name them."""
  if JOIN not in key:
    return {key: value}
  return {key: value, **dict(zip(key.split(JOIN), value))}


def _directory_name(parts):
  """``key=value__key=value`` from ``[(key, value text)]``, with only portable characters."""
  safe = []
  for key, text in parts:
    clean = lambda t: re.sub(r'[^A-Za-z0-9._+-]+', '_', t).strip('_')
    cleaned = f'{clean(key)}={clean(text)}'
    if cleaned != f'{key}={text}':
      # Two values that clean up to the same text must not share a directory.
      cleaned += '-' + hashlib.sha1(f'{key}={text}'.encode()).hexdigest()[:6]
    safe.append(cleaned)
  name = '__'.join(safe)
  if len(name) > 200:
    name = name[:180] + '-' + hashlib.sha1(name.encode()).hexdigest()[:10]
  return name


def parse_grid_argument(text):
  """``key.path=v1,v2,...`` -> (key, [(text, value), ...])."""
  if '=' not in text:
    raise SweepError(f'--grid {text!r}: expected key.path=value1,value2,...')
  key, values = text.split('=', 1)
  key = key.strip()
  texts = split_top_level(values)
  if not key or not all(texts):
    raise SweepError(f'--grid {text!r}: empty key or value')
  return key, [(t, parse_value(t)) for t in texts]


def parse_derive_argument(text):
  if '=' not in text:
    raise SweepError(f'--derive {text!r}: expected key.path=expression')
  key, expression = text.split('=', 1)
  if not key.strip():
    raise SweepError(f'--derive {text!r}: empty key')
  return Derivation(key.strip(), expression)


def load_grid_file(path):
  """Reads a grid file: ``{key: [values]}`` plus an optional ``derived: {key: expression}``.

  Returns:
    (grid ``{key: [(text, value), ...]}``, list of :class:`Derivation`).
  """
  try:
    with open(path, encoding='utf-8') as f:
      data = load_yaml(f)  # a SafeLoader
  except OSError as exc:
    raise SweepError(f'--grid-file {path}: {exc.strerror}') from None
  except UnicodeDecodeError as exc:
    raise SweepError(f'--grid-file {path}: not UTF-8 text (byte offset {exc.start}); save the '
                     'file as UTF-8') from None
  except yaml.YAMLError as exc:
    raise SweepError(f'--grid-file {path}: {" ".join(str(exc).split())}') from None
  if not isinstance(data, dict):
    raise SweepError(f'--grid-file {path}: expected a mapping of key paths to lists of values')
  derived = data.pop('derived', None) or {}
  if not isinstance(derived, dict):
    raise SweepError(f'--grid-file {path}: derived must map key paths to expressions')
  grid = {}
  for key, values in data.items():
    if not isinstance(values, list) or not values:
      raise SweepError(f'--grid-file {path}: {key} must be a non-empty list of values, '
                       f'got {values!r}')
    grid[str(key)] = [(value_text(v), v) for v in values]
  return grid, [Derivation(str(k), v) for k, v in derived.items()]


def make_points(grid, derivations, seeds):
  """The cartesian product of the grid, times the seeds, in grid order (seeds innermost).

  Args:
    grid: ``{key: [(text, value), ...]}``.
    derivations: list of :class:`Derivation`, evaluated in order.
    seeds: list of ints, or None to keep the config's seed.

  Raises:
    SweepError: for a repeated grid value, a derived key that is also a grid
      key, a seed given both by the grid (or a derived value) and by ``seeds``,
      or a derivation that fails on some point.
  """
  for key, values in grid.items():
    joined = key.split(JOIN)
    for text, value in values if len(joined) > 1 else ():
      if not isinstance(value, list) or len(value) != len(joined):
        raise SweepError(f'grid {key}: value {text} must be a list of {len(joined)} values, one '
                         f'for each of {", ".join(joined)}')
    seen = {}
    for text, value in values:
      # Compared as values: 0.9, 0.90 and 9e-1 are one point, so are 1 and 1.0 (true and 1 are not).
      same = [t for t, v in seen.items()
              if v == value and isinstance(v, bool) == isinstance(value, bool)]
      if same:
        also = '' if same[0] == text else f' (as {same[0]})'
        raise SweepError(f'grid {key}: value {text} is given twice{also}')
      seen[text] = value
  set_keys = [k for key in grid for k in key.split(JOIN)]
  repeated = sorted({k for k in set_keys if set_keys.count(k) > 1})
  if repeated:
    raise SweepError(f'grid: {repeated[0]} is set by two grid keys; give it in one')
  for derivation in derivations:
    if derivation.key in grid or derivation.key in set_keys:
      raise SweepError(f'derived {derivation.key}: is also a grid key')
  derived_keys = [d.key for d in derivations]
  if len(set(derived_keys)) != len(derived_keys):
    raise SweepError('derived: a key is given twice')
  if seeds:
    for key in [k for k in set_keys + derived_keys if k in SEED_KEYS]:
      kind = 'grid' if key in set_keys else 'derived'
      # The seed of --seeds comes last and would win: points differing only in
      # the grid's seed would be the same run under two names.
      raise SweepError(f'{kind} {key} and --seeds both set random_seed, so points would repeat '
                       'one another; give the seeds one way: --seeds alone, or the '
                       f'{kind} key without --seeds')
  points = []
  keys = list(grid)
  for combination in itertools.product(*(grid[k] for k in keys)):
    for seed in (seeds if seeds else [None]):
      values = {}
      for key, (_, value) in zip(keys, combination):
        values.update(_named_values(key, value))
      if seed is not None:
        values['seed'] = seed
      derived = {}
      for derivation in derivations:
        derived[derivation.key] = values[derivation.key] = derivation.evaluate(values)
      points.append(Point(dict(zip(keys, combination)), derived, seed))
  return points
