"""The key point of the sequence-to-sequence large-batch study as one config: LAMB at 8192 words (32 x 256).

Batch 8192 words (about 130 K tokens) as 8 micro-batches of 1024
(``iter_size: 8``), 148 updates in 10 epochs, LAMB at 0.008485, the best
rate of the study's grid at 8192 (0.004242 to 0.06788, centred on the
square-root rule from LAMB's tuned rate at 256 words, 0.006·sqrt(8192/256) =
0.03394), on the study's recipe (``lamb.py``, ``common.py``), evaluated on
the dev split every 18 updates:

  .venv/bin/python run.py --config=configs/large_batch_seq2seq/lamb_8k.py --mode=train_eval --logdir=runs/s2s_lamb_8k

Result: docs/large_batch_seq2seq.md, "The key point as one config".
"""

import copy

from configs.large_batch_seq2seq import lamb

base_params = copy.deepcopy(lamb.base_params)
base_params['batch_size_per_gpu'] = 1024
base_params['iter_size'] = 8
# The best of the study's grid at 8192, to 4 significant digits as the study writes its rates.
base_params['lr_policy_params']['learning_rate'] = 0.008485
# An eighth of the run's 148 updates, as the study sets it at this batch.
base_params['eval_steps'] = 18
base_params['save_checkpoint_steps'] = 18

eval_params = copy.deepcopy(lamb.eval_params)
