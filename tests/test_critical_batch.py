"""run.py --mode=critical_batch end to end, on a tiny classifier of synthetic images.

One measurement from scratch (the run trained to its three points and their
windows, then branches at 2x and 4x from each) is shared by the tests that
read it: its numbers against ones recomputed here (the fit of each point by
numpy, the whole run by the fit of its parts' summed updates), the same command again (every branch
kept), and the bad inputs, each one line with exit status 2 and the run
directory as it was. A stop in a branch, a rate at which nothing learns, and
two workers under both engines run their own.
"""

import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.processes import Child
from tests import in_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, 'run.py')

pytestmark = pytest.mark.slow

MODEL = textwrap.dedent('''\
    """A linear classifier of Fashion-MNIST: what the mode does, not what a model learns."""
    import keras

    TASK = 'image_classification'


    def linear(params, image_shape, num_classes):
      inputs = keras.Input(image_shape)
      logits = keras.layers.Dense(num_classes, dtype='float32')(keras.layers.Flatten()(inputs))
      return keras.Model(inputs, logits)


    linear.PARAMS = {}
    linear.TASK = TASK
    ''')

# A run of 128 steps of 8 images: points at steps 32, 64 and 96, windows of 8 to 32
# steps, looks every step (128 / 256, at least 1), and --max_batch 32: branches at 8
# (the run itself), 16 and 32.
CONFIG = textwrap.dedent('''\
    base_params:
      model: tiny_linear:linear
      data_layer: fashion_mnist
      batch_size_per_gpu: 8
      max_steps: 128
      optimizer: Momentum
      optimizer_params: {momentum: 0.9}
      lr_policy: poly_decay
      lr_scaling: {rule: sqrt, base_learning_rate: 0.02, reference_batch: 8}
      lr_policy_params: {power: 1.0, decay_fraction: 1.0}
      print_loss_steps: %(print_every)d
      save_summaries_steps: null
      save_checkpoint_steps: null
    eval_params:
      batch_size_per_gpu: 1024
    ''')

UNIT = 'images'


def write_config(directory, print_every=100):
  directory.mkdir(parents=True, exist_ok=True)
  (directory / 'tiny_linear.py').write_text(MODEL)
  path = directory / 'tiny.yaml'
  path.write_text(CONFIG % {'print_every': print_every})
  return str(path)


def env():
  clean = {k: v for k, v in os.environ.items()
           if k not in ('TF_CONFIG', 'HOROVOD_CYCLE_TIME', 'LARGEBATCH_NUM_WORKERS')
           and not k.startswith('SLURM_')}
  return dict(clean, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT, OMP_NUM_THREADS='1')


def run(*args, check=True):
  """``run.py ARGS`` in this process (tests/in_process.py): what a child would give."""
  return in_process.run_py(*args, check=check)


def command(config, logdir, *extra):
  return ['--config', config, '--mode', 'critical_batch', '--logdir', logdir, '--max_batch', '32',
          *extra]


def files_of(directory):
  """``{relative path: (size, mtime in ns)}`` of every file under ``directory``."""
  found = {}
  for base, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(base, name)
      stat = os.stat(path)
      found[os.path.relpath(path, directory)] = (stat.st_size, stat.st_mtime_ns)
  return found


def read_json(path):
  with open(path, encoding='utf-8') as f:
    return json.load(f)


@pytest.fixture(scope='module')
def measured(tmp_path_factory):
  """One measurement from scratch: ``(config, logdir, its output)``."""
  directory = tmp_path_factory.mktemp('critical_batch')
  config = write_config(directory)
  logdir = str(directory / 'run')
  result = run(*command(config, logdir))
  return config, logdir, result.stdout


def refused(result):
  """The one error line of a refusal with exit status 2."""
  errors = [l for l in result.stderr.splitlines() if l.startswith('error: ')]
  assert result.returncode == 2 and len(errors) == 1, (result.returncode, result.stdout,
                                                       result.stderr)
  assert 'Traceback' not in result.stderr
  return errors[0]


def relative_fit(updates):
  """``(S_min, B_crit)`` by numpy: least squares of S on 1/B, each residual relative to its S."""
  batches = sorted(int(b) for b, s in updates.items() if s is not None)
  ys = np.array([updates[str(b)] for b in batches])
  slope, intercept = np.polyfit([1.0 / b for b in batches], ys, 1, w=1.0 / ys)
  return intercept, slope / intercept


def test_from_scratch_it_trains_the_run_to_three_points_and_fits_each(measured):
  _, logdir, out = measured
  summary = read_json(os.path.join(logdir, 'critical_batch.json'))
  assert [p['step'] for p in summary['points']] == [32, 64, 96]
  assert summary['batches'] == [8, 16, 32] and summary['base_batch'] == 8
  assert summary['branch_loss'] == 'heldout'
  # The run's own curve is every point's 1x branch; the others trained from the point.
  curve = read_json(os.path.join(logdir, 'critical_batch', 'run_curve.json'))['curve']
  assert [row[2] for row in curve[:4]] == [1, 2, 3, 4]  # a look every step
  for point in summary['points']:
    assert [(b['batch'], b['from_run']) for b in point['branches']] == [
        (8, True), (16, False), (32, False)]
    assert 8 * 8 <= point['window'] <= 32 * 8  # a 16th to a quarter of the run's 1024 images
    for branch in point['branches'][1:]:
      assert branch['examples'] == branch['updates'] * branch['batch']
    if point['b_crit'] is not None:
      s_min, b_crit = relative_fit(point['updates'])
      assert point['s_min'] == pytest.approx(s_min, rel=1e-9)
      assert point['b_crit'] == pytest.approx(b_crit, rel=1e-9)
      if point['interval'] is not None:  # None where fewer than half the draws fit
        low, high = point['interval']
        assert high is None or low <= high  # None: open above
  # The whole run: the fit of its updates at each batch every point reached, the sum of the
  # parts' (each point's speed-up times the 1x run's updates over the part it stands for).
  parts = [p for p in summary['points'] if p['measured']]
  common = [b for b in ('8', '16', '32') if all(p['updates'][b] is not None for p in parts)]
  run_updates = {b: summary['run_steps'] * sum(p['share'] * p['updates'][b] / p['updates']['8']
                                               for p in parts) for b in common}
  assert summary['run_updates'] == pytest.approx(run_updates, rel=1e-12)
  assert summary['run_updates']['8'] == pytest.approx(summary['run_steps'])
  assert len(common) >= 2
  assert summary['critical_batch'] == pytest.approx(relative_fit(run_updates)[1], rel=1e-9)
  assert sum(p['share'] for p in parts) == pytest.approx(1.0)
  lines = out.strip().splitlines()
  first, second, third = lines[-3:]
  from framework.run import critical_batch_results as results  # pylint: disable=import-outside-toplevel
  assert first == (f'critical batch: {results.describe_batch(summary["critical_batch"])} images '
                   f'({results.describe_interval(summary["interval"], 32)}) for a fixed batch '
                   f'over the whole run, from {results.points_text(len(parts), 3)}'), first
  assert second.startswith('growing batch: ')
  assert third.startswith('noise scale (B_simple): ')
  cost = [l for l in lines if l.startswith('cost: ')]
  assert len(cost) == 1 and f'{summary["compute"]["runs"]:.2f} runs of the config' in cost[0]
  # The compute: the run to its last window and the branches, against one run of the config.
  trained = read_json(os.path.join(logdir, 'critical_batch', 'warmup.json'))['examples'] + sum(
      p['examples_read'] for p in summary['points'])
  assert summary['compute']['trained_examples'] == trained
  # Each look of each branch evaluated the same 2048 held-out examples (two eval batches),
  # a forward pass each: a third of a trained example.
  evaluated = sum(p['evaluations'] for p in summary['points']) * 2048
  assert summary['heldout_examples'] == 2048
  assert summary['compute']['heldout_examples_evaluated'] == evaluated
  assert summary['compute']['runs'] == pytest.approx((trained + evaluated / 3) / (128 * 8),
                                                     abs=1e-3)
  assert os.path.getsize(os.path.join(logdir, 'critical_batch.png')) > 1000


def test_the_same_command_again_keeps_every_branch(measured):
  config, logdir, _ = measured
  before = read_json(os.path.join(logdir, 'critical_batch.json'))
  again = run(*command(config, logdir)).stdout
  assert 'training tiny_linear' not in again
  assert again.count('2 of 3 measured before, kept') == 3, again
  after = read_json(os.path.join(logdir, 'critical_batch.json'))
  assert after['critical_batch'] == before['critical_batch']
  assert [p['updates'] for p in after['points']] == [p['updates'] for p in before['points']]


def test_a_run_directory_moved_whole_keeps_its_branches(measured, tmp_path):
  config, logdir, _ = measured
  moved = tmp_path / 'moved'
  shutil.copytree(logdir, moved)
  again = run(*command(config, moved)).stdout
  assert 'training tiny_linear' not in again and 'branch at' not in again, again
  assert again.count('2 of 3 measured before, kept') == 3, again
  before = read_json(os.path.join(logdir, 'critical_batch.json'))
  after = read_json(moved / 'critical_batch.json')
  assert after['critical_batch'] == before['critical_batch']


@pytest.mark.parametrize('extra, expected', [
    (['--points', '0.5,0.2'], 'error: --points: 0.5,0.2 must be increasing shares of the run'),
    (['--points', 'half'], "error: --points: 'half' is not a comma-separated list of numbers"),
    (['--max_batch', '8'], 'error: --max_batch: 8 leaves only the config\'s global batch 8'),
    (['--branch_examples', '12'], 'error: --branch_examples: 12 images is no whole number of '
                                  'updates of the config\'s batch (8 images)'),
    (['--branch_loss', 'online', '--heldout_examples', '64'],
     'error: --heldout_examples: only used with --branch_loss=heldout'),
    (['--continue_learning'], 'error: --continue_learning: not used with --mode=critical_batch, '
                              'which goes on from its records and checkpoints by itself'),
    # Another config than the one the branches were measured with.
    (['--set', 'optimizer_params.momentum=0.0'],
     'error: {logdir}/critical_batch/step_32: its branches were measured with another config '
     '(optimizer_params.momentum: 0.9 -> 0.0)'),
])
def test_bad_input_is_one_line_and_changes_nothing(measured, run_main, extra, expected):
  config, logdir, _ = measured
  before = files_of(logdir)
  line = refused(run_main(*command(config, logdir, *extra)))
  assert line.startswith(expected.format(logdir=logdir)), line
  assert files_of(logdir) == before


@pytest.mark.parametrize('mode, flag', [('train', '--max_batch=64'), ('eval', '--points=0.5'),
                                        ('benchmark', '--branch_examples=256'),
                                        ('infer', '--branch_loss=heldout')])
def test_the_modes_flags_with_another_mode_are_one_line(measured, run_main, mode, flag):
  config, logdir, _ = measured
  before = files_of(logdir)
  line = refused(run_main('--config', config, '--mode', mode, '--logdir', logdir, flag))
  assert line == (f'error: {flag.split("=")[0]}: only used with --mode=critical_batch, not '
                  f'--mode={mode}')
  assert files_of(logdir) == before


def test_a_logdir_of_other_files_is_refused_before_anything_is_trained(measured, run_main,
                                                                       tmp_path):
  config, _, _ = measured
  (tmp_path / 'notes.txt').write_text('mine')
  line = refused(run_main(*command(config, tmp_path)))
  assert line.startswith(f'error: logdir {tmp_path} holds no checkpoint to branch from'), line
  assert sorted(os.listdir(tmp_path)) == ['notes.txt']


def test_a_checkpoint_of_another_config_is_refused(measured, run_main, tmp_path):
  config, logdir, _ = measured
  other = tmp_path / 'other.yaml'
  other.write_text(open(config, encoding='utf-8').read().replace('momentum: 0.9',
                                                                 'momentum: 0.5'))
  (tmp_path / 'tiny_linear.py').write_text(MODEL)
  checkpoint = os.path.join(logdir, 'ckpt-96')
  line = refused(run_main(*command(str(other), tmp_path / 'new', '--checkpoint', checkpoint)))
  assert line.startswith(f'error: --checkpoint={checkpoint}: written by a run of another config '
                         '(optimizer_params.momentum: 0.9 -> 0.5'), line


def test_a_growing_batch_runs_checkpoint_is_branched_at_its_run_step(tmp_path):
  config = write_config(tmp_path)
  source = tmp_path / 'grown'
  # 8 images a step to step 32, then 16: at run step 96 the run has made 32 + 64/2 = 64 updates.
  run('--config', config, '--mode', 'train', '--logdir', source, '--set', 'save_checkpoint_steps=32',
      '--set', 'batch_policy=steps', '--set', 'batch_policy_params={batches: [8, 16], '
      'boundaries: [32]}')
  checkpoint = str(source / 'ckpt-96')
  out = run(*command(config, tmp_path / 'run', '--checkpoint', checkpoint, '--max_batch', '16',
                     '--set', 'print_loss_steps=1'))
  assert 'point at step 96 of 128 (ckpt-96)' in out.stdout, out.stdout
  summary = read_json(tmp_path / 'run' / 'critical_batch.json')
  assert [p['step'] for p in summary['points']] == [96]
  # The 1x branch goes on at the schedule's rate of run step 96, not of its 64 updates:
  # poly_decay to 0 over 128 steps at 0.02 (the sqrt rule at its reference batch); a step's
  # line gives the rate at the step it ends at, 97 (at update 65 it would read 0.0098).
  first = [l for l in out.stdout.splitlines() if l.startswith('step 1 ')]
  assert first, out.stdout
  rate = float(first[0].split(' lr ')[1].split()[0])
  assert rate == pytest.approx(0.02 * (1 - 97 / 128), rel=1e-4), first[0]


def test_at_a_rate_where_nothing_learns_it_says_so(tmp_path):
  config = write_config(tmp_path)
  out = run(*command(config, tmp_path / 'run', '--set',
                     'lr_scaling.base_learning_rate=1e-9')).stdout
  last = out.strip().splitlines()[-3]
  assert last.startswith('critical batch: none measured (at no point did the 1x branch learn '
                         'enough to measure anything'), last
  summary = read_json(tmp_path / 'run' / 'critical_batch.json')
  assert summary['critical_batch'] is None
  assert all(not p['measured'] for p in summary['points'])


def test_a_sweep_passes_the_modes_flags_and_the_mode_resumes_by_itself(tmp_path):
  config = write_config(tmp_path)
  out = tmp_path / 'sweep'
  sweep = [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--config', config,
           '--out', out, '--mode', 'critical_batch', '--grid', 'random_seed=0',
           '--', '--max_batch', '16', '--points', '0.5']
  swept = subprocess.run(list(map(str, sweep)), cwd=ROOT, env=env(), capture_output=True,
                         text=True, timeout=300)
  assert swept.returncode == 0, swept.stdout + swept.stderr
  (point,) = [d for d in out.iterdir() if d.is_dir()]
  summary = read_json(point / 'critical_batch.json')
  assert summary['batches'] == [8, 16] and [p['step'] for p in summary['points']] == [64]
  log = (point / 'run.log').read_text()
  assert 'error' not in log.lower(), log
  # Again: the point is finished and skipped; run by hand, its branches are kept.
  again = run(*command(config, point, '--points', '0.5', '--max_batch', '16')).stdout
  assert '1 of 2 measured before, kept' in again and 'training tiny_linear' not in again, again


def start(*args):
  return Child([sys.executable, '-u', RUN, *map(str, args)], cwd=ROOT, env=env())


def stop_after(child, predicate, timeout=300):
  """Sends SIGTERM once a line of ``child`` matches; returns (status, its whole output)."""
  text = ''.join(child.wait_for_line(predicate, timeout))
  child.send_signal(signal.SIGTERM)
  rest, _ = child.communicate(timeout=300)
  return child.returncode, text + rest


def test_a_stop_in_a_branch_goes_on_with_the_same_command_to_the_same_answer(measured, tmp_path):
  config, straight, _ = measured
  logdir = str(tmp_path / 'run')
  args = command(config, logdir)
  seen = {'branch': False}

  def in_a_branch(line):
    seen['branch'] = seen['branch'] or line.startswith('branch at batch 32 (iter_size 4) from '
                                                       'step 64')
    return seen['branch'] and line.startswith('training ')

  with start(*args, '--set', 'print_loss_steps=1') as child:
    status, out = stop_after(child, in_a_branch)
  assert status == 143, out
  stopped = out.strip().splitlines()[-1]
  assert stopped.startswith('stopped by SIGTERM in a branch from step 64 at step '), stopped
  directory = os.path.join(logdir, 'critical_batch', 'step_64')
  assert not os.path.exists(os.path.join(directory, 'branch_32.json'))
  kept = files_of(directory)['branch_16.json']
  finished = run(*args, '--set', 'print_loss_steps=1').stdout
  (line,) = [l for l in finished.splitlines() if l.startswith('point at step 64 of 128 (ckpt-64)')]
  assert line.endswith('; branches 8, 16, 32 images; 1 of 3 measured before, kept'), line
  assert files_of(directory)['branch_16.json'] == kept
  one = read_json(os.path.join(straight, 'critical_batch.json'))
  other = read_json(os.path.join(logdir, 'critical_batch.json'))
  for a, b in zip(one['points'], other['points']):
    assert a['updates'].keys() == b['updates'].keys()
    for batch, updates in a['updates'].items():  # None: not reached in either
      assert (updates is None and b['updates'][batch] is None) or updates == pytest.approx(
          b['updates'][batch], rel=1e-6), (batch, a['updates'], b['updates'])


@functools.lru_cache(maxsize=None)
def horovod_built():
  """Whether horovod.tensorflow imports, asked once a process: each asking is a TensorFlow start-up."""
  return subprocess.run([sys.executable, '-c', 'import horovod.tensorflow'], env=env(),
                        capture_output=True, timeout=120).returncode == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(1500)
def test_two_workers_measure_the_same_branches_under_both_engines(tmp_path):
  config = write_config(tmp_path)
  summaries = {}
  # The suite's set-up builds Horovod (scripts/setup.sh): without it this test fails, not skips.
  assert horovod_built(), 'horovod.tensorflow does not import: run scripts/setup.sh'
  engines = {'tf_distribute': [sys.executable, RUN, '--num_workers', '2'],
             'horovod': [os.path.join(os.path.dirname(sys.executable), 'horovodrun'), '-np', '2',
                         '--gloo', '-H', 'localhost:2', sys.executable, RUN]}
  for name, launcher in engines.items():
    logdir = tmp_path / name
    with Child([*launcher, *command(config, logdir, '--max_batch', '64', '--points', '0.5')],
               cwd=ROOT, env=env(), stderr=subprocess.STDOUT, start_new_session=True) as child:
      out, _ = child.communicate(timeout=700)
    assert child.returncode == 0, out[-4000:]
    summary = read_json(logdir / 'critical_batch.json')
    # The global batch spans the workers: 8 per worker x 2, and the ladder doubles that.
    assert summary['workers'] == 2 and summary['batches'] == [16, 32, 64]
    point, = summary['points']
    assert [(b['batch'], b['iter_size']) for b in point['branches']] == [(16, 1), (32, 2), (64, 4)]
    # The chief alone prints the summary and writes the records.
    assert out.count('critical batch along the run of ') == 1, out[-4000:]
    assert sorted(n for n in os.listdir(logdir / 'critical_batch' / f'step_{point["step"]}')
                  if n.endswith('.json')) == [
        'branch_16.json', 'branch_32.json', 'branch_64.json', 'start.json']
    summaries[name] = summary
  one, other = summaries.values()
  assert one['points'][0]['updates'] == pytest.approx(other['points'][0]['updates'], rel=1e-4)
