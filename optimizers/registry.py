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

from core.registry import Registry

Arguments = collections.namedtuple('Arguments', ['who', 'names', 'required'])
Arguments.__doc__ = """The keyword arguments an entry accepts, declared so they are known unimported.

``who`` is the class or function name the errors give, ``names`` every
keyword argument, ``required`` those without a default.
tests/optimizers/test_declared_arguments.py checks each against the signature.
"""

# The arguments every Keras optimizer takes from its base class, as of this
# Keras version. Under another version the optimizers declare none, and their
# argument names are checked once the class is imported.
KERAS_VERSION = '3.15.1'
KERAS_BASE = ('weight_decay', 'clipnorm', 'clipvalue', 'global_clipnorm', 'use_ema',
              'ema_momentum', 'ema_overwrite_frequency', 'loss_scale_factor',
              'gradient_accumulation_steps', 'name')
_LEARNING_RATE = ('learning_rate',)
_EXCLUSIONS = ('exclude_from_weight_decay', 'exclude_from_layer_adaptation', 'skip_list', 'fused')

# The weight decay an optimizer applies by its own algorithm, with its default: a
# run takes one source of weight decay, this one unless the config gives the
# model's (model_params.weight_decay), framework/config/validation.py.
_OWN_WEIGHT_DECAY = {'AdamW': 0.004, 'LARS': 1e-4, 'LAMB': 0.0, 'Muon': 0.004}
# The arguments that hold an optimizer's own decay, where there are more than
# Keras' weight_decay: Muon decays its orthogonalized matrices by weight_decay
# and the variables of its AdamW fallback by adam_weight_decay (both 0.004).
_OWN_DECAY_ARGUMENTS = {'Muon': ('weight_decay', 'adam_weight_decay')}

_OPTIMIZERS = (
    ('Adagrad', 'keras.optimizers:Adagrad', ('initial_accumulator_value', 'epsilon')),
    ('Adam', 'keras.optimizers:Adam', ('beta_1', 'beta_2', 'epsilon', 'amsgrad')),
    ('Ftrl', 'keras.optimizers:Ftrl', ('learning_rate_power', 'initial_accumulator_value',
                                       'l1_regularization_strength', 'l2_regularization_strength',
                                       'l2_shrinkage_regularization_strength', 'beta')),
    ('Momentum', 'optimizers.lars:MomentumOptimizer', ('momentum', 'use_nesterov', 'nesterov')),
    ('RMSProp', 'keras.optimizers:RMSprop', ('rho', 'momentum', 'epsilon', 'centered')),
    ('SGD', 'keras.optimizers:SGD', ('momentum', 'nesterov')),
    ('AdamW', 'keras.optimizers:AdamW', ('beta_1', 'beta_2', 'epsilon', 'amsgrad')),
    ('LARS', 'optimizers.lars:LARSOptimizer', ('momentum', 'eeta', 'epsilon', 'use_nesterov')
     + _EXCLUSIONS),
    ('LAMB', 'optimizers.lamb:LAMB', ('beta_1', 'beta_2', 'epsilon') + _EXCLUSIONS),
    # Keras 3's sign-of-momentum update (Chen et al. 2023); its decay is Keras'
    # weight_decay, off by default, so it has no own decay.
    ('Lion', 'keras.optimizers:Lion', ('beta_1', 'beta_2')),
    # Keras 3's Muon (Jordan et al. 2024; Liu et al. 2025): momentum
    # orthogonalized by Newton-Schulz iterations for 2-D variables whose path names
    # no embedding nor any of exclude_layers, AdamW for every other variable.
    ('Muon', 'optimizers.catalog:Muon', ('adam_beta_1', 'adam_beta_2', 'adam_weight_decay',
                                       'epsilon', 'exclude_layers', 'exclude_embeddings',
                                       'muon_a', 'muon_b', 'muon_c', 'adam_lr_ratio', 'momentum',
                                       'ns_steps', 'nesterov', 'rms_rate')),
)


def _keras_version():
  try:
    return importlib.metadata.version('keras')
  except importlib.metadata.PackageNotFoundError:
    return None


OPTIMIZER_CLS_NAMES = Registry('optimizer', case_insensitive=True)
_KNOWN_KERAS = _keras_version() == KERAS_VERSION
for _name, _target, _own in _OPTIMIZERS:
  _facts = {}
  if _name in _OWN_WEIGHT_DECAY:
    _facts['OWN_WEIGHT_DECAY'] = _OWN_WEIGHT_DECAY[_name]
    _facts['OWN_DECAY_ARGUMENTS'] = _OWN_DECAY_ARGUMENTS.get(_name, ('weight_decay',))
  if _KNOWN_KERAS:
    _facts['ARGUMENTS'] = Arguments(_target.split(':')[1], _LEARNING_RATE + _own + KERAS_BASE, ())
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
    ('cosine_decay', ('decay_steps',), _DECAY + ('warmup_steps',)),
    ('inv_poly_decay', ('decay_steps', 'min_lr'), ('power', 'begin_decay_at', 'warmup_steps',
                                                   'name')),
    ('transformer_policy', ('d_model', 'warmup_steps'), ('max_lr', 'coefficient', 'dtype')),
)

LR_POLICIES = Registry('lr policy')
for _name, _required, _optional in _LR_POLICIES:
  LR_POLICIES.register_lazy(_name, f'optimizers.lr_policies:{_name}',
                            ARGUMENTS=Arguments(_name, _STEP + _required + _optional,
                                                _STEP + _required))
