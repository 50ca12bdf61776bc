"""Optimizer-update benchmark on ResNet-50's variables.

  .venv/bin/python scripts/bench_optimizers.py [--rounds 15] [--calls 3]

Times one update of all 161 trainable variables of ResNet-50 (25.6 M
parameters) with fixed random gradients, for the framework's LARS, Momentum +
LARC and LAMB, against Keras 3 ``SGD(momentum=0.9)`` applied inside a
``tf.function(jit_compile=True)``. The framework's optimizers run on their
default path, the native kernels (optimizers/native.py); the "XLA path" rows
are the same optimizers with the kernels switched off, for reference. Every round runs each candidate in turn
(``--calls`` updates, the mean taken), so all of them see the same load on a
shared machine; a row reports the median over rounds of the time and of the
per-round ratio to the baseline. Each candidate's turn starts with one
untimed update: the cache still holds the previous candidate's written lines,
and a large last-level cache (260 MB on the Intel machine) writes them back
to memory during whatever runs next. Timed calls therefore pay the deferred
writes of their own kind of update, as they do in training, where the update
runs once per step; without that call, the candidate after the baseline paid
for the baseline's writes (measured: 0.02-0.04 added to its ratio).

Memory bandwidth is measured in the same rounds with an XLA-compiled triad
a = b + s·c over three float32 arrays larger than the caches, counting 12
bytes per element. The bandwidth bound of an update is the bytes it must move
(LARS and Momentum + LARC: read w, g, m and write w, m; LAMB: read w, g, m, v
and write w, m, v) divided by that bandwidth; "of bound" is bound / time.

The last lines give one PASS/FAIL per goal: time ratio <= 1.25 and
bandwidth efficiency >= 50 %.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from models import MODELS  # noqa: E402
from optimizers import native  # noqa: E402
from optimizers import validation  # noqa: E402
from optimizers.lamb import LAMB  # noqa: E402
from optimizers.lars import LARSOptimizer  # noqa: E402
from optimizers.lars import KerasMomentum  # noqa: E402
from optimizers.pipeline import larc_and_apply  # noqa: E402

MAX_RATIO = 1.25
MIN_EFFICIENCY = 0.5
TRIAD_ELEMENTS = 32 * 1024 * 1024  # 128 MB per array, four times the L3 cache
SKIP = ['batch_normalization', 'bias']  # as in configs/resnet50_lars.py


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=15, help='interleaved rounds (median taken)')
  parser.add_argument('--calls', type=int, default=3, help='updates timed per candidate per round')
  parser.add_argument('--reference', action='store_true',
                      help='also time the per-variable reference paths (slower run)')
  return parser.parse_args()


def triad_fn():
  b = tf.Variable(tf.random.uniform([TRIAD_ELEMENTS]))
  c = tf.Variable(tf.random.uniform([TRIAD_ELEMENTS]))
  a = tf.Variable(tf.zeros([TRIAD_ELEMENTS]))

  @tf.function(jit_compile=True)
  def triad():
    a.assign(b + 1.5 * c)

  return triad


def update_fn(optimizer, grads, variables, jit_compile=False, larc=None, use_native=True):
  """A traced tf.function applying ``grads`` with ``optimizer`` (after LARC when given).

  ``use_native=False`` traces it with the native kernels switched off: the
  XLA path (the choice is made when the function is traced).
  """
  optimizer.build(variables)

  def step():
    if larc is not None:
      larc_and_apply(optimizer, grads, variables, optimizer.learning_rate, larc)
    else:
      optimizer.apply(grads, variables)

  function = tf.function(step, jit_compile=jit_compile)
  saved = os.environ.get(native.ENV_SWITCH)
  os.environ[native.ENV_SWITCH] = '1' if use_native else '0'
  try:
    function.get_concrete_function()
  finally:
    if saved is None:
      del os.environ[native.ENV_SWITCH]
    else:
      os.environ[native.ENV_SWITCH] = saved
  return function


BASELINE = 'keras SGD(momentum=0.9), jit_compile=True'
TRIAD = 'triad a = b + s*c (jit)'
# Float32 arrays of the parameters' size each update must move (reads and writes).
ARRAYS = {'LARS (native kernel)': 5, 'Momentum + LARC (native kernel)': 5, 'LAMB (native kernel)': 7,
          'LARS (XLA path)': 5, 'Momentum + LARC (XLA path)': 5, 'LAMB (XLA path)': 7,
          'keras Lamb, jit_compile=True': 7, BASELINE: 5,
          'LARS (reference, per variable)': 5, 'LAMB (reference, per variable)': 7}
GOALS = ('LARS (native kernel)', 'Momentum + LARC (native kernel)', 'LAMB (native kernel)')


def candidates_for(grads, variables, reference):
  """``{name: traced update}`` of every candidate, the triad first."""
  larc = validation.check_larc_params({'larc_eta': 0.002, 'larc_mode': 'clip', 'skip_list': SKIP})
  candidates = {
      TRIAD: triad_fn(),
      BASELINE: update_fn(keras.optimizers.SGD(0.1, momentum=0.9), grads, variables,
                          jit_compile=True),
      'LARS (native kernel)': update_fn(LARSOptimizer(0.1, skip_list=SKIP), grads, variables),
      'Momentum + LARC (native kernel)': update_fn(KerasMomentum(0.1, momentum=0.9), grads, variables,
                                           larc=larc),
      'LAMB (native kernel)': update_fn(LAMB(1e-3, weight_decay=1e-4, exclude_from_weight_decay=SKIP),
                                grads, variables),
      'LARS (XLA path)': update_fn(LARSOptimizer(0.1, skip_list=SKIP), grads, variables,
                                   use_native=False),
      'Momentum + LARC (XLA path)': update_fn(KerasMomentum(0.1, momentum=0.9), grads,
                                              variables, larc=larc, use_native=False),
      'LAMB (XLA path)': update_fn(LAMB(1e-3, weight_decay=1e-4, exclude_from_weight_decay=SKIP),
                                   grads, variables, use_native=False),
      'keras Lamb, jit_compile=True': update_fn(keras.optimizers.Lamb(1e-3), grads, variables,
                                                jit_compile=True),
  }
  if reference:
    candidates['LARS (reference, per variable)'] = update_fn(
        LARSOptimizer(0.1, skip_list=SKIP, fused=False), grads, variables)
    candidates['LAMB (reference, per variable)'] = update_fn(
        LAMB(1e-3, weight_decay=1e-4, exclude_from_weight_decay=SKIP, fused=False), grads,
        variables)
  return candidates


def time_rounds(candidates, rounds, calls):
  """``{name: [seconds per update, one per round]}``, the candidates in turn in every round."""
  for fn in candidates.values():  # compile and warm up
    fn()
    fn()
  times = {name: [] for name in candidates}
  for _ in range(rounds):
    for name, fn in candidates.items():
      fn()  # untimed: the previous candidate's deferred writes go to memory now
      start = time.perf_counter()
      for _ in range(calls):
        fn()
      times[name].append((time.perf_counter() - start) / calls)
  return times


def report(times, elements):
  """Prints the table and one PASS/FAIL line per goal."""
  bandwidth = 3 * 4 * TRIAD_ELEMENTS / np.array(times[TRIAD])  # bytes/s, per round
  base = np.array(times[BASELINE])
  print(f'memory bandwidth (triad): {statistics.median(bandwidth) / 1e9:.1f} GB/s (median)')
  print(f'{"candidate":40s} {"ms":>8s} {"ratio to baseline":>18s} {"bound ms":>9s} {"of bound":>9s}')
  results = {}
  for name, values in times.items():
    values = np.array(values)
    ratio = statistics.median(values / base)
    line = f'{name:40s} {statistics.median(values) * 1e3:8.2f} {ratio:18.3f}'
    if name in ARRAYS:
      bound = ARRAYS[name] * 4 * elements / bandwidth
      efficiency = statistics.median(bound / values)
      line += f' {statistics.median(bound) * 1e3:9.2f} {efficiency:9.1%}'
      results[name] = (ratio, efficiency)
    print(line)
  print(f'baseline: {BASELINE}; ratios and efficiencies are medians of per-round values')
  for name in GOALS:
    ratio, efficiency = results[name]
    print(f'{"PASS" if ratio <= MAX_RATIO else "FAIL"} {name} time vs {BASELINE}: '
          f'{ratio:.3f}x (goal <= {MAX_RATIO}x)')
    print(f'{"PASS" if efficiency >= MIN_EFFICIENCY else "FAIL"} {name} memory-bandwidth '
          f'efficiency: {efficiency:.1%} of bound (goal >= {MIN_EFFICIENCY:.0%})')


def main():
  args = parse_args()
  keras.utils.set_random_seed(0)
  model = MODELS.resolve('resnet50')({}, (224, 224, 3), 1000)
  variables = model.trainable_variables
  elements = sum(int(np.prod(v.shape)) for v in variables)
  grads = [tf.random.normal(v.shape, stddev=1e-3) for v in variables]
  if native.load() is None:
    print(f'FAIL the native kernels are unavailable ({native.error()}); '
          'the "native kernel" rows measure the XLA path')
  print(f'ResNet-50: {len(variables)} variables, {elements / 1e6:.2f} M parameters; '
        f'{args.rounds} rounds x {args.calls} calls; TF {tf.__version__}, Keras {keras.__version__}')
  candidates = candidates_for(grads, variables, args.reference)
  report(time_rounds(candidates, args.rounds, args.calls), elements)


if __name__ == '__main__':
  main()
