"""Large-batch study, arm (b): LARS with square-root learning-rate scaling.

LARS (You, Gitman, Ginsburg 2017) with momentum 0.9, eeta 0.001 and weight
decay 5e-4 folded into the LARS gradient; the batch-norm and bias variables are
skipped (no trust ratio, no decay: they take the plain rate), as in the MLPerf
ResNet-50 LARS runs. On the study's shared recipe (``common.py``).
``scripts/large_batch_study.sh`` sets lr = 2.0·sqrt(B/256) at batch size B.
This file alone is the batch-256 point; ``lars_8k.py`` is the 8K point:

  python run.py --config=configs/large_batch/lars.py --mode=train_eval --logdir=runs/lb_lars_256

Results: docs/large_batch.md.
"""

import copy

from configs.large_batch import common

base_params = copy.deepcopy(common.base_params)
base_params.update({
    'optimizer': 'LARS',
    'optimizer_params': {
        'momentum': 0.9,
        'weight_decay': 5e-4,
        'eeta': 0.001,
        'skip_list': ['batch_normalization', 'bias'],
    },
})
base_params['lr_policy_params']['learning_rate'] = 2.0  # 2.0·sqrt(B/256)

eval_params = copy.deepcopy(common.eval_params)
