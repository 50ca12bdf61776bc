"""The key point of the sequence-to-sequence large-batch study as one config: LAMB at 8192 words (32 x 256).

Batch 8192 words (about 130 K tokens) as 8 micro-batches of 1024
(``iter_size: 8``), 148 updates in 10 epochs, LAMB at 0.008485, the best
rate of the study's grid at 8192 (0.004242 to 0.06788, centred on the
square-root rule from LAMB's tuned rate at 256 words, 0.006·sqrt(8192/256) =
0.03394), on the study's recipe (``lamb.py``, ``common.py``), evaluated on
the dev split every 18 updates:

  .venv/bin/python run.py --config=configs/large_batch_seq2seq/lamb_8k.py --mode=train_eval --logdir=runs/s2s_lamb_8k

Result, measured by the study (seeds 0 and 1, 2026-11-26/27): test WER
97.10 ± 0.94 %, PER 56.33 ± 4.99 % (mean ± std over the two seeds), 65.86
points from the best small-batch result, Muon at 256 words, 31.25 ± 0.18 %:
LAMB's target at 32x (within 1 point) is missed. LAMB at 256 words reaches
35.23 ± 0.02 %. The grid's other rates (seed 0): 0.004242: 99.89 %,
0.01697: 99.92 %, 0.03394: 99.95 %, 0.06788: 100 %. In 148 updates LAMB at
32x the small batch gets few words right at any rate.
At the same point the study's other arms, each at the rate of its grid with
the best mean over both seeds, reach: AdamW (0.002828) 96.08 ± 5.12 %, Muon
(0.02263) 51.92 ± 1.23 %. At 4096 words (16x, seed 0) LAMB reaches 64.32 %
(0.007917), AdamW 61.00 % (0.006964) and Muon 41.52 % (0.016). The study's
table (docs/large_batch_seq2seq.md, generated from the archived runs) has
every batch.
The warm-up matters most for LAMB here. At this rate, seed 0, test WER by
warm-up fraction: 5 %: 95.93 %, 10 % (this config's): 96.44 %, 20 %:
88.87 %, 40 %: 78.97 % (--set lr_policy_params.warmup_fraction=0.4). The
longest warm-up is worth 17.47 points, yet LAMB stays far from the target.
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
