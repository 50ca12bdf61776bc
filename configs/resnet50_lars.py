"""ImageNet ResNet-50 v1.5 with LARS at a global batch of 8,192 (32 workers x 256).

Launch on 4 machines with 8 GPUs each (the Dockerfile's image; docs/horovod.md):
  export IMAGENET_DIR=/data/imagenet   # TFRecord shards train-* and validation-*
  horovodrun -np 32 -H host1:8,host2:8,host3:8,host4:8 \
      python run.py --config=configs/resnet50_lars.py --mode=train_eval --logdir=runs/resnet50_lars

Without IMAGENET_DIR the data layer is synthetic, for throughput measurements:
  .venv/bin/python run.py --config=configs/resnet50_lars.py --mode=benchmark --bench_steps=20 \
      --set batch_size_per_gpu=32

Precision: mixed_float16 (float16 compute, float32 variables, Backoff loss
scaling) where TensorFlow sees a GPU; float32 on a CPU, which has no float16
arithmetic (emulated float16 made this benchmark 11x slower than float32 on
a 2-core AMD EPYC). Override with --set dtype=...

Recipe (MLPerf ResNet-50 LARS, batch < 16K): base lr 10.0 with 5 warm-up
epochs, polynomial decay of power 2 to 1e-4, LARS eta 0.001, weight decay
2e-4 folded into LARS, batch-norm and bias variables skipped, label smoothing
0.1. Published results for this setting: 75.9 % top-1 is the MLPerf target;
the LARS paper reports 72.9-73.5 % at 8K with 90 epochs and minimal
augmentation. This configuration has not been run to completion on ImageNet
by this project (no GPU cluster); docs/performance.md gives its benchmark mode
on a 2-core AMD EPYC: about 2.6 images/sec at batch 16 in float32.
``configs/resnet50_lars.yaml`` is the same configuration as YAML.
"""

import os

import tensorflow as tf

DATA_DIR = os.environ.get('IMAGENET_DIR')
# configs/resnet50_lars.yaml says mixed_float16: it is the configuration for GPUs.
dtype = 'mixed_float16' if tf.config.list_physical_devices('GPU') else 'float32'

num_workers = 32          # the launch above; the global batch scales with it
batch_size = 256          # per worker
num_epochs = 41

if DATA_DIR:
  data_layer = 'imagenet'
  train_data = {'data_dir': DATA_DIR}
  eval_data = {'data_dir': DATA_DIR}
else:
  data_layer = 'synthetic'
  train_data = {'image_shape': [224, 224, 3], 'num_classes': 1000, 'num_examples': 1281167}
  eval_data = {'image_shape': [224, 224, 3], 'num_classes': 1000, 'num_examples': 50000}

base_params = {
    'model': 'resnet50',
    'model_params': {'weight_decay': 0.0, 'zero_init_residual': True},
    'data_layer': data_layer,
    'data_layer_params': train_data,
    'batch_size_per_gpu': batch_size,
    'num_epochs': num_epochs,
    'optimizer': 'LARS',
    'optimizer_params': {
        'momentum': 0.9,
        'weight_decay': 2e-4,
        'eeta': 0.001,
        'skip_list': ['batch_normalization', 'bias'],
    },
    'lr_policy': 'poly_decay',
    'lr_policy_params': {
        'learning_rate': 10.0,
        'power': 2.0,
        'warmup_epochs': 5,
        'decay_epochs': num_epochs - 5,
        'min_lr': 1e-4,
    },
    'label_smoothing': 0.1,
    'dtype': dtype,
    'loss_scaling': 'Backoff',
    'random_seed': 0,
    'save_checkpoint_steps': 1000,
    'num_checkpoints': 5,
    'eval_steps': 5000,
    'print_loss_steps': 100,
    'save_summaries_steps': 100,
    'summaries': ['learning_rate', 'global_gradient_norm', 'loss_scale'],
}

eval_params = {
    'data_layer_params': eval_data,
    'batch_size_per_gpu': 250,
}
