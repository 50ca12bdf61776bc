"""Fashion-MNIST with a CIFAR-style ResNet-8 and LARS: the framework's main job.

Launch (about 3 minutes on an idle 2-core AMD EPYC, evaluations included):
  .venv/bin/python run.py --config=configs/fashion_mnist_lars.py --mode=train_eval --logdir=runs/fashion_mnist_lars

Expected result (measured on a 2-core AMD EPYC): test top-1
accuracy 90.69 % (top-5 99.79 %) after 8 epochs; 3 min 8 s wall time
(5 min 27 s of CPU) on an otherwise idle machine.

Recipe (You, Gitman, Ginsburg 2017): LARS with momentum 0.9, weight decay
folded into the LARS gradient, batch-norm and bias variables skipped, a linear
warm-up then polynomial decay of power 2.
"""

batch_size = 256
num_epochs = 8

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
    # 2.0 x sqrt(B/256) of the global batch B (batch_size_per_gpu x workers x
    # iter_size): the rule the large-batch study's tuned LARS rates follow (11.31
    # at 8K, 16 at 16K). Skipped (batch-norm, bias) variables use this rate as
    # is; the others use it times eeta·‖w‖/‖g‖.
    'lr_scaling': {'rule': 'sqrt', 'base_learning_rate': 2.0, 'reference_batch': 256},
    'lr_policy_params': {
        'power': 2.0,
        'warmup_epochs': 1,
        'decay_fraction': 1.0,  # decays over the whole run, however long
        'min_lr': 0.0,
    },
    'dtype': 'float32',
    'random_seed': 0,
    'save_checkpoint_steps': 200,
    'num_checkpoints': 3,
    'print_loss_steps': 20,
    'save_summaries_steps': 20,
    'summaries': ['learning_rate', 'global_gradient_norm', 'loss_scale'],
}

eval_params = {
    'batch_size_per_gpu': 1000,
}
