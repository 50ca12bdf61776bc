"""The key point of the sequence-to-sequence large-batch study as one config: LAMB at 8192 words (32 x 256).

Batch 8192 words (about 130 K tokens) as 8 micro-batches of 1024
(``iter_size: 8``), 148 updates in 10 epochs, LAMB at the square-root rule's
rate from LAMB's tuned rate at 256 words, 0.006·sqrt(8192/256) = 0.03394 (the
centre of the study's grid at 8192) on the study's recipe (``lamb.py``, ``common.py``), evaluated on the dev split
every 18 updates:

  .venv/bin/python run.py --config=configs/large_batch_seq2seq/lamb_8k.py --mode=train_eval --logdir=runs/s2s_lamb_8k

Result: not measured yet. scripts/large_batch/seq2seq_study.py runs this
point (with the rest of LAMB's grid at 8192 and, at its best rate, a second
seed); docs/large_batch_seq2seq.md gives what it measured, and this
docstring is to be filled in from there once the point has run.
"""

import copy

from configs.large_batch_seq2seq import lamb

base_params = copy.deepcopy(lamb.base_params)
base_params['batch_size_per_gpu'] = 1024
base_params['iter_size'] = 8
# 0.006·sqrt(8192/256), to 4 significant digits as the study writes its rates.
base_params['lr_policy_params']['learning_rate'] = 0.03394
# An eighth of the run's 148 updates, as the study sets it at this batch.
base_params['eval_steps'] = 18
base_params['save_checkpoint_steps'] = 18

eval_params = copy.deepcopy(lamb.eval_params)
