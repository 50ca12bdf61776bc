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
  function (``models.sequence_losses.sequence_cross_entropy`` over the real
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

**Micro-batch sizes and dtypes** (``--batches``, ``--dtypes``, ``--one_pass``):

  .venv/bin/python scripts/bench_seq2seq.py --batches 256,1024,4096,8192
      [--dtypes float32,mixed_bfloat16] [--one_pass [SIZES]] [--words 32768] [--rounds 2]
      [--warmup 2] [--set KEY.PATH=VALUE ...]

measures the config's train step (``Trainer``'s compiled micro-step: the
loss, its gradient and the LAMB update) at each micro-batch size
(``batch_size_per_gpu``) and each dtype, each measurement in a fresh child
process (under tcmalloc, as run.py runs) so that its peak memory (the
child's RSS high-water mark) is its own: ``--warmup`` steps untimed (tracing),
then steps of ``--words`` words in all. ``--rounds`` rounds run every
measurement once each, in an order rotated from round to round, so the
machine's slow spells fall on all sizes alike; a row's words/sec is its
words over its seconds summed over the rounds (the rounds' spread in
brackets), and its ratio is to the row of 1,024 words (or the first size)
of the same dtype. ``--one_pass`` adds, for each size above
``model_params.train_chunk_size`` (or those listed, ``--one_pass 4096``) and
dtype, a row with ``train_chunk_size=null``: the whole micro-batch in one
forward and backward pass, as before chunks existed (the "before" of a
comparison; 8,192 words in one pass need more than 23 GB).
Padding waste is the share of ``<pad>`` positions in an epoch of the size's
bucketed batches, as one pass sees them and as chunks of
``train_chunk_size`` examples see them. The CPU's model name and whether it
has ``avx512_bf16`` / ``amx_bf16`` (from /proc/cpuinfo) head the table,
and with two dtypes each size's words/sec ratio of the second dtype to
the first closes it. A child that fails (out of memory: the kernel kills
it) is reported in its row, and the others go on.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from core import allocator  # noqa: E402
from core import precision  # noqa: E402
from core.params import ConfigError  # noqa: E402
from data import DATA_LAYERS  # noqa: E402
from data import sequences  # noqa: E402
from framework.config import validation as config_lib  # noqa: E402
from models import MODELS  # noqa: E402
from models.sequence_losses import sequence_cross_entropy  # noqa: E402
from scripts.bench_seq2seq_batches import chunked_padding_waste, format_dtype_ratios  # noqa: E402
from scripts.bench_seq2seq_batches import format_table, measurements, ratio_to_reference  # noqa: E402
from scripts.bench_seq2seq_batches import rotated, row_name, summarize  # noqa: E402
from scripts.bench_train import TurnCallback, TurnTrainer, in_strict_turns  # noqa: E402

CONFIG = os.path.join(ROOT, 'configs', 'cmudict_transformer_lamb.py')
BFLOAT16_FLAGS = ('avx512_bf16', 'amx_bf16')


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', default=CONFIG, help='a cmudict Transformer config')
  parser.add_argument('--steps', type=int, default=60, help='steps of each train loop')
  parser.add_argument('--skip', type=int, default=8, help='steps of each loop not timed')
  parser.add_argument('--block', type=int, default=8, help='steps per ratio')
  parser.add_argument('--against', metavar='OTHER_CONFIG',
                      help="time Trainer.train on this config instead of model.fit")
  parser.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                      help='a config override, as run.py takes it')
  sweep = parser.add_argument_group('micro-batch sizes and dtypes')
  sweep.add_argument('--batches', type=_int_list,
                     help='comma-separated micro-batch sizes to measure, e.g. 256,1024,4096,8192')
  sweep.add_argument('--dtypes', type=_name_list,
                     help="comma-separated dtypes to measure, e.g. float32,mixed_bfloat16 "
                          "(default: the config's)")
  sweep.add_argument('--one_pass', nargs='?', const='all', metavar='SIZES',
                     help='also measure sizes above model_params.train_chunk_size (all, or '
                          'these comma-separated ones) in one pass (train_chunk_size=null)')
  sweep.add_argument('--words', type=int, default=32768, help='timed words per measurement')
  sweep.add_argument('--rounds', type=int, default=2, help='measurements of each row')
  sweep.add_argument('--warmup', type=int, default=2, help='untimed steps per measurement')
  sweep.add_argument('--measure', type=json.loads, help=argparse.SUPPRESS)  # a child's job
  args = parser.parse_args(argv)
  if args.dtypes and not args.batches:
    args.batches = []  # the config's own size, filled in by main
  for name in ('words', 'rounds'):
    if getattr(args, name) < 1:
      parser.error(f'--{name}: must be >= 1, got {getattr(args, name)}')
  if args.warmup < 0:
    parser.error(f'--warmup: must be >= 0, got {args.warmup}')
  if args.one_pass not in (None, 'all'):
    try:
      args.one_pass = _int_list(args.one_pass)
    except argparse.ArgumentTypeError as exc:
      parser.error(f'--one_pass: {exc}')
  return args


def _int_list(text):
  try:
    values = [int(v) for v in text.split(',')]
  except ValueError:
    raise argparse.ArgumentTypeError(f'expected comma-separated integers, got {text!r}') from None
  if any(v < 1 for v in values):
    raise argparse.ArgumentTypeError(f'sizes must be >= 1, got {text!r}')
  return values


def _name_list(text):
  return [v.strip() for v in text.split(',') if v.strip()]


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

# --- micro-batch sizes and dtypes (rows and table: bench_seq2seq_batches.py) -------------------


def measure(job):
  """A child's job: times the train step of one row; prints one JSON line of its numbers."""
  with tempfile.TemporaryDirectory() as logdir:
    overrides = list(job['set']) + [
        f'batch_size_per_gpu={job["batch"]}', f'dtype={job["dtype"]}', 'num_epochs=null',
        'max_steps=1000000', f'logdir={logdir}', 'save_checkpoint_steps=null']
    if not job['chunked']:
      overrides.append('model_params.train_chunk_size=null')
    cfg = load_config(job['config'], overrides)
    from framework.run import trainer as trainer_lib  # pylint: disable=import-outside-toplevel
    trainer = trainer_lib.Trainer(cfg, None, logdir)
    trainer.begin()
    step = trainer.make_train_step()
    iterator = trainer.train_iterator()
    steps = -(-job['words'] // job['batch'])
    with tf.summary.create_noop_writer().as_default():
      for _ in range(job['warmup']):
        step(iterator)['loss'].numpy()
      wall, cpu = time.perf_counter(), time.process_time()
      for _ in range(steps):
        result = step(iterator)
      result['loss'].numpy()
      wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
  print(json.dumps({'words': steps * trainer.batch_size, 'steps': steps, 'seconds': wall,
                    'cpu_seconds': cpu, 'peak_bytes': peak}), flush=True)


def run_child(args, row):
  """Runs ``row`` in a fresh process; its numbers, or ``{'error': one line}``."""
  job = {**row, 'config': args.config, 'set': list(args.set), 'words': args.words,
         'warmup': args.warmup}
  environ = allocator.tcmalloc_environ() or dict(os.environ)
  result = subprocess.run([sys.executable, os.path.abspath(__file__), '--measure',
                           json.dumps(job)], env=environ, capture_output=True, text=True,
                          check=False)
  lines = [line for line in result.stdout.splitlines() if line.startswith('{')]
  if result.returncode == 0 and lines:
    return json.loads(lines[-1])
  if result.returncode < 0:
    return {'error': f'killed by signal {-result.returncode}'
                     + (' (out of memory?)' if result.returncode == -9 else '')}
  tail = (result.stderr.strip().splitlines() or [f'exit status {result.returncode}'])[-1]
  return {'error': tail[:120]}


def sweep(args, cfg, layer):
  """``--batches`` / ``--dtypes``: the table of words/sec, peak memory and padding waste."""
  sizes = args.batches or [cfg['batch_size_per_gpu']]
  dtypes = args.dtypes or [cfg['dtype']]
  model, flags = precision.cpu_info()
  has = ', '.join(f'{flag} {"yes" if flag in flags else "no"}' for flag in BFLOAT16_FLAGS)
  print(f'CPU: {model}, {os.cpu_count()} cores; {has}')
  chunk = cfg['model_params'].get('train_chunk_size')
  waste = {}
  for size in sizes:
    batches = list(layer.dataset(size, cfg['random_seed']).take(
        layer.batches_per_epoch(size)).as_numpy_iterator())
    waste[size] = (chunked_padding_waste(batches, None), chunked_padding_waste(batches, chunk))
  rows = measurements(sizes, dtypes, args.one_pass, chunk)
  results = [[] for _ in rows]
  for round_index in range(args.rounds):
    for row in rotated(rows, round_index):
      result = run_child(args, row)
      results[rows.index(row)].append(result)
      shown = (f'{result["words"] / result["seconds"]:.1f} {layer.batch_unit}/sec'
               if 'error' not in result else result['error'])
      print(f'  round {round_index + 1}/{args.rounds}: {row_name(row, chunk)}: {shown}',
            flush=True)
  table = summarize(rows, results)
  reference = ratio_to_reference(table, sizes)
  print(format_table(table, waste, reference, layer.batch_unit, chunk, args))
  if len(dtypes) > 1:
    print(format_dtype_ratios(table, dtypes))


def main():
  args = parse_args()
  if args.measure:
    measure(args.measure)
    return
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
  if args.batches is not None:
    sweep(args, cfg, layer)
    return
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
