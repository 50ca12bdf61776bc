"""Train-loop benchmark of the CMUdict Transformer: this framework against Keras' own ``model.fit``.

  .venv/bin/python scripts/bench_seq2seq.py [--config configs/cmudict_transformer_lamb.py]
      [--steps 60] [--skip 8] [--block 8]

Both sides train the config's model (the Transformer of
configs/cmudict_transformer_lamb.py by default, its dtype policy included)
on the same length-bucketed batches of the cmudict data layer, in one run:

* **framework**: ``Trainer.train`` in train mode: the task's masked,
  label-smoothed token cross-entropy through the gradient pipeline
  (``optimize_loss``) with the config's LAMB, learning-rate schedule, global
  gradient norm, progress lines and summaries;
* **Keras**: ``model.fit`` of an identical model (same seed) compiled with
  ``keras.optimizers.Lamb`` (the same rate, betas, epsilon and weight decay,
  layer normalization and biases excluded from the decay), the same loss
  function (``models.transformer.sequence_cross_entropy`` over the real
  tokens) and ``jit_compile`` as Keras chooses it (``'auto'``, which
  resolves to no XLA for this model), on the same ``tf.data`` pipeline
  mapped to ``((source, decoder inputs), labels)``.

The two loops run in two threads that take strict turns, one step each
(``scripts/bench_train.py``'s turnstile), so the machine's slow spells fall
on both alike. The ratio is words/sec of the framework over ``model.fit`` in
blocks of ``--block`` steps after the first ``--skip`` (tracing and warm-up);
the summary is the median over blocks. Goal: >= 1.0x. The padding waste of
the train split's batches (the share of ``<pad>`` positions, bucketing by
length) is printed, and for scale that of the same batches drawn without
bucketing.

With ``--against OTHER_CONFIG`` the second loop is the framework's own
``Trainer.train`` on that config instead of ``model.fit`` (the same ``--set``
overrides on both), which measures what one config's update costs against
another's on the same model and batches, for example Muon against AdamW in
the sequence study:

  .venv/bin/python scripts/bench_seq2seq.py --config configs/large_batch_seq2seq/muon.py
      --against configs/large_batch_seq2seq/adamw.py [--set batch_size_per_gpu=1024 --set iter_size=8]

There is no goal then: the ratio is the first config's words/sec over the
second's (below 1: the first costs more per word).
"""

import argparse
import os
import statistics
import sys
import tempfile

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from core import precision  # noqa: E402
from core.params import ConfigError  # noqa: E402
from data import DATA_LAYERS  # noqa: E402
from data import sequences  # noqa: E402
from framework import config as config_lib  # noqa: E402
from models import MODELS  # noqa: E402
from models.transformer import sequence_cross_entropy  # noqa: E402
from scripts.bench_train import TurnCallback, TurnTrainer, in_strict_turns  # noqa: E402

CONFIG = os.path.join(ROOT, 'configs', 'cmudict_transformer_lamb.py')


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', default=CONFIG, help='a cmudict Transformer config')
  parser.add_argument('--steps', type=int, default=60, help='steps of each train loop')
  parser.add_argument('--skip', type=int, default=8, help='steps of each loop not timed')
  parser.add_argument('--block', type=int, default=8, help='steps per ratio')
  parser.add_argument('--against', metavar='OTHER_CONFIG',
                      help="time Trainer.train on this config instead of model.fit")
  parser.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                      help='a config override, as run.py takes it')
  return parser.parse_args()


def load_config(path, overrides):
  try:
    configs = config_lib.load_configs(path, 'train', list(overrides))
  except ConfigError as e:
    raise SystemExit(f'error: {e}') from None
  configs, _ = config_lib.scale_learning_rates(configs, 1)
  return configs['train']


def keras_lamb(cfg):
  """``keras.optimizers.Lamb`` with the config's LAMB settings and peak learning rate."""
  params = dict(cfg['optimizer_params'])
  excluded = params.pop('exclude_from_weight_decay', None)
  params.pop('exclude_from_layer_adaptation', None)  # Keras' Lamb adapts every layer
  params.pop('fused', None)
  optimizer = keras.optimizers.Lamb(learning_rate=cfg['lr_policy_params']['learning_rate'],
                                    **params)
  if excluded:
    optimizer.exclude_from_weight_decay(var_names=excluded)
  return optimizer


def random_padding_waste(layer, batch_size, seed):
  """The padding waste of ``batch_size`` examples drawn at random (no bucketing), for scale."""
  batches = []
  for batch in layer.dataset(batch_size, seed).take(layer.batches_per_epoch(batch_size)):
    batches.append((batch['source'].numpy(), batch['target'].numpy()))
  sources = np.concatenate([_rows(s) for s, _ in batches])
  targets = np.concatenate([_rows(t) for _, t in batches])
  order = np.random.default_rng(seed).permutation(len(sources))
  shuffled = ({'source': _pad(sources[order[i:i + batch_size]]),
               'target': _pad(targets[order[i:i + batch_size]])}
              for i in range(0, len(order) - batch_size + 1, batch_size))
  return sequences.batch_padding_waste(shuffled, sequences.Vocabulary.PAD)


def _rows(array):
  """The rows of a padded id array as an object array of unpadded id arrays."""
  out = np.empty(len(array), object)
  for i, row in enumerate(array):
    out[i] = row[row != sequences.Vocabulary.PAD]
  return out


def _pad(rows):
  out = np.zeros([len(rows), max(len(r) for r in rows)], np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def trainer_loop(path, overrides, steps, side):
  """``Trainer.train`` on ``path`` for ``steps`` steps as ``side`` of a turnstile, in a temporary logdir."""
  def loop(turnstile):
    with tempfile.TemporaryDirectory() as logdir:
      train_cfg = load_config(path, list(overrides) + [
          'num_epochs=null', f'max_steps={steps}', f'logdir={logdir}',
          'save_checkpoint_steps=null'])
      trainer = TurnTrainer(turnstile, train_cfg, None, logdir, side=side)
      trainer.begin()
      trainer.train()

  return loop


def interleaved_loops(path, overrides, cfg, steps, against=None):
  """Runs Trainer.train and model.fit (or Trainer.train on ``against``) for ``steps`` steps each, in strict turns.

  Args:
    path: the config file.
    overrides: its ``--set`` overrides.
    cfg: the config they give (train view).
    steps: the steps of each loop.
    against: another config file to train in model.fit's place, or None.

  Returns:
    (framework seconds per step, second loop's seconds per step), numpy arrays.
  """
  train_loop = trainer_loop(path, overrides, steps, 'train')
  if against:
    return in_strict_turns(train_loop, trainer_loop(against, overrides, steps, 'fit'))

  def fit_loop(turnstile):
    # Keras' dtype policy is global: the Trainer set the same one for its model.
    keras.mixed_precision.set_dtype_policy(precision.policy_name(cfg['dtype']))
    keras.utils.set_random_seed(cfg['random_seed'])
    layer = DATA_LAYERS.resolve(cfg['data_layer'])(cfg['data_layer_params'], 'train')
    model = MODELS.resolve(cfg['model'])(cfg['model_params'], layer.source_vocab_size,
                                         layer.target_vocab_size)
    smoothing = cfg['model_params'].get('label_smoothing', 0.0)

    def loss(labels, logits):
      # Keras hands the loss its targets cast to the logits' float type.
      total, count = sequence_cross_entropy(tf.cast(labels, tf.int32), logits, smoothing)
      return total / tf.maximum(count, 1.0)

    model.compile(optimizer=keras_lamb(cfg), loss=loss)
    dataset = layer.dataset(cfg['batch_size_per_gpu'], seed=cfg['random_seed']).map(
        lambda b: ((b['source'], b['target'][:, :-1]), b['target'][:, 1:]))
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0,
              callbacks=[TurnCallback(turnstile)])

  return in_strict_turns(train_loop, fit_loop)


def main():
  args = parse_args()
  cfg = load_config(args.config, args.set)
  other = load_config(args.against, args.set) if args.against else None
  if other and other['model_params'] != cfg['model_params']:
    raise SystemExit(f'error: --against {args.against}: its model_params differ from '
                     f'{args.config}\'s; the comparison needs the same model')
  batch_size = cfg['batch_size_per_gpu']
  layer = DATA_LAYERS.resolve(cfg['data_layer'])(cfg['data_layer_params'], 'train')
  p = cfg['model_params']
  print(f'{os.path.relpath(args.config, ROOT)}: transformer {p.get("encoder_layers")}+'
        f'{p.get("decoder_layers")} layers, d_model {p.get("d_model")}, {cfg["dtype"]}; '
        f'{cfg["optimizer"]} at {cfg["lr_policy_params"]["learning_rate"]:.4g}; batch '
        f'{batch_size} {layer.batch_unit}; TF {tf.__version__}, Keras {keras.__version__}')
  print(f'CPU: {precision.cpu_info()[0]}')
  bucketed = layer.padding_waste(batch_size, cfg['random_seed'])
  shuffled = random_padding_waste(layer, batch_size, cfg['random_seed'])
  print(f'padding waste of an epoch of {layer.batches_per_epoch(batch_size)} train batches: '
        f'{bucketed:.1%} bucketed by length ({shuffled:.1%} for the same examples in random '
        'batches)')

  if other:
    print(f'against {os.path.relpath(args.against, ROOT)}: {other["optimizer"]} at '
          f'{other["lr_policy_params"]["learning_rate"]:.4g}')
  train_turns, fit_turns = interleaved_loops(args.config, args.set, cfg, args.steps, args.against)
  count = min(len(train_turns), len(fit_turns)) - args.skip
  blocks = [slice(args.skip + i, args.skip + i + args.block)
            for i in range(0, count - args.block + 1, args.block)]
  if not blocks:
    raise SystemExit(f'error: --steps {args.steps} leaves no block of {args.block} steps after '
                     f'--skip {args.skip}')
  ratios = np.array([fit_turns[b].sum() / train_turns[b].sum() for b in blocks])
  ratio = statistics.median(ratios)
  timed = slice(args.skip, args.skip + len(blocks) * args.block)
  unit = f'{layer.batch_unit}/sec'
  print(f'{"train loop, strict turns":44s} {unit:>10s} {"ms/step":>8s}  ({len(blocks)} blocks of '
        f'{args.block} steps after {args.skip}; ratio per block {ratios.min():.3f}-'
        f'{ratios.max():.3f})')
  if args.against:
    names = (f'Trainer.train, {cfg["optimizer"]}', f'Trainer.train, {other["optimizer"]}')
  else:
    names = ('framework train mode (Trainer.train)', 'model.fit, keras.optimizers.Lamb')
  for name, turns in zip(names, (train_turns, fit_turns)):
    print(f'{name:44s} {batch_size / turns[timed].mean():10.1f} '
          f'{turns[timed].mean() * 1e3:8.1f}')
  if args.against:
    print(f'{cfg["optimizer"]} against {other["optimizer"]}: {ratio:.3f}x the {unit} (median of '
          f'{len(blocks)} blocks; below 1: {cfg["optimizer"]} costs more per step)')
    return
  print(f'{"PASS" if ratio >= 1.0 else "FAIL"} framework vs model.fit: {ratio:.3f}x the '
        f'{unit} (median of {len(blocks)} blocks; goal >= 1.0x)')


if __name__ == '__main__':
  main()
