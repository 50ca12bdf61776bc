"""The LARS 8K point of the large-batch study as one config (docs/large_batch.md).

Batch 8192 (7 updates per epoch), LARS at lr 2.0·sqrt(8192/256) = 11.31 on
the study's recipe (``lars.py``, ``common.py``):

  python run.py --config=configs/large_batch/lars_8k.py --mode=train_eval --logdir=runs/lars_8k

Measured (docs/large_batch.md), seed 0, with this file's recipe (linear decay,
eeta 0.002): **92.25 %** test top-1 after 48 epochs (336 updates; 90 % first
reached at update 161), about 50 minutes on an idle 2-core AMD EPYC (the
study's archived run, docs/results/large_batch_e48/lars/). The previous
round measured 92.01 % on an Intel Xeon, against 92.67 % for its best
batch-256 SGD run. With eeta 0.001: 91.24 %; with that and power-2 decay:
90.74 %; at 24 epochs (168 updates): 87.39 %. Memory: about 6.5 GB.
"""

import copy
import math

from configs.large_batch import lars

batch_size = 8192

base_params = copy.deepcopy(lars.base_params)
base_params['batch_size_per_gpu'] = batch_size
# To 4 significant digits, as scripts/large_batch_study.sh sets it: 11.31.
base_params['lr_policy_params']['learning_rate'] = float(f'{2.0 * math.sqrt(batch_size / 256):.4g}')

eval_params = copy.deepcopy(lars.eval_params)
