"""Sequence-to-sequence large-batch study, arm LAMB: the layer-wise adaptive Adam (You et al. 2020).

LAMB with beta_1 0.9, beta_2 0.999, epsilon 1e-6 and decoupled weight decay
0.01; the layer-normalization and bias variables get neither the decay nor
the layer-wise trust ratio (as the main job, configs/cmudict_transformer_lamb.py).
On the study's shared recipe (``common.py``);
``studies/large_batch/seq2seq_study.py`` tunes the rate at each batch on a
grid around 0.003 at 256 words and, at a batch B, around the rate tuned at
256 × sqrt(B/256). This file alone is the batch-256 point at 0.003:

  .venv/bin/python run.py --config=configs/large_batch_seq2seq/lamb.py --mode=train_eval --logdir=runs/s2s_lamb_256

Results: docs/large_batch_seq2seq.md.
"""

import copy

from configs.large_batch_seq2seq import common

_EXCLUDED = ['layer_normalization', 'bias']

base_params = common.arm('LAMB', {
    'beta_1': 0.9,
    'beta_2': 0.999,
    'epsilon': 1e-6,
    'weight_decay': 0.01,
    'exclude_from_weight_decay': _EXCLUDED,
    'exclude_from_layer_adaptation': _EXCLUDED,
}, 0.003)  # the grid's centre at 256; at B, the tuned rate at 256 × sqrt(B/256)
eval_params = copy.deepcopy(common.eval_params)
