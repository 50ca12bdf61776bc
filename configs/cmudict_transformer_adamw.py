"""Grapheme-to-phoneme conversion on CMUdict: the LAMB config's Transformer trained with AdamW (the baseline).

Launch:
  .venv/bin/python run.py --config=configs/cmudict_transformer_adamw.py --mode=train_eval --logdir=runs/cmudict_transformer_adamw

Result: none recorded yet; docs/sequence.md gives the measured results of the
sequence configs, and docs/large_batch_seq2seq.md compares tuned AdamW with
LAMB on a smaller Transformer from 256 to 16,384 words per batch.

Everything as configs/cmudict_transformer_lamb.py (model, data, batch 512
words, 20 epochs, dtype auto, warm-up over 10 % then linear decay, greedy
dev evaluations and a beam of 4 on the test split), except the update: Keras'
AdamW (Loshchilov and Hutter 2019: Adam with decoupled weight decay, here on
every variable, as Keras' AdamW takes no exclusion list in its constructor)
at the rate Adam trains this Transformer with, 1e-3 at 512 words.
"""

import copy

from configs import cmudict_transformer_lamb as lamb

base_params = copy.deepcopy(lamb.base_params)
base_params['optimizer'] = 'AdamW'
base_params['optimizer_params'] = {
    'beta_1': 0.9,
    'beta_2': 0.999,
    'epsilon': 1e-6,
    'weight_decay': 0.01,
}
# Adam's rate grows with the square root of the global batch B (batch_size_per_gpu
# x workers x iter_size), as LAMB's: 1e-3 at 512 words.
base_params['lr_scaling'] = {'rule': 'sqrt', 'base_learning_rate': 0.001, 'reference_batch': 512}

eval_params = copy.deepcopy(lamb.eval_params)
