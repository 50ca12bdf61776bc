"""Large-batch optimizers, loss scaling, learning-rate policies and ``optimize_loss``."""

from optimizers.agn import AGNOptimizer
from optimizers.automatic_loss_scaler import AutomaticLossScaler
from optimizers.keras_loss_scale import LossScaleOptimizer
from optimizers.lamb import LAMB
from optimizers.lars import LARSOptimizer
from optimizers.loss_scale_optimizer import MixedPrecisionLossScaleOptimizer
from optimizers.mp_wrapper import MixedPrecisionOptimizerWrapper
from optimizers.optimizers import OPTIMIZER_CLS_NAMES
from optimizers.optimizers import OPTIMIZER_SUMMARIES
from optimizers.optimizers import GradientPipeline
from optimizers.optimizers import MomentumOptimizer
from optimizers.optimizers import clear_pipelines
from optimizers.optimizers import find_pipeline
from optimizers.optimizers import get_pipeline
from optimizers.optimizers import get_regularization_loss
from optimizers.optimizers import optimize_loss
