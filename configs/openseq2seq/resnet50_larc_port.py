"""OpenSeq2Seq's image2label/resnet-50-v1-larc.py, ported: ResNet-50 with momentum and LARC on ImageNet.

The port keeps the keys of OpenSeq2Seq's config and swaps its classes for
this framework's names (docs/openseq2seq.md, "An image config"):

- ``base_model = Image2Label`` and ``encoder``/``decoder``/``loss``
  (``ResNetEncoder``, ``FullyConnectedDecoder``, ``CrossEntropyLoss``) are
  ``model: resnet50`` with ``model_params`` (the encoder's batch-norm
  settings); the classes come from the data layer (1,000 for ImageNet, where
  OpenSeq2Seq's decoder had 1,001 outputs).
- ``data_layer: ImagenetDataLayer`` is ``data_layer: imagenet``.
- ``tf.contrib.layers.l2_regularizer``, which TensorFlow 2 no longer has, is
  ``tf.keras.regularizers.l2`` with the same ``regularizer_params``; it is
  read as ``regularizer: l2`` (scale * sum(w**2) / 2, as in OpenSeq2Seq).
- ``initializer: tf.variance_scaling_initializer`` is left out: Keras layers
  set their own initializers (He normal kernels here), and a config that
  gives one is refused in one line.

Every other key is OpenSeq2Seq's, read as OpenSeq2Seq reads it: ``num_gpus: 8``
starts 8 workers on a machine with 8 GPUs (one process each, as
``--num_workers=8``), ``larc_nu`` is ``larc_eta``, ``poly_decay`` without
``decay_steps`` decays over the whole run, ``print_samples_steps`` prints the
top classes of a few training images.

On ImageNet (TFRecord shards in data/tf-imagenet):
  .venv/bin/python run.py --config=configs/openseq2seq/resnet50_larc_port.py --mode=train_eval

On the Fashion-MNIST of this machine, for a look (one worker, a few steps):
  .venv/bin/python run.py --config=configs/openseq2seq/resnet50_larc_port.py --mode=train_eval \
      --set data_layer=fashion_mnist --set 'data_layer_params={}' --set num_gpus=1 \
      --set max_steps=20 --set eval_steps=10 --set print_samples_steps=10 --set print_loss_steps=5 \
      --logdir=runs/resnet50_larc_port

Not run to completion on ImageNet by this project (no GPU cluster).
"""

import tensorflow as tf

from optimizers.lr_policies import poly_decay

base_params = {
    'random_seed': 0,
    'use_horovod': False,
    'num_epochs': 100,

    'num_gpus': 8,
    'batch_size_per_gpu': 32,
    'dtype': tf.float32,

    'save_summaries_steps': 2000,
    'print_loss_steps': 100,
    'print_samples_steps': 2000,
    'eval_steps': 5000,
    'save_checkpoint_steps': 5000,
    'logdir': 'experiments/resnet50-imagenet',

    'optimizer': 'Momentum',
    'optimizer_params': {
        'momentum': 0.90,
    },

    'lr_policy': poly_decay,
    'lr_policy_params': {
        'learning_rate': 0.5,
        'power': 2.0,
    },
    'larc_params': {
        'larc_nu': 0.001,
    },

    'regularizer': tf.keras.regularizers.l2,
    'regularizer_params': {
        'scale': 0.0005,
    },
    'summaries': ['learning_rate', 'variables', 'gradients', 'larc_summaries',
                  'variable_norm', 'gradient_norm', 'global_gradient_norm'],

    'model': 'resnet50',
    'model_params': {
        'bn_momentum': 0.9,
        'bn_epsilon': 1e-4,
    },
    'data_layer': 'imagenet',
    'data_layer_params': {
        'data_dir': 'data/tf-imagenet',
    },
}
