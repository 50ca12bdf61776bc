"""TensorFlow 1's names, as a Python config reads them here.

OpenSeq2Seq's configs do ``import tensorflow as tf`` and name TF 1's objects:
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

import sys

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
