"""Training cases run by two workers under either engine, and in-process as references.

tests/test_horovod.py runs them under ``horovodrun -np 2``, tests/test_multi_worker.py
under two ``TF_CONFIG`` workers (the multi_worker_mirrored engine); the engine is
chosen as run.py chooses it, from the environment. Each case trains a small
model through ``optimize_loss`` on a fixed data set: worker r takes rows
r::size of every batch; a single process takes the whole batch. Results go to
``<out>/<case>.rank<r>.npz``.

Usage: python tests/multi_worker_cases.py OUT_DIR CASE [CASE ...]
"""

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from framework.engines import distributed  # noqa: E402

from optimizers import allreduce  # noqa: E402
from optimizers.agn import AGNOptimizer  # noqa: E402
from optimizers.compat import openseq2seq as opt_lib  # noqa: E402
from optimizers.lars import KerasMomentum  # noqa: E402

BATCH = 16
STEPS = 6

CASES = {
    'momentum': dict(optimizer='Momentum', optimizer_params={'momentum': 0.9}, lr=0.1),
    'lars_larc_scaling': dict(
        optimizer='LARS', lr=2.0,
        optimizer_params={'momentum': 0.9, 'weight_decay': 1e-3, 'eeta': 0.01,
                          'skip_list': ['bias']},
        larc_params={'larc_eta': 0.05, 'larc_mode': 'clip'}, loss_scaling='Backoff',
        loss_scaling_params={'scale_max': 256.0}, clip_gradients=10.0),
    'momentum_iter3': dict(optimizer='Momentum', optimizer_params={'momentum': 0.9}, lr=0.1,
                           iter_size=3),
    # Rank 1's rows of update 2 hold an infinity: every worker must skip that update.
    'backoff_overflow': dict(optimizer='Momentum', optimizer_params={'momentum': 0.9}, lr=0.1,
                             loss_scaling='Backoff', loss_scaling_params={'scale_max': 1024.0},
                             overflow_at=2),
    'lamb_larc_skip': dict(optimizer='LAMB', optimizer_params={'weight_decay': 0.01}, lr=0.02,
                           larc_params={'larc_eta': 0.002, 'skip_list': ['bias']}),
    'adam_larc_skip': dict(optimizer='Adam', optimizer_params={}, lr=0.01,
                           larc_params={'larc_eta': 0.002, 'skip_list': ['bias']}),
    'momentum_fp16': dict(optimizer='Momentum', optimizer_params={'momentum': 0.9}, lr=0.1,
                          horovod_params={'compression': 'fp16'}),
}
# The row of a batch that rank 1 of two workers reads (rows r::2).
RANK1_ROW = 1


def data(steps, batch, overflow_at=None):
  rng = np.random.default_rng(7)
  x = rng.normal(size=(steps * batch, 6)).astype(np.float32)
  y = np.tanh(x @ rng.normal(size=(6, 3))).astype(np.float32)
  if overflow_at is not None:
    x[overflow_at * batch + RANK1_ROW] = np.inf
  return x, y


def model():
  keras.utils.set_random_seed(11)
  return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation='tanh'),
                           keras.layers.Dense(3)], name='net')


def my_rows(x):
  """This worker's rows of a batch: all of them in a single process."""
  return x[allreduce.rank()::allreduce.size()]


def train_case(name):
  """Trains one case; returns a dict of numpy results."""
  case = dict(CASES[name])
  lr = case.pop('lr')
  overflow_at = case.pop('overflow_at', None)
  iter_size = case.get('iter_size', 1)
  opt_lib.clear_pipelines()
  net = model()
  kwargs = dict(case, optimizer_params=dict(case['optimizer_params'], learning_rate=lr),
                model=net, on_horovod=allreduce.size() > 1)
  kwargs.pop('optimizer')
  pipeline = opt_lib.get_pipeline(case['optimizer'], learning_rate_decay_fn=None, **kwargs)

  @tf.function
  def step(xb, yb):
    return opt_lib.optimize_loss(lambda: tf.reduce_mean(tf.square(net(xb) - yb)),
                                 case['optimizer'], learning_rate_decay_fn=None, **kwargs)

  x, y = data(STEPS * iter_size, BATCH, overflow_at)
  for i in range(STEPS * iter_size):
    rows = slice(i * BATCH, (i + 1) * BATCH)
    step(tf.constant(my_rows(x[rows])), tf.constant(my_rows(y[rows])))
  result = {f'w{i}': v.numpy() for i, v in enumerate(net.trainable_variables)}
  result['global_step'] = pipeline.global_step.numpy()
  result['allreduce_count'] = pipeline.allreduce_count.numpy()
  result['loss_scale'] = pipeline.loss_scale.numpy()
  result['engine'] = np.array(allreduce.engine_name())
  return result


def agn_case(period, steps=7, lr=0.1, momentum=0.5):
  """AGN around KerasMomentum on a quadratic; per rank, rows rank::size of a fixed data set."""
  keras.utils.set_random_seed(3)
  w = keras.Variable(np.array([1.0, -1.0, 0.5], np.float32), name='w')
  rng = np.random.default_rng(5)
  a = rng.normal(size=(steps, 4, 3)).astype(np.float32)
  b = rng.normal(size=(steps, 4)).astype(np.float32)
  inner = KerasMomentum(lr, momentum=momentum)
  agn = AGNOptimizer(inner, communication_period=period)
  agn.build([w])
  agn.get_init_op()
  gs = tf.Variable(0, dtype=tf.int64)
  for t in range(steps):
    at, bt = my_rows(a[t]), my_rows(b[t])
    loss = lambda at=at, bt=bt: 0.5 * tf.reduce_mean(tf.square(tf.linalg.matvec(at, w) - bt))
    agn.minimize(loss, global_step=gs, var_list=[w])
  return {'w': w.numpy(), 'center': agn.center[0].numpy(), 'global_step': gs.numpy()}


def single_process_case(name):
  """Trains case ``name`` inside ``allreduce.single_process()`` (as benchmarks time one worker)."""
  with allreduce.single_process():
    result = train_case(name)
    result['size_inside'] = np.array(allreduce.size())
  result['size_after'] = np.array(allreduce.size())
  return result


def late_rank_case(rounds=10, late_seconds=0.05):
  """Allreduces to which rank 1 comes ``late_seconds`` after rank 0, timed on every rank.

  Run with a long HOROVOD_CYCLE_TIME: a Horovod whose background thread only
  wakes once a cycle needs about a cycle per allreduce; one that wakes on
  enqueue finishes each soon after the late rank arrives.
  """
  import time  # pylint: disable=import-outside-toplevel
  reduce = tf.function(lambda x: allreduce.average([x])[0])
  value = tf.constant([float(allreduce.rank() + 1), 10.0])
  reduce(value)  # trace, and let both workers meet once
  start = time.perf_counter()
  results = []
  for _ in range(rounds):
    if allreduce.rank() == 1:
      time.sleep(late_seconds)
    results.append(reduce(value).numpy())
  return {'seconds': np.array(time.perf_counter() - start), 'results': np.array(results),
          'cycle_time': np.array(float(os.environ.get(distributed.CYCLE_TIME_VARIABLE, 'nan'))),
          'wakes_on_enqueue': np.array(distributed.wakes_on_enqueue())}


def noise_scale_case(workers=None):
  """Momentum with the noise scale measured, on ``data``: its estimates after each update.

  Under two workers each update averages the two workers' gradients of rows
  r::2 (iter_size 1); a single process (``workers=1``) takes the same rows as
  two micro-batches of iter_size 2, which is the same update and the same
  pair of small-batch gradients.
  """
  from optimizers.pipeline import GradientPipeline  # pylint: disable=import-outside-toplevel
  from optimizers.settings import UpdateSettings  # pylint: disable=import-outside-toplevel
  size = workers or allreduce.size()
  net = model()
  pipeline = GradientPipeline(
      net.trainable_variables, UpdateSettings(
          'Momentum', {'momentum': 0.9, 'learning_rate': 0.1}, multi_worker=size > 1,
          iter_size=1 if size > 1 else 2, noise_scale=True,
          noise_scale_params={'micro_batch': BATCH // 2, 'decay': 0.9}))

  @tf.function
  def step(xb, yb):
    return pipeline(lambda: tf.reduce_mean(tf.square(net(xb) - yb)))

  x, y = data(STEPS, BATCH)
  estimates = []
  for i in range(STEPS):
    rows = slice(i * BATCH, (i + 1) * BATCH)
    if size > 1:
      metrics = step(tf.constant(my_rows(x[rows])), tf.constant(my_rows(y[rows])))
    else:
      for r in range(2):
        metrics = step(tf.constant(x[rows][r::2]), tf.constant(y[rows][r::2]))
    estimates.append([float(metrics[k]) for k in ('noise_scale', 'noise_gradient_sq',
                                                  'noise_trace', 'noise_updates')])
  result = {f'w{i}': v.numpy() for i, v in enumerate(net.trainable_variables)}
  result['estimates'] = np.array(estimates)
  result['engine'] = np.array(allreduce.engine_name())
  return result


def run(name):
  if name == 'late_rank':
    return late_rank_case()
  if name == 'noise_scale':
    return noise_scale_case()
  if name.startswith('agn'):
    return agn_case(int(name[len('agn'):]))
  if name.startswith('single_'):
    return single_process_case(name[len('single_'):])
  return train_case(name)


# The cases the two-worker tests read, run once per engine (tests/conftest.py).
TRAINED = ['momentum', 'lars_larc_scaling', 'momentum_iter3', 'backoff_overflow',
           'lamb_larc_skip', 'adam_larc_skip']
ALL = TRAINED + ['agn3', 'momentum_fp16', 'single_momentum', 'noise_scale']
HOROVOD_ONLY = ['late_rank']  # Horovod's negotiation cycle


def main(out_dir, names):
  distributed.start()
  for name in names:
    result = run(name)
    np.savez(os.path.join(out_dir, f'{name}.rank{allreduce.rank()}.npz'), **result)
  print(f'rank {allreduce.rank()} of {allreduce.size()}: done {", ".join(names)}', flush=True)


if __name__ == '__main__':
  main(sys.argv[1], sys.argv[2:])
