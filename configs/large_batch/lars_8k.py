"""The LARS 8K point of the large-batch study as one config (docs/large_batch.md).

Batch 8192 (7 updates per epoch), LARS at lr 2.0·sqrt(8192/256) = 11.31 on
the study's recipe (``lars.py``, ``common.py``) with eeta 0.004, the eeta the
study's grid chose at 8K (the table's "LARS (eeta tuned)" row):

  .venv/bin/python run.py --config=configs/large_batch/lars_8k.py --mode=train_eval --logdir=runs/lars_8k

Result and time: docs/large_batch.md, "Reproduce".
"""

import copy
import math

from configs.large_batch import lars

batch_size = 8192

base_params = copy.deepcopy(lars.base_params)
base_params['batch_size_per_gpu'] = batch_size
# Twice the recipe's: the eeta that won the study's eeta grid at 8K.
base_params['optimizer_params']['eeta'] = 0.004
# To 4 significant digits, as studies/large_batch/run_study.sh sets it: 11.31.
base_params['lr_policy_params']['learning_rate'] = float(f'{2.0 * math.sqrt(batch_size / 256):.4g}')

eval_params = copy.deepcopy(lars.eval_params)
