"""Grapheme-to-phoneme conversion on CMUdict: the LAMB config's Transformer trained with AdamW (the baseline).

Launch:
  .venv/bin/python run.py --config=configs/cmudict_transformer_adamw.py --mode=train_eval --logdir=runs/cmudict_transformer_adamw

Expected result: to be measured.

Everything as configs/cmudict_transformer_lamb.py (model, data, batch 512
words, 10 epochs, mixed bfloat16, warm-up over 10 % then linear decay),
except the update: Keras' AdamW (Loshchilov and Hutter 2019: Adam with
decoupled weight decay, here on every variable, as Keras' AdamW takes no
exclusion list in its constructor) at the rate Adam trains this Transformer
with, 1e-3 at 512 words.
"""

batch_size = 512
num_epochs = 10

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
        'beam_size': 1,
    },
    'data_layer': 'cmudict',
    'data_layer_params': {'eval_split': 'dev', 'final_eval_split': 'test'},
    'batch_size_per_gpu': batch_size,
    'num_epochs': num_epochs,
    'optimizer': 'AdamW',
    'optimizer_params': {
        'beta_1': 0.9,
        'beta_2': 0.999,
        'epsilon': 1e-6,
        'weight_decay': 0.01,
    },
    'lr_policy': 'poly_decay',
    # Adam's rate grows with the square root of the global batch B (batch_size_per_gpu
    # x workers x iter_size), as LAMB's: 1e-3 at 512 words.
    'lr_scaling': {'rule': 'sqrt', 'base_learning_rate': 0.001, 'reference_batch': 512},
    'lr_policy_params': {
        'power': 1.0,
        'warmup_fraction': 0.1,
        'decay_fraction': 1.0,  # decays over the whole run, however long
        'min_lr': 0.0,
    },
    'dtype': 'mixed_bfloat16',
    'random_seed': 0,
    'save_checkpoint_steps': 200,
    'num_checkpoints': 3,
    'eval_steps': 2 * 237,  # every two epochs of 237 updates
    'print_loss_steps': 50,
    'save_summaries_steps': 50,
    'summaries': ['learning_rate', 'global_gradient_norm', 'loss_scale'],
}

eval_params = {
    'batch_size_per_gpu': 1024,
}
