"""The large-batch study's shared recipe (docs/large_batch.md): what every arm and batch size has.

Fashion-MNIST without augmentation, the CIFAR-style ResNet-8 of the main job,
float32, one process on the CPU, and the same number of epochs at every batch
size. The arms (``sgd.py``, ``lars.py``, ``lamb.py``) add the optimizer and its
learning rate; ``studies/large_batch/run_study.sh`` sets the batch size (16K as
two micro-batches of 8K, ``iter_size: 2``) and the learning rate per point.

- **Budget:** ``num_epochs`` epochs at every batch size, so the number of
  updates falls as the batch grows (7 updates per epoch at 8K).
- **Schedule:** linear warm-up from 0 over the first ``warmup_fraction`` of
  the updates, then polynomial decay of power 2 to 0 at the last update. As a
  fraction of the run, the warm-up is the same share of training at every
  batch size (MLPerf's large-batch LARS runs warm up over 25-45 %).
- **Ghost batch norm over 256 images** (Hoffer et al. 2017): every batch size
  normalises with the statistics of 256-image groups, those batch 256 has;
  at 256 it is plain batch norm.
- **Precise batch-norm statistics** before every evaluation and at the end:
  the moving statistics are recomputed as plain averages over 20 training
  batches of 256 (the weights change fast in a run of a few hundred updates,
  and an exponential average trails them).
- **Label smoothing 0.1** on the training loss.
"""

import copy

num_epochs = 48
warmup_fraction = 0.15

base_params = {
    'model': 'resnet_cifar',
    'model_params': {'depth': 8, 'weight_decay': 0.0, 'ghost_batch_size': 256},
    'data_layer': 'fashion_mnist',
    'data_layer_params': {'augment': False},
    'batch_size_per_gpu': 256,
    'num_epochs': num_epochs,
    'lr_policy': 'poly_decay',
    'lr_policy_params': {
        'learning_rate': 0.1,  # each arm sets its own
        'power': 2.0,
        'warmup_fraction': warmup_fraction,
        'decay_fraction': 1.0 - warmup_fraction,  # so the rate reaches 0 at the last update
        'min_lr': 0.0,
    },
    'label_smoothing': 0.1,
    'precise_bn': {'num_batches': 20, 'batch_size': 256, 'before_each_eval': True},
    'dtype': 'float32',
    'random_seed': 0,
    # A run interrupted by the end of a session starts again from nothing
    # (scripts/sweep.py), so only the final checkpoint is written.
    'save_checkpoint_steps': None,
    'num_checkpoints': 1,
    'print_loss_steps': 10,
    'save_summaries_steps': 5,
    'summaries': ['learning_rate', 'global_gradient_norm'],
}

eval_params = {
    'batch_size_per_gpu': 1000,
}


def arm(optimizer, optimizer_params, learning_rate, weight_decay=0.0):
  """``base_params`` of one arm: the shared recipe with its optimizer and lr at batch 256.

  Args:
    optimizer, optimizer_params: the arm's optimizer and its parameters.
    learning_rate: the peak learning rate at batch 256.
    weight_decay: ``model_params.weight_decay`` (L2 on conv and dense kernels).
  """
  params = copy.deepcopy(base_params)
  params.update({'optimizer': optimizer, 'optimizer_params': copy.deepcopy(optimizer_params)})
  params['model_params']['weight_decay'] = weight_decay
  params['lr_policy_params']['learning_rate'] = learning_rate
  return params
