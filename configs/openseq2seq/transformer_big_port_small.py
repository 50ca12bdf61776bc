"""transformer_big_port.py at a size a CPU trains: the port's keys, its width, depth and precision made small.

:func:`small_transformer` (which transformer_base_port_small.py takes too):
``encoder_params`` and ``decoder_params``
of 2 + 2 layers of width 64 (the port: 6 + 6 of 1024), beam 2, a warm-up of
100 steps (the port: 8000), ``lr_policy_params.d_model`` following the width
as in the port; float32 (a CPU emulates float16, ``mixed``, often ten times
slower); one process started by run.py (``use_horovod: false``).

Everything else is the port's: the parallel files and vocabulary files under
``WMT_DATA_ROOT``, LazyAdam, the Transformer schedule, label smoothing 0.1,
``print_samples_steps``, the eval and infer batch sizes. docs/openseq2seq.md
runs it on CMUdict's words written as parallel files.
"""

import copy

from transformer_big_port import base_model  # noqa: F401  (read by run.py)
from transformer_big_port import base_params as port_params
from transformer_big_port import eval_params  # noqa: F401
from transformer_big_port import infer_params  # noqa: F401
from transformer_big_port import train_params  # noqa: F401


def small_transformer(params, d_model=64):
  """A text port's ``base_params``: 2 + 2 layers of width ``d_model``, beam 2, a warm-up of 100 steps, float32, one process."""
  params = copy.deepcopy(params)
  width = {'hidden_size': d_model, 'num_heads': 4, 'filter_size': 4 * d_model}
  params['encoder_params'].update(width, encoder_layers=2)
  params['decoder_params'].update(width, num_hidden_layers=2, beam_size=2)
  params['lr_policy_params'].update(d_model=d_model, warmup_steps=100)
  params.update(use_horovod=False, dtype='float32', batch_size_per_gpu=64)
  return params


base_params = small_transformer(port_params)
