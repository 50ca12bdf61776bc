"""Round five's probes of ``batch_policy`` in run.py runs: each answers rightly or in one line.

The tiny linear classifier of tests/test_batch_policy_run.py (micro-batches of
8, 32 run steps an epoch) where a policy only has to grow; Fashion-MNIST where
the noise scale must be measured.
"""

import glob
import json
import re
import textwrap

import pytest

from framework.config import validation
from tests.test_batch_policy_run import CHANGE
from tests.test_batch_policy_run import CONFIG
from tests.test_batch_policy_run import NOISE_COMMON
from tests.test_batch_policy_run import train
from tests.test_batch_policy_run import variables
from tests.test_critical_batch import MODEL
from tests.test_critical_batch import run
from tests.test_noise_scale_run import scalars

pytestmark = pytest.mark.slow

NOISE_POLICY = ['--set', 'noise_scale_params.decay=0.5',
                '--set', 'batch_policy_params={max_batch: 256, interval: 3, factor: 0.01}']


@pytest.fixture(scope='module')
def config(tmp_path_factory):
  directory = tmp_path_factory.mktemp('probes')
  (directory / 'tiny_linear.py').write_text(MODEL)
  (directory / 'jumping.py').write_text(textwrap.dedent('''\
      def jump(state):
        """64 times the start after the first update."""
        return 64 * state.start_batch if state.step else state.batch


      def every(state, steps):
        return state.batch * 2 if state.step % steps == 0 else state.batch


      def no_state():
        return 8


      def failing(state):
        return state.batch // 0


      def yes(state):
        return True
      '''))
  path = directory / 'tiny.yaml'
  path.write_text(CONFIG)
  return str(path)


def refusal(result):
  """The last line of a run refused with status 2 and no traceback."""
  assert result.returncode == 2, result
  assert 'Traceback' not in result.stderr, result.stderr
  return result.stderr.strip().splitlines()[-1]


# --- 1. a built-in policy by import path or as the function is the built-in one ---------------

def test_the_noise_scale_policy_by_its_import_path_measures_and_grows(tmp_path):
  out = run(*NOISE_COMMON, *NOISE_POLICY, '--set', 'batch_policy=core.batch_policy:noise_scale',
            '--logdir', str(tmp_path / 'run')).stdout
  changes = [CHANGE.match(l).groups()[:3] for l in out.splitlines() if CHANGE.match(l)]
  assert changes == [('64', '256', '3')], out
  assert 'batch policy noise_scale from global batch 64' in out


def test_a_python_config_naming_the_function_is_the_built_in_policy(tmp_path):
  path = tmp_path / 'grows.py'
  path.write_text(textwrap.dedent('''\
      from core.batch_policy import noise_scale

      base_params = {
          'model': 'resnet_cifar', 'model_params': {'depth': 8},
          'data_layer': 'fashion_mnist', 'batch_size_per_gpu': 64, 'max_steps': 12,
          'optimizer': 'Momentum', 'optimizer_params': {'momentum': 0.9},
          'lr_policy_params': {'learning_rate': 0.05},
          'batch_policy': noise_scale, 'batch_policy_params': {'interval': 3},
      }
      '''))
  cfg = validation.load_configs(str(path), 'train', construct=False)['train']
  assert cfg['batch_policy'] == 'noise_scale'
  from framework.run import noise_scale as noise_lib  # pylint: disable=import-outside-toplevel
  # One worker at iter_size 1: measured (in halves) because the policy grows by it.
  assert noise_lib.pipeline_arguments(cfg, 1)[0] is True
  with pytest.raises(validation.ConfigError, match=r"^batch_policy_params: unknown key\(s\) "
                     r"\['every'\] for batch_policy 'noise_scale'"):
    validation.load_configs(str(path), 'train', ['batch_policy_params={every: 3}'],
                            construct=False)


@pytest.mark.parametrize('policy', ['core.batch_policy:noise_scale', 'noise_scale'])
def test_the_noise_scale_policy_in_any_form_refuses_noise_scale_false(config, tmp_path, run_main,
                                                                      policy):
  result = run_main('--config', config, '--mode', 'train', '--logdir', tmp_path / 'refused',
                    '--set', f'batch_policy={policy}', '--set', 'noise_scale=false')
  assert refusal(result).endswith("batch_policy: 'noise_scale' grows the batch by the measured "
                                  'noise scale, but noise_scale is false; set noise_scale: auto '
                                  '(or true)'), result.stderr
  assert not glob.glob(str(tmp_path / 'refused' / 'ckpt-*'))


# --- 2. a growing batch ends at max_steps and num_epochs, as a fixed batch does ----------------

def steps_policy(batches, boundaries):
  return ['--set', 'batch_policy=steps',
          '--set', f'batch_policy_params={{batches: {batches}, boundaries: {boundaries}}}']


@pytest.mark.parametrize('length', [['--set', 'max_steps=32'],
                                    ['--set', 'max_steps=null', '--set', 'num_epochs=1']])
def test_the_last_update_of_a_grown_batch_reads_only_the_examples_left(config, tmp_path, length):
  logdir = str(tmp_path / 'run')
  # 6 updates of 8, then of 32 (4 run steps each): 10, 14, ..., 30, and the last one
  # of the 2 steps left, 16 examples, ends at step 32 (one epoch of 256) and not 34.
  out = train(config, logdir, *steps_policy([8, 32], [6]), *length).stdout
  assert ('the last update reads the examples left before step 32: global batch 16 '
          '(iter_size 2) instead of 32, lr ') in out, out
  assert 'batch policy steps: 13 updates to step 32 ' in out
  values = variables(logdir, 32)
  assert int(values['batch_policy/step/.ATTRIBUTES/VARIABLE_VALUE']) == 32
  assert int(values['data_position/.ATTRIBUTES/VARIABLE_VALUE']) == 32  # micro-batches of 8
  assert not glob.glob(f'{logdir}/ckpt-34*')
  assert max(scalars(logdir, 'epoch')['epoch']) == (32, 1.0)
  # The run is complete: a resume has nothing to do, and says so at the step it ended.
  again = train(config, logdir, *steps_policy([8, 32], [6]), *length, '--continue_learning')
  assert 'nothing to do: the checkpoint is at step 32 and the run ends at step 32' in again.stdout


def test_a_policy_of_your_own_jumping_far_past_the_end_reads_what_was_asked(config, tmp_path):
  logdir = str(tmp_path / 'jump')
  out = train(config, logdir, '--set', 'batch_policy=jumping:jump', '--set', 'max_steps=5').stdout
  assert 'global batch 32 (iter_size 4) instead of 512' in out, out
  values = variables(logdir, 5)
  assert int(values['data_position/.ATTRIBUTES/VARIABLE_VALUE']) == 5
  assert int(values['global_step/.ATTRIBUTES/VARIABLE_VALUE']) == 2  # updates


# --- 3. train summaries keep their cadence when an update advances the step by several ---------

def test_summaries_are_written_when_the_step_passes_their_cadence(config, tmp_path):
  logdir = str(tmp_path / 'run')
  # 8 updates of 8, then of 24 (3 run steps each): 11, 14, ..., 32. Every 4 steps.
  train(config, logdir, *steps_policy([8, 24], [8]),
        '--set', 'summaries=[learning_rate, variable_norm]')
  assert [s for s, _ in sorted(scalars(logdir, 'epoch')['epoch'])] == [4, 8, 14, 17, 20, 26,
                                                                        29, 32]
  # Inside the update, on the same axis, at the run step before it (as a fixed batch's are):
  # the updates that span a multiple of 4, and the last: updates 0, 4 at steps 0, 4; then
  # updates 8, 9, 10, 12, 13, 14, 15 of 3 steps each at 8 + 3 x (update - 8).
  expected = [0, 4, 8, 11, 14, 20, 23, 26, 29]
  norms = scalars(logdir, 'variable_norm/')
  assert norms and all(sorted(s for s, _ in found) == expected for found in norms.values()), norms


# --- 4. eval and export read a grown batch's checkpoint at its run step ------------------------

def test_eval_and_export_read_a_grown_batchs_checkpoint_at_its_run_step(config, tmp_path):
  logdir = str(tmp_path / 'run')
  # 6 updates of 8, 3 of 16, 5 of 32: 14 updates to run step 32.
  grow = steps_policy([8, 16, 32], [6, 12])
  train(config, logdir, *grow)
  evaluated = run('--config', config, '--mode', 'eval', '--logdir', logdir, *grow).stdout
  assert re.search(r'^restored .*ckpt-32 \(step 32\)$', evaluated, re.M), evaluated
  assert re.search(r'^eval at step 32: ', evaluated, re.M), evaluated
  eval_steps = {s for found in scalars(f'{logdir}/eval', '').values() for s, _ in found}
  assert eval_steps == {32}
  exported = run('--config', config, '--mode', 'export', '--logdir', logdir,
                 '--export_dir', tmp_path / 'export', *grow).stdout
  assert '(step 32) to ' in exported, exported
  assert json.loads((tmp_path / 'export' / 'export.json').read_text())['step'] == 32


# --- 5. a policy of your own: its signature checked as the config is read, its errors one line --

@pytest.mark.parametrize('extra,message', [
    (['--set', 'batch_policy=jumping:every', '--set', 'batch_policy_params={step: 4}'],
     'batch_policy_params.step: unknown argument of every (did you mean '
     'batch_policy_params.steps?); accepted: steps'),
    (['--set', 'batch_policy=jumping:every'],
     'batch_policy_params.steps: required argument of every is missing'),
    (['--set', 'batch_policy=jumping:no_state'],
     "batch_policy: jumping:no_state takes no positional argument for the run's state; allowed: "
     'a function policy(state, **batch_policy_params) returning the global batch '
     '(core/batch_policy.py)'),
    # A friction: a ceiling the doubling never reaches.
    (['--set', 'batch_policy=noise_scale', '--set', 'batch_policy_params={max_batch: 100}'],
     'batch_policy_params.max_batch: 100 is not reached by doubling the starting global batch 8; '
     'allowed: 16, 32, 64, 128, ... (or null: 16 x the start)'),
])
def test_a_policy_that_cannot_run_is_refused_before_a_step(config, tmp_path, run_main, extra,
                                                           message):
  result = run_main('--config', config, '--mode', 'train', '--logdir', tmp_path / 'refused',
                    *extra)
  assert refusal(result).endswith(message), result.stderr
  assert not glob.glob(str(tmp_path / 'refused' / 'ckpt-*'))


@pytest.mark.parametrize('policy,message', [
    ('failing', r'batch_policy jumping:failing: raised ZeroDivisionError at step 1 \(\S+jumping.py '
                r'line 15\): integer division or modulo by zero$'),
    ('yes', r'batch_policy jumping:yes: returned True at step 1; a batch policy returns the global '
            r'batch as an integer$'),
])
def test_a_policy_of_your_own_that_fails_as_it_runs_is_one_line(config, tmp_path, policy,
                                                                message):
  result = run('--config', config, '--mode', 'train', '--logdir', str(tmp_path / 'bad'),
               '--set', f'batch_policy=jumping:{policy}', check=False)
  assert result.returncode != 0
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert 'Traceback' not in result.stderr and re.search(message, lines[-1]), result.stderr


# --- frictions ---------------------------------------------------------------------------------

def test_a_resume_may_change_one_growing_policy_for_another_but_not_a_fixed_batch(config,
                                                                                  tmp_path):
  logdir = str(tmp_path / 'run')
  train(config, logdir, *steps_policy([8, 16], [4]), '--set', 'max_steps=8')
  # Batch 16 at step 8: doubling every 8 run steps goes on from it, to 32 at step 16.
  out = train(config, logdir, '--set', 'batch_policy=jumping:every',
              '--set', 'batch_policy_params={steps: 8}', '--set', 'max_steps=20',
              '--continue_learning').stdout
  assert "batch_policy: 'steps' -> 'jumping:every'" in out, out
  changes = [CHANGE.match(l).groups()[:3] for l in out.splitlines() if CHANGE.match(l)]
  assert changes == [('16', '32', '16')], out
  refused = run('--config', config, '--mode', 'train', '--logdir', logdir, '--set',
                'max_steps=24', '--continue_learning', check=False)
  assert refused.returncode == 2 and "batch_policy: 'jumping:every' -> 'fixed'" in \
      refused.stderr.strip().splitlines()[-1], refused.stderr


def test_a_resumed_steps_schedule_below_the_checkpoints_batch_is_refused_before_a_step(config,
                                                                                      tmp_path):
  logdir = tmp_path / 'run'
  train(config, str(logdir), *steps_policy([8, 16, 32], [4, 8]), '--set', 'max_steps=12')
  saved = (logdir / 'config.yaml').read_text()
  result = run('--config', config, '--mode', 'train', '--logdir', logdir,
               *steps_policy([8, 16], [4]), '--continue_learning', check=False)
  assert refusal(result).endswith(
      'batch_policy_params.batches: 16 at step 12, below the global batch 32 of the checkpoint '
      'resumed; a batch policy never shrinks the batch; allowed: a schedule at 32 or more from '
      'step 12 on'), result.stderr
  assert (logdir / 'config.yaml').read_text() == saved
  assert sorted(p.name for p in logdir.glob('ckpt-*.index')) == ['ckpt-12.index']


def test_benchmark_with_iter_size_two_names_the_micro_batch_and_the_global_batch(config,
                                                                                 tmp_path):
  out = run('--config', config, '--mode', 'benchmark', '--logdir', tmp_path / 'bench',
            '--bench_steps', '2', '--set', 'iter_size=2').stdout
  assert re.search(r'^benchmark: [\d.]+ images/sec, [\d.]+ ms/step over 2 steps \(micro-batch 8; '
                   r'global batch 16 = iter_size 2 steps, [\d.]+ ms/update, 1 worker\(s\)\)$',
                   out, re.M), out
