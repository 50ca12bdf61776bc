"""OpenSeq2Seq's text2text/en-de/transformer-big.py, ported: the big Transformer on WMT16 en-de.

The port keeps the keys of OpenSeq2Seq's config and swaps its classes for
this framework's names (docs/openseq2seq.md, "A text config"):

- ``base_model = Text2Text`` and ``encoder``/``decoder``/``loss``
  (``TransformerEncoder``, ``TransformerDecoder``,
  ``PaddedCrossEntropyLossWithSmoothing``) are ``model: transformer`` with
  the encoder's and decoder's settings in ``model_params`` (one dropout rate
  for ``relu_dropout`` and ``layer_postprocess_dropout``; ``alpha`` is
  ``length_penalty``, ``extra_decode_length`` is ``decode_length_margin``;
  the special token ids are the data layer's).
- ``data_layer: ParallelTextDataLayer`` is ``data_layer: text_pairs``, which
  reads the same parallel files, vocabulary files and keys.
- ``tf.contrib.opt.LazyAdamOptimizer``, which TensorFlow 2 no longer has, is
  ``Adam`` (the same update for the dense gradients here), with Keras' names
  of its arguments (``beta_1``, ``beta_2``).
- ``data_root`` may be given in the environment, ``WMT_DATA_ROOT``.

Every other key is OpenSeq2Seq's, read as OpenSeq2Seq reads it: ``use_horovod``
with ``num_gpus: 1`` (horovodrun -np sets the workers), ``dtype: mixed``
(float16 compute with float32 variables and Backoff loss scaling),
``loss_params.label_smoothing``, ``print_samples_steps`` (source, reference
and output of a few training pairs), and ``eval_params``/``infer_params``
with their own batch sizes and files.

On 8 GPUs of one machine:
  export WMT_DATA_ROOT=/data/wmt16-ende-sp/
  horovodrun -np 8 -H localhost:8 .venv/bin/python run.py \
      --config=configs/openseq2seq/transformer_big_port.py --mode=train_eval

``transformer_big_port_small.py`` is this config at a size a CPU trains.
Not run to completion on WMT by this project (no GPU cluster).
"""

import os

from optimizers.lr_policies import transformer_policy

d_model = 1024
num_layers = 6

# REPLACE THIS TO THE PATH WITH YOUR WMT DATA (or set WMT_DATA_ROOT); it ends with a slash
data_root = os.path.join(os.environ.get('WMT_DATA_ROOT', '/data/wmt16-ende-sp/'), '')

base_params = {
    'use_horovod': True,
    'num_gpus': 1,  # under Horovod the workers are horovodrun's processes
    'batch_size_per_gpu': 256,  # sentence pairs
    'max_steps': 440000,
    'save_summaries_steps': 100,
    'print_loss_steps': 100,
    'print_samples_steps': 100,
    'eval_steps': 4001,
    'save_checkpoint_steps': 219999,
    'logdir': 'logs/Transformer-big-fp16',
    'dtype': 'mixed',
    'loss_scaling': 'Backoff',

    'optimizer': 'Adam',
    'optimizer_params': {
        'beta_1': 0.9,
        'beta_2': 0.997,
        'epsilon': 1e-09,
    },

    'lr_policy': transformer_policy,
    'lr_policy_params': {
        'learning_rate': 2.0,
        'warmup_steps': 8000,
        'd_model': d_model,
    },

    'model': 'transformer',
    'model_params': {
        'encoder_layers': num_layers,
        'decoder_layers': num_layers,
        'd_model': d_model,
        'num_heads': 16,
        'ff_size': 4 * d_model,
        'attention_dropout': 0.1,
        'dropout': 0.3,
        'beam_size': 4,
        'length_penalty': 0.6,
        'decode_length_margin': 50,
    },

    'loss_params': {
        'label_smoothing': 0.1,
    },
}

train_params = {
    'data_layer': 'text_pairs',
    'data_layer_params': {
        'pad_vocab_to_eight': True,
        'src_vocab_file': data_root + 'm_common.vocab',
        'tgt_vocab_file': data_root + 'm_common.vocab',
        'source_file': data_root + 'train.clean.en.shuffled.BPE_common.32K.tok',
        'target_file': data_root + 'train.clean.de.shuffled.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': True,
        'shuffle_buffer_size': 25000,
        'repeat': True,
        'map_parallel_calls': 16,
        'max_length': 56,
    },
}

eval_params = {
    'batch_size_per_gpu': 16,
    'data_layer': 'text_pairs',
    'data_layer_params': {
        'src_vocab_file': data_root + 'm_common.vocab',
        'tgt_vocab_file': data_root + 'm_common.vocab',
        'source_file': data_root + 'wmt13-en-de.src.BPE_common.32K.tok',
        'target_file': data_root + 'wmt13-en-de.ref.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': False,
        'repeat': False,
        'max_length': 256,
    },
}

infer_params = {
    'batch_size_per_gpu': 1,
    'data_layer': 'text_pairs',
    'data_layer_params': {
        'src_vocab_file': data_root + 'm_common.vocab',
        'tgt_vocab_file': data_root + 'm_common.vocab',
        'source_file': data_root + 'wmt14-en-de.src.BPE_common.32K.tok',
        'target_file': data_root + 'wmt14-en-de.src.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': False,
        'repeat': False,
        'max_length': 256,
    },
}
