"""``batch_policy`` in run.py runs: the batch grows by iter_size, the lr follows it, resume is exact.

A linear classifier of synthetic 4x4 images (tests/test_critical_batch.py's) in
micro-batches of 8, so every run is a few seconds: its lines and TensorBoard
scalars against hand-worked numbers, a stop just before and just after a change
resumed to the bit, config.yaml re-running the policy, the benchmark at each
batch, and the bad inputs in one line each.
"""

import glob
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.processes import Child
from tests.test_critical_batch import MODEL
from tests.test_critical_batch import ROOT
from tests.test_critical_batch import RUN
from tests.test_critical_batch import env
from tests.test_critical_batch import horovod_built
from tests.test_critical_batch import run
from tests.test_noise_scale_run import COMMON as NOISE_COMMON_BASE
from tests.test_noise_scale_run import scalars
from tests.test_run import checkpoint_values

pytestmark = pytest.mark.slow

# 256 examples in micro-batches of 8: 32 run steps an epoch. The lr decays linearly
# from 0.2 x sqrt(B/8) over 64 run steps, whatever the batch.
CONFIG = textwrap.dedent('''\
    base_params:
      model: tiny_linear:linear
      data_layer: synthetic
      data_layer_params: {image_shape: [4, 4, 1], num_classes: 3, num_examples: 256}
      batch_size_per_gpu: 8
      max_steps: 32
      optimizer: Momentum
      optimizer_params: {momentum: 0.9}
      lr_policy: poly_decay
      lr_scaling: {rule: sqrt, base_learning_rate: 0.2, reference_batch: 8}
      lr_policy_params: {power: 1.0, decay_steps: 64}
      deterministic: true
      print_loss_steps: 1
      save_summaries_steps: 4
      save_checkpoint_steps: 100
    eval_params:
      batch_size_per_gpu: 64
    ''')

# Fashion-MNIST in micro-batches of 64 with a fixed schedule (tests/test_noise_scale_run.py's).
NOISE_COMMON = [*NOISE_COMMON_BASE, '--set', 'max_steps=12', '--set', 'print_loss_steps=100']
STEPS = ['--set', 'batch_policy=steps',
         '--set', 'batch_policy_params={batches: [8, 16, 32], boundaries: [6, 12]}']
CHANGE = re.compile(r'^batch (\d+) -> (\d+) at step (\d+)(?: \(noise scale \d+ images\))?: '
                    r'iter_size (\d+), lr ([\d.e-]+) \(([^)]*)\) after update (\d+)$')


@pytest.fixture(scope='module')
def config(tmp_path_factory):
  directory = tmp_path_factory.mktemp('batch_policy')
  (directory / 'tiny_linear.py').write_text(MODEL)
  (directory / 'policies.py').write_text(textwrap.dedent('''\
      def doubling(state, every):
        """Twice the start every ``every`` run steps."""
        return state.start_batch * 2 ** min(state.step // every, 2)


      def shrinking(state):
        return state.batch // 2 if state.step >= 4 else state.batch


      def fractional(state):
        return state.batch + 0.5 if state.step >= 4 else state.batch
      '''))
  path = directory / 'tiny.yaml'
  path.write_text(CONFIG)
  return str(path)


def train(config, logdir, *extra):
  return run('--config', config, '--mode', 'train', '--logdir', logdir, *extra)


def variables(logdir, step):
  """Every value of ``ckpt-<step>`` but the save counter."""
  return {k: v for k, v in checkpoint_values(os.path.join(logdir, f'ckpt-{step}')).items()
          if 'save_counter' not in k}


def assert_same(got, expected):
  assert set(got) == set(expected)
  for key, value in expected.items():
    np.testing.assert_array_equal(got[key], value, err_msg=key)


@pytest.fixture(scope='module')
def straight(config, tmp_path_factory):
  """The steps policy from start to end: ``(logdir, output)``."""
  logdir = str(tmp_path_factory.mktemp('straight') / 'run')
  return logdir, train(config, logdir, *STEPS).stdout


def test_steps_grows_at_its_boundaries_with_the_lr_of_its_rule(straight):
  logdir, out = straight
  changes = [CHANGE.match(l).groups() for l in out.splitlines() if CHANGE.match(l)]
  # 6 updates of 8, then 3 of 16 (run steps 6 to 12), then 5 of 32 (to step 32).
  # lr = 0.2 x sqrt(B/8) x (1 - step/64).
  assert [(int(a), int(b), int(s), int(k), r, int(u)) for a, b, s, k, _, r, u in changes] == [
      (8, 16, 6, 2, 'lr_scaling sqrt', 6), (16, 32, 12, 4, 'lr_scaling sqrt', 9)]
  assert float(changes[0][4]) == pytest.approx(0.2 * 2 ** 0.5 * (1 - 6 / 64), rel=5e-5)
  assert float(changes[1][4]) == pytest.approx(0.2 * 2 * (1 - 12 / 64), rel=5e-5)
  assert 'batch policy steps: 14 updates to step 32 (a fixed batch of 8 takes 32), global batch ' \
         '8 -> 32' in out
  values = variables(logdir, 32)
  assert int(values['global_step/.ATTRIBUTES/VARIABLE_VALUE']) == 6 + 3 + 5  # updates
  assert int(values['batch_policy/step/.ATTRIBUTES/VARIABLE_VALUE']) == 32
  # 32 run steps of 8 examples: 32 micro-batches read, one epoch, none twice.
  assert int(values['data_position/.ATTRIBUTES/VARIABLE_VALUE']) == 32
  # The step lines show the batch of the next update and the rate it uses.
  lines = {int(m.group(1)): m for m in (re.match(r'^step (\d+) .*lr ([\d.e-]+) .*batch (\d+) ', l)
                                        for l in out.splitlines()) if m}
  assert lines[4].group(3) == '8' and lines[8].group(3) == '16' and lines[16].group(3) == '32'
  assert float(lines[16].group(2)) == pytest.approx(0.2 * 2 * (1 - 16 / 64), rel=1e-4)
  # TensorBoard: the batch and iter_size at each change and with the other train scalars.
  found = scalars(logdir, 'batch/')
  assert sorted(found['batch/global']) == [(4, 8), (6, 16), (8, 16), (12, 32), (12, 32),
                                           (16, 32), (20, 32), (24, 32), (28, 32), (32, 32)]
  assert max(found['batch/iter_size']) == (32, 4)


@pytest.mark.parametrize('stop_at', [5, 6, 8])
def test_a_stop_before_at_or_after_a_change_resumes_to_the_bit(config, straight, tmp_path,
                                                               stop_at):
  logdir = str(tmp_path / 'run')
  # A run step counts starting batches: the first update of 16, after step 6, ends at 8.
  first = train(config, logdir, *STEPS, '--set', f'max_steps={stop_at}')
  assert os.path.exists(os.path.join(logdir, f'ckpt-{stop_at}.index')), first.stdout
  second = train(config, logdir, *STEPS, '--continue_learning')
  assert f'starting at step {stop_at}' in second.stdout
  assert_same(variables(logdir, 32), variables(straight[0], 32))


def test_config_yaml_reruns_the_policy(straight, tmp_path):
  logdir = str(tmp_path / 'again')
  run('--config', os.path.join(straight[0], 'config.yaml'), '--mode', 'train', '--logdir', logdir)
  assert_same(variables(logdir, 32), variables(straight[0], 32))


def test_noise_scale_policy_grows_by_the_measured_noise_and_resumes_to_the_bit(tmp_path):
  # Fashion-MNIST (the synthetic images have no noise to measure), one worker at
  # iter_size 1: each micro-batch of 64 is measured as two halves. factor 0.01 makes
  # any estimate above 2.56 images reason to double, twice at most (max_batch 256).
  # decay 0.5: the estimate's window is 2 updates, so the first check (3) trusts it.
  policy = [*NOISE_COMMON, '--set', 'batch_policy=noise_scale', '--set',
            'noise_scale_params.decay=0.5',
            '--set', 'batch_policy_params={max_batch: 256, interval: 3, factor: 0.01}']
  straight_dir = str(tmp_path / 'straight')
  out = run(*policy, '--logdir', straight_dir).stdout
  changes = [CHANGE.match(l).groups() for l in out.splitlines() if CHANGE.match(l)]
  # The first check is after 3 updates: straight to 256 (iter_size 4), at run step 3.
  assert [(int(c[0]), int(c[1]), int(c[2]), int(c[3])) for c in changes] == [(64, 256, 3, 4)]
  assert re.search(r'at step 3 \(noise scale \d+ images\).*\(linear: no lr_scaling\)', out)
  # Then 2 updates of 4 run steps (to 11), and the last one of the step left, of 64, ends at 12.
  assert 'the last update reads the examples left before step 12: global batch 64 (iter_size 1) ' \
         'instead of 256' in out
  assert 'noise scale (B_simple): ' in out and '(global batch 256;' in out
  resumed = str(tmp_path / 'resumed')
  run(*policy, '--set', 'max_steps=2', '--logdir', resumed)
  run(*policy, '--logdir', resumed, '--continue_learning')
  assert_same(variables(resumed, 12), variables(straight_dir, 12))


# Seesaw on a schedule of 0.2 that halves after step 5 and again after step 11 (TensorFlow's
# convention: a boundary step keeps the earlier rate): the batch doubles at steps 6 and 12.
SEESAW = ['--set', 'batch_policy=seesaw', '--set', 'lr_policy=piecewise_constant',
          '--set', 'lr_policy_params={boundaries: [5, 11], decay_rates: [0.5, 0.25]}']


@pytest.fixture(scope='module')
def seesaw_straight(config, tmp_path_factory):
  """The seesaw policy from start to end: ``(logdir, output)``."""
  logdir = str(tmp_path_factory.mktemp('seesaw') / 'run')
  return logdir, train(config, logdir, *SEESAW).stdout


def test_seesaw_doubles_where_the_schedule_halves_with_its_rate(seesaw_straight):
  logdir, out = seesaw_straight
  assert ('batch policy seesaw from global batch 8 (it grows by iter_size; a step counts the '
          'examples of one starting batch); the lr schedule (0.2 at its peak, step 0) halves at '
          'steps 6, 12: the batch doubles there to 16, 32 (max_batch 128), the rate x0.70711 at '
          'each instead of x0.5') in out
  changes = [CHANGE.match(l).groups() for l in out.splitlines() if CHANGE.match(l)]
  rule = 'seesaw: the rate x0.70711 at each doubling'
  assert [(int(a), int(b), int(s), int(k), r, int(u)) for a, b, s, k, _, r, u in changes] == [
      (8, 16, 6, 2, rule, 6), (16, 32, 12, 4, rule, 9)]
  # Where the schedule would halve the rate, Seesaw multiplies it by 1/sqrt(2) instead:
  # 0.2, then 0.2 / sqrt(2) from step 6, then 0.2 / 2 from step 12.
  assert float(changes[0][4]) == pytest.approx(0.2 / 2 ** 0.5, rel=5e-5)
  assert float(changes[1][4]) == pytest.approx(0.1, rel=5e-5)
  lines = {int(m.group(1)): m for m in (re.match(r'^step (\d+) .*lr ([\d.e-]+) .*batch (\d+) ', l)
                                        for l in out.splitlines()) if m}
  assert [lines[s].group(3) for s in (4, 8, 28)] == ['8', '16', '32']
  assert float(lines[28].group(2)) == pytest.approx(0.1, rel=1e-4)
  assert int(variables(logdir, 32)['global_step/.ATTRIBUTES/VARIABLE_VALUE']) == 6 + 3 + 5


def test_seesaw_stopped_after_a_doubling_resumes_to_the_bit(config, seesaw_straight, tmp_path):
  logdir = str(tmp_path / 'run')
  # The first update of 16 (from step 6) ends at step 8.
  train(config, logdir, *SEESAW, '--set', 'max_steps=8')
  second = train(config, logdir, *SEESAW, '--continue_learning')
  assert 'starting at step 8' in second.stdout
  assert_same(variables(logdir, 32), variables(seesaw_straight[0], 32))


def test_a_policy_of_your_own(config, tmp_path):
  logdir = str(tmp_path / 'own')
  out = train(config, logdir, '--set', 'batch_policy=policies:doubling',
              '--set', 'batch_policy_params={every: 8}').stdout
  changes = [CHANGE.match(l).groups()[:3] for l in out.splitlines() if CHANGE.match(l)]
  assert changes == [('8', '16', '8'), ('16', '32', '16')]
  assert 'batch policy policies:doubling from global batch 8' in out


@pytest.mark.parametrize('policy,message', [
    ('policies:shrinking', r'batch_policy policies:shrinking: returned 4 at step 4, below the '
                           'current global batch 8; a batch policy never shrinks the batch'),
    ('policies:fractional', r'batch_policy policies:fractional: returned 8.5 at step 4; a batch '
                            'policy returns the global batch as an integer'),
])
def test_a_policy_of_your_own_that_returns_what_a_run_cannot_take_is_one_line(config, tmp_path,
                                                                              policy, message):
  result = run('--config', config, '--mode', 'train', '--logdir', str(tmp_path / 'bad'),
               '--set', f'batch_policy={policy}', check=False)
  assert result.returncode != 0
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert 'Traceback' not in result.stderr and re.search(message, lines[-1]), result.stderr


def test_benchmark_times_each_batch_the_policy_uses(config, tmp_path):
  result = run('--config', config, '--mode', 'benchmark', '--logdir', str(tmp_path / 'bench'),
               '--bench_steps', '2', *STEPS)
  lines = re.findall(r'^benchmark at global batch (\d+) \(iter_size (\d+)\): [\d.]+ images/sec, '
                     r'[\d.]+ ms/update over 2 updates \(1 worker\(s\)\)$', result.stdout, re.M)
  assert lines == [('8', '1'), ('16', '2'), ('32', '4')], result.stdout


@pytest.mark.parametrize('extra,message', [
    (['--set', 'batch_policy=noise_scale', '--set', 'batch_policy_params={max_batch: 4}'],
     'batch_policy_params.max_batch: 4 is below the starting global batch 8'),
    (['--set', 'batch_policy=steps', '--set',
      'batch_policy_params={batches: [8, 32, 16], boundaries: [4, 8]}'],
     r'batch_policy_params.batches: must increase'),
    (['--set', 'batch_policy=steps', '--set',
      'batch_policy_params={batches: [8, 12], boundaries: [4]}'],
     'the global batch 12 is not a multiple of 8'),
    (['--set', 'batch_policy=seesaw', '--set', 'batch_policy_params={factor: 2}'],
     'batch_policy_params.factor: 2 is no rate factor Seesaw takes; allowed: a number from 0.5 '
     'to 1.0'),
    (['--set', 'batch_policy=seesaw', '--set', 'batch_policy_params={max_batch: 24}'],
     'batch_policy_params.max_batch: 24 is not reached by doubling the starting global batch 8; '
     'allowed: 16, 32, 64, 128, ...'),
    (['--set', 'batch_policy=seesaw', '--set', 'batch_policy_params={boundaries: [4]}'],
     "batch_policy_params: unknown key(s) ['boundaries'] for batch_policy 'seesaw'; allowed: "
     'factor, max_batch'),
    (['--set', 'batch_policy=noise_scale', '--set', 'noise_scale=false'],
     "batch_policy: 'noise_scale' grows the batch by the measured noise scale, but noise_scale "
     'is false'),
    (['--set', 'batch_policy=steps', '--set', 'optimizer=AGN',
      '--set', 'agn_params={optimizer: Momentum, communication_period: 2}',
      '--set', 'batch_policy_params={batches: [8, 16], boundaries: [4]}'],
     'batch_policy: a growing batch cannot run beside optimizer AGN'),
])
def test_bad_input_is_one_line(config, tmp_path, run_main, extra, message):
  logdir = tmp_path / 'refused'
  result = run_main('--config', config, '--mode', 'train', '--logdir', logdir, *extra)
  assert result.returncode == 2, result
  assert 'Traceback' not in result.stderr
  assert message in result.stderr.strip().splitlines()[-1], result.stderr
  assert not glob.glob(str(logdir / 'ckpt-*'))


def test_critical_batch_mode_refuses_a_growing_batch_in_one_line(config, tmp_path, run_main):
  logdir = tmp_path / 'refused'
  result = run_main('--config', config, '--mode', 'critical_batch', '--logdir', logdir, *STEPS)
  message = ('batch_policy: --mode=critical_batch measures fixed batches against each other, '
             "and this config grows its batch ('steps'); run it with --set batch_policy=fixed")
  assert result.returncode == 2, result
  assert 'Traceback' not in result.stderr
  assert message in result.stderr.strip().splitlines()[-1], result.stderr
  assert not glob.glob(str(logdir / 'ckpt-*'))


# --- two workers ------------------------------------------------------------------------------

TWO_STEPS = ['--set', 'batch_policy=steps',
             '--set', 'batch_policy_params={batches: [16, 32, 64], boundaries: [6, 12]}']


def two_workers(engine, config, logdir, *extra):
  """run.py on two workers of ``engine`` on this machine; its output, with a deadline."""
  python = [sys.executable, RUN]
  launcher = (python + ['--num_workers', '2'] if engine == 'tf_distribute' else
              [os.path.join(os.path.dirname(sys.executable), 'horovodrun'), '-np', '2', '--gloo',
               '-H', 'localhost:2'] + python)
  args = [*launcher, '--config', config, '--mode', 'train', '--logdir', logdir, *TWO_STEPS,
          *extra]
  with Child(args, cwd=ROOT, env=env(), stderr=subprocess.STDOUT,
             start_new_session=True) as child:
    out, _ = child.communicate(timeout=600)
  assert child.returncode == 0, out[-4000:]
  # horovodrun prefixes each worker's lines with its rank: '[0]<stdout>:'.
  return re.sub(r'^\[\d+\]<std(?:out|err)>:', '', out, flags=re.M)


@pytest.mark.multiprocess
@pytest.mark.timeout(1200)
@pytest.mark.parametrize('engine', ['tf_distribute', 'horovod'])
def test_two_workers_change_together_and_resume_across_a_change_exactly(config, tmp_path,
                                                                         engine):
  # The suite's set-up builds Horovod (scripts/setup.sh): without it this test fails, not skips.
  assert horovod_built(), 'horovod.tensorflow does not import: run scripts/setup.sh'
  straight = str(tmp_path / 'straight')
  out = two_workers(engine, config, straight)
  # 8 per worker x 2 workers: the run starts at 16, and the chief alone says each change.
  changes = [CHANGE.match(l).groups()[:4] for l in out.splitlines() if CHANGE.match(l)]
  assert changes == [('16', '32', '6', '2'), ('32', '64', '12', '4')], out[-4000:]
  resumed = str(tmp_path / 'resumed')
  # Stopped after the first update of 32, which ends at step 8.
  two_workers(engine, config, resumed, '--set', 'max_steps=8')
  assert os.path.exists(os.path.join(resumed, 'ckpt-8.index'))
  second = two_workers(engine, config, resumed, '--continue_learning')
  assert 'starting at step 8' in second
  assert_same(variables(resumed, 32), variables(straight, 32))
