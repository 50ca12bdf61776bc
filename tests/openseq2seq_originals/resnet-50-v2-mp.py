# OpenSeq2Seq's example_configs/image2label/resnet-50-v2-mp.py, commit 276afeccaf395c329eb270f5538e1fe8e5b8c4c8
# (https://github.com/NVIDIA/OpenSeq2Seq, Apache License 2.0), as it is below this header's
# three lines; tests/test_openseq2seq_ports.py compares its port with it.
# pylint: skip-file
from open_seq2seq.models import Image2Label
from open_seq2seq.encoders import ResNetEncoder
from open_seq2seq.decoders import FullyConnectedDecoder
from open_seq2seq.losses import CrossEntropyLoss
from open_seq2seq.data import ImagenetDataLayer
from open_seq2seq.optimizers.lr_policies import piecewise_constant, poly_decay
import tensorflow as tf

data_root =""
base_model = Image2Label

base_params = {
  "random_seed": 0,
  "use_horovod": True,
  "num_epochs": 100,

  "num_gpus": 1,
  "batch_size_per_gpu": 128,
  "dtype": "mixed",
  "loss_scaling": "Backoff",

  "save_summaries_steps": 2000,
  "print_loss_steps": 100,
  "print_samples_steps": 2000,
  "eval_steps": 5000,
  "save_checkpoint_steps": 5000,
  "logdir": "logs/rn50/sgd/lr0.02_wd0.0001",

  "optimizer": "Momentum",
  "optimizer_params": {
    "momentum": 0.90,
  },
  "lr_policy": poly_decay,
  "lr_policy_params": {
    "learning_rate": 0.4,  # 8 GPU-s ,
    "power": 2,
  },

  "initializer": tf.variance_scaling_initializer,

  "regularizer": tf.contrib.layers.l2_regularizer,
  "regularizer_params": {
    'scale': 0.0001,
  },
  "summaries": ['learning_rate', 'variables', 'gradients', 'larc_summaries',
                'variable_norm', 'gradient_norm', 'global_gradient_norm'],
  "encoder": ResNetEncoder,
  "encoder_params": {
    'resnet_size': 50,
    "regularize_bn": False,
  },
  "decoder": FullyConnectedDecoder,
  "decoder_params": {
    "output_dim": 1000,
  },
  "loss": CrossEntropyLoss,
  "data_layer": ImagenetDataLayer,
  "data_layer_params": {
    "data_dir": data_root+"data", # "data",
    "image_size": 224,
    "num_classes": 1000,
  },
}
