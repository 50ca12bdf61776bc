"""The LARS 8K point of the large-batch study as one config (docs/large_batch.md).

Batch 8192 (7 updates per epoch), LARS at lr 2.0·sqrt(8192/256) = 11.31 on
the study's recipe (``lars.py``, ``common.py``):

  python run.py --config=configs/large_batch/lars_8k.py --mode=train_eval --logdir=runs/lars_8k

Measured (docs/large_batch.md, "What was tried so far"), on a 2-core CPU that
other work shared: 90.74 % test top-1 after 48 epochs (336 updates); with
``--set lr_policy_params.power=1.0`` (linear decay), 91.24 %. At 24 epochs
(168 updates) the same point reached 87.39 %, in 37 minutes of wall time.
Memory: about 6.5 GB.
"""

import copy
import math

from configs.large_batch import lars

batch_size = 8192

base_params = copy.deepcopy(lars.base_params)
base_params['batch_size_per_gpu'] = batch_size
base_params['lr_policy_params']['learning_rate'] = round(2.0 * math.sqrt(batch_size / 256), 4)

eval_params = copy.deepcopy(lars.eval_params)
