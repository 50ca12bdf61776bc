"""resnet50_larc_port.py on the Fashion-MNIST of this machine: the port's keys, three of them replaced.

- ``data_layer: fashion_mnist`` (Debian's dataset-fashion-mnist) for ImageNet;
- ``num_gpus: 1``: one worker (8 would be refused on a machine with fewer
  GPUs or cores, in one line);
- ``model: resnet_cifar`` of depth 8 for ResNet-50, which takes minutes a step
  on two CPU cores and shrinks 28x28 images to 1x1 by its last stage.

Everything else is the port's: momentum, LARC with ``larc_nu``, ``poly_decay``
over the whole run, the L2 regularizer, the summaries, ``print_samples_steps``.
A look in under a minute of training on two cores:

  .venv/bin/python run.py --config=configs/openseq2seq/resnet50_larc_port_fashion_mnist.py \
      --mode=train_eval --set max_steps=40 --set eval_steps=20 --set print_samples_steps=20 \
      --set print_loss_steps=10 --logdir=runs/resnet50_larc_port
"""

import copy

from resnet50_larc_port import base_params as port_params

base_params = copy.deepcopy(port_params)
base_params.update({
    'num_gpus': 1,
    'data_layer': 'fashion_mnist',
    'data_layer_params': {},
    'model': 'resnet_cifar',
    'model_params': dict(port_params['model_params'], depth=8),
})
eval_params = {'batch_size_per_gpu': 1000}
