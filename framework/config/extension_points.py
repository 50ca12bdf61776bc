"""The shape of your own code at each extension point, checked before it is called.

A config may name its own model, data layer, optimizer and lr policy
(``"package.module:name"``, or the object in a Python config). Each is called
in one way (``docs/your_data.md``):

| key | what it must be | called as |
|---|---|---|
| ``model`` | a function, or a ``keras.Model`` subclass | ``build(model_params, <the task's two sizes>)`` |
| ``data_layer`` | a subclass of ``data.base.DataLayer`` | ``Layer(params, mode, num_workers=, worker_index=)`` |
| ``optimizer`` | a ``keras.optimizers.Optimizer`` subclass, or a function returning an instance of one | ``f(learning_rate=, **optimizer_params)`` |
| ``lr_policy`` | a function | ``policy(global_step, learning_rate=, **lr_policy_params)`` |

:func:`check_shapes` holds what a config names against that table (is it
callable, a class or a function, of the right base class, does its signature
take those arguments) as soon as the config's checks have imported it, so a
mistake is one line naming the key and the shape expected, before anything
is built or written, instead of a ``TypeError`` out of the trainer. A
registered name is the framework's and is not checked. :func:`check_optimizer_result`
calls an optimizer function once and checks what it returns, with the checks
that construct the optimizer.
"""

import inspect
import sys

from core.params import ConfigError
from framework.config import config_resolve

# What the model builder of each task is called with (framework.tasks.*.build_model).
MODEL_ARGUMENTS = {
    'image_classification': ('model_params', 'image_shape', 'num_classes'),
    'sequence_to_sequence': ('model_params', 'source_vocab_size', 'target_vocab_size'),
}

DATA_LAYER_SHAPE = ('a subclass of data.base.DataLayer, built as Layer(params, mode, '
                    'num_workers=, worker_index=)')
OPTIMIZER_SHAPE = ('a keras.optimizers.Optimizer subclass, or a function returning an instance '
                   'of one, called as f(learning_rate=, **optimizer_params)')
LR_POLICY_SHAPE = ('a function called as policy(global_step, learning_rate=, '
                   '**lr_policy_params) that returns the rate')


def model_shape(task):
  """What ``model`` must be for ``task``, in words."""
  arguments = ', '.join(MODEL_ARGUMENTS.get(task, MODEL_ARGUMENTS['image_classification']))
  return f'a function or a keras.Model subclass called as build({arguments})'


def check_shapes(config, registries, task):
  """Refuses a model, data layer, optimizer or lr policy of yours that cannot be called as the run calls it.

  Only what is already imported is checked (an import path that imports,
  or an object of a Python config); a name that does not import is left to
  the name checks, which say why.

  Args:
    config: the config being validated (names or objects at the four keys).
    registries: ``{'model': Registry, ...}`` (``validation.default_registries``).
    task: the config's task (``framework.tasks.task_of``).

  Raises:
    ConfigError: one line naming the key, what it names and the shape expected.
  """
  checks = {'model': lambda obj, name: _check_model(obj, name, task),
            'data_layer': _check_data_layer, 'optimizer': _check_optimizer,
            'lr_policy': _check_lr_policy}
  for key, check in checks.items():
    found = _own_object(config, key, registries)
    if found is not None:
      check(found[0], found[1])


def _own_object(config, key, registries):
  """``(object, how the config names it)`` for the user's own code at ``config[key]``, else None.

  An import path is imported as the name check imports it (TensorFlow first,
  quietly), and one that does not import is refused by it, saying why.
  """
  value, registry = config.get(key), registries.get(key)
  if registry is None:
    return None
  if not isinstance(value, str):
    return value, _name(value)
  if not registry.is_own_code(value):
    return None  # the framework's own name
  config_resolve.check_name(config, key, registries)
  return registry[value], repr(value)


def _name(obj):
  """An object of a Python config as its lines name it: ``module:qualname``, else its repr."""
  qualname = getattr(obj, '__qualname__', None)
  return f'{obj.__module__}:{qualname}' if qualname and hasattr(obj, '__module__') else repr(obj)


def _kind(obj):
  """'a class', 'a function', or 'an int (5)': what the object is, for the lines."""
  if obj is None:
    return 'None'
  if inspect.isclass(obj):
    return 'a class'
  if inspect.isroutine(obj):
    return 'a function'
  text = repr(obj)
  text = text if len(text) <= 40 else text[:37] + '...'
  article = 'an' if type(obj).__name__[:1].lower() in 'aeiou' else 'a'
  return f'{article} {type(obj).__name__} ({text})'


def _signature(obj):
  """The signature of a function or of a class's constructor, or None where Python cannot read it."""
  try:
    return inspect.signature(obj)
  except (TypeError, ValueError):
    return None


def _takes(obj, *args, **kwargs):
  """None when ``obj`` can be called with these arguments, else its signature as text."""
  signature = _signature(obj)
  if signature is None:
    return None
  try:
    signature.bind(*args, **kwargs)
  except TypeError:
    return str(signature)
  return None


def _subclass(obj, module, attribute):
  """Whether the class ``obj`` derives from ``module.attribute``, without importing ``module``.

  A module not imported yet cannot hold a base class of the user's class.
  """
  loaded = sys.modules.get(module)
  base = loaded
  for part in attribute.split('.'):
    base = getattr(base, part, None)
  return base is not None and issubclass(obj, base)


def _refuse(key, name, what, shape):
  raise ConfigError(f'{key}: {name} is {what}; expected {shape}', key, 'invalid')


def _check_model(obj, name, task):
  shape = model_shape(task)
  if not callable(obj):
    _refuse('model', name, f'{_kind(obj)}, not callable', shape)
  if inspect.isclass(obj) and not _subclass(obj, 'keras', 'Model'):
    _refuse('model', name, 'a class that is not a keras.Model subclass', shape)
  arguments = MODEL_ARGUMENTS.get(task, MODEL_ARGUMENTS['image_classification'])
  taken = _takes(obj, *arguments)
  if taken is not None:
    _refuse('model', name, f'{_kind(obj)} taking {taken}', shape)


def _check_data_layer(obj, name):
  if not inspect.isclass(obj):
    what = _kind(obj) if callable(obj) else f'{_kind(obj)}, not callable'
    _refuse('data_layer', name, what, DATA_LAYER_SHAPE)
  if not _subclass(obj, 'data.base', 'DataLayer'):
    _refuse('data_layer', name, 'a class that is not a data.base.DataLayer subclass',
            DATA_LAYER_SHAPE)
  taken = _takes(obj, {}, 'train', num_workers=1, worker_index=0)
  if taken is not None:
    _refuse('data_layer', name, f'a class taking {taken}', DATA_LAYER_SHAPE)


def _check_optimizer(obj, name):
  if _subclass(type(obj), 'keras', 'optimizers.Optimizer'):
    return  # an instance of a Python config: used as it is
  if not callable(obj):
    _refuse('optimizer', name, f'{_kind(obj)}, not callable', OPTIMIZER_SHAPE)
  if getattr(obj, 'WRAPS_OPTIMIZER', False):
    return  # a wrapper takes agn_params, checked with them
  if inspect.isclass(obj) and not _subclass(obj, 'keras', 'optimizers.Optimizer'):
    _refuse('optimizer', name, 'a class that is not a keras.optimizers.Optimizer subclass',
            OPTIMIZER_SHAPE)
  taken = _takes(obj, learning_rate=0.1)
  signature = _signature(obj)
  if taken is not None and signature is not None and not _has_keyword(signature, 'learning_rate'):
    _refuse('optimizer', name, f'{_kind(obj)} taking {taken}, without learning_rate',
            OPTIMIZER_SHAPE)


def _has_keyword(signature, name):
  kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
  return any((p.name == name and p.kind in kinds) or p.kind is inspect.Parameter.VAR_KEYWORD
             for p in signature.parameters.values())


def _check_lr_policy(obj, name):
  if inspect.isclass(obj):
    _refuse('lr_policy', name, 'a class', LR_POLICY_SHAPE)
  if not callable(obj):
    _refuse('lr_policy', name, f'{_kind(obj)}, not callable', LR_POLICY_SHAPE)
  signature = _signature(obj)
  positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                inspect.Parameter.VAR_POSITIONAL)
  if signature is not None and not any(p.kind in positional
                                       for p in signature.parameters.values()):
    _refuse('lr_policy', name, f'a function taking {signature}, without global_step first',
            LR_POLICY_SHAPE)


def check_optimizer_result(optimizer, value, params, learning_rate):
  """Calls the user's optimizer function once and refuses what is not a Keras optimizer.

  A class is constructed by the checks of its arguments
  (``argument_checks.check_by_constructing``); a function can only be judged by
  what it returns. Its own TypeError or ValueError is one line too.

  Args:
    optimizer: the object ``value`` names (or is).
    value: the config's ``optimizer``.
    params: ``optimizer_params``.
    learning_rate: the rate of the trial.

  Raises:
    ConfigError: naming ``optimizer`` and what came back.
  """
  if inspect.isclass(optimizer) or not callable(optimizer):
    return
  name = repr(value) if isinstance(value, str) else _name(value)
  if _subclass(type(optimizer), 'keras', 'optimizers.Optimizer'):
    return
  try:
    made = optimizer(learning_rate=learning_rate, **(params or {}))
  except (TypeError, ValueError) as exc:
    detail = ' '.join(str(exc).split())
    raise ConfigError(f'optimizer_params: rejected by {name}: {detail}', 'optimizer_params',
                      'invalid') from None
  if not _subclass(type(made), 'keras', 'optimizers.Optimizer'):
    _refuse('optimizer', name, f'a function that returned {_kind(made)}', OPTIMIZER_SHAPE)
