"""Run a grid of run.py configurations, one run directory per point, and collect the results.

  python scripts/sweep.py --config configs/fashion_mnist_lars.py --out runs/sweep_bs \\
      --grid optimizer=Momentum,LARS --grid batch_size_per_gpu=256,1024,4096 \\
      --derive 'lr_policy_params.learning_rate=0.1*batch_size_per_gpu/256' --seeds 0,1

  python scripts/sweep.py --config configs/fashion_mnist_lars.py --grid-file grid.yaml \\
      --out runs/sweep_bs

A grid file is a YAML mapping from config key paths to lists of values, with
optional ``derived`` values computed from each point::

  optimizer: [Momentum, LARS]
  batch_size_per_gpu: [256, 1024, 4096]
  derived:
    lr_policy_params.learning_rate: 0.1 * batch_size_per_gpu / 256  # linear scaling

A point is one element of the cartesian product of the grid (times the seeds
of ``--seeds``, given to the run as ``random_seed``). It runs as

  python run.py --config CONFIG --mode MODE --logdir OUT/<point> --continue_learning \\
      --set <--set args> --set <grid values> --set <derived values> [--set random_seed=<seed>]

with its output in ``OUT/<point>/run.log``. On success the sweep writes
``OUT/<point>/result.json`` (the metrics of run.py's last lines and the wall
time) and a later sweep with the same ``--out`` skips the point; a failed point
gets ``error.txt`` (the last line it printed) and runs again, from an empty
directory, next time. At the end the sweep writes ``results.csv``,
``results.md`` (mean and standard deviation over seeds) and ``accuracy.png``
to OUT, and exits with status 1 when a point failed (2 for a mistake in the
sweep's own arguments). Failed points are listed in the tables and marked with
a red cross on the plot; its x axis is logarithmic for batch-like keys.

Before any point runs, every point's config is resolved and validated as
run.py would do it (all in one process, ``python -m framework.check_configs``):
a point run.py would refuse stops the sweep with exit status 2 and one line
per such point, naming it and the key. ``--dry-run`` prints the commands
without checking them.

Derived values are arithmetic on the point's numbers only (``+ - * / // % **``,
parentheses, ``min max abs round int float sqrt log log2 exp``); names are the
grid's key paths, the derived keys defined before, and ``seed``.
"""

import argparse
import ast
import csv
import hashlib
import itertools
import json
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PY = os.path.join(ROOT, 'run.py')
# Eval mode reads the checkpoints of an existing run; a sweep makes new runs.
MODES = ('train_eval', 'train', 'benchmark')

RESULT_FILE = 'result.json'
ERROR_FILE = 'error.txt'
LOG_FILE = 'run.log'
METRICS = ('accuracy', 'top5', 'loss', 'steps')

# What run.py and the trainer print; parsed back from run.log.
FINAL_RE = re.compile(r'^final test accuracy: (\S+) \(top-5 (\S+), loss (\S+)\) at step (\d+)')
EVAL_RE = re.compile(r'^eval at step (\d+): loss (\S+), top-1 (\S+), top-5 (\S+)')
TRAINING_RE = re.compile(r'^training .* for (\d+) steps')


class _Loader(yaml.SafeLoader):
  """Reads ``1e-3`` as a float, as run.py's ``--set`` does (framework.config).

  framework.config imports TensorFlow through the optimizers, which would add
  seconds to every sweep start, so the resolver is repeated here.
  """


_Loader.add_implicit_resolver(
    'tag:yaml.org,2002:float',
    re.compile(r'^(?:[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+'
               r'|[-+]?\.[0-9_]+[eE][-+]?[0-9]+)$'),
    list('-+0123456789.'))


class SweepError(ValueError):
  """A mistake in the sweep's own arguments or grid; nothing has run."""


def _log(message):
  print(f'[sweep] {message}', flush=True)


# ---------------------------------------------------------------------------
# Values

def parse_value(text):
  """Reads a grid value given as text, as run.py's ``--set`` reads it."""
  try:
    return yaml.load(text, Loader=_Loader)  # a SafeLoader
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
    self.overrides = ([f'{key}={text}' for key, (text, _) in grid.items()]
                      + [f'{key}={value_text(value)}' for key, value in derived.items()])
    if seed is not None:
      self.overrides.append(f'random_seed={seed}')

  def group(self):
    """The point without its seed: runs of one group differ only by seed."""
    return tuple(text for text, _ in self.grid.values())


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
      data = yaml.load(f, Loader=_Loader)  # a SafeLoader
  except OSError as exc:
    raise SweepError(f'--grid-file {path}: {exc.strerror}') from None
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
      key, or a derivation that fails on some point.
  """
  for key, values in grid.items():
    texts = [text for text, _ in values]
    repeated = sorted({t for t in texts if texts.count(t) > 1})
    if repeated:
      raise SweepError(f'grid {key}: value {repeated[0]} is given twice')
  for derivation in derivations:
    if derivation.key in grid:
      raise SweepError(f'derived {derivation.key}: is also a grid key')
  derived_keys = [d.key for d in derivations]
  if len(set(derived_keys)) != len(derived_keys):
    raise SweepError('derived: a key is given twice')
  points = []
  keys = list(grid)
  for combination in itertools.product(*(grid[k] for k in keys)):
    for seed in (seeds if seeds else [None]):
      values = {key: value for key, (_, value) in zip(keys, combination)}
      if seed is not None:
        values['seed'] = seed
      derived = {}
      for derivation in derivations:
        derived[derivation.key] = values[derivation.key] = derivation.evaluate(values)
      points.append(Point(dict(zip(keys, combination)), derived, seed))
  return points


# ---------------------------------------------------------------------------
# Reading a finished run

def parse_metrics(log_text):
  """Reads the final metrics from run.py's output.

  Returns:
    ``{'accuracy', 'top5', 'loss', 'steps'}``, each None when run.py did not
    print it: train_eval ends with ``final test accuracy: ...`` (the last
    ``eval at step ...`` line serves when that is missing), train and
    benchmark only give the steps of ``training ... for N steps``.
  """
  metrics = dict.fromkeys(METRICS)
  for line in log_text.splitlines():
    line = line.strip()
    final, evaluation, training = FINAL_RE.match(line), EVAL_RE.match(line), TRAINING_RE.match(line)
    if final:
      metrics.update(accuracy=float(final.group(1)), top5=float(final.group(2)),
                     loss=float(final.group(3)), steps=int(final.group(4)))
    elif evaluation:
      metrics.update(steps=int(evaluation.group(1)), loss=float(evaluation.group(2)),
                     accuracy=float(evaluation.group(3)), top5=float(evaluation.group(4)))
    elif training and metrics['steps'] is None:
      metrics['steps'] = int(training.group(1))
  return metrics


def last_text_line(text):
  """The last non-empty line of ``text``, stripped; '' when there is none."""
  lines = [l.strip() for l in text.splitlines() if l.strip()]
  return lines[-1] if lines else ''


def last_line(path):
  """The last non-empty line of a file: run.py's one-line error, or the exception of a crash."""
  try:
    with open(path, encoding='utf-8', errors='replace') as f:
      return last_text_line(f.read())
  except OSError:
    return ''


def read_result(logdir):
  path = os.path.join(logdir, RESULT_FILE)
  if not os.path.isfile(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def read_error(logdir):
  path = os.path.join(logdir, ERROR_FILE)
  if not os.path.isfile(path):
    return None
  with open(path, encoding='utf-8') as f:
    return f.read().strip()


# ---------------------------------------------------------------------------
# Running

class Sweep:
  """Runs the points that have no result yet, ``jobs`` at a time."""

  def __init__(self, args, points):
    self.args = args
    self.points = points
    self.out = os.path.abspath(args.out)
    self.config = os.path.abspath(args.config)
    self.done = self.failed = self.skipped = 0
    self.running = {}
    self.errors = {}

  def logdir(self, point):
    return os.path.join(self.out, point.name)

  def overrides(self, point):
    """The point's ``--set`` values, after the sweep's own."""
    return list(self.args.set) + point.overrides

  def check_points(self):
    """Resolves and validates every point's config as run.py would, running nothing.

    One process checks all points, so TensorFlow starts once.

    Raises:
      SweepError: naming each point whose config run.py would refuse, and why.
    """
    request = {'config': self.config, 'mode': self.args.mode,
               'variants': [self.overrides(p) for p in self.points]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
    result = subprocess.run([sys.executable, '-m', 'framework.check_configs'], cwd=ROOT, env=env,
                            input=json.dumps(request), capture_output=True, text=True,
                            check=False)
    try:
      errors = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
      raise SweepError('the configs could not be checked: '
                       f'{last_text_line(result.stderr) or f"exit status {result.returncode}"}'
                       ) from None
    bad = [(p, e) for p, e in zip(self.points, errors) if e is not None]
    if bad:
      raise SweepError('\n'.join(f'point {p.name}: {e.removeprefix("error: ")}' for p, e in bad)
                       + f'\n{len(bad)} of {len(self.points)} point(s) have a config error; '
                       'nothing was run')

  def command(self, point):
    # run.log is in the run directory before run.py looks at it, and run.py
    # refuses a non-empty directory unless told to continue; the sweep empties
    # the directory first, so there is no checkpoint to continue from.
    command = [sys.executable, RUN_PY, '--config', self.config, '--mode', self.args.mode,
               '--logdir', self.logdir(point), '--continue_learning']
    for override in self.overrides(point):
      command += ['--set', override]
    return command

  def progress(self):
    left = len(self.points) - self.done - len(self.running)
    _log(f'{self.done}/{len(self.points)} done ({self.skipped} skipped, {self.failed} failed), '
         f'{len(self.running)} running, {left} left')

  def run(self):
    """Runs the sweep; returns the names of the points that failed."""
    os.makedirs(self.out, exist_ok=True)
    pending = []
    for point in self.points:
      result = read_result(self.logdir(point))
      if result is None:
        pending.append(point)
        continue
      self.done += 1
      self.skipped += 1
      accuracy = (result.get('metrics') or {}).get('accuracy')
      _log(f'skipped {point.name}: finished before (accuracy {_format(accuracy)})')
      if result.get('overrides') != self.overrides(point):
        _log(f'warning: {point.name} finished with other --set values ({result.get("overrides")}); '
             f'delete {self.logdir(point)} to run it again with the current ones')
    self.progress()
    try:
      while pending or self.running:
        while pending and len(self.running) < self.args.jobs:
          self.start(pending.pop(0))
        time.sleep(0.1)
        for process in [p for p in self.running if p.poll() is not None]:
          self.finish(process)
    except KeyboardInterrupt:
      for process, (point, _, log) in self.running.items():
        process.terminate()
        process.wait()
        log.close()
        _log(f'interrupted {point.name}; it runs again next time')
      raise
    return [p.name for p in self.points if p.name in self.errors]

  def start(self, point):
    logdir = self.logdir(point)
    if os.path.isdir(logdir) and os.listdir(logdir):
      if not os.path.exists(os.path.join(logdir, LOG_FILE)):
        self.errors[point.name] = (f'{logdir} exists and holds files the sweep did not write; '
                                   'move it away to run this point')
        self.done += 1
        self.failed += 1
        _log(f'FAILED {point.name}: {self.errors[point.name]}')
        return
      # A failed or interrupted run: start again from nothing, so that run.py
      # does not refuse the directory and no stale checkpoint is resumed.
      shutil.rmtree(logdir)
    os.makedirs(logdir, exist_ok=True)
    command = self.command(point)
    # The log stays open while the run goes on; finish() closes it.
    log = open(os.path.join(logdir, LOG_FILE), 'w', encoding='utf-8')
    log.write('$ ' + shlex.join(command) + '\n')
    log.flush()
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    self.running[process] = (point, time.monotonic(), log)
    _log(f'started {point.name}')
    self.progress()

  def finish(self, process):
    point, started, log = self.running.pop(process)
    log.close()
    wall = time.monotonic() - started
    logdir = self.logdir(point)
    log_path = os.path.join(logdir, LOG_FILE)
    self.done += 1
    if process.returncode == 0:
      with open(log_path, encoding='utf-8', errors='replace') as f:
        metrics = parse_metrics(f.read())
      result = {'point': {k: v for k, (_, v) in point.grid.items()}, 'derived': point.derived,
                'seed': point.seed, 'overrides': self.overrides(point),
                'mode': self.args.mode, 'config': self.config, 'metrics': metrics,
                'wall_s': round(wall, 2), 'finished': time.strftime('%Y-%m-%d %H:%M:%S')}
      with open(os.path.join(logdir, RESULT_FILE), 'w', encoding='utf-8') as f:
        json.dump(result, f, indent=2)
      _log(f'finished {point.name}: accuracy {_format(metrics["accuracy"])}, '
           f'{metrics["steps"]} steps, {wall:.1f} s')
    else:
      status = (f'killed by signal {-process.returncode}' if process.returncode < 0
                else f'exit status {process.returncode}')
      error = last_line(log_path) or status
      with open(os.path.join(logdir, ERROR_FILE), 'w', encoding='utf-8') as f:
        f.write(error + '\n')
      self.errors[point.name] = error
      self.failed += 1
      _log(f'FAILED {point.name} ({status}): {error}  [log: {log_path}]')
    self.progress()


def _format(value, digits=4):
  return 'n/a' if value is None else f'{value:.{digits}f}'


# ---------------------------------------------------------------------------
# Results: CSV, markdown, plot

def collect_rows(sweep):
  """One dict per point, in grid order, from the result.json / error.txt on disk."""
  rows = []
  for point in sweep.points:
    logdir = sweep.logdir(point)
    result = read_result(logdir)
    row = {key: text for key, (text, _) in point.grid.items()}
    row.update({key: value for key, value in point.derived.items()})
    row['seed'] = '' if point.seed is None else point.seed
    metrics = dict.fromkeys(METRICS)
    if result is not None:
      status, error, wall = 'ok', '', result.get('wall_s')
      metrics.update(result.get('metrics') or {})
    else:
      error = sweep.errors.get(point.name) or read_error(logdir)
      status, wall = ('failed' if error else 'not run'), None
    row.update(status=status, **metrics, wall_s=wall, logdir=logdir, error=error or '')
    rows.append(row)
  return rows


def write_csv(rows, columns, path):
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    for row in rows:
      writer.writerow({c: ('' if row.get(c) is None else row.get(c)) for c in columns})


def _mean_std(values):
  values = [v for v in values if v is not None]
  if not values:
    return None, None
  std = statistics.stdev(values) if len(values) > 1 else None
  return statistics.fmean(values), std


def _mean_std_text(values, digits=4):
  mean, std = _mean_std(values)
  if mean is None:
    return 'n/a'
  return f'{mean:.{digits}f}' + (f' ± {std:.{digits}f}' if std is not None else '')


def group_rows(points, rows):
  """``[(representative row, [rows of its seeds])]`` in grid order."""
  groups = {}
  for point, row in zip(points, rows):
    groups.setdefault(point.group(), []).append(row)
  return list(groups.values())


def markdown(rows, points, swept, with_seeds, header):
  """A markdown table of the results; with seeds, one line per grid point with mean ± std."""
  lines = [header, '']
  if with_seeds:
    columns = swept + ['seeds ok', 'accuracy', 'top-5', 'loss', 'steps', 'wall (s)',
                       'failed seeds']
    lines += ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
    for group in group_rows(points, rows):
      ok = [r for r in group if r['status'] == 'ok']
      steps = sorted({r['steps'] for r in ok if r['steps'] is not None})
      failed_seeds = [str(r['seed']) for r in group if r['status'] == 'failed']
      cells = [str(group[0][k]) for k in swept] + [
          f'{len(ok)}/{len(group)}',
          _mean_std_text([r['accuracy'] for r in ok]),
          _mean_std_text([r['top5'] for r in ok]),
          _mean_std_text([r['loss'] for r in ok]),
          ', '.join(map(str, steps)) or 'n/a',
          _mean_std_text([r['wall_s'] for r in ok], 1),
          ', '.join(failed_seeds) or '']
      lines.append('| ' + ' | '.join(cells) + ' |')
  else:
    columns = swept + ['status', 'accuracy', 'top-5', 'loss', 'steps', 'wall (s)']
    lines += ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
    for row in rows:
      cells = [str(row[k]) for k in swept] + [
          row['status'], _format(row['accuracy']), _format(row['top5']), _format(row['loss']),
          'n/a' if row['steps'] is None else str(row['steps']), _format(row['wall_s'], 1)]
      lines.append('| ' + ' | '.join(cells) + ' |')
  failed = [r for r in rows if r['status'] != 'ok']
  if failed:
    lines += ['', 'Not finished:', '']
    lines += [f'- `{os.path.basename(r["logdir"])}`: {r["status"]}'
              + (f' — {r["error"]}' if r['error'] else '') for r in failed]
  return '\n'.join(lines) + '\n'


def is_batch_like(key):
  """True for keys that count examples or micro-batches (batch sizes, iter_size)."""
  name = key.rsplit('.', 1)[-1] if key else ''
  return 'batch' in name or name == 'iter_size'


def x_scale(values, key=None):
  """The x axis for ``values`` of the grid key ``key``.

  'log' for positive numbers spanning more than a factor of 10, or of a
  batch-like key (batch sizes grow by factors, so equal ratios get equal
  spacing); 'linear' for other numbers; 'category' for anything else.
  """
  if not values or not all(is_number(v) for v in values):
    return 'category'
  if min(values) > 0 and (max(values) / min(values) > 10
                          or (is_batch_like(key) and max(values) > min(values))):
    return 'log'
  return 'linear'


def plot_accuracy(points, rows, path, title):
  """Final accuracy against the first grid key, one line per value of the other keys.

  Error bars are the standard deviation over seeds. Returns False (and writes
  nothing) when no point has an accuracy.
  """
  if not any(r['status'] == 'ok' and r['accuracy'] is not None for r in rows):
    return False
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  keys = list(points[0].grid)
  if keys:
    x_key, line_keys = keys[0], keys[1:]
    x_of = lambda p: p.grid[x_key]
  else:
    x_key, line_keys = 'seed', []
    x_of = lambda p: (str(p.seed), p.seed)
  x_values = []
  for point in points:
    if x_of(point) not in x_values:
      x_values.append(x_of(point))
  scale = x_scale([v for _, v in x_values], x_key)
  position = {text: (value if scale != 'category' else i)
              for i, (text, value) in enumerate(x_values)}

  lines, failed = {}, []
  for point, row in zip(points, rows):
    label = ', '.join(f'{k}={point.grid[k][0]}' for k in line_keys)
    by_x = lines.setdefault(label, {})
    if row['status'] == 'ok' and row['accuracy'] is not None:
      by_x.setdefault(x_of(point)[0], []).append(row['accuracy'])
    elif row['status'] == 'failed':
      failed.append(x_of(point)[0])

  figure, axes = plt.subplots(figsize=(7, 4.5))
  for label, by_x in lines.items():
    xs = [text for text, _ in x_values if text in by_x]
    if not xs:
      continue
    means = [statistics.fmean(by_x[x]) for x in xs]
    stds = [statistics.stdev(by_x[x]) if len(by_x[x]) > 1 else 0.0 for x in xs]
    # Lines between categories would suggest an order that is not there.
    axes.errorbar([position[x] for x in xs], means, yerr=stds, marker='o', capsize=4,
                  linestyle='none' if scale == 'category' else '-', label=label or None)
  if failed:
    # At the foot of the axes, whatever the accuracies: a failed point has none.
    axes.plot([position[x] for x in failed], [0.02] * len(failed), linestyle='none', marker='x',
              markersize=9, color='red', transform=axes.get_xaxis_transform(),
              label=f'failed ({len(failed)})')
  if scale == 'log':
    axes.set_xscale('log')
  if scale == 'category':
    axes.set_xticks(range(len(x_values)))
    axes.set_xticklabels([text for text, _ in x_values])
  elif scale == 'log':
    axes.set_xticks([v for _, v in x_values])
    axes.set_xticklabels([text for text, _ in x_values])
    axes.minorticks_off()
  axes.set_xlabel(x_key)
  axes.set_ylabel('final test accuracy (top-1)')
  axes.set_title(title)
  axes.grid(True, alpha=0.3)
  if line_keys or failed:
    axes.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)
  return True


# ---------------------------------------------------------------------------
# Command line

def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', required=True, help='the config file given to run.py')
  parser.add_argument('--out', required=True,
                      help='the sweep directory; one run directory per point')
  parser.add_argument('--grid', action='append', default=[], metavar='KEY.PATH=V1,V2,...',
                      help='values of one config key (each read as YAML); repeatable; '
                           "replaces that key's values from --grid-file")
  parser.add_argument('--grid-file',
                      help='YAML file: {key.path: [values]}, optional derived: {key.path: expr}')
  parser.add_argument('--derive', action='append', default=[], metavar='KEY.PATH=EXPRESSION',
                      help="a value computed from the point, e.g. "
                           "'lr_policy_params.learning_rate=0.1*batch_size_per_gpu/256'")
  parser.add_argument('--mode', default='train_eval', choices=MODES)
  parser.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                      help='an override given to every run, before the grid values')
  parser.add_argument('--seeds', help='comma-separated random seeds; each point runs once per seed')
  parser.add_argument('--jobs', type=int, default=1,
                      help='runs at the same time (each run.py uses all cores it sees)')
  parser.add_argument('--dry-run', action='store_true', help='print the commands and exit')
  return parser.parse_args(argv)


def build_points(args):
  """The points the arguments describe (nothing runs)."""
  grid, derivations = {}, []
  if args.grid_file:
    grid, derivations = load_grid_file(args.grid_file)
  given = set()
  for text in args.grid:
    key, values = parse_grid_argument(text)
    if key in given:
      raise SweepError(f'--grid {key}: the key is given twice')
    given.add(key)
    grid[key] = values  # replaces the grid file's values of that key, in place
  derivations += [parse_derive_argument(text) for text in args.derive]
  seeds = None
  if args.seeds is not None:
    try:
      seeds = [int(s) for s in split_top_level(args.seeds)]
    except ValueError:
      raise SweepError(f'--seeds {args.seeds!r}: expected comma-separated integers') from None
    if len(set(seeds)) != len(seeds):
      raise SweepError(f'--seeds {args.seeds!r}: a seed is given twice')
  if not grid and not seeds:
    raise SweepError('nothing to sweep: give --grid, --grid-file or --seeds')
  return make_points(grid, derivations, seeds)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  try:
    if args.jobs < 1:
      raise SweepError(f'--jobs: must be >= 1, got {args.jobs}')
    if not os.path.isfile(args.config):
      raise SweepError(f'--config {args.config}: file not found')
    points = build_points(args)
  except SweepError as exc:
    print(f'error: {exc}', file=sys.stderr)
    return 2
  sweep = Sweep(args, points)
  if args.dry_run:
    for point in points:
      print(shlex.join(sweep.command(point)))
    return 0
  try:
    sweep.check_points()
  except SweepError as exc:
    print('\n'.join(f'error: {line}' for line in str(exc).splitlines()), file=sys.stderr)
    return 2
  _log(f'{len(points)} point(s) in {sweep.out}, all configs valid')
  try:
    failed = sweep.run()
  except KeyboardInterrupt:
    return 130

  rows = collect_rows(sweep)
  swept = list(points[0].grid) + list(points[0].derived)
  columns = swept + ['seed', 'status', 'accuracy', 'top5', 'loss', 'steps', 'wall_s', 'logdir',
                     'error']
  write_csv(rows, columns, os.path.join(sweep.out, 'results.csv'))
  header = (f'# Sweep of {os.path.relpath(sweep.config)} ({args.mode})\n\n'
            + '\n'.join(f'- `--set {s}`' for s in args.set))
  with open(os.path.join(sweep.out, 'results.md'), 'w', encoding='utf-8') as f:
    f.write(markdown(rows, points, swept, args.seeds is not None, header.rstrip()))
  title = f'{os.path.basename(args.config)}: {os.path.basename(sweep.out)}'
  plotted = plot_accuracy(points, rows, os.path.join(sweep.out, 'accuracy.png'), title)
  _log(f'wrote {os.path.join(sweep.out, "results.csv")}, results.md'
       + (', accuracy.png' if plotted else ' (no accuracy to plot)'))
  if failed:
    _log(f'{len(failed)} of {len(points)} point(s) failed:')
    for name in failed:
      _log(f'  {name}: {sweep.errors[name]}')
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
