"""The optimizer and learning-rate-policy registries, filled without importing TensorFlow.

A config names its optimizer (``optimizer: LARS``, any case) and its lr policy
(``lr_policy: poly_decay``). Both registries name their entries lazily, so the
config layer checks those names, and whether the optimizer wraps another one
(``WRAPS_OPTIMIZER``, AGN), before TensorFlow is loaded; the class or function
is imported on its first lookup.
"""

from core.registry import Registry

OPTIMIZER_CLS_NAMES = Registry('optimizer', case_insensitive=True)
for _name, _target in (('Adagrad', 'keras.optimizers:Adagrad'), ('Adam', 'keras.optimizers:Adam'),
                       ('Ftrl', 'keras.optimizers:Ftrl'),
                       ('Momentum', 'optimizers.momentum:MomentumOptimizer'),
                       ('RMSProp', 'keras.optimizers:RMSprop'), ('SGD', 'keras.optimizers:SGD'),
                       ('AdamW', 'keras.optimizers:AdamW'), ('LARS', 'optimizers.lars:LARSOptimizer'),
                       ('LAMB', 'optimizers.lamb:LAMB')):
  OPTIMIZER_CLS_NAMES.register_lazy(_name, _target)
# AGN takes optimizer_params for the optimizer it wraps (agn_params.optimizer).
OPTIMIZER_CLS_NAMES.register_lazy('AGN', 'optimizers.agn:AGNOptimizer', WRAPS_OPTIMIZER=True)

LR_POLICIES = Registry('lr policy')
for _name in ('fixed_lr', 'piecewise_constant', 'exp_decay', 'poly_decay', 'cosine_decay',
              'inv_poly_decay', 'transformer_policy'):
  LR_POLICIES.register_lazy(_name, f'optimizers.lr_policies:{_name}')
