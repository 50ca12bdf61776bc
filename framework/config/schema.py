"""The keys a resolved config may hold, their types, defaults and allowed values.

``SCHEMA`` declares every generic top-level key; a task declares its own
keys (``framework.tasks``: the image classifier's ``label_smoothing`` and
``precise_bn``), and :func:`top_level_keys` is both (:func:`check_keys`, the first
check of ``framework.config.validation.validate``, holds a config to it). The settings another package owns are declared there
and only referenced here: the multi-worker engine's in
``framework.engines.schema``, LARC, the allreduce compression, the loss-scaling
algorithms and the summary names in ``optimizers.validation``, the dtype names in
``core.precision``, a model's or data layer's params in ``models.schemas`` and
``data.schemas``. Nothing here imports TensorFlow.
"""

import copy
import inspect
import math
import sys

from core import precision
from core.params import ConfigError
from core.params import DictParam
from core.params import ListParam
from core.params import Param
from core.params import REQUIRED
from core.params import fraction_below_one
from core.params import non_negative
from core.params import positive
from core.params import reject_unknown_keys
from framework.engines.schema import DISTRIBUTION_CHOICES
from framework.engines.schema import DISTRIBUTION_SCHEMA
from framework.tasks import task_keys
from optimizers import validation

# lr_policy_params may give a duration in epochs; the trainer turns it into the
# step-valued argument of the policy with epochs_to_steps once it knows the
# number of steps per epoch.
EPOCH_KEYS = {'warmup_epochs': 'warmup_steps', 'decay_epochs': 'decay_steps',
              'begin_decay_at_epochs': 'begin_decay_at', 'boundary_epochs': 'boundaries'}
# ... or as a fraction of the run's length in updates (warmup_fraction: 0.1 is
# the first tenth of training), converted once the trainer knows that length.
FRACTION_KEYS = {'warmup_fraction': 'warmup_steps', 'decay_fraction': 'decay_steps',
                 'begin_decay_at_fraction': 'begin_decay_at', 'boundary_fractions': 'boundaries'}
DURATION_KEYS = {**EPOCH_KEYS, **FRACTION_KEYS}


class _NameOrObject(Param):
  """A name looked up in a registry, or, from a Python config, the object itself."""

  def __init__(self, what, accepts, default=REQUIRED, doc=''):
    super().__init__(object, default, doc=doc)
    self.what = what
    self.accepts = accepts

  def validate(self, value, path):
    if isinstance(value, str) or self.accepts(value):
      return value
    raise ConfigError(f'{path}: expected a registered name or a {self.what}, got {value!r} '
                      f'({type(value).__name__})')


class _LossScalingParam(Param):
  """A fixed positive scale, or the name of an automatic algorithm."""

  def validate(self, value, path):
    if isinstance(value, str):
      return Param(str, REQUIRED, choices=validation.LOSS_SCALING_ALGOS, case_insensitive=True).validate(value, path)
    return Param((float, str), REQUIRED, check=positive).validate(value, path)


class _DTypeParam(Param):
  """A dtype name, checked by ``core.precision``; a ``tf.DType`` from a Python config becomes its name."""

  def validate(self, value, path):
    return precision.check_dtype(dtype_name(value), path)


def dtype_name(value):
  """The name of a ``tf.DType``; any other value as it is."""
  # TensorFlow is only consulted when a config already imported it.
  tf = sys.modules.get('tensorflow')
  if tf is not None and isinstance(value, tf.dtypes.DType):
    return value.name
  return value


def _anything(value):
  del value
  return True  # models.initializer_names checks it, beside initializer_params


def _at_least_one(value):
  return None if value >= 1 else 'must be >= 1'


def _finite_positive(value):
  return None if math.isfinite(value) and value > 0 else 'must be a finite number > 0'


def _seed(value):
  return None if 0 <= value < 2 ** 32 else 'must be in [0, 2**32)'


REGULARIZER_SCHEMA = {
    'scale': Param(float, REQUIRED, check=non_negative, doc='L2 weight-decay coefficient'),
}

_OPTIONAL_INT = (int, type(None))

LR_SCALING_RULES = ('linear', 'sqrt')

LR_SCALING_SCHEMA = {
    'rule': Param(str, 'linear', choices=LR_SCALING_RULES,
                  doc='linear: base x B/reference_batch (Goyal et al.); sqrt: base x '
                      'sqrt(B/reference_batch) (the LAMB recipes)'),
    'base_learning_rate': Param(float, REQUIRED, check=_finite_positive,
                                doc='the rate at the reference batch'),
    'reference_batch': Param(int, 256, check=positive, doc='the global batch of the base rate'),
}

NOISE_SCALE_SCHEMA = {
    'decay': Param(float, 0.99, check=fraction_below_one,
                   doc="the estimates' moving averages (bias-corrected): about the last "
                       '1/(1 - decay) updates weigh'),
}

SCHEMA = {
    'model': _NameOrObject('callable', callable, doc='registered model name, or the builder itself'),
    'model_params': Param(dict, {}, doc="checked against the model's PARAMS"),
    'data_layer': _NameOrObject('class', inspect.isclass, doc='registered data layer name, or the class'),
    'data_layer_params': Param(dict, {}, doc="checked against the data layer's PARAMS"),
    'batch_size_per_gpu': Param(int, REQUIRED, check=positive, doc='examples per replica per micro-batch'),
    'num_epochs': Param(float, None, check=_finite_positive,
                        doc='training length in epochs (or max_steps): ceil(epochs x micro-batches '
                            'per epoch / iter_size) updates'),
    'max_steps': Param(int, None, check=positive,
                       doc='training length in updates (or num_epochs); where batch_policy grows '
                           'the batch, in run steps: examples over the starting global batch'),
    'optimizer': _NameOrObject('class', inspect.isclass, doc='registered optimizer name, or the class'),
    'optimizer_params': Param(dict, {}, doc="keyword arguments of the optimizer, except learning_rate"),
    'lr_policy': _NameOrObject('callable', callable, 'fixed_lr', doc='registered lr policy, or the function'),
    'lr_policy_params': Param(dict, {}, doc='arguments of the lr policy; *_epochs and *_fraction '
                                            'keys allowed'),
    'lr_scaling': DictParam(LR_SCALING_SCHEMA, None,
                            doc='the base learning rate as a rule of the global batch B = '
                                'batch_size_per_gpu x workers x iter_size, resolved once the '
                                'workers are known (instead of lr_policy_params.learning_rate)'),
    'larc_params': DictParam(validation.LARC_SCHEMA, None, doc='enables LARC when given'),
    'loss_scaling': _LossScalingParam((float, str), 1.0,
                                      doc="a fixed scale, or 'Backoff', 'LogMax', 'dynamic'"),
    'loss_scaling_params': Param(dict, None, doc='parameters of the automatic loss scaler'),
    'dtype': _DTypeParam(str, 'float32', doc='compute precision; auto: mixed_bfloat16 where '
                                             'the GPU or CPU computes bfloat16 natively, else '
                                             'float32'),
    'max_grad_norm': Param(float, None, check=positive, doc='clip gradients to this global norm'),
    'iter_size': Param(int, 1, check=_at_least_one, doc='micro-batches accumulated per update'),
    'noise_scale': Param((bool, str), 'auto', choices=('auto', True, False), case_insensitive=True,
                         doc='measure the gradient noise scale B_simple (docs/critical_batch.md); '
                             'auto: when it costs no extra pass (iter_size >= 2 or 2+ workers); '
                             "true: also on one worker with iter_size 1, from the step's batch "
                             'in two halves'),
    'noise_scale_params': DictParam(NOISE_SCALE_SCHEMA, {}, doc='how the noise scale is smoothed'),
    'batch_policy': _NameOrObject('callable', callable, 'fixed',
                                  doc='the global batch as a policy of the run: fixed, steps, '
                                      "noise_scale, seesaw, or your function 'module:name' "
                                      '(core/batch_policy.py; docs/critical_batch.md); it grows '
                                      'by iter_size'),
    'batch_policy_params': Param(dict, {}, doc='arguments of the batch policy (steps: batches, '
                                               'boundaries or boundary_epochs; noise_scale: '
                                               'factor, max_batch, interval; seesaw: factor '
                                               '(1/sqrt(2); 1 for plain SGD), max_batch)'),
    'regularizer': Param(str, None, choices=('l2',), doc='weight decay added to the loss'),
    'regularizer_params': DictParam(REGULARIZER_SCHEMA, None, doc='scale of the regularizer'),
    'initializer': _NameOrObject('Keras initializer (class or instance)', _anything, None,
                                 doc="the kernels' initializer of the built-in models (their "
                                     'convolutions, dense and attention projections): '
                                     "TensorFlow 1's function name or Keras' name "
                                     '(initializer_params below); None: each model\'s own'),
    'initializer_params': Param(dict, None, doc="its arguments: TensorFlow 1's names and "
                                                "defaults for TensorFlow 1's functions, Keras' "
                                                "for Keras'"),
    'summaries': ListParam(validation.SUMMARY, ['learning_rate', 'global_gradient_norm', 'loss_scale'],
                           doc='optimizer summaries to write'),
    'save_checkpoint_steps': Param(_OPTIONAL_INT, 1000, check=positive, doc='None: no checkpoints'),
    'num_checkpoints': Param(int, 5, check=positive, doc='checkpoints kept'),
    'eval_steps': Param(int, None, check=positive, doc='steps between evaluations in train_eval'),
    'print_loss_steps': Param(int, 100, check=positive, doc='steps between loss log lines'),
    'print_samples_steps': Param(_OPTIONAL_INT, None, check=positive,
                                 doc='steps between printed samples of the training batch: '
                                     'source, reference and output of a few sequences, or the '
                                     'top classes of a few images; None: none (OpenSeq2Seq\'s key)'),
    'save_summaries_steps': Param(_OPTIONAL_INT, 100, check=positive, doc='None: no summaries'),
    'logdir': Param(str, None, doc='run directory; None: nothing written'),
    'auto_resume': Param(bool, False,
                         doc='train: resume when logdir holds a run (checkpoints or config.yaml), '
                             'start one when it is new or empty; as --auto_resume'),
    'import_paths': ListParam(Param(str, REQUIRED), [],
                              doc="directories your own code (model: 'package.module:name', ...) is "
                                  "imported from, relative to the config file; the config file's "
                                  'own directory is always one. A config is code: a name imports '
                                  'and runs its module, so read a config from someone else '
                                  'before running it'),
    'random_seed': Param(int, 0, check=_seed, doc='seed of Python, NumPy and TensorFlow'),
    'distribution': Param(str, 'auto', choices=DISTRIBUTION_CHOICES,
                          doc='the multi-worker engine; auto: horovod under horovodrun, '
                              'multi_worker_mirrored under a TF_CONFIG or Slurm cluster, else none'),
    'distribution_params': DictParam(DISTRIBUTION_SCHEMA, {}, doc='multi-worker engine options'),
    'use_horovod': Param(bool, False, doc='the same as distribution: horovod'),
    'num_gpus': Param(_OPTIONAL_INT, None, check=positive,
                      doc="OpenSeq2Seq's: the workers run.py starts on this machine, as "
                          '--num_workers (one process each); 1 under horovodrun or a TF_CONFIG '
                          'or Slurm cluster, whose launcher sets the workers; None: one'),
    'horovod_params': DictParam(validation.HOROVOD_SCHEMA, {},
                                doc="OpenSeq2Seq's place of distribution_params.compression, "
                                    'still read'),
    'agn_params': Param(dict, None, doc='with optimizer: AGN, the wrapped optimizer and period'),
    'deterministic': Param(bool, False, doc='enable TensorFlow op determinism'),
    'jit_compile': Param(bool, False, doc='XLA-compile the train step'),
    'bench_warmup_steps': Param(int, 5, check=non_negative, doc='steps not timed in benchmark mode'),
}


# The tasks' keys, read from their registrations once: they are declared when the
# tasks are registered, at import, and never change after.
_TASK_KEYS = []


def top_level_keys():
  """Every key a config may hold at its top level: ``SCHEMA``'s and every task's own."""
  if not _TASK_KEYS:
    _TASK_KEYS.append(task_keys())
  return {**SCHEMA, **_TASK_KEYS[0]}


def check_keys(config):
  """The config checked against :func:`top_level_keys`: a new dict with every key, defaults filled in.

  Each key's value is checked by its ``Param`` (the checks of this module and
  of the owners it names are given to them), so this is the one place a
  config's top-level keys are read; ``num_epochs`` and ``max_steps`` are
  given exactly one.

  Raises:
    ConfigError: naming the key of the first mistake.
  """
  if not isinstance(config, dict):
    raise ConfigError(f'config: expected a mapping, got {type(config).__name__}')
  config = copy.deepcopy(config)
  schema = top_level_keys()
  reject_unknown_keys(config, schema, '')
  result = {}
  for key, spec in schema.items():
    if key in config:
      value = config[key]
    elif spec.required:
      raise ConfigError(f'{key}: required key is missing ({spec.doc})')
    else:
      value = copy.deepcopy(spec.default)
    result[key] = spec.validate(value, key)
  given = [key for key in ('num_epochs', 'max_steps') if result[key] is not None]
  if len(given) != 1:
    raise ConfigError(f'num_epochs, max_steps: give exactly one of them, got '
                      f'{"both" if given else "neither"}')
  return result
