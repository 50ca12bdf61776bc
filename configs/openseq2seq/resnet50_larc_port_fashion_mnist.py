"""resnet50_larc_port.py on the Fashion-MNIST of this machine: the port's keys, its model and data replaced.

:func:`on_fashion_mnist` (which the other image ports' small variants take
too): Debian's Fashion-MNIST for ImageNet, a ResNet-8 (``model:
resnet_cifar``, with the port's batch-norm settings) for its ResNet-50, which
takes minutes a step on two CPU cores and shrinks 28x28 images to 1x1; one
worker (``num_gpus: 8`` is refused on a machine with fewer GPUs or cores, in
one line), float32. Everything else is the port's: momentum, LARC with
``larc_nu``, ``poly_decay`` over the whole run, the L2 regularizer, the
initializer, the summaries, ``print_samples_steps``. A look in under a minute
of training on two cores:

  .venv/bin/python run.py --config=configs/openseq2seq/resnet50_larc_port_fashion_mnist.py \
      --mode=train_eval --set max_steps=40 --set eval_steps=20 --set print_samples_steps=20 \
      --set print_loss_steps=10 --logdir=runs/resnet50_larc_port
"""

import copy

from resnet50_larc_port import base_params as port_params

# OpenSeq2Seq's keys that an image port's ResNet-50 is given by.
_MODEL_KEYS = ('encoder', 'encoder_params', 'decoder', 'decoder_params', 'loss')


def on_fashion_mnist(params):
  """An image port's ``base_params`` with Fashion-MNIST and a ResNet-8 for ImageNet and ResNet-50."""
  batch_norm = {k: v for k, v in params['encoder_params'].items()
                if k in ('bn_momentum', 'bn_epsilon')}
  params = {k: v for k, v in copy.deepcopy(params).items() if k not in _MODEL_KEYS}
  params.update(num_gpus=1, use_horovod=False, dtype='float32', data_layer='fashion_mnist',
                data_layer_params={}, model='resnet_cifar', model_params=dict(batch_norm, depth=8))
  return params


base_params = on_fashion_mnist(port_params)
eval_params = {'batch_size_per_gpu': 1000}
