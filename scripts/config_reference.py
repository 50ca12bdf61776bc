"""Writes the generated part of docs/config.md: every config key, from the declarations the checks use.

  .venv/bin/python scripts/config_reference.py           # rewrite the block in docs/config.md
  .venv/bin/python scripts/config_reference.py --check   # exit 1 when the page is out of date

The block between the page's markers is made from what validates a config, so
it cannot drift from it: ``SCHEMA`` (framework/config/schema.py) and the schemas it
nests, the ``PARAMS`` of each registered model and data layer, the
``ARGUMENTS`` each optimizer and lr policy registers (optimizers/registry.py)
with the defaults of the signatures they declare, AGN's and the loss
scalers' settings (optimizers/validation.py), and the dtype names
(core/precision.py). Reading the defaults imports TensorFlow.
"""

import argparse
import inspect
import os
import sys

# TensorFlow's start-up lines would bury the one line this prints.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from core import files  # noqa: E402  pylint: disable=wrong-import-position
from core import precision  # noqa: E402  pylint: disable=wrong-import-position
from core.params import DictParam  # noqa: E402  pylint: disable=wrong-import-position
from core.params import ListParam  # noqa: E402  pylint: disable=wrong-import-position
from core.params import type_name  # noqa: E402  pylint: disable=wrong-import-position
from framework.config import schema  # noqa: E402  pylint: disable=wrong-import-position
from framework.config import validation as config_lib  # noqa: E402  pylint: disable=wrong-import-position
from framework.engines import tf_import  # noqa: E402  pylint: disable=wrong-import-position
from models import initializer_names  # noqa: E402  pylint: disable=wrong-import-position
from optimizers import registry  # noqa: E402  pylint: disable=wrong-import-position
from optimizers import validation  # noqa: E402  pylint: disable=wrong-import-position

PAGE = os.path.join(ROOT, 'docs', 'config.md')
BEGIN = '<!-- config_reference: begin -->'
END = '<!-- config_reference: end -->'
COMMAND = '.venv/bin/python scripts/config_reference.py'

# Keys whose allowed names live with their own check rather than in the
# Param's choices: the same constants those checks read.
NAMES_ELSEWHERE = {'dtype': precision.DTYPE_NAMES, 'loss_scaling': validation.LOSS_SCALING_ALGOS,
                   'initializer': tuple(initializer_names.NAMES)}
# The optimizer argument the framework gives itself (validation refuses it in optimizer_params).
LEARNING_RATE = 'learning_rate'
# The lr policy argument the trainer passes.
GLOBAL_STEP = 'global_step'


def code(value):
  """``value``'s repr as inline code, safe inside a table cell."""
  return '`' + repr(value).replace('|', '\\|') + '`'


def cell(text):
  return text.replace('|', '\\|').replace('\n', ' ')


def type_text(param):
  if isinstance(param, DictParam):
    return 'a mapping'
  if isinstance(param, ListParam):
    return f'a list, each {type_name(param.item.types)}'
  what = getattr(param, 'what', None)  # a registered name, or the object itself
  if what is not None:
    return f'a name, or the {what}'
  if param.types is callable:
    return 'a callable'
  return type_name(param.types)


def default_text(param):
  return 'required' if param.required else code(param.default)


def allowed_text(key, param, registries):
  if key in registries:
    return 'registered: ' + ', '.join(f'`{name}`' for name in registries[key])
  choices = NAMES_ELSEWHERE.get(key, param.choices)
  if choices is None and isinstance(param, ListParam):
    choices = param.item.choices
  if choices is None:
    return ''
  return ', '.join(f'`{c}`' for c in choices)


def param_rows(params, registries=None, prefix=''):
  """Table rows of a schema (``name -> Param``); a nested schema's keys follow their parent."""
  rows = []
  for key, param in params.items():
    rows.append(f'| `{prefix}{key}` | {type_text(param)} | {default_text(param)} | '
                f'{cell(allowed_text(key, param, registries or {}))} | {cell(param.doc)} |')
    if isinstance(param, DictParam):
      rows += param_rows(param.schema, registries, f'{prefix}{key}.')
  return rows


def param_table(params, registries=None):
  return ['| key | type | default | allowed | meaning |', '|---|---|---|---|---|',
          *param_rows(params, registries)]


def signature_default(target, name):
  """The default of argument ``name`` of a function, or of a class's constructor up its bases.

  Returns ``inspect.Parameter.empty`` when no signature gives one.
  """
  owners = [target] if not inspect.isclass(target) else [
      klass.__init__ for klass in target.__mro__ if '__init__' in vars(klass)]
  for owner in owners:
    parameter = inspect.signature(owner).parameters.get(name)
    if parameter is not None and parameter.default is not inspect.Parameter.empty:
      return parameter.default
  return inspect.Parameter.empty


def default_cell(target, name, required=()):
  if name in required:
    return 'required'
  value = signature_default(target, name)
  return 'none declared' if value is inspect.Parameter.empty else code(value)


def optimizer_section(registries):
  optimizers = registries['optimizer']
  import keras  # pylint: disable=import-outside-toplevel
  # The Keras base arguments and their defaults, as the optimizers inherit them.
  base_class = keras.optimizers.Optimizer
  # Keras' optimizer classes pass **kwargs down to the first base that names them.
  base_names = next(names for names in (
      [p.name for p in inspect.signature(cls.__init__).parameters.values()
       if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ('self', LEARNING_RATE)]
      for cls in base_class.__mro__) if names)
  keras_base = set(base_names)
  declared_any = False
  lines = ['## `optimizer_params`', '',
           f'The keyword arguments of the optimizer `optimizer` names, but `{LEARNING_RATE}`, '
           'which comes from the lr policy (`lr_policy_params.learning_rate`). Each registration '
           'declares the names (read from the classes into `optimizers/optimizer_arguments.json` by '
           '`scripts/optimizer_arguments.py`); the defaults are those '
           "of the class's signature. Every optimizer but AGN also takes the Keras base "
           'arguments listed last; a row under an optimizer shows where it sets its own default.',
           '']
  for name in optimizers:
    facts = optimizers.facts(name)
    if facts.get('WRAPS_OPTIMIZER'):
      lines += [f'### `{name}`', '',
                '`optimizer_params` go to the optimizer it wraps, named by '
                '`agn_params.optimizer`; its own settings are `agn_params`:', '',
                *param_table(validation.AGN_SCHEMA), '']
      continue
    arguments = facts.get('ARGUMENTS')
    if arguments is None:
      lines += [f'### `{name}`', '',
                'Arguments checked against its signature once TensorFlow is loaded.', '']
      continue
    lines += [f'### `{name}`' + (f' (`{arguments.who}`)' if arguments.who != name else ''), '']
    target = optimizers[name]
    declared_any = True
    rows = []
    for argument in arguments.names:
      if argument == LEARNING_RATE:
        continue
      value = default_cell(target, argument, arguments.required)
      if argument in keras_base and (argument == 'name'
                                     or value == default_cell(base_class, argument)):
        continue
      rows.append(f'| `{argument}` | {value} |')
    lines += (['| argument | default |', '|---|---|', *rows, ''] if rows
              else ['The Keras base arguments only.', ''])
  if declared_any:
    lines += ['### Keras base arguments', '',
              '| argument | default |', '|---|---|',
              *(f'| `{a}` | {default_cell(base_class, a)} |'
                for a in base_names if a != 'name'),
              '', "`name` defaults to the optimizer's own name.", '']
  return lines


def lr_policy_section(registries):
  policies = registries['lr_policy']
  also = {}
  for alias, steps in schema.DURATION_KEYS.items():
    also.setdefault(steps, []).append(alias)
  lines = ['## `lr_policy_params`', '',
           f'The arguments of the policy `lr_policy` names, but `{GLOBAL_STEP}`, which the '
           'trainer passes (`ARGUMENTS` in `optimizers/registry.py`, defaults from the '
           'function). A duration in steps may be given in epochs or as a fraction of the '
           "run's updates instead (the column \"or\"); the trainer converts it once it knows "
           'the steps per epoch and the length of the run.', '']
  for name in policies:
    arguments = policies.facts(name)['ARGUMENTS']
    target = policies[name]
    lines += [f'### `{name}`', '', '| argument | default | or |', '|---|---|---|']
    for argument in arguments.names:
      if argument == GLOBAL_STEP:
        continue
      aliases = ', '.join(f'`{a}`' for a in also.get(argument, ()))
      lines.append(f'| `{argument}` | {default_cell(target, argument, arguments.required)} | '
                   f'{aliases} |')
    lines.append('')
  return lines


def loss_scaling_section():
  spelled = {algo.lower(): algo for algo in validation.LOSS_SCALING_ALGOS}
  lines = ['## `loss_scaling_params`', '',
           'The parameters of the automatic loss scaler `loss_scaling` names (any case), '
           'checked by `optimizers/validation.py`; a fixed scale takes none. docs/math.md gives '
           'the rules they drive.', '']
  for key, defaults in validation.LOSS_SCALER_DEFAULTS.items():
    lines += [f'### `{spelled.get(key, key)}`', '', '| parameter | default |', '|---|---|',
              *(f'| `{p}` | {code(v)} |' for p, v in defaults.items()), '']
  return lines


def initializer_section():
  """Each name ``initializer`` takes: the function or class it is, its arguments, the Keras initializer."""
  lines = ['## `initializer_params`', '',
           'The arguments of the initializer `initializer` names (`models/initializer_names.py`): '
           "TensorFlow 1's names and defaults for TensorFlow 1's functions, Keras' for Keras' "
           "(a Keras class name reads as its name). `variance_scaling_initializer` is "
           "`tf.contrib.layers.variance_scaling_initializer` when given that function's "
           "arguments (`factor`, `uniform`, a mode in capitals); "
           "`contrib.layers.variance_scaling_initializer` (what a Python config's "
           "`tf.contrib.layers.variance_scaling_initializer` reads as) is that function with "
           "its own defaults. `seed`: kernel k of the model "
           'draws with seed + k; without it, each kernel takes a seed from Python\'s generator, '
           'which `random_seed` seeds. The last column is the Keras initializer each kernel is '
           'drawn with at the defaults.', '',
           '| initializer | is | arguments and defaults | drawn as |', '|---|---|---|---|']
  entries = list(initializer_names.NAMES.items())
  entries.insert(1, ('variance_scaling_initializer', initializer_names.CONTRIB_VARIANCE_SCALING))
  for name, entry in entries:
    defaults = {key: param.default for key, param in entry.params.items()}
    arguments = ', '.join(
        f'`{key}={param.default!r}`' + (f" ({'/'.join(map(str, param.choices))})"
                                        if param.choices else '')
        for key, param in entry.params.items())
    keras_class, kwargs = entry.keras(defaults)
    made = ', '.join(f'{k}={v!r}' for k, v in kwargs.items())
    lines.append(f'| `{name}` | `{entry.who}` | {cell(arguments) or "none"} | '
                 f'`{cell(f"{keras_class}({made})")}` |')
  return lines + ['']


def named_params_section(title, registry_, intro):
  lines = [f'## `{title}`', '', intro, '']
  for name in registry_:
    lines += [f'### `{name}`', '', *param_table(registry_.facts(name).get('PARAMS', {})), '']
  return lines


def task_keys_section(registries):
  """The keys each task owns, written at the top level of that task's configs."""
  from framework.tasks import TASKS  # pylint: disable=import-outside-toplevel
  lines = []
  for name in TASKS:
    keys = TASKS.facts(name).get('CONFIG_KEYS')
    if keys:
      lines += [f'### The {name} task\'s keys', '',
                f'Written at the top level of a config of the {name} task; a config of another '
                'task refuses them unless they keep their defaults.', '',
                *param_table(keys, registries), '']
  return lines


def reference():
  """The generated block, markers included."""
  tf_import.import_tensorflow()  # the defaults are read from the classes and functions
  registries = config_lib.default_registries()
  lines = [BEGIN, f'<!-- written by {COMMAND}; edit the declarations, not this block -->', '',
           '## Top-level keys', '',
           'A nested key (`larc_params.larc_eta`) follows its parent.', '',
           *param_table(schema.SCHEMA, registries), '',
           *task_keys_section(registries),
           *named_params_section('model_params', registries['model'],
                                 'What each model declares (`PARAMS`, `models/schemas.py`).'),
           *named_params_section('data_layer_params', registries['data_layer'],
                                 'What each data layer declares (`PARAMS`, in '
                                 '`data/<layer>_facts.py`).'),
           *optimizer_section(registries),
           *lr_policy_section(registries),
           *loss_scaling_section(),
           *initializer_section(),
           END]
  return '\n'.join(lines) + '\n'


def page_with(text, block):
  """``text`` with the block between the markers replaced; ValueError without the markers."""
  start, end = text.find(BEGIN), text.find(END)
  if start < 0 or end < start:
    raise ValueError(f'no {BEGIN} ... {END} block')
  rest = text[end + len(END):]
  return text[:start] + block + (rest[1:] if rest.startswith('\n') else rest)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--check', action='store_true',
                      help='only say whether the page is up to date (exit 1 when it is not)')
  parser.add_argument('--page', default=PAGE, help='the page holding the block (docs/config.md)')
  args = parser.parse_args(argv)
  return files.refresh_generated_page(args.page, lambda text: page_with(text, reference()), args.check,
                                      COMMAND)

if __name__ == '__main__':
  sys.exit(main())
