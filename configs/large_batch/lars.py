"""Large-batch study, arm (b): LARS with warm-up and polynomial decay (power 2).

Fashion-MNIST, CIFAR-style ResNet-8, 12 epochs at every batch size. The study
(docs/large_batch.md) sweeps ``batch_size_per_gpu`` over 256, 1K, 4K, 8K and
16K with ``configs/large_batch/lars_grid.yaml``, which sets the learning rate
by square-root scaling, lr = 2.0·sqrt(B/256):

  bash scripts/large_batch_study.sh

This file alone is the batch-256 point:
  python run.py --config=configs/large_batch/lars.py --mode=train_eval --logdir=runs/lb_lars_256

Recipe (You, Gitman, Ginsburg 2017): LARS with momentum 0.9, eeta 0.001,
weight decay 5e-4 folded into the LARS gradient, batch-norm and bias
variables skipped; a linear warm-up over the first 2 epochs, then
polynomial decay of power 2 to 0.
"""

batch_size = 256
num_epochs = 12

base_params = {
    'model': 'resnet_cifar',
    'model_params': {'depth': 8, 'weight_decay': 0.0},
    'data_layer': 'fashion_mnist',
    'data_layer_params': {'augment': False},
    'batch_size_per_gpu': batch_size,
    'num_epochs': num_epochs,
    'optimizer': 'LARS',
    'optimizer_params': {
        'momentum': 0.9,
        'weight_decay': 5e-4,
        'eeta': 0.001,
        'skip_list': ['batch_normalization', 'bias'],
    },
    'lr_policy': 'poly_decay',
    'lr_policy_params': {
        'learning_rate': 2.0 * (batch_size / 256) ** 0.5,  # the grid file re-derives it per batch
        'power': 2.0,
        'warmup_epochs': 2,
        'decay_epochs': num_epochs,
        'min_lr': 0.0,
    },
    'dtype': 'float32',
    'random_seed': 0,
    'save_checkpoint_steps': 500,
    'num_checkpoints': 2,
    'print_loss_steps': 10,
    'save_summaries_steps': 5,
    'summaries': ['learning_rate', 'global_gradient_norm'],
}

eval_params = {
    'batch_size_per_gpu': 1000,
}
