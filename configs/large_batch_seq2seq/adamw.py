"""Sequence-to-sequence large-batch study, arm AdamW: Adam with decoupled weight decay, tuned.

Keras' AdamW (Loshchilov and Hutter 2019) with beta_1 0.9, beta_2 0.999,
epsilon 1e-6 and weight decay 0.01 (on every variable: Keras' AdamW takes no
exclusion list), the baseline Nado et al. 2021 found to match LAMB once its
rate is tuned at each batch. On the study's shared recipe (``common.py``);
``studies/large_batch/seq2seq_study.py`` tunes the rate at each batch on a
grid around 0.001 at 256 words and, at a batch B, around the rate tuned at
256 × sqrt(B/256). This file alone is the batch-256 point at 0.001:

  .venv/bin/python run.py --config=configs/large_batch_seq2seq/adamw.py --mode=train_eval --logdir=runs/s2s_adamw_256

Results: docs/large_batch_seq2seq.md.
"""

import copy

from configs.large_batch_seq2seq import common

base_params = common.arm('AdamW', {
    'beta_1': 0.9,
    'beta_2': 0.999,
    'epsilon': 1e-6,
    'weight_decay': 0.01,
}, 0.001)  # the grid's centre at 256; at B, the tuned rate at 256 × sqrt(B/256)
eval_params = copy.deepcopy(common.eval_params)
