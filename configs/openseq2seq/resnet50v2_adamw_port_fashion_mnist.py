"""resnet50v2_adamw_port.py on the Fashion-MNIST of this machine: the port's keys, its model, data and precision replaced.

``on_fashion_mnist`` of resnet50_larc_port_fashion_mnist.py: Fashion-MNIST
for ImageNet, a ResNet-8 for Keras' ResNet50V2, float32 for ``mixed``, one
worker for ``num_gpus: 8``.
The rest is the port's: ``AdamW`` (OpenSeq2Seq's name: the decay multiplied
by the rate), ``tf.train.cosine_decay`` over the whole run, the initializer,
Backoff loss scaling. A look on two cores:

  .venv/bin/python run.py --config=configs/openseq2seq/resnet50v2_adamw_port_fashion_mnist.py \
      --mode=train_eval --set max_steps=40 --set eval_steps=20 --set print_loss_steps=10 \
      --logdir=runs/resnet50v2_adamw_port
"""

from resnet50_larc_port_fashion_mnist import on_fashion_mnist
from resnet50v2_adamw_port import base_params as port_params

base_params = on_fashion_mnist(port_params)
eval_params = {'batch_size_per_gpu': 1000}
