"""Tasks: what a workload family owns, so that the trainer knows no loss or metric by name.

A task (``framework.tasks.base.Task``) builds the model from the facts its
data layer gives, computes the loss and train metrics of a batch, evaluates
(decoding, for sequence to sequence), names the metric that picks the best
checkpoint and its direction, prints the evaluation's line, and writes the
serving signature of an export. The trainer, the train loop, the
checkpoints, the summaries and the sweep tools read metrics by the names a
task gives. Two are registered:

==========================  ==========================  ======================  ==============
task                        data layers                 best checkpoint by      export takes
==========================  ==========================  ======================  ==============
``image_classification``    image_folder, tfrecord,     ``accuracy`` (higher)   images
                            tfds, fashion_mnist,
                            cifar10, imagenet,
                            synthetic
``sequence_to_sequence``    cmudict                     ``wer`` (lower)         words (strings)
==========================  ==========================  ======================  ==============

A config never names its task: models and data layers declare theirs (a
``TASK`` fact of their registration, or a ``TASK`` attribute of a class or
builder given as an object or as ``"package.module:name"``), and :func:`task_of` checks that the two agree.
A third workload (speech, language modelling) is a new module here, its
entry in ``TASKS`` and the ``TASK`` of its model and data layer; the trainer
does not change.

This package's ``__init__`` loads no TensorFlow: a config's task is checked
with the rest of the config.
"""

from core.params import ConfigError
from core.registry import Registry
from framework.tasks import image_keys

IMAGE_CLASSIFICATION = 'image_classification'
SEQUENCE_TO_SEQUENCE = 'sequence_to_sequence'
# A model and a data layer that declare no task are image classifiers (the
# framework's first family; a user's own builder from a Python config).
DEFAULT_TASK = IMAGE_CLASSIFICATION

# A task's facts: CONFIG_KEYS, the top-level config keys it owns (name -> Param),
# and KEY_HINTS, what to write instead of another task's key (key -> text).
TASKS = Registry('task')
TASKS.register_lazy(IMAGE_CLASSIFICATION,
                    'framework.tasks.image_classification:ImageClassificationTask',
                    CONFIG_KEYS=image_keys.KEYS)
TASKS.register_lazy(SEQUENCE_TO_SEQUENCE,
                    'framework.tasks.sequence_to_sequence:SequenceToSequenceTask',
                    KEY_HINTS={'label_smoothing': 'a sequence model smooths its loss with '
                                                  'model_params.label_smoothing'})


def task_keys():
  """Every task's own top-level config keys, ``{name: Param}``; loads no task."""
  return {key: spec for name in TASKS
          for key, spec in TASKS.facts(name).get('CONFIG_KEYS', {}).items()}


def check_task_keys(config, task):
  """Refuses a key of another task than ``task`` set in a validated config (not at its default).

  A config holds every task's keys, each at its default unless its own
  task's (so the run directory's config.yaml lists the same keys for every task).

  Raises:
    ConfigError: naming the key, the task it belongs to and the config's task.
  """
  hints = TASKS.facts(task).get('KEY_HINTS', {})
  for owner in TASKS:
    if owner == task:
      continue
    for key, spec in TASKS.facts(owner).get('CONFIG_KEYS', {}).items():
      if config.get(key, spec.default) != spec.default:
        hint = f'; {hints[key]}' if key in hints else ''
        raise ConfigError(f'{key}: a setting of the {owner} task ({spec.doc}), but this config '
                          f'is a {task} one{hint}')


def declared_task(value, registry):
  """The task a model or data layer declares (a name in ``registry``, or an object), or None."""
  if isinstance(value, str):
    if value not in registry:
      return None  # the name's own check says it is unknown
    facts = registry.facts(value)
    if 'TASK' in facts or not registry.is_loaded(value):
      return facts.get('TASK')
    value = registry[value]  # an import path, or an entry loaded already
  return getattr(value, 'TASK', None)


def task_of(config, registries):
  """The name of the task of a config, from what its model and data layer declare.

  Args:
    config: a config with ``model`` and ``data_layer`` (names or objects).
    registries: ``{'model': Registry, 'data_layer': Registry}``.

  Returns:
    A name in ``TASKS``.

  Raises:
    ConfigError: the model and the data layer declare different tasks, or an
      unknown one.
  """
  declared = {kind: declared_task(config[kind], registries[kind])
              for kind in ('data_layer', 'model')}
  for kind, task in declared.items():
    if task is not None and task not in TASKS:
      raise ConfigError(f'{kind}: declares the task {task!r}; known tasks: {", ".join(TASKS)}')
  data_task, model_task = declared['data_layer'], declared['model']
  if data_task is not None and model_task is not None and data_task != model_task:
    raise ConfigError(
        f'model: {_name(config["model"])} is a {model_task} model, but data_layer '
        f'{_name(config["data_layer"])} gives {data_task} data; choose a model and a data layer '
        'of the same task')
  return data_task or model_task or DEFAULT_TASK


def _name(value):
  return repr(value) if isinstance(value, str) else getattr(value, '__name__', repr(value))


def make_task(config, eval_config=None, registries=None):
  """The task object of a run (imports TensorFlow).

  Args:
    config: the run's main config (train view, else eval view).
    eval_config: the eval view, or None.
    registries: as :func:`task_of` (default: the models' and data layers').
  """
  if registries is None:
    from data import DATA_LAYERS  # pylint: disable=import-outside-toplevel
    from models import MODELS  # pylint: disable=import-outside-toplevel
    registries = {'model': MODELS, 'data_layer': DATA_LAYERS}
  return TASKS[task_of(config, registries)](config, eval_config)
