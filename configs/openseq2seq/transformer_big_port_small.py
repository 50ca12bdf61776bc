"""transformer_big_port.py at a size a CPU trains: the port's keys, its model and precision made small.

- ``model_params``: 2 + 2 layers of width 64 (the port: 6 + 6 of 1024), beam 2, a warm-up of 100 steps (the port: 8000);
  ``lr_policy_params.d_model`` follows the width, as in the port;
- ``dtype: float32``: a CPU emulates float16 (``mixed``), often ten times slower;
- ``use_horovod: false``: one process started by run.py (``num_gpus: 1``).

Everything else is the port's: the parallel files and vocabulary files under
``WMT_DATA_ROOT``, Adam, the Transformer schedule, label smoothing 0.1,
``print_samples_steps``, the eval and infer batch sizes. docs/openseq2seq.md
runs it on CMUdict's words written as parallel files.
"""

import copy

from transformer_big_port import base_params as port_params
from transformer_big_port import eval_params
from transformer_big_port import infer_params
from transformer_big_port import train_params

d_model = 64

base_params = copy.deepcopy(port_params)
base_params.update({
    'use_horovod': False,
    'dtype': 'float32',
    'batch_size_per_gpu': 64,
    'model_params': dict(port_params['model_params'], encoder_layers=2, decoder_layers=2,
                         d_model=d_model, num_heads=4, ff_size=4 * d_model, beam_size=2),
    'lr_policy_params': dict(port_params['lr_policy_params'], d_model=d_model, warmup_steps=100),
})
