"""The multi-worker engine's settings (``distribution``, ``distribution_params``); no TensorFlow.

Declared here, beside the engine that reads them, and referenced by the
config's schema (``framework.config.schema``), so a config is checked
against them before TensorFlow is loaded.
"""

from core.params import Param
from core.params import positive
from optimizers.validation import COMPRESSIONS

_OPTIONAL_INT = (int, type(None))

DISTRIBUTION_CHOICES = ('auto', 'none', 'horovod', 'multi_worker_mirrored')

DISTRIBUTION_SCHEMA = {
    'timeout_seconds': Param(_OPTIONAL_INT, 600, check=positive,
                             doc='multi_worker_mirrored: how long a collective waits for its peers '
                                 'before the run fails (None: for ever)'),
    'implementation': Param(str, 'auto', choices=('auto', 'ring', 'nccl'),
                            doc='multi_worker_mirrored: the all-reduce (auto: NCCL on GPUs, ring '
                                'on CPUs)'),
    'port_base': Param(int, 8888, check=positive,
                       doc='multi_worker_mirrored under Slurm: the first port of a node\'s tasks'),
    'compression': Param(str, 'none', choices=COMPRESSIONS,
                         doc='both engines: fp16 sends the gradients as float16 in the all-reduce '
                             '(horovod_params.compression, the old key, is read too)'),
}
