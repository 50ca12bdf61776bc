"""Fashion-MNIST with a CIFAR-style ResNet-8 and momentum SGD: the baseline for LARS.

Launch (about 3 minutes on an idle 2-core AMD EPYC, evaluations included):
  .venv/bin/python run.py --config=configs/fashion_mnist_sgd.py --mode=train_eval --logdir=runs/fashion_mnist_sgd

Expected result (measured on a 2-core AMD EPYC): test top-1
accuracy 91.90 % (top-5 99.86 %) after 8 epochs; 3 min 11 s wall time
(5 min 33 s of CPU) on an otherwise idle machine. At this small batch momentum
SGD is slightly ahead of LARS (90.69 %); the large-batch study compares them
as the batch grows.

Recipe (Goyal et al. 2017): momentum 0.9, lr = 0.1·B/256 (linear scaling
rule) with a linear warm-up, L2 weight decay on the weights only.
"""

batch_size = 256
num_epochs = 8

base_params = {
    'model': 'resnet_cifar',
    'model_params': {'depth': 8, 'weight_decay': 5e-4},
    'data_layer': 'fashion_mnist',
    'data_layer_params': {'augment': False},
    'batch_size_per_gpu': batch_size,
    'num_epochs': num_epochs,
    # Keras' momentum SGD (v <- 0.9 v - lr g; w <- w + v), the update this
    # baseline and the large-batch study's SGD arm were measured with. The name
    # Momentum is TF 1's MomentumOptimizer, as in OpenSeq2Seq (a <- 0.9 a + g;
    # w <- w - lr a), which under this changing rate trains differently.
    'optimizer': 'KerasMomentum',
    'optimizer_params': {'momentum': 0.9},
    'lr_policy': 'poly_decay',
    # Goyal et al.'s linear scaling rule, 0.1 x B/256 of the global batch B
    # (batch_size_per_gpu x workers x iter_size), resolved by the framework.
    'lr_scaling': {'rule': 'linear', 'base_learning_rate': 0.1, 'reference_batch': 256},
    'lr_policy_params': {
        'power': 2.0,
        'warmup_epochs': 1,
        'decay_fraction': 1.0,  # decays over the whole run, however long
    },
    'dtype': 'float32',
    'random_seed': 0,
    'save_checkpoint_steps': 200,
    'num_checkpoints': 3,
    'print_loss_steps': 20,
    'save_summaries_steps': 20,
    'summaries': ['learning_rate', 'global_gradient_norm'],
}

eval_params = {
    'batch_size_per_gpu': 1000,
}
