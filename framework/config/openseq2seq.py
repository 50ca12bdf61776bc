"""OpenSeq2Seq's config keys, read as OpenSeq2Seq reads them or refused in one line.

A config written for OpenSeq2Seq runs here once the imports of its classes
(model, encoder, decoder, loss, data layer) are swapped for this framework's
modules (``models.openseq2seq``, ``data.openseq2seq``); its keys keep their
meaning (docs/openseq2seq.md has the whole table):

- ``base_model``, ``encoder``, ``decoder``, ``loss`` and their params: this
  framework's ``model`` and ``model_params``, and ``data_layer`` given as
  OpenSeq2Seq's class its name (:func:`read_classes`);
- TensorFlow 1's names (``tf.train.MomentumOptimizer``, ``tf.float16``) are
  what the framework reads for them as the config is executed (below);
- ``num_gpus``: the workers ``run.py`` starts on this machine, as
  ``--num_workers`` does (:func:`local_workers`); one per process under
  Horovod, whose launcher sets how many.
- ``print_samples_steps``: a few decoded samples (source, reference, output),
  or the top classes of a few images, every N steps (a schema key; the train
  loop prints them through ``framework.run.samples``).
- ``larc_params.larc_nu``: the name of ``larc_eta`` in OpenSeq2Seq's LARC
  configs, read as it with a note.
- ``decay_steps`` of an lr policy that takes it: the run's last step less
  ``begin_decay_at`` when the config gives none (``framework.config.schedule``).
- ``loss_params``: its ``label_smoothing`` is the task's (the image
  classifier's ``label_smoothing``, a sequence model's
  ``model_params.label_smoothing``).
- ``regularizer`` given as a callable: an L2 regularizer
  (``tf.keras.regularizers.l2``, ``tf.contrib.layers.l2_regularizer``'s
  name) is ``regularizer: l2``.
- ``infer_params``: a section of the config file, overlaid for
  ``--mode=infer`` (``framework.config.config_resolve``).
- ``dtype: mixed``: ``mixed_float16`` (``core.precision``).

The keys that have no counterpart here (``gpu_ids``, ``hooks``, ...) are
refused in one line that says what to write instead.
Nothing here imports TensorFlow.

TensorFlow 1's names. OpenSeq2Seq's configs do ``import tensorflow as tf`` and name TF 1's objects:
``tf.train.MomentumOptimizer``, ``tf.contrib.opt.LazyAdamOptimizer``,
``tf.contrib.layers.l2_regularizer``, ``tf.variance_scaling_initializer``,
``tf.train.cosine_decay``, ``tf.float16``. TensorFlow 2 has none of
``tf.contrib``, and ``tf.train`` holds no optimizers. While a Python config
is executed (``framework.config.config_file``), ``import tensorflow`` in it
(and in the modules it imports from its own directory, such as the config a
small variant starts from) is :func:`imported` from :data:`TF`, a namespace
of this module:

- each TF 1 name below is what the framework reads for it: an optimizer its
  registered name (``'Momentum'``, the TF 1 class with TF 1's formula,
  ``optimizers/compat/tf1.py``) or its import path, an lr policy the import
  path of a function with TF 1's signature
  (``optimizers/compat/tf1_lr_policies.py``), the L2 regularizer ``'l2'``, an
  initializer its TF 1 name as a string (the ``initializer`` key reads it
  with TF 1's defaults), a dtype its name (or the ``tf.DType`` itself once
  TensorFlow is loaded);
- every other attribute is TensorFlow 2's (``tf.keras``, ``tf.train.Checkpoint``),
  imported on its first use, so that a config naming only the names below
  is read before TensorFlow loads;
- a name that neither has (``tf.contrib.foo``) is one line naming it and what is read.

The real ``tensorflow`` module is not changed: code outside the config sees
TensorFlow 2 as it is.
"""

import os
import sys

from core.params import ConfigError
from core.params import Param
from core.params import REQUIRED
from core.params import fraction_below_one
from core.registry import is_import_path
from data import DATA_LAYERS
from data.openseq2seq import DATA_LAYER_CLASSES
from framework.engines import local_cluster
from models.openseq2seq import BASE_MODELS

# --- TensorFlow 1's names, as a Python config reads them ------------------------------
# TF 1's classes a config names as its optimizer, and what ``optimizer`` takes for each.
OPTIMIZERS = {
    'train.AdagradOptimizer': 'Adagrad',
    'train.AdamOptimizer': 'Adam',
    'train.FtrlOptimizer': 'Ftrl',
    'train.GradientDescentOptimizer': 'SGD',
    'train.MomentumOptimizer': 'Momentum',
    'train.RMSPropOptimizer': 'RMSProp',
    'contrib.opt.AdamWOptimizer': 'optimizers.compat.tf1:AdamWOptimizer',
    'contrib.opt.LARSOptimizer': 'LARS',
    'contrib.opt.LazyAdamOptimizer': 'optimizers.compat.tf1:LazyAdamOptimizer',
}
# TF 1's schedules a config names as its lr policy (TF 1's arguments, the step as global_step).
LR_POLICIES = {
    'train.cosine_decay': 'optimizers.compat.tf1_lr_policies:cosine_decay',
    'train.piecewise_constant': 'optimizers.compat.tf1_lr_policies:piecewise_constant',
}
REGULARIZERS = {'contrib.layers.l2_regularizer': 'l2'}
# TF 1's initializers, each its TF 1 name: the initializer key reads them with TF 1's defaults.
INITIALIZERS = {
    name: name for name in (
        'constant_initializer', 'glorot_normal_initializer', 'glorot_uniform_initializer',
        'ones_initializer', 'orthogonal_initializer', 'random_normal_initializer',
        'random_uniform_initializer', 'truncated_normal_initializer',
        'uniform_unit_scaling_initializer', 'variance_scaling_initializer', 'zeros_initializer')}
INITIALIZERS['contrib.layers.xavier_initializer'] = 'xavier_initializer'
INITIALIZERS['contrib.layers.xavier_initializer_conv2d'] = 'xavier_initializer_conv2d'
INITIALIZERS['contrib.layers.variance_scaling_initializer'] = (
    'contrib.layers.variance_scaling_initializer')
DTYPES = {name: name for name in ('bfloat16', 'bool', 'float16', 'float32', 'float64', 'int8',
                                  'int16', 'int32', 'int64', 'string', 'uint8')}
NAMES = {**OPTIMIZERS, **LR_POLICIES, **REGULARIZERS, **INITIALIZERS, **DTYPES}

# The namespaces of TF 1 a config reaches through ``tf``, and whether TensorFlow 2 has one
# of that name to serve their other attributes (it has no tf.contrib).
_FORWARDED = {'': True, 'train': True, 'compat': True, 'contrib': False, 'contrib.layers': False,
              'contrib.opt': False}


class UnknownName(AttributeError):
  """A ``tf.`` name of a config that neither TensorFlow 2 nor this module serves."""


class Namespace:
  """``tf`` (``path`` ''), ``tf.train``, ``tf.contrib``... as a config sees it: TF 1's names, then TF 2's."""

  def __init__(self, path):
    self._path = path

  def __repr__(self):
    return f"<TensorFlow 1's names: {self._name('')[:-1]}>"

  def _name(self, attribute):
    return '.'.join(p for p in ('tf', self._path, attribute) if p)

  def __getattr__(self, attribute):
    if attribute.startswith('__'):
      raise AttributeError(attribute)
    key = f'{self._path}.{attribute}' if self._path else attribute
    if key == 'compat.v1':
      return TF
    if key in _FORWARDED:
      return _NAMESPACES[key]
    if key in NAMES:
      if key in DTYPES and 'tensorflow' in sys.modules:
        return getattr(sys.modules['tensorflow'], attribute)
      return NAMES[key]
    if _FORWARDED[self._path]:
      try:
        return getattr(_tensorflow(self._path), attribute)
      except AttributeError:
        pass
    raise UnknownName(self._unknown(attribute))

  def _unknown(self, attribute):
    prefix = f'{self._path}.' if self._path else ''
    ours = sorted(f'tf.{k}' for k in NAMES if k.startswith(prefix))
    what = ("neither TensorFlow 2's nor one of TensorFlow 1's names read here"
            if _FORWARDED[self._path] else "not one of TensorFlow 1's names read here")
    also = "TensorFlow 2's names, and of TensorFlow 1 " if _FORWARDED[self._path] else ''
    return (f'{self._name(attribute)}: {what} (docs/openseq2seq.md#tensorflow-1s-names); '
            f'allowed: {also}{", ".join(ours)}')

  def __dir__(self):
    prefix = f'{self._path}.' if self._path else ''
    return sorted({k[len(prefix):].split('.')[0] for k in list(NAMES) + list(_FORWARDED)
                   if k.startswith(prefix) and k != self._path})


def _tensorflow(path):
  """TensorFlow 2's module (or ``tf.train``, ``tf.compat``) of ``path``, imported quietly."""
  from framework.engines import tf_import  # pylint: disable=import-outside-toplevel
  module = sys.modules.get('tensorflow') or tf_import.import_tensorflow()
  for part in filter(None, path.split('.')):
    module = getattr(module, part)
  return module


_NAMESPACES = {path: Namespace(path) for path in _FORWARDED}
TF = _NAMESPACES['']


def imported(name, fromlist):
  """What ``import name`` (``fromlist`` empty) or ``from name import ...`` gives inside a config."""
  if not fromlist:
    return TF
  value = TF
  for part in name.split('.')[1:]:
    value = getattr(value, part)
  return value


# --- OpenSeq2Seq's keys -----------------------------------------------------------------

# The key of OpenSeq2Seq's model class, which a config file's namespace may hold beside
# base_params (framework.config.config_file reads it there).
BASE_MODEL_KEY = 'base_model'

# OpenSeq2Seq's keys that mean nothing here, and what to write instead.
INSTEAD = {
    'gpu_ids': 'give num_gpus (the number of workers on this machine), or CUDA_VISIBLE_DEVICES',
    'eval_batch_size_per_gpu': 'give eval_params: {batch_size_per_gpu: N}',
    'load_model': 'start from another run\'s weights with run.py --init_checkpoint=LOGDIR',
    'finetune': 'start from another run\'s weights with run.py --init_checkpoint=LOGDIR',
    'restore_best_checkpoint': 'evaluate, export or infer the best checkpoint with run.py '
                               '--checkpoint=best',
    'use_xla_jit': 'give jit_compile: true',
    'bench_start': 'give bench_warmup_steps (the steps benchmark mode does not time)',
    'print_bench_info_steps': 'the progress line shows the examples per second every '
                              'print_loss_steps: drop the key',
    'freeze_variables_regex': 'every trainable variable is trained here: drop the key, or '
                              'make the layers non-trainable in your own model builder',
    'hooks': 'the train loop has no user hooks: drop the key',
    'use_trt': 'export a SavedModel (--mode=export) and convert it with TensorRT yourself',
}

# What a config's loss_params.label_smoothing becomes for each task.
_LABEL_SMOOTHING = {'image_classification': ('label_smoothing',),
                    'sequence_to_sequence': ('model_params', 'label_smoothing')}
LOSS_PARAMS_KEY = 'loss_params'


def _note(notes, text):
  """Appends ``text`` to ``notes`` once (each view of a run is validated on its own)."""
  if notes is not None and text not in notes:
    notes.append(text)


def read_keys(config, notes=None):
  """A resolved config with OpenSeq2Seq's keys read into this framework's, before the schema check.

  Args:
    config: a resolved config (not modified).
    notes: a list the one-line notes are appended to (once each), or None.

  Returns:
    ``(config, loss_params)``: a new dict without ``loss_params``, with
    ``larc_params.larc_nu`` read as ``larc_eta`` and an L2 ``regularizer``
    callable as ``'l2'``; and the ``loss_params`` it held (None when none),
    for :func:`apply_loss_params` once the task is known.

  Raises:
    ConfigError: for a key that has no counterpart here, naming what to write
      instead; ``larc_nu`` and ``larc_eta`` both given; a regularizer callable
      that is no L2 one.
  """
  if not isinstance(config, dict):
    return config, None
  config = read_classes(config, notes)
  for key in config:
    if key in INSTEAD and config[key] is not None:
      raise ConfigError(f'{key}: a key of OpenSeq2Seq that is not read here; {INSTEAD[key]}',
                        key, 'unknown')
  config = {k: v for k, v in config.items() if k not in INSTEAD}
  loss_params = config.pop(LOSS_PARAMS_KEY, None)
  if loss_params is not None and not isinstance(loss_params, dict):
    raise ConfigError(f'{LOSS_PARAMS_KEY}: expected a mapping, got {loss_params!r} '
                      f'({type(loss_params).__name__})', LOSS_PARAMS_KEY, 'invalid')
  larc = config.get('larc_params')
  if isinstance(larc, dict) and 'larc_nu' in larc:
    config['larc_params'] = _larc_eta(larc, notes)
  if callable(config.get('regularizer')):
    config.update(_l2_regularizer(config['regularizer'], config.get('regularizer_params'), notes))
  return config, loss_params


def _larc_eta(larc, notes):
  """``larc_params`` with ``larc_nu`` read as ``larc_eta``."""
  nu = larc['larc_nu']
  if 'larc_eta' in larc and larc['larc_eta'] != nu:
    raise ConfigError(f'larc_params.larc_nu: {nu!r}, but larc_params.larc_eta says '
                      f'{larc["larc_eta"]!r}; they are one setting (the trust coefficient): give '
                      'larc_eta alone', 'larc_params.larc_nu', 'invalid')
  _note(notes, f'note: larc_params.larc_nu: read as larc_eta: {nu!r}, the trust coefficient '
               "(larc_nu is its name in OpenSeq2Seq's LARC configs, larc_eta in its code and "
               'here)')
  return {('larc_eta' if k == 'larc_nu' else k): v for k, v in larc.items()
          if not (k == 'larc_eta' and 'larc_nu' in larc)}


def _l2_regularizer(regularizer, params, notes):
  """``{'regularizer': 'l2', 'regularizer_params': {'scale': s}}`` for an L2 regularizer callable.

  OpenSeq2Seq calls ``regularizer(**regularizer_params)``;
  ``tf.contrib.layers.l2_regularizer(scale)`` adds ``scale * sum(w**2) / 2``,
  which is ``regularizer: l2`` here. Keras' ``L2`` (``tf.keras.regularizers.l2``)
  adds ``l2 * sum(w**2)``: given with Keras' own ``l2`` (or as an instance,
  ``l2(0.0005)``), the scale is twice it; given with OpenSeq2Seq's ``scale``,
  the scale is read as OpenSeq2Seq meant it.
  """
  name = _callable_name(regularizer)
  keras_l2 = _is_keras_l2(regularizer)
  if not keras_l2 and getattr(regularizer, '__name__', '') != 'l2_regularizer':
    raise ConfigError(
        f'regularizer: {name} is not read here; regularizer takes l2 (regularizer_params.scale: '
        'loss += scale * sum(w**2) / 2 over the kernels, as tf.contrib.layers.l2_regularizer), '
        'or put your regularizer on the layers of your own model builder',
        'regularizer', 'invalid')
  params = dict(params or {})
  if not isinstance(regularizer, type) and hasattr(regularizer, 'l2'):  # Keras' L2(0.0005)
    if params:
      raise ConfigError(f'regularizer: {name}({float(regularizer.l2)!r}) holds its factor '
                        'already; drop regularizer_params', 'regularizer_params', 'invalid')
    params = {'l2': float(regularizer.l2)}
  if keras_l2 and 'l2' in params:
    if 'scale' in params:
      raise ConfigError("regularizer_params: give scale (OpenSeq2Seq's) or l2 (Keras'), not both",
                        'regularizer_params', 'invalid')
    l2 = params.pop('l2')
    if isinstance(l2, (int, float)) and not isinstance(l2, bool):
      params['scale'] = 2.0 * l2
      how = f"Keras' l2: {l2!r} adds {l2!r} * sum(w**2), which is scale {2.0 * l2!r}"
    else:
      params['scale'] = l2  # the schema names the bad value
      how = "Keras' l2"
  else:
    how = 'scale * sum(w**2) / 2 over the kernels, as tf.contrib.layers.l2_regularizer'
  _note(notes, f'note: regularizer: {name} read as regularizer: l2 ({how})')
  return {'regularizer': 'l2', 'regularizer_params': params}


def _is_keras_l2(value):
  """Whether ``value`` is Keras' L2 regularizer class (``tf.keras.regularizers.l2``) or one of it."""
  cls = value if isinstance(value, type) else type(value)
  return cls.__name__ == 'L2' and cls.__module__.split('.')[0] in ('keras', 'tf_keras')


def _callable_name(value):
  if not isinstance(value, type) and not hasattr(value, '__qualname__'):
    value = type(value)
  return f'{getattr(value, "__module__", "?")}.{getattr(value, "__qualname__", repr(value))}'


def apply_loss_params(result, loss_params, task, given):
  """``result`` with ``loss_params.label_smoothing`` set where ``task`` keeps it.

  Args:
    result: a validated config of ``task``.
    loss_params: what :func:`read_keys` took from the config, or None.
    task: the config's task name.
    given: the config as given (before its defaults were filled in), to tell
      a label smoothing given twice.

  Returns:
    ``result``, or a new dict.

  Raises:
    ConfigError: for another key of ``loss_params``, or a label smoothing the
      config also gives, differently, in the task's own key.
  """
  if not loss_params:
    return result
  place = _LABEL_SMOOTHING.get(task, ('label_smoothing',))
  own = '.'.join(place)
  for key in loss_params:
    if key != 'label_smoothing':
      raise ConfigError(f'{LOSS_PARAMS_KEY}.{key}: not read here; the loss is the {task} '
                        f"task's, and its one setting is label_smoothing ({LOSS_PARAMS_KEY}."
                        f'label_smoothing, or {own}): drop the key',
                        f'{LOSS_PARAMS_KEY}.{key}', 'unknown')
  value = Param(float, REQUIRED, check=fraction_below_one).validate(
      loss_params['label_smoothing'], f'{LOSS_PARAMS_KEY}.label_smoothing')
  holder = given
  for key in place[:-1]:
    holder = holder.get(key) if isinstance(holder, dict) else None
  if isinstance(holder, dict) and place[-1] in holder and holder[place[-1]] != value:
    raise ConfigError(f'{LOSS_PARAMS_KEY}.label_smoothing: {value!r}, but {own} says '
                      f'{holder[place[-1]]!r}; give one of them',
                      f'{LOSS_PARAMS_KEY}.label_smoothing', 'invalid')
  result = dict(result)
  if len(place) == 2:
    result[place[0]] = dict(result[place[0]], **{place[1]: value})
  else:
    result[place[0]] = value
  return result


# ---------------------------------------------------------------------------
# OpenSeq2Seq's classes: base_model, encoder, decoder, loss, data_layer
#
# A ported config keeps OpenSeq2Seq's form:
#
#   base_model = Image2Label                     # models.openseq2seq
#   base_params = {'encoder': ResNetEncoder, 'encoder_params': {'resnet_size': 50, ...},
#                  'decoder': FullyConnectedDecoder, 'decoder_params': {'output_dim': 1001},
#                  'loss': CrossEntropyLoss, 'data_layer': ImagenetDataLayer, ...}
#
# read_classes reads it, in each view of the config, as model: resnet50 with its
# model_params and data_layer: imagenet: the base model checks its encoder's and
# decoder's params (models.openseq2seq) and says what they become.

PART_KEYS = ('encoder', 'decoder', 'loss')
CLASS_KEYS = (BASE_MODEL_KEY,) + PART_KEYS + ('encoder_params', 'decoder_params')


def read_classes(config, notes):
  """``config`` with OpenSeq2Seq's classes read as this framework's keys.

  Args:
    config: a resolved config view (not modified).
    notes: a list the notes are appended to (each once), or None.

  Returns:
    ``config``, or a new dict: ``data_layer`` given as an OpenSeq2Seq class
    is its name here; ``base_model``, ``encoder``, ``decoder``, ``loss`` and
    their params are ``model`` and ``model_params`` (``loss_params`` stays,
    for the task's label smoothing); ``model_params`` given beside
    ``base_model`` adds the keys OpenSeq2Seq's params do not set.

  Raises:
    ConfigError: one line naming the key: a base model or part this framework
      does not read, a part missing, ``model`` beside ``base_model``, a
      ``model_params`` key the encoder or decoder sets otherwise, or a param
      the base model refuses.
  """
  if not isinstance(config, dict):
    return config
  data_layer = config.get('data_layer')
  if isinstance(data_layer, type) and data_layer in DATA_LAYER_CLASSES:
    config = dict(config, data_layer=data_layer.NAME)
  given = [key for key in CLASS_KEYS if config.get(key) is not None]
  if not given:
    return config
  base = config.get(BASE_MODEL_KEY)
  if base is None:
    raise ConfigError(f"{given[0]}: OpenSeq2Seq's {given[0]} is read with its base_model; allowed: "
                      f'base_model = {" or ".join(_names(BASE_MODELS))} (models.openseq2seq) '
                      'with encoder, decoder and loss, or model and model_params without them',
                      given[0], 'invalid')
  if base not in BASE_MODELS:
    raise ConfigError(f'base_model: {_name(base)} is not read here; allowed: '
                      f'{", ".join(_names(BASE_MODELS))} (models.openseq2seq)',
                      BASE_MODEL_KEY, 'invalid')
  if config.get('model') is not None:
    raise ConfigError(f'model: given beside base_model {base.__name__}, which gives the model '
                      'from its encoder and decoder; allowed: one of them (for a change of the '
                      'model, set encoder_params or decoder_params)', 'model', 'invalid')
  params = {}
  for part in PART_KEYS:
    allowed = base.PARTS[part]
    if config.get(part) not in allowed:
      what = (f'{_name(config[part])} is not read with' if config.get(part) is not None
              else 'required with')
      raise ConfigError(f'{part}: {what} base_model {base.__name__}; allowed: '
                        f'{", ".join(_names(allowed))} (models.openseq2seq)', part, 'invalid')
    params[part] = (config[part].params(config.get(f'{part}_params'), f'{part}_params')
                    if part != 'loss' else dict(config.get('loss_params') or {}))
  read = []
  keys = base.model_keys(params, _num_classes(config), _regularized(config), read)
  for note in read:
    _note(notes, note)
  result = {k: v for k, v in config.items() if k not in CLASS_KEYS}
  result.update(keys, model_params=_with_model_params(keys['model_params'],
                                                      config.get('model_params'), base))
  return result


def _with_model_params(read, given, base):
  """The model_params read from the encoder and decoder, with those the config gives beside them.

  ``model_params`` beside ``base_model`` sets what OpenSeq2Seq's params do not
  (``--set model_params.train_chunk_size=256``); a key they set is given there.
  """
  if given is None:
    return read
  if not isinstance(given, dict):
    raise ConfigError(f'model_params: expected a mapping, got {given!r}', 'model_params', 'invalid')
  for key, value in given.items():
    if key in read and read[key] != value:
      raise ConfigError(f'model_params.{key}: {value!r}, but base_model {base.__name__} reads '
                        f'{read[key]!r} from encoder_params and decoder_params; give it there '
                        '(docs/openseq2seq.md maps the keys)', f'model_params.{key}', 'invalid')
  return dict(read, **given)


def _num_classes(config):
  """The classes the config's data layer gives, where its params declare ``num_classes``; else None."""
  name = config.get('data_layer')
  if not isinstance(name, str) or is_import_path(name) or name not in DATA_LAYERS:
    return None
  declared = DATA_LAYERS.facts(name).get('PARAMS') or {}
  if 'num_classes' not in declared:
    return None
  given = config.get('data_layer_params') or {}
  value = given.get('num_classes', declared['num_classes'].default)
  return value if isinstance(value, int) else None


def _regularized(config):
  scale = (config.get('regularizer_params') or {}).get('scale')
  return config.get('regularizer') is not None and not (isinstance(scale, (int, float))
                                                        and scale == 0)


def _name(value):
  return getattr(value, '__name__', repr(value))


def _names(values):
  return [_name(v) for v in values]


# ---------------------------------------------------------------------------
# num_gpus

_HOROVOD_RANKS = ('HOROVOD_RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK')


def local_workers(config, mode, num_workers=1, environ=None):
  """The workers ``run.py`` starts on this machine for the config's ``num_gpus``, and the line that says so.

  OpenSeq2Seq's ``num_gpus`` is the GPUs one process trains on, one copy of
  the model each (its towers), and is ignored under Horovod, where every
  process is one worker. Here a worker is a process: ``num_gpus: N`` starts N
  workers on this machine, as ``run.py --num_workers=N`` does
  (``multi_worker_mirrored``), and is one worker per process under
  ``horovodrun`` (or ``use_horovod``/``distribution: horovod``), or under a
  cluster another launcher started (``TF_CONFIG``, Slurm), which sets the
  workers. ``--num_workers`` above 1 replaces it. Export and infer run in one
  process.

  Args:
    config: the run's validated main config.
    mode: the run.py mode.
    num_workers: ``--num_workers``.
    environ: the environment (default ``os.environ``).

  Returns:
    ``(workers, line)``: how many workers run.py starts here (1: this
    process runs the mode), and the one line that says what ``num_gpus``
    became, or None (no ``num_gpus``, or a worker a launcher of this machine
    started, whose launcher said it).

  Raises:
    ConfigError: more workers than this machine holds, or ``num_gpus`` above 1
      beside ``distribution: none``.
  """
  gpus = config.get('num_gpus')
  environ = os.environ if environ is None else environ
  if gpus is None or environ.get('LARGEBATCH_NUM_WORKERS'):
    return num_workers, None
  if num_workers > 1:
    return num_workers, (None if num_workers == gpus else
                         f'num_gpus: {gpus} is replaced by --num_workers={num_workers}')
  rank = next((environ[v] for v in _HOROVOD_RANKS if v in environ), None)
  if rank is not None or config.get('use_horovod') or config.get('distribution') == 'horovod':
    line = (f'num_gpus: {gpus} is read as 1, as OpenSeq2Seq reads it under Horovod: every '
            'process is one worker, and horovodrun -np sets how many')
    return 1, line if rank in (None, '0') else None
  if environ.get('TF_CONFIG', '').strip() or local_cluster.slurm_tasks(environ) > 1:
    launcher = 'TF_CONFIG' if environ.get('TF_CONFIG', '').strip() else 'srun'
    return 1, (f'num_gpus: {gpus} is not used: this process is one worker of the cluster '
               f'{launcher} describes, which sets how many')
  if gpus == 1:
    return 1, 'num_gpus: 1 is one worker, this process'
  if mode in ('export', 'infer'):
    return 1, f'num_gpus: {gpus} is not used: --mode={mode} runs in one process'
  if config.get('distribution') == 'none':
    raise ConfigError(f'num_gpus: {gpus} starts {gpus} workers, but distribution: none trains in '
                      'one process; set num_gpus: 1, or distribution: auto',
                      'num_gpus', 'invalid')
  most, what = local_cluster.most_workers()
  if gpus > most:
    raise ConfigError(
        f'num_gpus: {gpus} workers on this machine, which has {what}: here each is a process '
        'with its own copy of the model (OpenSeq2Seq put one on each GPU), useful up to one per '
        f'{"GPU" if "GPU" in what else "core"}; allowed: 1 to {most} (--set num_gpus={most}). '
        'For more, start one worker per machine with TF_CONFIG, srun or horovodrun',
        'num_gpus', 'invalid')
  return gpus, (f'num_gpus: {gpus} is {gpus} workers on this machine, as run.py '
                f'--num_workers={gpus} (multi_worker_mirrored, one process each)')


