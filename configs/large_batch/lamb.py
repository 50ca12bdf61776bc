"""Large-batch study, arm (c): LAMB with square-root learning-rate scaling.

LAMB (You et al. 2020) with beta_1 0.9, beta_2 0.999 and decoupled weight
decay 0.01; the batch-norm and bias variables get neither weight decay nor the
layer-wise trust ratio. On the study's shared recipe (``common.py``).
``studies/large_batch/run_study.sh`` sets lr = 0.005·sqrt(B/256) at batch size B.
This file alone is the batch-256 point:

  .venv/bin/python run.py --config=configs/large_batch/lamb.py --mode=train_eval --logdir=runs/lb_lamb_256

Results: docs/large_batch.md.
"""

import copy

from configs.large_batch import common

_EXCLUDED = ['batch_normalization', 'bias']

base_params = common.arm('LAMB', {
    'beta_1': 0.9,
    'beta_2': 0.999,
    'weight_decay': 0.01,
    'exclude_from_weight_decay': _EXCLUDED,
    'exclude_from_layer_adaptation': _EXCLUDED,
}, 0.005)  # lr 0.005·sqrt(B/256)
eval_params = copy.deepcopy(common.eval_params)
