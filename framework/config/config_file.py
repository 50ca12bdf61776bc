"""Config files: reading them and writing them.

``load_config_file`` reads a ``.py`` or ``.yaml`` config
(``framework.config.config_resolve.resolve`` builds the config of one mode from it),
and ``to_yaml``/``run_config`` write a validated config back so that a run
directory re-runs itself. Nothing here
imports TensorFlow; ``load_yaml`` (YAML with ``1e-3`` read as a float) serves
every reader of YAML in the project.
"""

import builtins
import importlib.util
import os
import re
import runpy
import sys
import sysconfig
import traceback
import typing

import yaml

from core.files import write_text_atomically
from core.params import ConfigError
from core.registry import closest
from core.registry import is_import_path
from framework.config import openseq2seq
from framework.config.schema import dtype_name

# The checkout's root, which holds the framework package (and configs/, scripts/).
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))



class Mode(typing.NamedTuple):
  """What differs between run.py's modes, for every place that asks."""
  # The config's views it resolves (framework.config.config_resolve): ``train``, ``eval``, or
  # ``infer`` (the eval view with infer_params over it).
  views: tuple
  # Trains in its logdir: stop signals save, the record is written, --continue_learning,
  # --init_checkpoint and --auto_resume apply.
  trains: bool = False
  # Reads the checkpoints of an existing run (the logdir must hold one); a sweep does not run it.
  reads: bool = False
  # Takes --checkpoint=latest|best|PATH.
  checkpoint: bool = False


# run.py's modes, in one table. Eval, export and infer read the checkpoints of an existing
# run and the eval view of its config (a model is exported and infers as it is evaluated);
# critical_batch trains branches of a run's checkpoint and evaluates them, as train_eval.
MODE_TABLE = {
    'train': Mode(('train',), trains=True),
    'eval': Mode(('eval',), reads=True, checkpoint=True),
    'train_eval': Mode(('train', 'eval'), trains=True),
    'benchmark': Mode(('train',)),
    'export': Mode(('eval',), reads=True, checkpoint=True),
    'infer': Mode(('infer',), reads=True, checkpoint=True),
    'critical_batch': Mode(('train', 'eval'), checkpoint=True),
}
MODES = tuple(MODE_TABLE)
READING_MODES = tuple(name for name, mode in MODE_TABLE.items() if mode.reads)
TRAINING_MODES = tuple(name for name, mode in MODE_TABLE.items() if mode.trains)
CHECKPOINT_MODES = tuple(name for name, mode in MODE_TABLE.items() if mode.checkpoint)
# infer_params (OpenSeq2Seq's) overlays the eval view for --mode=infer; a file without it has none.
INFER_KEY = 'infer_params'
TOP_LEVEL_KEYS = ('base_params', 'train_params', 'eval_params', INFER_KEY)
YAML_EXTENSIONS = ('.yaml', '.yml')
CONFIG_EXTENSIONS = ('.py',) + YAML_EXTENSIONS


# ---------------------------------------------------------------------------
# YAML

class _Loader(yaml.SafeLoader):
  """``yaml.SafeLoader`` that reads ``1e-3`` and ``5e4`` as floats.

  YAML 1.1, which PyYAML implements, wants a dot and a signed exponent
  (``1.0e-3``), so ``lr: 1e-3`` would otherwise be the string '1e-3'.
  """


  def construct_mapping(self, node, deep=False):
    """A mapping whose keys are all different; a key given twice is an error naming both lines.

    PyYAML keeps the last value of a repeated key without a word, so a config
    that sets ``optimizer`` twice would run with the second one unnoticed.
    Keys brought in by a merge (``<<: *base``) may be overridden, as YAML allows.
    """
    if isinstance(node, yaml.MappingNode):
      first = {}
      for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == 'tag:yaml.org,2002:merge':
          continue
        key = self.construct_object(key_node, deep=True)
        try:
          earlier = first.setdefault(key, key_node.start_mark)
        except TypeError:
          continue  # an unhashable key: the constructor below reports it
        if earlier is not key_node.start_mark:
          raise yaml.constructor.ConstructorError(
              None, None, f'duplicate key {key!r} (first given on line {earlier.line + 1}); '
              'a key may appear once in a mapping', key_node.start_mark)
    return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    'tag:yaml.org,2002:float',
    re.compile(r'^(?:[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+'
               r'|[-+]?\.[0-9_]+[eE][-+]?[0-9]+)$'),
    list('-+0123456789.'))


def load_yaml(text):
  """Reads YAML text with a safe loader that also reads ``1e-3`` and ``5e4`` as floats.

  Raises:
    yaml.YAMLError: for text that is not YAML.
  """
  return yaml.load(text, Loader=_Loader)


def read_utf8(path):
  """The text of a UTF-8 file.

  Raises:
    ConfigError: naming the file, the line and the byte when it is not UTF-8 text,
      or the file when it cannot be read (permissions, a directory, an I/O error).
  """
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as exc:
    raise ConfigError(f'{path}: cannot be read ({exc.strerror or type(exc).__name__})') from None
  try:
    return data.decode('utf-8')
  except UnicodeDecodeError as exc:
    line = data[:exc.start].count(b'\n') + 1
    raise ConfigError(f'{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset '
                      f'{exc.start}); save the file as UTF-8') from None


def yaml_problem(exc):
  """Returns (line or None, problem) of a YAML error."""
  mark = getattr(exc, 'problem_mark', None)
  problem = getattr(exc, 'problem', None) or one_line(str(exc))
  return (mark.line + 1 if mark is not None else None), problem


def one_line(text):
  """``text`` with every run of whitespace (newlines too) made one space."""
  return ' '.join(str(text).split())


# ---------------------------------------------------------------------------
# Loading

def load_config_file(path):
  """Reads a config file.

  A ``.py`` config is executed, so it may compute values and hold objects
  (classes, functions, ``tf.float32``); its ``import tensorflow`` serves
  TensorFlow 1's names (``framework.config.openseq2seq``), and its top-level
  ``base_model`` (OpenSeq2Seq's model class) is read as a key of
  ``base_params``. A ``.yaml``/``.yml`` config is read with a safe loader and
  holds plain data.

  Args:
    path: the config file.

  Returns:
    ``{'base_params': dict, 'train_params': dict, 'eval_params': dict}``; the
    last two are ``{}`` when the file does not define them. ``infer_params``
    too, when the file defines it.

  Raises:
    ConfigError: the file is missing, has another extension, cannot be parsed
      or executed (the message gives ``file:line``), defines no
      ``base_params`` dict, or (YAML) has other top-level keys.
  """
  path = os.fspath(path)
  extension = os.path.splitext(path)[1].lower()
  if extension not in CONFIG_EXTENSIONS:
    raise ConfigError(f'{path}: unsupported config file extension {extension or "(none)"!r}; '
                      f'allowed: {", ".join(CONFIG_EXTENSIONS)}')
  if not os.path.isfile(path):
    raise ConfigError(f'{path}: config file not found')
  # A config names the user's own code as "module:name" (or, in Python, imports it):
  # the modules beside the config file are importable.
  add_import_path(os.path.dirname(os.path.abspath(path)))
  if extension == '.py':
    namespace = _run_python_config(path)
  else:
    namespace = _read_yaml_config(path)
  raw = {}
  for key in TOP_LEVEL_KEYS:
    value = namespace.get(key)
    if key == 'base_params' and value is None:
      raise ConfigError(f'{path}: defines no base_params dict')
    if value is None and key == INFER_KEY:
      continue
    if value is None:
      value = {}
    if not isinstance(value, dict):
      raise ConfigError(f'{path}: {key} must be a dict, got {type(value).__name__}')
    raw[key] = value
  # OpenSeq2Seq's model class, a top-level name of its Python configs: read as a key of base_params.
  key = openseq2seq.BASE_MODEL_KEY
  if namespace.get(key) is not None and key not in raw['base_params']:
    raw['base_params'] = dict(raw['base_params'], **{key: namespace[key]})
  for key in raw:
    if 'import_paths' in raw[key]:
      raw[key] = dict(raw[key], import_paths=absolute_import_paths(
          raw[key]['import_paths'], os.path.dirname(os.path.abspath(path)), f'{key}.import_paths'))
  return raw


# ---------------------------------------------------------------------------
# The user's own code: import paths

IMPORT_PATHS_KEY = 'import_paths'


def add_import_path(directory):
  """Puts ``directory`` on ``sys.path`` (after the framework's own packages), once."""
  directory = os.path.abspath(directory)
  if directory not in [os.path.abspath(p) for p in sys.path if p]:
    sys.path.append(directory)


def absolute_import_paths(paths, base, key=IMPORT_PATHS_KEY):
  """``import_paths`` made absolute (relative ones from ``base``, the config file's directory) and put on ``sys.path``.

  Values that are not a list of strings are returned as they are, for the
  schema's check to name.
  """
  if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) for p in paths):
    return paths
  result = []
  for index, entry in enumerate(paths):
    directory = os.path.normpath(os.path.join(base, os.path.expanduser(entry)))
    if not os.path.isdir(directory):
      raise ConfigError(f'{key}.{index}: {entry!r} is not a directory ({directory}); import_paths '
                        'lists directories to import your own modules from')
    add_import_path(directory)
    if directory not in result:
      result.append(directory)
  return result


def code_roots(config):
  """The directories a config's own code is imported from, outside the framework and the installed packages.

  Every ``"module:name"`` string of the config (its model, data layer,
  optimizer, lr policy, or a function among the params) is located without
  being run; the directory its top-level package sits in is a root. A run
  directory's ``config.yaml`` records them in ``import_paths``, so that it
  re-runs the run from anywhere.
  """
  here = CHECKOUT
  installed = {os.path.abspath(p) for p in sysconfig.get_paths().values()}
  roots = []
  for value in _strings(config):
    if not is_import_path(value):
      continue
    module_name = value.partition(':')[0]
    top = module_name.split('.', 1)[0]
    try:
      spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
      continue
    if spec is None:
      continue
    # A package's directory, or a module's file: either sits in the root.
    locations = list(spec.submodule_search_locations or []) or [spec.origin]
    for location in locations:
      if not location or not os.path.isabs(location):
        continue  # built-in and frozen modules
      root = os.path.dirname(os.path.abspath(location))
      if (root == here or any(root == p or root.startswith(p + os.sep) for p in installed)
          or root.startswith(os.path.abspath(sys.base_prefix) + os.sep)):
        continue
      if root not in roots:
        roots.append(root)
  return roots


def with_code_roots(config):
  """``config`` with :func:`code_roots` added to its ``import_paths`` (a new dict when any is added)."""
  paths = list(config.get(IMPORT_PATHS_KEY) or [])
  missing = [root for root in code_roots(config) if root not in paths]
  if not missing:
    return config
  return dict(config, **{IMPORT_PATHS_KEY: paths + missing})


def _strings(value):
  if isinstance(value, dict):
    for item in value.values():
      yield from _strings(item)
  elif isinstance(value, (list, tuple)):
    for item in value:
      yield from _strings(item)
  elif isinstance(value, str):
    yield value


def _run_python_config(path):
  target = os.path.realpath(path)
  try:
    return runpy.run_path(path, run_name=_module_name(path), init_globals={
        '__builtins__': config_builtins(os.path.dirname(target))})
  except SystemExit as exc:
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if os.path.realpath(frame.filename) == target]
    line = f':{lines[-1]}' if lines else ''
    raise ConfigError(f'{path}{line}: the config called sys.exit({exc.code!r}); a config defines '
                      'base_params (and train_params/eval_params), it does not exit') from None
  except SyntaxError as exc:
    if exc.filename and os.path.realpath(exc.filename) == target:
      line = f':{exc.lineno}' if exc.lineno else ''
      raise ConfigError(f'{path}{line}: {type(exc).__name__}: {exc.msg}') from None
    raise ConfigError(f'{path}: {type(exc).__name__}: {one_line(exc)}') from None
  except Exception as exc:  # pylint: disable=broad-except
    # Point at the config's own line, not at the library the config called.
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if os.path.realpath(frame.filename) == target]
    line = f':{lines[-1]}' if lines else ''
    message = one_line(exc)
    detail = f'{type(exc).__name__}: {message}' if message else type(exc).__name__
    if isinstance(exc, openseq2seq.UnknownName):
      detail = message  # it names the attribute and what is allowed
    raise ConfigError(f'{path}{line}: {detail}') from None


def config_builtins(directory):
  """Python's builtins for executing a config of ``directory``: ``import tensorflow`` serves TF 1's names.

  ``import tensorflow`` (and ``from tensorflow.contrib.layers import ...``)
  inside the config gives ``framework.config.openseq2seq``' namespace. A module
  the config imports from its own directory (the port a small variant
  imports) is executed with the same builtins, once, so that it reads TF 1's
  names too. Every other import is Python's own.
  """
  directory = os.path.realpath(directory)
  names = dict(vars(builtins))

  def config_import(name, globals=None, locals=None, fromlist=(), level=0):  # pylint: disable=redefined-builtin
    top = name.partition('.')[0]
    if level == 0 and top == 'tensorflow':
      return openseq2seq.imported(name, fromlist)
    if level == 0 and top not in sys.modules:
      _import_beside(top, directory, names)
    return builtins.__import__(name, globals, locals, fromlist, level)

  names['__import__'] = config_import
  return names


def _import_beside(name, directory, names):
  """Executes module ``name`` with the config's builtins when it is a file of ``directory``."""
  try:
    spec = importlib.util.find_spec(name)
  except (ImportError, ValueError):
    return
  origin = getattr(spec, 'origin', None)
  if (spec is None or spec.submodule_search_locations is not None or not origin
      or not origin.endswith('.py') or os.path.dirname(os.path.realpath(origin)) != directory):
    return
  module = importlib.util.module_from_spec(spec)
  module.__builtins__ = names
  sys.modules[name] = module
  try:
    spec.loader.exec_module(module)
  except BaseException:
    del sys.modules[name]
    raise


def _module_name(path):
  """The name objects defined in a Python config get as ``__module__``: one that imports again.

  ``configs/x.py`` of the checkout gives ``configs.x``; a config elsewhere
  its file's name (``exp`` for ``/home/me/exp.py``), its directory being on
  the path. So a function or class the config defines is written to the run
  directory's config as an importable ``exp:function``.
  """
  here = CHECKOUT
  relative = os.path.splitext(os.path.relpath(os.path.abspath(path), here))[0]
  if relative.startswith(os.pardir):
    return os.path.basename(relative)
  return relative.replace(os.sep, '.')


def _read_yaml_config(path):
  text = read_utf8(path)
  try:
    data = load_yaml(text)
  except yaml.YAMLError as exc:
    line, problem = yaml_problem(exc)
    raise ConfigError(f'{path}{f":{line}" if line else ""}: {problem}') from None
  if data is None:
    data = {}
  if not isinstance(data, dict):
    raise ConfigError(f'{path}: expected a mapping with base_params, got {type(data).__name__}')
  for key in data:
    if key not in TOP_LEVEL_KEYS:
      guess = closest(key, TOP_LEVEL_KEYS)
      hint = f' (did you mean {guess}?)' if guess is not None else ''
      raise ConfigError(f'{path}: unknown top-level key {key!r}{hint}; '
                        f'allowed: {", ".join(TOP_LEVEL_KEYS)}')
  return data


# ---------------------------------------------------------------------------
# Output

def to_yaml(config):
  """Returns ``config`` as YAML text with sorted keys.

  Objects from a Python config are written as their import path
  (``module:qualname``, which a YAML config may give for the same object), a
  ``tf.DType`` as its name, tuples as lists, so a Python config and the YAML
  config that spells those names give the same text.

  Raises:
    ConfigError: for a value that has no such spelling (an instance of some
      class), naming its key path.
  """
  return yaml.safe_dump(_to_plain(config, ''), default_flow_style=False, sort_keys=True)


def write_config(config, path):
  """Writes :func:`to_yaml` of ``config`` to ``path`` (atomically), creating its directory."""
  write_text(to_yaml(config), path)


def run_config(train, evaluation=None, infer=None):
  """The config file whose train and eval views are the resolved ``train`` and ``evaluation``.

  Keys equal in both views go to ``base_params``; a key that differs goes, with
  its whole value, to ``train_params`` and ``eval_params``. So
  ``resolve(run_config(t, e), 'train')`` is ``t`` and ``resolve(..., 'eval')``
  is ``e``: a run directory's ``config.yaml`` re-runs and re-evaluates the run.

  Args:
    train: the validated train config, or None for an eval-only run.
    evaluation: the validated eval config, or None (the eval view is then the
      train view).
    infer: the ``infer_params`` section to record (it overlays the eval
      view for ``--mode=infer``), or None.

  Returns:
    ``{'base_params': ..., 'train_params': ..., 'eval_params': ...}`` of plain
    values (as :func:`to_yaml` spells them), and ``infer_params`` when
    ``infer`` is given.
  """
  result = _run_views(train, evaluation)
  if infer:
    result[INFER_KEY] = _to_plain(infer, INFER_KEY)
  return result


def _run_views(train, evaluation):
  """:func:`run_config` of the train and eval views."""
  views = [_to_plain(v, '') for v in (train, evaluation) if v is not None]
  if len(views) == 1:
    return {'base_params': views[0], 'train_params': {}, 'eval_params': {}}
  train, evaluation = views
  result = {'base_params': {}, 'train_params': {}, 'eval_params': {}}
  for key in sorted(set(train) | set(evaluation)):
    if key in train and key in evaluation and train[key] == evaluation[key]:
      result['base_params'][key] = train[key]
      continue
    if key in train:
      result['train_params'][key] = train[key]
    if key in evaluation:
      result['eval_params'][key] = evaluation[key]
  return result


def run_config_yaml(train, evaluation=None, infer=None):
  """:func:`run_config` as YAML text (a file ``--config`` reads)."""
  return yaml.safe_dump(run_config(train, evaluation, infer), default_flow_style=False,
                        sort_keys=False)


def write_run_config(train, evaluation, path, infer=None):
  """Writes :func:`run_config_yaml` to ``path``."""
  write_text(run_config_yaml(train, evaluation, infer), path)


def write_text(text, path):
  """Writes ``text`` to ``path`` atomically (no partial file on failure), creating its directory."""
  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  write_text_atomically(path, text)


def plain(config):
  """``config`` with every value as :func:`to_yaml` writes it (objects as ``module:qualname``).

  Raises:
    ConfigError: as :func:`to_yaml`.
  """
  return _to_plain(config, '')


def _to_plain(value, path):
  if isinstance(value, dict):
    return {k: _to_plain(v, f'{path}.{k}' if path else str(k)) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_to_plain(v, f'{path}.{i}') for i, v in enumerate(value)]
  if value is None or isinstance(value, (str, bool, int, float)):
    return value
  name = dtype_name(value)
  if isinstance(name, str):
    return name
  if type(value).__module__ == 'numpy' and hasattr(value, 'item'):
    return value.item()
  if callable(value) and hasattr(value, '__module__') and hasattr(value, '__qualname__'):
    if '<' in value.__qualname__:
      raise ConfigError(f'{path or "config"}: {value.__qualname__} ({value.__module__}) cannot be '
                        'named in a config file; define it at the top level of a module')
    return f'{value.__module__}:{value.__qualname__}'
  raise ConfigError(f'{path or "config"}: cannot write {value!r} ({type(value).__name__}) as YAML; '
                    f'use a name, number, string, list or mapping')


def format_error(exc):
  """The one line the command line prints for ``exc``: ``error: ...``."""
  message = one_line(exc)
  if not isinstance(exc, ConfigError):
    message = f'{type(exc).__name__}: {message}' if message else type(exc).__name__
  return f'error: {message}'
