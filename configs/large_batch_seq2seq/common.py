"""The sequence-to-sequence large-batch study's shared recipe (docs/large_batch_seq2seq.md).

Grapheme-to-phoneme conversion on CMUdict (docs/sequence.md) with a smaller
Transformer than the main job's (configs/cmudict_transformer_lamb.py: d_model
256, 3 + 3 layers), so that the study's runs fit about ten hours of a 2-core
AMD EPYC with AVX512-BF16; the same number of epochs at every batch size.
The arms (``lamb.py``, ``adamw.py``, ``muon.py``) add the optimizer and its
learning rate at batch 256; ``studies/large_batch/seq2seq_study.py`` sets the
batch (in words; above 1024 as micro-batches of 1024 with ``iter_size``: a
micro-batch of 4096 words trained 2.6 times slower per word on that
machine), the learning rate, the evaluation cadence and the seed of each run.

- **Model:** a pre-norm Transformer of 2 + 2 layers, d_model 128, 4 heads,
  feed-forward 512, dropout 0.1, label smoothing 0.1, the target embedding
  tied to the output (0.9 M parameters), in dtype auto: mixed bfloat16 on the
  study's machine, which computes it natively; float32 on a CPU without it.
- **Budget:** ``num_epochs`` epochs of the 121,393 train pronunciations at
  every batch size, so the number of updates falls as the batch grows.
- **Schedule:** linear warm-up from 0 over the first ``warmup_fraction`` of
  the updates (the same share of training at every batch), then linear decay
  over as many updates as the run has, from the end of the warm-up
  (``poly_decay`` starts its decay there), so the rate ends at a tenth of its
  peak at the last update: the same shape at every batch.
- **Evaluation:** the whole dev split (6,289 words, greedy decoding) 8
  times per run, at the same fractions of training at every batch size
  (``eval_steps``, set per run by the study); the checkpoint of the best dev
  WER is then scored on the test split (6,315 words), the result.
"""

import copy

num_epochs = 10
warmup_fraction = 0.1

base_params = {
    'model': 'transformer',
    'model_params': {
        'encoder_layers': 2,
        'decoder_layers': 2,
        'd_model': 128,
        'num_heads': 4,
        'ff_size': 512,
        'dropout': 0.1,
        'label_smoothing': 0.1,
        'beam_size': 1,
    },
    'data_layer': 'cmudict',
    'data_layer_params': {'eval_split': 'dev', 'final_eval_split': 'test'},
    'batch_size_per_gpu': 256,
    'num_epochs': num_epochs,
    'lr_policy': 'poly_decay',
    'lr_policy_params': {
        'learning_rate': 1e-3,  # each arm sets its own
        'power': 1.0,
        'warmup_fraction': warmup_fraction,
        'decay_fraction': 1.0,  # a decay as long as the run, from the warm-up's end
        'min_lr': 0.0,
    },
    'dtype': 'auto',
    'random_seed': 0,
    # The driver sets eval_steps and save_checkpoint_steps per run (the updates
    # of an eighth of it); these are the batch-256 run's (4,740 updates).
    'eval_steps': 592,
    'save_checkpoint_steps': 592,
    'num_checkpoints': 1,
    'print_loss_steps': 20,
    'save_summaries_steps': 20,
    'summaries': ['learning_rate', 'global_gradient_norm'],
}

eval_params = {
    'batch_size_per_gpu': 1024,
}


def arm(optimizer, optimizer_params, learning_rate):
  """``base_params`` of one arm: the shared recipe with its optimizer and its rate at batch 256."""
  params = copy.deepcopy(base_params)
  params.update({'optimizer': optimizer, 'optimizer_params': copy.deepcopy(optimizer_params)})
  params['lr_policy_params']['learning_rate'] = learning_rate
  return params
