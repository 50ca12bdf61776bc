"""Images/sec of the main job's update by micro-batch, at one global batch: what growing the micro-batch buys.

  .venv/bin/python scripts/bench_microbatch.py [--global_batch 2048] \
      [--micro_batches 64,128,256,512,1024,2048] [--rounds 7]

A batch policy grows the global batch by ``iter_size``, reading the same
micro-batch more times per update; a larger micro-batch instead would save
wall time on one worker only where it runs faster per image. This measures
that for configs/fashion_mnist_lars.py's update (ResNet-8, LARS through the
framework's pipeline, float32): one update of ``--global_batch`` images as
``global_batch / b`` micro-batches of ``b``, for each ``b``, on a fixed batch
of random images (the input pipeline is hundreds of times faster than the
step: docs/performance.md). Rounds interleave the sizes, each round starting
at another one; a row is the median over rounds of images/sec and of the
per-round ratio to the config's micro-batch (256). Ratios above 1 are the
wall time a growing micro-batch would save: 1.25 is an update in 0.8x the time.
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from scripts import bench_seq2seq_batches  # noqa: E402  pylint: disable=wrong-import-position
from scripts import bench_train  # noqa: E402  pylint: disable=wrong-import-position

REFERENCE = 256  # the main job's batch_size_per_gpu


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--global_batch', type=int, default=2048)
  parser.add_argument('--micro_batches', default='64,128,256,512,1024,2048',
                      help='comma-separated micro-batch sizes, each dividing --global_batch')
  parser.add_argument('--rounds', type=int, default=7)
  args = parser.parse_args(argv)
  args.micro_batches = sorted({int(b) for b in args.micro_batches.split(',')})
  bad = [b for b in args.micro_batches if b < 1 or args.global_batch % b]
  if bad:
    parser.error(f'--micro_batches: {bad} do not divide --global_batch {args.global_batch}')
  if REFERENCE not in args.micro_batches:
    parser.error(f'--micro_batches: include {REFERENCE}, the reference of the ratios')
  return args


def update_step(cfg, micro_batch, global_batch):
  """One update of ``global_batch`` images as micro-batches of ``micro_batch`` (iter_size)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  iter_size = global_batch // micro_batch
  model = bench_train.build_model(cfg)
  params = dict(cfg['optimizer_params'], learning_rate=cfg['lr_policy_params']['learning_rate'])
  pipeline = bench_train.GradientPipeline(model.trainable_variables, bench_train.UpdateSettings(
      cfg['optimizer'], params, iter_size=iter_size))

  @tf.function
  def micro_step(images, labels):
    return pipeline(lambda: bench_train.cross_entropy(model, images, labels))['loss']

  def step(images, labels):
    for i in range(iter_size):
      loss = micro_step(images[i * micro_batch:(i + 1) * micro_batch],
                        labels[i * micro_batch:(i + 1) * micro_batch])
    return loss

  return step


def rows(times, global_batch):
  """``[(micro-batch, images/sec, ratio to the reference)]``: medians over rounds."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  reference = np.asarray(times[REFERENCE])
  return [(b, float(np.median(global_batch / np.asarray(t))),
           float(np.median(reference / np.asarray(t)))) for b, t in sorted(times.items())]


def main(argv=None):
  args = parse_args(argv)
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  cfg = bench_train.load_config()
  rng = np.random.default_rng(0)
  images = tf.constant(rng.standard_normal((args.global_batch, 28, 28, 1)), tf.float32)
  labels = tf.constant(rng.integers(0, 10, args.global_batch), tf.int32)
  steps = {b: update_step(cfg, b, args.global_batch) for b in args.micro_batches}
  for step in steps.values():  # trace and warm up
    step(images, labels).numpy()
  times = {b: [] for b in steps}
  for round_index in range(args.rounds):
    for b in bench_seq2seq_batches.rotated(list(steps), round_index):
      start = time.perf_counter()
      steps[b](images, labels).numpy()
      times[b].append(time.perf_counter() - start)
  print(f'one update of {args.global_batch} images (configs/fashion_mnist_lars.py, float32), '
        f'median of {args.rounds} interleaved rounds, {os.cpu_count()} CPUs:')
  print(f'{"micro-batch":>12} {"iter_size":>9} {"images/sec":>11} {"vs " + str(REFERENCE):>8}')
  for b, rate, ratio in rows(times, args.global_batch):
    print(f'{b:>12} {args.global_batch // b:>9} {rate:>11.1f} {ratio:>8.3f}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
