"""The image classifier's own config keys, written at a config's top level; no TensorFlow.

The config's schema (``framework.config.schema``) holds the keys of every
task; a config holds each key, at its default unless its task is the one
that owns it (a config of another task that sets one is refused in one
line, ``framework.tasks.check_task_keys``).
"""

from core.params import DictParam
from core.params import Param
from core.params import fraction_below_one
from core.params import positive


PRECISE_BN_SCHEMA = {
    'num_batches': Param(int, 20, check=positive, doc='training batches averaged'),
    'batch_size': Param(int, None, check=positive,
                        doc='images per batch (default: batch_size_per_gpu)'),
    'before_each_eval': Param(bool, True, doc='also recompute before every evaluation'),
}

KEYS = {
    'label_smoothing': Param(float, 0.0, check=fraction_below_one,
                             doc='for the classification loss'),
    'precise_bn': DictParam(PRECISE_BN_SCHEMA, None,
                            doc='recompute batch-norm moving statistics as a plain average '
                                'over training batches after training'),
}
