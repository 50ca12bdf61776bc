"""Multi-worker benchmark: one worker against two, under each engine, in one run.

  .venv/bin/python scripts/bench_distributed.py [--rounds 8] [--steps 6] [--jobs 2]

Starts, in turn, a two-worker job of each engine on this machine: ``horovodrun
-np 2 --gloo`` (Horovod) and two ``TF_CONFIG`` workers (tf.distribute's
MultiWorkerMirroredStrategy), ``--jobs`` times each, alternating, with
TensorFlow's thread pools and OpenMP limited to one thread per worker. Inside a
job each worker builds the framework's Trainer twice (configs/fashion_mnist_lars.py,
ResNet-8, batch 256 per worker, LARS): once as a one-worker job
(``distributed.single_process``: no collectives, the unsharded data) and once
as a worker of the two-worker job (one grouped all-reduce per step). Each round
times, in rotating order, ``--steps`` steps of

  one          rank 0 trains as a one-worker job; rank 1 waits at the barrier
  two          both ranks train the two-worker job
  independent  both ranks train as one-worker jobs at once (no communication)

with a host sum of the phase times between phases (also the barrier). The
speed-up of a round is the images/sec of ``two`` over that of ``one`` in the
same processes; an engine's figure is the median over all its rounds.
``independent`` shows what sharing this machine's two cores, caches and memory
allows before any cost of communication: the ceiling of the speed-up. The two
engines are compared by the median images/sec of their ``two`` phases, each
normalised by the ``one`` phase of its own round (so a slow spell of this shared
machine lands on both candidates alike). Goals: two multi_worker_mirrored
workers >= 1.8x one worker, and >= 0.95x two Horovod workers.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')
SPEEDUP_GOAL = 1.8
ENGINE_GOAL = 0.95
ENGINES = ('horovod', 'multi_worker_mirrored')
PHASES = ('one', 'two', 'independent')
JOB_TIMEOUT_SECONDS = 1200


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=8, help='rounds of the two phases per job')
  parser.add_argument('--steps', type=int, default=6, help='timed steps per phase')
  parser.add_argument('--jobs', type=int, default=2, help='jobs of each engine, alternating')
  parser.add_argument('--config', default=CONFIG, help='the config to train')
  parser.add_argument('--engines', default=','.join(ENGINES),
                      help='comma-separated engines to time (the comparison needs both)')
  parser.add_argument('--worker', default=None, metavar='OUT_JSON',
                      help='(internal) run as a worker of a job; rank 0 writes OUT_JSON')
  return parser.parse_args()


# --- a worker of a job ------------------------------------------------------------------------

def worker(args):
  """One worker of a two-worker job: the rounds of timed phases; rank 0 writes the results."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  from optimizers import allreduce  # pylint: disable=import-outside-toplevel
  engine = distributed.start()
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  from framework.run import trainer as trainer_lib  # pylint: disable=import-outside-toplevel
  if allreduce.size() != 2:
    raise SystemExit(f'bench_distributed.py --worker: expected 2 workers, got {allreduce.size()}')
  rank = allreduce.rank()
  configs = config_lib.load_configs(args.config, 'benchmark')
  configs, _ = config_lib.scale_learning_rates(configs, allreduce.size())
  cfg = configs['train']

  class Timed:
    """One Trainer's compiled step and data iterator, warmed up."""

    def __init__(self, logdir):
      self.trainer = trainer_lib.Trainer(cfg, None, logdir)
      self.trainer.begin()
      self.step = self.trainer.make_train_step()
      self.iterator = self.trainer.train_iterator()
      self.run(max(1, cfg['bench_warmup_steps']))

    def run(self, steps):
      start = time.perf_counter()
      with tf.summary.create_noop_writer().as_default():
        for _ in range(steps):
          result = self.step(self.iterator)
        result['loss'].numpy()
      return time.perf_counter() - start

  with tempfile.TemporaryDirectory() as logdir:
    with allreduce.single_process():
      solo = Timed(logdir)
    joint = Timed(logdir)
    # The all-reduce alone, before the rounds: one update's gradients (zeros of the
    # model's shapes), 50 times.
    grads = [tf.zeros_like(v) for v in joint.trainer.model.trainable_variables]
    reduce = tf.function(lambda: allreduce.average(grads))
    reduce()[0].numpy()
    distributed.sum_array(np.zeros(1))
    start = time.perf_counter()
    for _ in range(50):
      reduced = reduce()
    reduced[0].numpy()
    allreduce_ms = (time.perf_counter() - start) / 50 * 1000
    rounds = []
    for r in range(args.rounds):
      seconds = {}
      for name in PHASES[r % 3:] + PHASES[:r % 3]:
        mine = np.zeros(2)
        if name == 'two':
          mine[rank] = joint.run(args.steps)
        elif name == 'independent' or rank == 0:
          with allreduce.single_process():
            mine[rank] = solo.run(args.steps)
        seconds[name] = distributed.sum_array(mine)  # also the barrier between phases
      images = cfg['batch_size_per_gpu'] * args.steps
      rounds.append({'one': images / seconds['one'][0],
                     'two': 2 * images / float(np.max(seconds['two'])),
                     'independent': float(sum(images / t for t in seconds['independent']))})
  if rank == 0:
    with open(args.worker, 'w') as f:
      json.dump({'engine': engine, 'batch': cfg['batch_size_per_gpu'], 'rounds': rounds,
                 'allreduce_ms': allreduce_ms,
                 'parameters': int(sum(int(np.prod(g.shape)) for g in grads))}, f)


# --- the driver -------------------------------------------------------------------------------

def _environment():
  env = {k: v for k, v in os.environ.items()
         if k not in ('TF_CONFIG', 'HOROVOD_CYCLE_TIME') and not k.startswith('SLURM_')}
  for name in ('TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS', 'OMP_NUM_THREADS'):
    env.setdefault(name, '1')
  env.update(TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT)
  return env


def run_job(engine, args, out):
  """Runs one two-worker job of ``engine``; returns rank 0's results."""
  from framework.engines import local_cluster  # pylint: disable=import-outside-toplevel
  command = [sys.executable, os.path.abspath(__file__), '--worker', out, '--rounds',
             str(args.rounds), '--steps', str(args.steps), '--config', args.config]
  env = _environment()
  if engine == 'horovod':
    horovodrun = os.path.join(os.path.dirname(sys.executable), 'horovodrun')
    procs = [subprocess.Popen([horovodrun, '-np', '2', '--gloo', '-H', 'localhost:2', *command],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)]
  else:
    procs = [subprocess.Popen(command, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
             for e in local_cluster.worker_environments(2, env)]
  outputs = []
  try:
    for proc in procs:
      outputs.append(proc.communicate(timeout=JOB_TIMEOUT_SECONDS)[0])
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  if any(p.returncode for p in procs) or not os.path.exists(out):
    tail = '\n'.join(o[-2000:] for o in outputs)
    raise SystemExit(f'FAIL the {engine} job exited with an error:\n{tail}')
  with open(out) as f:
    return json.load(f)


def main():
  args = parse_args()
  if args.worker:
    worker(args)
    return
  print(f'multi-worker benchmark: {os.path.relpath(args.config, ROOT)}, 2 single-threaded '
        f'workers against 1, {args.jobs} job(s) of each engine x {args.rounds} rounds x '
        f'{args.steps} steps per phase', flush=True)
  engines = [e for e in ENGINES if e in args.engines.split(',')]
  results = {engine: [] for engine in engines}
  with tempfile.TemporaryDirectory() as tmp:
    for j in range(args.jobs):
      for engine in (engines if j % 2 == 0 else engines[::-1]):
        result = run_job(engine, args, os.path.join(tmp, f'{engine}-{j}.json'))
        results[engine].extend(result['rounds'])
        rounds = result['rounds']
        print(f'  job {j + 1} {engine:22s}: 1 worker '
              f'{statistics.median(r["one"] for r in rounds):7.1f} img/s, 2 workers '
              f'{statistics.median(r["two"] for r in rounds):7.1f} img/s, speed-up '
              f'{statistics.median(r["two"] / r["one"] for r in rounds):.3f}x (2 independent '
              f'jobs {statistics.median(r["independent"] / r["one"] for r in rounds):.3f}x); '
              f'the all-reduce of {result["parameters"]:,} float32 gradients alone: '
              f'{result["allreduce_ms"]:.2f} ms', flush=True)
  speedup = {e: statistics.median(r['two'] / r['one'] for r in results[e]) for e in engines}
  for engine in engines:
    ceiling = statistics.median(r['independent'] / r['one'] for r in results[engine])
    share = statistics.median(r['two'] / r['independent'] for r in results[engine])
    print(f'{engine:22s}: 2 workers give {speedup[engine]:.3f}x the images/sec of 1 '
          f'(median of {len(results[engine])} rounds; 2 independent one-worker jobs in the same '
          f'rounds: {ceiling:.3f}x, so the job reaches {share:.1%} of what the machine allowed)')
    ok = speedup[engine] >= SPEEDUP_GOAL
    print(f'{"PASS" if ok else "FAIL"} {engine} speed-up {speedup[engine]:.3f}x '
          f'(goal >= {SPEEDUP_GOAL}x)')
  if len(engines) == 2:
    # The engines' two-worker rates, each in units of its own round's one-worker rate.
    ratio = speedup['multi_worker_mirrored'] / speedup['horovod']
    raw = (statistics.median(r['two'] for r in results['multi_worker_mirrored'])
           / statistics.median(r['two'] for r in results['horovod']))
    print(f'multi_worker_mirrored / horovod, 2 workers: {ratio:.3f}x normalised by each '
          f'round\'s 1 worker ({raw:.3f}x in raw images/sec)')
    ok = ratio >= ENGINE_GOAL
    print(f'{"PASS" if ok else "FAIL"} multi_worker_mirrored against horovod {ratio:.3f}x '
          f'(goal >= {ENGINE_GOAL}x)', flush=True)


if __name__ == '__main__':
  main()
