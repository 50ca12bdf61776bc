"""The ``model_params`` each model builder declares, importable without TensorFlow.

The registry entries of ``models`` point here (their ``PARAMS`` fact), so the
config layer checks a config's ``model_params`` before TensorFlow is loaded;
each builder validates its ``params`` against the same schema.
"""

from core.params import Param
from core.params import non_negative
from core.params import positive

CIFAR_DEPTHS = (8, 14, 20, 32, 44, 56, 110)


def _momentum_check(value):
  return None if 0 <= value < 1 else 'must be in [0, 1)'


COMMON_PARAMS = {
    'weight_decay': Param(float, 1e-4, check=non_negative,
                          doc='L2 on conv/dense kernels: loss += wd / 2 * sum(w**2); 0 disables'),
    'zero_init_residual': Param(bool, False,
                                doc='start the last batch-norm gamma of each residual block at 0'),
    'bn_momentum': Param(float, 0.9, check=_momentum_check, doc='moving-statistics decay'),
    'bn_epsilon': Param(float, 1e-5, check=positive),
    'ghost_batch_size': Param(int, None, check=positive,
                              doc='ghost batch norm: statistics over groups of this many examples '
                                  'of a training batch (None: the whole batch)'),
}

RESNET50_PARAMS = dict(COMMON_PARAMS)

RESNET_CIFAR_PARAMS = {
    'depth': Param(int, 20, choices=CIFAR_DEPTHS, doc='6n + 2 layers; 8 for smoke runs'),
    'width': Param(int, 1, check=positive, doc='channel multiplier of the 16/32/64 stages'),
    'shortcut': Param(str, 'A', choices=('A', 'B'),
                      doc="'A': subsample and zero-pad channels (no parameters); 'B': 1x1 conv + BN"),
    **COMMON_PARAMS,
}
