"""The optimizer and learning-rate-policy registries, filled without importing TensorFlow.

A config names its optimizer (``optimizer: LARS``, any case) and its lr policy
(``lr_policy: poly_decay``). Both registries name their entries lazily, so the
config layer checks those names, whether the optimizer wraps another one
(``WRAPS_OPTIMIZER``, AGN), and the names of ``optimizer_params`` and
``lr_policy_params`` (``ARGUMENTS``) before TensorFlow is loaded; the class or
function is imported on its first lookup.
"""

import collections
import importlib.metadata
import json
import os

from core.registry import Registry

Arguments = collections.namedtuple('Arguments', ['who', 'names', 'required'])
Arguments.__doc__ = """The keyword arguments an entry accepts, declared so they are known unimported.

``who`` is the class or function name the errors give, ``names`` every
keyword argument, ``required`` those without a default.
tests/optimizers/test_declared_arguments.py checks each against the signature.
"""

# The optimizers' keyword arguments, read from their classes by
# scripts/optimizer_arguments.py into a data file, with the Keras version they
# were read under. Under another version the optimizers declare none, and their
# argument names are checked once the class is imported.
# Without the file (while the script writes it anew) none are declared.
_DECLARED_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'optimizer_arguments.json')
_DECLARED = {'keras_version': None, 'arguments': {}}
if os.path.exists(_DECLARED_PATH):
  with open(_DECLARED_PATH, encoding='utf-8') as _file:
    _DECLARED = json.load(_file)
KERAS_VERSION = _DECLARED['keras_version']

# The weight decay an optimizer applies by its own algorithm, with its default: a
# run takes one source of weight decay, this one unless the config gives the
# model's (model_params.weight_decay), framework/config/validation.py.
# AdamW's (TF 1's) weight_decay is required: a config always gives it.
_OWN_WEIGHT_DECAY = {'AdamW': 0.0, 'LARS': 1e-4, 'LAMB': 0.0, 'Muon': 0.004}
# The arguments that hold an optimizer's own decay, where there are more than
# Keras' weight_decay: Muon decays its orthogonalized matrices by weight_decay
# and the variables of its AdamW fallback by adam_weight_decay (both 0.004).
_OWN_DECAY_ARGUMENTS = {'Muon': ('weight_decay', 'adam_weight_decay')}

# optimizer: where its class lives (imported on the first lookup of its name).
OPTIMIZER_TARGETS = (
    # OpenSeq2Seq's OPTIMIZER_CLS_NAMES: each name is the TensorFlow 1 class it
    # named there, with that class's formula, arguments and defaults (compat/tf1.py).
    ('Adagrad', 'optimizers.compat.tf1:AdagradOptimizer'),
    ('Adam', 'optimizers.compat.tf1:AdamOptimizer'),
    # Keras' Ftrl is TF 1's formula with TF 1's argument names and defaults.
    ('Ftrl', 'keras.optimizers:Ftrl'),
    ('Momentum', 'optimizers.compat.tf1:MomentumOptimizer'),
    ('RMSProp', 'optimizers.compat.tf1:RMSPropOptimizer'),
    ('SGD', 'optimizers.compat.tf1:GradientDescentOptimizer'),
    # OpenSeq2Seq's optimize_loss multiplies this name's weight_decay by the rate.
    ('AdamW', 'optimizers.compat.tf1:AdamW'),
    # The project's own names.
    # Keras' momentum SGD (the rate inside the velocity), fused: what Momentum
    # was before it took TF 1's formula.
    ('KerasMomentum', 'optimizers.lars:KerasMomentum'),
    ('LARS', 'optimizers.lars:LARSOptimizer'),
    ('LAMB', 'optimizers.lamb:LAMB'),
    # Keras 3's sign-of-momentum update (Chen et al. 2023); its decay is Keras'
    # weight_decay, off by default, so it has no own decay.
    ('Lion', 'keras.optimizers:Lion'),
    # Keras 3's Muon (Jordan et al. 2024; Liu et al. 2025): momentum
    # orthogonalized by Newton-Schulz iterations for 2-D variables whose path names
    # no embedding nor any of exclude_layers, AdamW for every other variable.
    ('Muon', 'optimizers.catalog:Muon'),
)


def _keras_version():
  try:
    return importlib.metadata.version('keras')
  except importlib.metadata.PackageNotFoundError:
    return None


OPTIMIZER_CLS_NAMES = Registry('optimizer', case_insensitive=True)
_KNOWN_KERAS = _keras_version() == KERAS_VERSION
for _name, _target in OPTIMIZER_TARGETS:
  _facts = {}
  if _name in _OWN_WEIGHT_DECAY:
    _facts['OWN_WEIGHT_DECAY'] = _OWN_WEIGHT_DECAY[_name]
    _facts['OWN_DECAY_ARGUMENTS'] = _OWN_DECAY_ARGUMENTS.get(_name, ('weight_decay',))
  if _KNOWN_KERAS and _name in _DECLARED['arguments']:
    _declared = _DECLARED['arguments'][_name]
    _facts['ARGUMENTS'] = Arguments(_declared['class'], tuple(_declared['names']),
                                    tuple(_declared['required']))
  OPTIMIZER_CLS_NAMES.register_lazy(_name, _target, **_facts)
# AGN takes optimizer_params for the optimizer it wraps (agn_params.optimizer).
OPTIMIZER_CLS_NAMES.register_lazy('AGN', 'optimizers.agn:AGNOptimizer', WRAPS_OPTIMIZER=True)

_STEP = ('global_step', 'learning_rate')
_DECAY = ('begin_decay_at', 'min_lr')
_LR_POLICIES = (
    ('fixed_lr', (), ()),
    ('piecewise_constant', ('boundaries', 'decay_rates'), ('steps_per_epoch',)),
    ('exp_decay', ('decay_steps', 'decay_rate', 'use_staircase_decay'), _DECAY),
    ('poly_decay', ('decay_steps',), ('power',) + _DECAY + ('warmup_steps',)),
    ('cosine_decay', ('decay_steps',), ('power',) + _DECAY + ('warmup_steps',)),
    ('inv_poly_decay', ('decay_steps', 'min_lr'), ('power', 'begin_decay_at', 'warmup_steps',
                                                   'name')),
    ('transformer_policy', ('d_model', 'warmup_steps'), ('max_lr', 'coefficient', 'dtype')),
)

LR_POLICIES = Registry('lr policy')
for _name, _required, _optional in _LR_POLICIES:
  LR_POLICIES.register_lazy(_name, f'optimizers.lr_policies:{_name}',
                            ARGUMENTS=Arguments(_name, _STEP + _required + _optional,
                                                _STEP + _required))
