"""Large-batch study, arm (b): LARS with warm-up and polynomial decay (power 2).

Fashion-MNIST, CIFAR-style ResNet-8, 12 epochs at every batch size. The study
(docs/large_batch.md) sweeps ``batch_size_per_gpu`` over 256, 1K, 4K, 8K and
16K with ``configs/large_batch/lars_grid.yaml``, which sets the learning rate
by square-root scaling, lr = 2.0·sqrt(B/256):

  bash scripts/large_batch_study.sh

This file alone is the batch-256 point:
  python run.py --config=configs/large_batch/lars.py --mode=train_eval --logdir=runs/lb_lars_256

Measured (docs/large_batch.md; test top-1 after 12 epochs, 2-core CPU):
  batch 256: 91.0 % (seeds 0, 1: 91.29, 90.72), 6-9 min per run
  batch 1K: 90.57 %; 4K: 87.35 %; 8K: 78.5 % (79.81, 77.26); 16K: 26.78 %
At 8K and above the run is too short (84 updates at 8K) for LARS to get
close to batch 256; with 24 epochs LARS at 8K reached 86.91 %.

Recipe: the main job's (configs/fashion_mnist_lars.py: LARS with momentum
0.9, eeta 0.001, weight decay 5e-4 folded into the LARS gradient, batch-norm
and bias variables skipped, polynomial decay of power 2 to 0) with 12 epochs
instead of 8 and a linear warm-up over the first 2 of them.
"""

import copy

from configs import fashion_mnist_lars as _main

num_epochs = 12

base_params = copy.deepcopy(_main.base_params)
base_params.update({
    'num_epochs': num_epochs,
    'save_checkpoint_steps': 500,
    'num_checkpoints': 2,
    'print_loss_steps': 10,
    'save_summaries_steps': 5,
    'summaries': ['learning_rate', 'global_gradient_norm'],
})
base_params['lr_policy_params'].update({
    'learning_rate': 2.0,  # at batch 256; lars_grid.yaml re-derives it per batch
    'warmup_epochs': 2,
    'decay_epochs': num_epochs,
})

eval_params = copy.deepcopy(_main.eval_params)
