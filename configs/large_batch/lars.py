"""Large-batch study, arm (b): LARS with square-root learning-rate scaling.

LARS (You, Gitman, Ginsburg 2017) with momentum 0.9, eeta 0.002 and weight
decay 5e-4 folded into the LARS gradient; the batch-norm and bias variables are
skipped (no trust ratio, no decay: they take the plain rate), as in the MLPerf
ResNet-50 LARS runs. On the study's shared recipe (``common.py``).
``studies/large_batch/run_study.sh`` sets lr = 2.0·sqrt(B/256) at batch size B.
Unlike the other arms, its schedule decays linearly (power 1) after the
warm-up. This file alone is the batch-256 point; ``lars_8k.py`` is the 8K point:

  .venv/bin/python run.py --config=configs/large_batch/lars.py --mode=train_eval --logdir=runs/lb_lars_256

Results: docs/large_batch.md.
"""

import copy

from configs import fashion_mnist_lars as _main
from configs.large_batch import common

# The main job's LARS settings; lr 2.0·sqrt(B/256), with linear decay and eeta 0.002,
# the two changes the study chose at 8K (docs/large_batch.md, "What was tried so far").
base_params = common.arm(_main.base_params['optimizer'], _main.base_params['optimizer_params'], 2.0)
base_params['optimizer_params']['eeta'] = 0.002
base_params['lr_policy_params']['power'] = 1.0
eval_params = copy.deepcopy(common.eval_params)
