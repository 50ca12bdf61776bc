"""Large-batch optimizers, loss scaling, learning-rate policies and ``optimize_loss``.

``import optimizers`` loads no TensorFlow: the registries
(``OPTIMIZER_CLS_NAMES``, ``optimizers.registry.LR_POLICIES``) and the names
of ``optimizers.validation`` are ready at once, and every class and function
below is imported on first access (``optimizers.LARSOptimizer``, ``from
optimizers import optimize_loss``). When Keras is loaded already, the Keras
optimizer classes are imported with the package, so ``keras.models.load_model``
finds them by their registered names.
"""

import sys

from core.lazy import lazy_exports
from optimizers.registry import OPTIMIZER_CLS_NAMES
from optimizers.validation import SUMMARY_NAMES as OPTIMIZER_SUMMARIES

_EXPORTS = {
    'AGNOptimizer': 'optimizers.agn:AGNOptimizer',
    'AutomaticLossScaler': 'optimizers.automatic_loss_scaler:AutomaticLossScaler',
    'LossScaleOptimizer': 'optimizers.compat.loss_scale_optimizer:LossScaleOptimizer',
    'LAMB': 'optimizers.lamb:LAMB',
    'LARSOptimizer': 'optimizers.lars:LARSOptimizer',
    'MixedPrecisionLossScaleOptimizer':
        'optimizers.compat.loss_scale_optimizer:MixedPrecisionLossScaleOptimizer',
    'MixedPrecisionOptimizerWrapper':
        'optimizers.compat.loss_scale_optimizer:MixedPrecisionOptimizerWrapper',
    'GradientPipeline': 'optimizers.pipeline:GradientPipeline',
    'UpdateSettings': 'optimizers.settings:UpdateSettings',
    'MomentumOptimizer': 'optimizers.compat.tf1:MomentumOptimizer',
    'KerasMomentum': 'optimizers.lars:KerasMomentum',
    'GradientDescentOptimizer': 'optimizers.compat.tf1:GradientDescentOptimizer',
    'AdamOptimizer': 'optimizers.compat.tf1:AdamOptimizer',
    'LazyAdamOptimizer': 'optimizers.compat.tf1:LazyAdamOptimizer',
    'AdamWOptimizer': 'optimizers.compat.tf1:AdamWOptimizer',
    'RMSPropOptimizer': 'optimizers.compat.tf1:RMSPropOptimizer',
    'AdagradOptimizer': 'optimizers.compat.tf1:AdagradOptimizer',
    'clear_pipelines': 'optimizers.compat.openseq2seq:clear_pipelines',
    'find_pipeline': 'optimizers.compat.openseq2seq:find_pipeline',
    'get_pipeline': 'optimizers.compat.openseq2seq:get_pipeline',
    'get_regularization_loss': 'optimizers.compat.openseq2seq:get_regularization_loss',
    'optimize_loss': 'optimizers.compat.openseq2seq:optimize_loss',
}
# The classes Keras saves by registered name ('largebatch>LARSOptimizer').
_KERAS_SAVEABLE = ('LARSOptimizer', 'LAMB', 'MomentumOptimizer', 'KerasMomentum',
                   'GradientDescentOptimizer', 'AdamOptimizer', 'LazyAdamOptimizer',
                   'AdamWOptimizer', 'RMSPropOptimizer', 'AdagradOptimizer', 'LossScaleOptimizer')

__all__ = ['OPTIMIZER_CLS_NAMES', 'OPTIMIZER_SUMMARIES'] + sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if 'keras' in sys.modules:
  for _name in _KERAS_SAVEABLE:
    __getattr__(_name)
