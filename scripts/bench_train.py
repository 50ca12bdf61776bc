"""Train-step and train-loop benchmark on the Fashion-MNIST ResNet.

  .venv/bin/python scripts/bench_train.py [--rounds 12] [--steps 3] [--loop_steps 120]

Model and batch are those of configs/fashion_mnist_lars.py: the CIFAR-style
ResNet-8 (16/32/64 channels) on 28x28x1 images, batch 256. Three comparisons,
each measured in the same run:

1. One train step, on a fixed batch: ``optimize_loss`` with Backoff loss
   scaling, global-norm clipping, LARC and LARS (summaries off) against a bare
   Keras 3 step (``GradientTape`` + ``keras.optimizers.SGD(momentum=0.9)``
   ``apply``) on an identical model. Rounds interleave the candidates; a row
   is the median over rounds of the time per step and of the per-round ratio
   to the bare step. Goal: ratio <= 1.05.
2. The same ``optimize_loss`` step with ``dtype: mixed_bfloat16`` (model built
   under the ``mixed_bfloat16`` policy) against float32. Goal: faster. Whether
   it can be depends on the CPU: the script prints the CPU's bfloat16
   features, a 2048x2048 bfloat16 matmul against float32 (oneDNN, the same
   rounds), and one core's peak rates of the two multiply-add instructions
   (scripts/cpu_peak.c). On AMD Zen 4 the step was 1.41x faster in bfloat16;
   on the Intel Xeon without AMX, vdpbf16ps reaches half the GFLOP/s of
   float32 FMA (86 against 176 per core), and the step is slower.
3. The framework's train mode (``Trainer.train`` with the config as is:
   summaries every 20 steps, progress lines, the Fashion-MNIST data layer)
   against ``model.fit`` on the same model, optimizer, loss and ``tf.data``
   pipeline. The two loops run in two threads that take strict turns, one
   loop iteration each (a turnstile in the train step's return and in
   ``on_train_batch_end``), so each iteration of one loop is timed next to an
   iteration of the other: the host's slow spells (steps stretched by 40 % for
   seconds at a time on this shared machine) fall on both alike. A loop's
   time is the sum of its own turns, Python overhead, summaries and progress
   lines included. The ratio is images/sec of train mode over model.fit in
   blocks of ``--block`` iterations after the first ``--skip`` (tracing and
   warm-up); the summary is the median over blocks. Goal: >= 1.
4. The gradient noise scale (``noise_scale``, docs/critical_batch.md), in
   the same rounds as 1: an update of two micro-batches of 128 (iter_size 2)
   with ``noise_scale: auto``, which measures it there, against the same
   update with ``noise_scale: false``. Goal: <= 1.01. And what ``true``
   costs one worker with iter_size 1: the step's 256 images as two halves of
   128, against the step in one pass (reported, no goal).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from core.precision import cpu_info  # noqa: E402
from data import DATA_LAYERS  # noqa: E402
from framework.config import validation as config_lib  # noqa: E402
from framework.run import trainer as trainer_lib  # noqa: E402
from models import MODELS  # noqa: E402
from optimizers.compat import openseq2seq as opt_lib  # noqa: E402
from optimizers.lars import LARSOptimizer  # noqa: E402
from optimizers.pipeline import GradientPipeline  # noqa: E402
from optimizers.settings import UpdateSettings  # noqa: E402

CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')
MAX_STEP_RATIO = 1.05
MAX_NOISE_SCALE_RATIO = 1.01
LARC = {'larc_eta': 0.002, 'larc_mode': 'clip', 'skip_list': ['batch_normalization', 'bias']}


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=12, help='interleaved rounds of the step timing')
  parser.add_argument('--steps', type=int, default=3, help='steps per candidate per round')
  parser.add_argument('--loop_steps', type=int, default=250, help='steps of each train loop')
  parser.add_argument('--skip', type=int, default=10, help='train-loop steps not timed')
  parser.add_argument('--block', type=int, default=20,
                      help='train-loop iterations per ratio (one summary and progress line each)')
  return parser.parse_args()


def load_config(overrides=()):
  return config_lib.load_configs(CONFIG, 'train', list(overrides))['train']


def build_model(cfg, policy='float32'):
  keras.mixed_precision.set_dtype_policy(policy)
  try:
    keras.utils.set_random_seed(cfg['random_seed'])
    return MODELS.resolve(cfg['model'])(cfg['model_params'], (28, 28, 1), 10)
  finally:
    keras.mixed_precision.set_dtype_policy('float32')


def cross_entropy(model, images, labels):
  logits = tf.cast(model(images, training=True), tf.float32)
  return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits,
                                                                     from_logits=True))


def bare_keras_step(cfg):
  model = build_model(cfg)
  optimizer = keras.optimizers.SGD(0.1, momentum=0.9)

  @tf.function
  def step(images, labels):
    with tf.GradientTape() as tape:
      loss = cross_entropy(model, images, labels)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply(grads, model.trainable_variables)
    return loss

  return step


def framework_step(cfg, dtype='float32'):
  """optimize_loss with loss scaling, clipping, LARC and the config's LARS; no summaries."""
  policy = {'float32': 'float32', 'mixed_bfloat16': 'mixed_bfloat16'}[dtype]
  model = build_model(cfg, policy)
  lr = cfg['lr_policy_params']['learning_rate']

  @tf.function
  def step(images, labels):
    return opt_lib.optimize_loss(
        lambda: cross_entropy(model, images, labels), cfg['optimizer'],
        dict(cfg['optimizer_params']), lambda _: tf.constant(lr, tf.float32), model=model,
        dtype=dtype, clip_gradients=5.0, larc_params=LARC, loss_scaling='Backoff', summaries=None)

  return step


def noise_scale_step(cfg, iter_size, noise_scale):
  """One update of the config's LARS through the pipeline: ``iter_size`` micro-batches of the batch.

  ``noise_scale`` False: not measured; True: measured from the micro-batches
  (iter_size 2), or from the two halves of the one micro-batch (iter_size 1).
  """
  model = build_model(cfg)
  params = dict(cfg['optimizer_params'], learning_rate=cfg['lr_policy_params']['learning_rate'])
  parts = 2 if noise_scale and iter_size == 1 else 1
  pipeline = GradientPipeline(model.trainable_variables, UpdateSettings(
      cfg['optimizer'], params, iter_size=iter_size, log_global_norm=True,
      noise_scale=noise_scale, noise_scale_params={'parts': parts} if noise_scale else None))

  def loss_of(images, labels):
    return lambda: cross_entropy(model, images, labels)

  @tf.function
  def step(images, labels):
    size = tf.shape(images)[0] // 2
    halves = [(images[:size], labels[:size]), (images[size:], labels[size:])]
    if iter_size == 2:
      for part in halves:
        metrics = pipeline(loss_of(*part))
    elif parts == 2:
      metrics = pipeline([loss_of(*part) for part in halves])
    else:
      metrics = pipeline(loss_of(images, labels))
    return metrics['loss']

  return step


def cpu_description(model, flags):
  """The CPU model and its bfloat16 features."""
  features = [f for f in ('avx512_bf16', 'amx_bf16') if f in flags]
  return f'{model}; bfloat16 features: {", ".join(features) or "none"}'


def cpu_peak(flags):
  """The line of scripts/cpu_peak.c: one core's float32 FMA and bfloat16 dot-product rates.

  Built with the system C compiler when ``flags`` (the CPU's) include
  avx512_bf16; otherwise (or if the build fails) says why.
  """
  if 'avx512_bf16' not in flags:
    return 'no avx512_bf16 on this CPU: the probe needs it'
  with tempfile.TemporaryDirectory() as tmp:
    binary = os.path.join(tmp, 'cpu_peak')
    try:
      build = subprocess.run(['cc', '-O2', '-mavx512f', '-mavx512bf16',
                              os.path.join(ROOT, 'scripts', 'cpu_peak.c'), '-o', binary],
                             capture_output=True, text=True, check=False)
    except OSError as exc:
      return f'probe not built: {exc}'
    if build.returncode != 0:
      return f'probe not built: {(build.stderr.strip().splitlines() or ["cc failed"])[-1]}'
    return subprocess.run([binary], capture_output=True, text=True, check=True).stdout.strip()


def matmul_candidates(size=2048):
  """A float32 and a bfloat16 size x size matmul, called like train steps (two arguments)."""
  result = {}
  for dtype in (tf.float32, tf.bfloat16):
    a = tf.cast(tf.random.stateless_normal([size, size], seed=[1, 2]), dtype)
    result[f'matmul {size}x{size} {dtype.name}'] = (
        tf.function(lambda x, _: tf.reduce_sum(tf.cast(tf.matmul(x, x), tf.float32))), (a, None))
  return result


def time_steps(candidates, batch, rounds, steps):
  """Times each candidate ``fn(*args)`` in interleaved rounds; ``batch`` is the default args.

  A candidate is a function, or a pair (function, its own arguments).
  """
  calls = {name: c if isinstance(c, tuple) else (c, batch) for name, c in candidates.items()}
  for fn, args in calls.values():  # trace, compile, warm up
    for _ in range(2):
      fn(*args).numpy()
  times = {name: [] for name in calls}
  for _ in range(rounds):
    for name, (fn, args) in calls.items():
      start = time.perf_counter()
      for _ in range(steps):
        loss = fn(*args)
      loss.numpy()
      times[name].append((time.perf_counter() - start) / steps)
  return {name: np.array(values) for name, values in times.items()}


class Turnstile:
  """Two threads take strict turns; each records the wall time of its own turns.

  A thread calls ``begin`` once, then ``turn_done`` at the end of every loop
  iteration (which hands the turn to the other thread and waits for it to come
  back), and ``finish`` when its loop is over.
  """

  def __init__(self, first, second):
    self.names = (first, second)
    self.go = {first: threading.Event(), second: threading.Event()}
    self.finished = {first: False, second: False}
    self.started = {}
    self.turns = {first: [], second: []}
    self.go[first].set()

  def _other(self, name):
    return self.names[1] if name == self.names[0] else self.names[0]

  def begin(self, name):
    self.go[name].wait()
    self.started[name] = time.perf_counter()

  def turn_done(self, name):
    self.turns[name].append(time.perf_counter() - self.started[name])
    other = self._other(name)
    if not self.finished[other]:
      self.go[name].clear()
      self.go[other].set()
      self.go[name].wait()
    self.started[name] = time.perf_counter()

  def finish(self, name):
    self.finished[name] = True
    self.go[self._other(name)].set()


class TurnTrainer(trainer_lib.Trainer):
  """The framework's Trainer, handing the turn over after every train step.

  ``side`` is its name at the turnstile: ``'train'``, or ``'fit'`` when a
  second Trainer stands where ``model.fit`` does.
  """

  def __init__(self, turnstile, *args, side='train'):
    super().__init__(*args)
    self.turnstile = turnstile
    self.side = side

  def make_train_step(self):
    run = super().make_train_step()

    def step(iterator):
      result = run(iterator)
      self.turnstile.turn_done(self.side)
      return result

    return step


class TurnCallback(keras.callbacks.Callback):
  """Hands the turn over after every model.fit batch."""

  def __init__(self, turnstile):
    super().__init__()
    self.turnstile = turnstile

  def on_train_batch_end(self, batch, logs=None):
    self.turnstile.turn_done('fit')


def in_turns(turnstile, name, loop, errors):
  """Runs ``loop()`` as ``name``'s side of the turnstile; exceptions go to ``errors``."""
  try:
    turnstile.begin(name)
    loop()
  except Exception as exc:  # pylint: disable=broad-except  # re-raised by the main thread
    errors.append(exc)
  finally:
    turnstile.finish(name)


def in_strict_turns(train_loop, fit_loop):
  """Runs ``train_loop(turnstile)`` and ``fit_loop(turnstile)`` in two threads taking strict turns.

  Each loop hands the turn over after every step (``TurnTrainer``,
  ``TurnCallback``); the first turns hold the set-up and tracing.

  Returns:
    (train loop seconds per turn, fit loop seconds per turn), numpy arrays.
  """
  turnstile = Turnstile('train', 'fit')
  errors = []
  threads = [
      threading.Thread(target=in_turns, args=(turnstile, 'train',
                                              lambda: train_loop(turnstile), errors)),
      threading.Thread(target=in_turns, args=(turnstile, 'fit',
                                              lambda: fit_loop(turnstile), errors))]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  opt_lib.clear_pipelines()
  if errors:
    raise errors[0]
  return np.array(turnstile.turns['train']), np.array(turnstile.turns['fit'])


def interleaved_loops(steps):
  """Runs Trainer.train and model.fit for ``steps`` steps each, in strict turns.

  Returns:
    (train mode seconds per iteration, model.fit seconds per iteration), numpy arrays.
  """

  def train_loop(turnstile):
    with tempfile.TemporaryDirectory() as logdir:
      cfg = load_config(['num_epochs=null', f'max_steps={steps}', f'logdir={logdir}'])
      trainer = TurnTrainer(turnstile, cfg, None, logdir)
      trainer.begin()
      trainer.train()

  def fit_loop(turnstile):
    cfg = load_config()
    data = DATA_LAYERS.resolve(cfg['data_layer'])(cfg['data_layer_params'], 'train')
    model = build_model(cfg)
    lr = cfg['lr_policy_params']['learning_rate']
    model.compile(optimizer=LARSOptimizer(lr, **cfg['optimizer_params']),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=['accuracy'])
    dataset = data.dataset(cfg['batch_size_per_gpu'], seed=cfg['random_seed'])
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0,
              callbacks=[TurnCallback(turnstile)])

  return in_strict_turns(train_loop, fit_loop)


def main():
  args = parse_args()
  cfg = load_config()
  batch_size = cfg['batch_size_per_gpu']
  data = DATA_LAYERS.resolve(cfg['data_layer'])(cfg['data_layer_params'], 'train')
  batch = next(iter(data.dataset(batch_size, seed=0)))
  print(f'model {cfg["model"]} {cfg["model_params"]}, batch {batch_size} of 28x28x1; '
        f'{args.rounds} rounds x {args.steps} steps; TF {tf.__version__}, Keras {keras.__version__}')
  model, flags = cpu_info()
  print(f'CPU: {cpu_description(model, flags)}')

  bare = 'bare Keras step (GradientTape + SGD apply)'
  full = 'optimize_loss: Backoff + clip + LARC + LARS'
  bf16 = 'optimize_loss, dtype mixed_bfloat16'
  accumulated = 'iter_size 2 (2 x 128), noise_scale: false'
  measured = 'iter_size 2 (2 x 128), noise_scale: auto'
  whole = 'iter_size 1 (256), noise_scale: false'
  halves = 'iter_size 1 (256), noise_scale: true (2 x 128)'
  candidates = {bare: bare_keras_step(cfg), full: framework_step(cfg),
                bf16: framework_step(cfg, 'mixed_bfloat16'),
                accumulated: noise_scale_step(cfg, 2, False),
                measured: noise_scale_step(cfg, 2, True), whole: noise_scale_step(cfg, 1, False),
                halves: noise_scale_step(cfg, 1, True)}
  times = time_steps(candidates, batch, args.rounds, args.steps)
  print(f'{"candidate":48s} {"ms/step":>8s} {"ratio to bare":>14s} {"ratio to float32":>17s}')
  for name, values in times.items():
    print(f'{name:48s} {statistics.median(values) * 1e3:8.1f} '
          f'{statistics.median(values / times[bare]):14.3f} '
          f'{statistics.median(values / times[full]):17.3f}')
  step_ratio = statistics.median(times[full] / times[bare])
  noise_ratio = statistics.median(times[measured] / times[accumulated])
  halves_ratio = statistics.median(times[halves] / times[whole])
  bf16_ratio = statistics.median(times[bf16] / times[full])
  gemm = time_steps(matmul_candidates(), None, args.rounds, args.steps)
  gemm_f32, gemm_bf16 = gemm.values()
  gemm_ratio = statistics.median(gemm_bf16 / gemm_f32)
  print(f'{"the CPU: 2048x2048 matmul, bfloat16 vs float32":48s} {statistics.median(gemm_bf16) * 1e3:8.1f} '
        f'{"":14s} {gemm_ratio:17.3f}')
  print(f'the CPU, one core (scripts/cpu_peak.c): {cpu_peak(flags)}')

  train_turns, fit_turns = interleaved_loops(args.loop_steps)
  count = min(len(train_turns), len(fit_turns)) - args.skip
  blocks = [slice(args.skip + i, args.skip + i + args.block)
            for i in range(0, count - args.block + 1, args.block)]
  loop_ratios = np.array([fit_turns[b].sum() / train_turns[b].sum() for b in blocks])
  loop_ratio = statistics.median(loop_ratios)
  timed = slice(args.skip, args.skip + len(blocks) * args.block)
  print(f'{"train loop, strict turns":48s} {"images/sec":>10s}  ({len(blocks)} blocks of '
        f'{args.block} iterations after {args.skip}; ratio per block '
        f'{loop_ratios.min():.3f}-{loop_ratios.max():.3f})')
  print(f'{"framework train mode (Trainer.train)":48s} '
        f'{batch_size / train_turns[timed].mean():10.1f}')
  print(f'{"model.fit (same model, LARS, data layer)":48s} '
        f'{batch_size / fit_turns[timed].mean():10.1f}')

  print(f'{"PASS" if step_ratio <= MAX_STEP_RATIO else "FAIL"} train step, optimize_loss vs bare '
        f'Keras step: {step_ratio:.3f}x the time (goal <= {MAX_STEP_RATIO}x)')
  print(f'{"PASS" if loop_ratio >= 1.0 else "FAIL"} train mode vs model.fit: {loop_ratio:.3f}x '
        f'the images/sec (median of {len(blocks)} blocks; goal >= 1.0x)')
  print(f'{"PASS" if noise_ratio <= MAX_NOISE_SCALE_RATIO else "FAIL"} noise_scale: auto '
        f'(iter_size 2) vs not measured: {noise_ratio:.3f}x the time (goal <= '
        f'{MAX_NOISE_SCALE_RATIO}x)')
  print(f'noise_scale: true on one worker with iter_size 1 (two half-batches) vs one pass: '
        f'{halves_ratio:.3f}x the time')
  print(f'{"PASS" if bf16_ratio < 1.0 else "FAIL"} mixed_bfloat16 vs float32 train step: '
        f'{bf16_ratio:.3f}x the time, {1.0 / bf16_ratio:.2f}x the speed (goal: faster; '
        f'this CPU\'s bfloat16 matmul takes {gemm_ratio:.2f}x the float32 time)')


if __name__ == '__main__':
  main()
