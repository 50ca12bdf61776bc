"""Grapheme-to-phoneme conversion on CMUdict: a Transformer trained with LAMB (the main seq2seq job).

Launch (one command, from a clean checkout after scripts/setup.sh):
  .venv/bin/python run.py --config=configs/cmudict_transformer_lamb.py --mode=train_eval --logdir=runs/cmudict_transformer_lamb

Result: test WER 28.1 %, PER 6.8 % in about 41 minutes on a 2-core AMD EPYC; the runs,
their times and other machines' are in docs/sequence.md, "Results".

Recipe: a pre-norm Transformer of 3 + 3 layers, d_model 256 (5.55 M
parameters, the default size), trained with dtype auto (mixed bfloat16 where
the CPU or GPU computes it natively, as the recorded run did; float32
elsewhere, where emulated bfloat16 is slower) on length-bucketed batches of
512 words with LAMB (You et al. 2019: Adam moments, a layer-wise trust
ratio, decoupled weight decay that skips layer normalization and biases), a
linear warm-up over the first 10 % of the updates and a linear decay to 0,
for 20 epochs. The dev split is decoded (greedy) every four
epochs; the best checkpoint by dev WER is decoded on the test split at the end
with a beam of 4 (model_params.final_beam_size).
"""

batch_size = 512
num_epochs = 20

base_params = {
    'model': 'transformer',
    'model_params': {
        'encoder_layers': 3,
        'decoder_layers': 3,
        'd_model': 256,
        'num_heads': 4,
        'ff_size': 1024,
        'dropout': 0.1,
        'label_smoothing': 0.1,
        'beam_size': 1,  # the dev evaluations during training: greedy
        'final_beam_size': 4,  # the test split after training
    },
    'data_layer': 'cmudict',
    'data_layer_params': {'eval_split': 'dev', 'final_eval_split': 'test'},
    'batch_size_per_gpu': batch_size,
    'num_epochs': num_epochs,
    'optimizer': 'LAMB',
    'optimizer_params': {
        'beta_1': 0.9,
        'beta_2': 0.999,
        'epsilon': 1e-6,
        'weight_decay': 0.01,
        'exclude_from_weight_decay': ['layer_normalization', 'bias'],
    },
    'lr_policy': 'poly_decay',
    # The LAMB recipes scale the rate with the square root of the global batch B
    # (batch_size_per_gpu x workers x iter_size): 0.003 at 512 words. (0.01 stalls
    # this model at the unigram loss for the first epoch.)
    'lr_scaling': {'rule': 'sqrt', 'base_learning_rate': 0.003, 'reference_batch': 512},
    'lr_policy_params': {
        'power': 1.0,
        'warmup_fraction': 0.1,
        'decay_fraction': 1.0,  # decays over the whole run, however long
        'min_lr': 0.0,
    },
    'dtype': 'auto',
    'random_seed': 0,
    'save_checkpoint_steps': 200,
    'num_checkpoints': 3,
    'eval_steps': 4 * 237,  # every four epochs of 237 updates
    'print_loss_steps': 50,
    'save_summaries_steps': 50,
    'summaries': ['learning_rate', 'global_gradient_norm', 'loss_scale'],
}

eval_params = {
    'batch_size_per_gpu': 1024,
}
