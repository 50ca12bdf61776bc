"""Large-batch study, arm (a): momentum SGD with its learning rate tuned at each batch size.

The baseline (Goyal et al. 2017; tuned per batch as Nado et al. 2021 insist):
momentum 0.9, L2 weight decay 5e-4 on the conv and dense kernels, on the
study's shared recipe (``common.py``). ``studies/large_batch/run_study.sh`` runs a
grid of three learning rates at each batch size B, 0.1·sqrt(B/256) times 0.5,
1 and 2 (it holds the linear-scaling value 0.1·B/256 up to 1K), with seed 0,
and seed 1 at the best of them. This file alone is the batch-256 point at lr 0.1:

  .venv/bin/python run.py --config=configs/large_batch/sgd.py --mode=train_eval --logdir=runs/lb_sgd_256

Results: docs/large_batch.md.
"""

import copy

from configs import fashion_mnist_sgd as _baseline
from configs.large_batch import common

# The main SGD baseline's optimizer and weight decay.
base_params = common.arm(_baseline.base_params['optimizer'],
                         _baseline.base_params['optimizer_params'], 0.1,
                         weight_decay=_baseline.base_params['model_params']['weight_decay'])
eval_params = copy.deepcopy(common.eval_params)
