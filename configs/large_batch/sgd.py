"""Large-batch study, arm (a): momentum SGD with linear lr scaling and warm-up.

Fashion-MNIST, CIFAR-style ResNet-8, 12 epochs at every batch size. The study
(docs/large_batch.md) sweeps ``batch_size_per_gpu`` over 256, 1K, 4K, 8K and
16K with ``configs/large_batch/sgd_grid.yaml``, which sets the learning rate
by the linear scaling rule lr = 0.1·B/256 (Goyal et al. 2017):

  bash scripts/large_batch_study.sh

This file alone is the batch-256 point:
  python run.py --config=configs/large_batch/sgd.py --mode=train_eval --logdir=runs/lb_sgd_256

Measured (docs/large_batch.md; test top-1 after 12 epochs, 2-core CPU):
  batch 256: 92.1 % (seeds 0, 1: 92.19, 92.00), 6-7 min per run
  batch 1K: 92.18 %; 4K: 83.76 %; 8K: 44.7 % (66.95, 22.35); 16K: 17.44 %
The linear scaling rule holds to 1K here and breaks from 4K on.

Recipe: the SGD baseline's (configs/fashion_mnist_sgd.py: momentum 0.9, L2
weight decay 5e-4 on the weights only, polynomial decay of power 2 to 0)
with 12 epochs instead of 8 and a linear warm-up over the first 2 of them.
"""

import copy

from configs import fashion_mnist_sgd as _baseline

num_epochs = 12

base_params = copy.deepcopy(_baseline.base_params)
base_params.update({
    'num_epochs': num_epochs,
    'save_checkpoint_steps': 500,
    'num_checkpoints': 2,
    'print_loss_steps': 10,
    'save_summaries_steps': 5,
})
base_params['lr_policy_params'].update({
    'learning_rate': 0.1,  # at batch 256; sgd_grid.yaml re-derives it per batch
    'warmup_epochs': 2,
    'decay_epochs': num_epochs,
})

eval_params = copy.deepcopy(_baseline.eval_params)
