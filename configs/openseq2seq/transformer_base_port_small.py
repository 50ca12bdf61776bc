"""transformer_base_port.py at a size a CPU trains: the port's keys, its width and depth made small.

``small_transformer`` of transformer_big_port_small.py: 2 + 2 layers of width 64 (the port: 6 +
6 of 512), beam 2, a warm-up of 100 steps; one process started by run.py.
The rest is the port's, float32 as it is: the parallel files under
``WMT_DATA_ROOT``, LazyAdam, the Transformer schedule, label smoothing 0.1.
On CMUdict's words written as parallel files (docs/openseq2seq.md):

  WMT_DATA_ROOT=cmu .venv/bin/python run.py \
      --config=configs/openseq2seq/transformer_base_port_small.py --mode=train_eval \
      --set max_steps=60 --set eval_steps=30 --logdir=runs/g2p_base
"""

from transformer_base_port import base_model  # noqa: F401  (read by run.py)
from transformer_base_port import base_params as port_params
from transformer_base_port import eval_params  # noqa: F401
from transformer_base_port import infer_params  # noqa: F401
from transformer_base_port import train_params  # noqa: F401
from transformer_big_port_small import small_transformer

base_params = small_transformer(port_params)
