"""Plot the learning-rate schedule a config gives, as the trainer will compute it.

  python scripts/plot_lr.py --config configs/fashion_mnist_lars.py --out lr.png
  python scripts/plot_lr.py --config configs/resnet50_lars.py --set batch_size_per_gpu=128 \\
      --workers 8 --out lr.png

The config is resolved and validated as run.py does (train mode, ``--set``
overrides applied); the train data layer gives the steps per epoch for the
per-worker batch, the number of workers and ``iter_size``; epoch-valued
``lr_policy_params`` are converted with them; and the policy is evaluated at
every step from 0 to max_steps (or ``--steps``). Prints the rate at a few
steps. A config mistake exits with status 2 and one ``error:`` line.
"""

import argparse
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', required=True, help='a .py or .yaml/.yml config file')
  parser.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                      help='override a config key as run.py does; repeatable')
  parser.add_argument('--out', default='lr.png', help='the PNG to write')
  parser.add_argument('--steps', type=int, default=None,
                      help='plot steps 0..N instead of 0..max_steps')
  parser.add_argument('--workers', type=int, default=1,
                      help='data-parallel workers of the run (Horovod processes); they share '
                           'each epoch, so they change the steps per epoch')
  return parser.parse_args(argv)


def load_train_config(path, overrides):
  """The validated train-mode config, as run.py builds it."""
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  return config_lib.load_configs(path, 'train', list(overrides))['train']


def steps_per_epoch(cfg, num_workers=1):
  """Updates per epoch, as the trainer computes them (builds the train data layer to learn its size)."""
  from data import DATA_LAYERS  # pylint: disable=import-outside-toplevel
  from framework.config import schedule  # pylint: disable=import-outside-toplevel
  layer = DATA_LAYERS.resolve(cfg['data_layer'])(cfg['data_layer_params'], 'train',
                                                 num_workers=num_workers, worker_index=0)
  return schedule.steps_per_epoch(layer, cfg['batch_size_per_gpu'], cfg['iter_size'])


def learning_rates(cfg, per_epoch, last_step):
  """The learning rate at steps 0..last_step.

  Returns:
    (steps int64 [N], rates float [N]) numpy arrays, N = last_step + 1.

  Raises:
    ConfigError: when the policy rejects its parameters, as the trainer reports it.
  """
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from framework.config import schedule  # pylint: disable=import-outside-toplevel
  rate_fn = schedule.learning_rate_fn(cfg, per_epoch)
  steps = tf.range(last_step + 1, dtype=tf.int64)
  # Policies take a scalar step; vectorized_map runs one over every step at once.
  rates = tf.vectorized_map(rate_fn, steps)
  return np.asarray(steps), np.asarray(rates, dtype=np.float64)


def landmarks(total, params):
  """The steps whose rate is printed: start, end of warm-up, quarters, end."""
  marks = {0, total // 4, total // 2, 3 * total // 4, total}
  warmup = params.get('warmup_steps')
  if isinstance(warmup, (int, float)) and 0 < warmup <= total:
    marks.add(int(warmup))
  return sorted(marks)


def plot(steps, rates, per_epoch, total, title, path):
  """Draws lr against step, with epochs on a secondary axis; marks the end of training."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  figure, axes = plt.subplots(figsize=(8, 4.5))
  axes.plot(steps, rates, linewidth=1.5)
  if steps[-1] > total:
    axes.axvline(total, color='gray', linestyle=':', label=f'max_steps = {total}')
    axes.legend()
  axes.set_xlabel('step')
  axes.set_ylabel('learning rate')
  axes.set_xlim(0, steps[-1])
  axes.set_ylim(bottom=0)
  axes.grid(True, alpha=0.3)
  epochs = axes.secondary_xaxis('top', functions=(lambda s: s / per_epoch,
                                                  lambda e: e * per_epoch))
  epochs.set_xlabel('epoch')
  axes.set_title(title)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if args.workers < 1:
    print(f'error: --workers: must be >= 1, got {args.workers}', file=sys.stderr)
    return 2
  if args.steps is not None and args.steps < 1:
    print(f'error: --steps: must be >= 1, got {args.steps}', file=sys.stderr)
    return 2
  from framework.engines import tf_import  # pylint: disable=import-outside-toplevel
  tf_import.import_tensorflow()
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  from data.base import DataError  # pylint: disable=import-outside-toplevel
  from framework.config import config_file  # pylint: disable=import-outside-toplevel
  try:
    cfg = load_train_config(args.config, args.set)
    per_epoch = steps_per_epoch(cfg, args.workers)
    from framework.config import schedule  # pylint: disable=import-outside-toplevel
    total = schedule.total_steps(cfg, per_epoch)
    last = args.steps if args.steps is not None else total
    steps, rates = learning_rates(cfg, per_epoch, last)
  except ConfigError as exc:
    print(config_file.format_error(exc), file=sys.stderr)
    return 2
  except DataError as exc:
    print(f'error: {exc}', file=sys.stderr)
    return 2

  policy = cfg['lr_policy'] if isinstance(cfg['lr_policy'], str) else cfg['lr_policy'].__name__
  global_batch = cfg['batch_size_per_gpu'] * args.workers * cfg['iter_size']
  print(f'{policy}: {total} steps = {total / per_epoch:.4g} epochs of {per_epoch} steps, '
        f'global batch {global_batch} = {cfg["batch_size_per_gpu"]} per worker x '
        f'{args.workers} worker(s) x iter_size {cfg["iter_size"]}')
  params = schedule.epochs_to_steps(cfg['lr_policy_params'], per_epoch, total)
  print(f'{"step":>10} {"epoch":>8}  learning rate')
  for step in landmarks(last, params):
    print(f'{step:>10} {step / per_epoch:>8.3f}  {rates[step]:.6g}')
  title = (f'{os.path.basename(args.config)}: {policy}, global batch {global_batch}, '
           f'{per_epoch} steps/epoch')
  out_dir = os.path.dirname(os.path.abspath(args.out))
  os.makedirs(out_dir, exist_ok=True)
  plot(steps, rates, per_epoch, total, title, args.out)
  print(f'wrote {args.out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
