"""Sequence-to-sequence large-batch study, arm Muon: Keras' orthogonalized momentum, AdamW elsewhere.

Keras 3's Muon (docs/optimizers.md: every attention and feed-forward kernel
takes Nesterov momentum 0.95 orthogonalized by 5 Newton-Schulz iterations,
scaled to Adam's RMS (rms_rate 0.2); the embeddings, which also make the
tied output layer, and every bias and layer-norm vector take AdamW with
beta_1 0.9, beta_2 0.999, epsilon 1e-6), with decoupled weight decay 0.01 on
both, as the AdamW arm. Its RMS matching lets it take Adam's rate (Liu et
al. 2025), so its grid at 256 words is centred on AdamW's tuned rate there.
On the study's shared recipe (``common.py``);
``studies/large_batch/seq2seq_study.py`` tunes the rate at each batch, at a
batch B around Muon's rate tuned at 256 × sqrt(B/256). This file alone is
the batch-256 point at 0.001:

  .venv/bin/python run.py --config=configs/large_batch_seq2seq/muon.py --mode=train_eval --logdir=runs/s2s_muon_256

Results: docs/large_batch_seq2seq.md.
"""

import copy

from configs.large_batch_seq2seq import common

base_params = common.arm('Muon', {
    'momentum': 0.95,
    'nesterov': True,
    'ns_steps': 5,
    'rms_rate': 0.2,
    'adam_beta_1': 0.9,
    'adam_beta_2': 0.999,
    'epsilon': 1e-6,
    'weight_decay': 0.01,
    'adam_weight_decay': 0.01,
}, 0.001)  # the study centres Muon's grid at 256 on AdamW's tuned rate there
eval_params = copy.deepcopy(common.eval_params)
