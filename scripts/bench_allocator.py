"""Train steps under tcmalloc against glibc's malloc, at the batch sizes of the study.

  .venv/bin/python scripts/bench_allocator.py [--batches 256,8192] [--steps 4] [--rounds 1]

run.py restarts itself under tcmalloc (core/allocator.py). This measures what
that buys: for each batch size it runs ``run.py --mode=benchmark`` on the LARS
8K config of the study (``configs/large_batch/lars_8k.py`` with the batch
set; 5 untimed warm-up steps, then ``--steps`` timed ones) once with
``LARGEBATCH_ALLOCATOR=system`` (the baseline) and once under tcmalloc,
alternating in ``--rounds`` rounds, and prints per allocator the ms per step
run.py reports and the processes' user and kernel CPU seconds, then the
speed-up (glibc's ms/step over tcmalloc's, median over rounds). glibc maps and
zeroes a fresh region for every tensor above 32 MB; the kernel time shows it.
"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, 'configs', 'large_batch', 'lars_8k.py')
ALLOCATORS = ('system', 'tcmalloc')
RATE_RE = re.compile(r'^benchmark: (\S+) images/sec, (\S+) ms/step')


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--batches', default='256,8192',
                      help='comma-separated batch sizes (default: 256,8192)')
  parser.add_argument('--steps', type=int, default=4, help='timed steps per run')
  parser.add_argument('--rounds', type=int, default=1, help='runs per allocator and batch')
  args = parser.parse_args(argv)
  try:
    args.batches = [int(b) for b in args.batches.split(',')]
  except ValueError:
    parser.error(f'--batches: expected comma-separated integers, got {args.batches!r}')
  return args


def one_run(allocator, batch, steps):
  """(ms per step, user s, kernel s) of one run.py benchmark under ``allocator``."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  env = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}
  env.update(LARGEBATCH_ALLOCATOR=allocator, TF_CPP_MIN_LOG_LEVEL='3')
  command = [sys.executable, os.path.join(ROOT, 'run.py'), '--config', CONFIG,
             '--mode', 'benchmark', '--bench_steps', str(steps),
             '--set', f'batch_size_per_gpu={batch}']
  result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  rates = [RATE_RE.match(line) for line in result.stdout.splitlines()]
  rates = [m for m in rates if m]
  if result.returncode != 0 or not rates:
    tail = (result.stderr.strip().splitlines() or [f'exit status {result.returncode}'])[-1]
    sys.exit(f'error: run.py --mode=benchmark at batch {batch} ({allocator}) failed: {tail}')
  return (float(rates[-1].group(2)), after.ru_utime - before.ru_utime,
          after.ru_stime - before.ru_stime)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  print(f'{"batch":>6} {"allocator":>9} {"ms/step":>9} {"user s":>8} {"kernel s":>9}')
  for batch in args.batches:
    times = {name: [] for name in ALLOCATORS}
    for _ in range(args.rounds):
      for name in ALLOCATORS:
        ms, user, kernel = one_run(name, batch, args.steps)
        times[name].append(ms)
        label = 'glibc' if name == 'system' else name
        print(f'{batch:>6} {label:>9} {ms:>9.1f} {user:>8.1f} {kernel:>9.1f}', flush=True)
    speedup = statistics.median(s / t for s, t in zip(times['system'], times['tcmalloc']))
    print(f'{batch:>6} tcmalloc speed-up: {speedup:.2f}x (glibc ms/step over tcmalloc ms/step, '
          f'median of {args.rounds} round(s))', flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
