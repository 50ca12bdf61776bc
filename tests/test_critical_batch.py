"""run.py --mode=critical_batch end to end, on a tiny classifier of synthetic images.

One measurement from scratch (a warm-up, then branches at 1x, 2x, 4x) is
shared by the tests that read it: its numbers against hand-computed ones, the
same command again (every branch kept, unchanged), and the bad inputs, each
one line with exit status 2 and the run directory as it was. A stop in the
warm-up and in a branch, and two workers under both engines, run their own.
"""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.processes import Child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, 'run.py')

pytestmark = pytest.mark.slow

MODEL = textwrap.dedent('''\
    """A linear classifier of 4x4 images: what the mode does, not what a model learns."""
    import keras

    TASK = 'image_classification'


    def linear(params, image_shape, num_classes):
      inputs = keras.Input(image_shape)
      logits = keras.layers.Dense(num_classes, dtype='float32')(keras.layers.Flatten()(inputs))
      return keras.Model(inputs, logits)


    linear.PARAMS = {}
    linear.TASK = TASK
    ''')

# 256 training examples in micro-batches of 8: the default ladder is 8, 16, 32 (the
# largest still gets 8 updates of one epoch), each branch reads 256 examples.
CONFIG = textwrap.dedent('''\
    base_params:
      model: tiny_linear:linear
      data_layer: synthetic
      data_layer_params: {image_shape: [4, 4, 1], num_classes: 3, num_examples: %(examples)d}
      batch_size_per_gpu: 8
      max_steps: 16
      optimizer: Momentum
      optimizer_params: {momentum: 0.9}
      lr_policy: poly_decay
      lr_scaling: {rule: sqrt, base_learning_rate: 0.2, reference_batch: 8}
      lr_policy_params: {power: 1.0, decay_fraction: 1.0}
      print_loss_steps: %(print_every)d
      save_summaries_steps: null
      save_checkpoint_steps: null
    eval_params:
      batch_size_per_gpu: 64
    ''')

UNIT = 'images'


def write_config(directory, examples=256, print_every=100):
  directory.mkdir(parents=True, exist_ok=True)
  (directory / 'tiny_linear.py').write_text(MODEL)
  path = directory / 'tiny.yaml'
  path.write_text(CONFIG % {'examples': examples, 'print_every': print_every})
  return str(path)


def env():
  clean = {k: v for k, v in os.environ.items()
           if k not in ('TF_CONFIG', 'HOROVOD_CYCLE_TIME', 'LARGEBATCH_NUM_WORKERS')
           and not k.startswith('SLURM_')}
  return dict(clean, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT, OMP_NUM_THREADS='1')


def run(*args, check=True, timeout=600):
  result = subprocess.run([sys.executable, RUN, *map(str, args)], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=timeout)
  if check and result.returncode != 0:
    raise AssertionError(f'run.py exited {result.returncode}:\n{result.stdout}\n{result.stderr}')
  return result


def command(config, logdir, *extra):
  return ['--config', config, '--mode', 'critical_batch', '--logdir', logdir, *extra]


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


def test_from_scratch_it_trains_a_quarter_of_the_run_then_branches_and_picks_by_the_rule(
    measured):
  _, logdir, out = measured
  lines = out.strip().splitlines()
  summary = read_json(os.path.join(logdir, 'critical_batch.json'))
  # The warm-up: a quarter of the config's 16 steps, saved as a train run saves, config.yaml
  # beside it so that the directory re-runs itself.
  assert 'training the config first for 4 of its 16 steps (--warmup_fraction 0.25)' in out
  assert summary['checkpoint'] == os.path.join(logdir, 'ckpt-4')
  assert summary['checkpoint_step'] == 4 and summary['warmup']['steps'] == 4
  assert os.path.exists(os.path.join(logdir, 'config.yaml'))

  # The ladder and its sizes, by hand: one epoch of 256 images per branch.
  assert summary['unit'] == UNIT and summary['base_batch'] == 8 and summary['workers'] == 1
  assert summary['branch_examples'] == 256 and summary['max_batch'] == 32
  branches = summary['branches']
  assert [b['batch'] for b in branches] == [8, 16, 32]
  assert [b['iter_size'] for b in branches] == [1, 2, 4]
  assert [b['updates'] for b in branches] == [256 // 8, 256 // 16, 256 // 32] == [32, 16, 8]
  assert all(b['examples'] == 256 and b['wall_s'] > 0 for b in branches)
  # The rate: the schedule's at step 4 of 16 (linear decay from 0.2, no warm-up), 0.15,
  # times sqrt of the batch ratio (lr_scaling: sqrt).
  assert summary['learning_rate_at_checkpoint'] == pytest.approx(0.15, rel=1e-6)
  assert [b['learning_rate'] for b in branches] == pytest.approx(
      [0.15, 0.15 * 2 ** 0.5, 0.15 * 2], rel=1e-6)

  # The rule, from the recorded losses: the largest batch within 5 % of the 1x branch's.
  losses = [b['heldout_loss'] for b in branches]
  assert summary['tolerance'] == 0.05
  assert [b['gap'] for b in branches] == pytest.approx([l / losses[0] - 1 for l in losses])
  expected = max(b['batch'] for b, l in zip(branches, losses) if l <= losses[0] * 1.05)
  assert summary['critical_batch'] == expected

  # Each branch's record, the source of the summary.
  directory = os.path.join(logdir, 'critical_batch', 'ckpt-4')
  for branch in branches:
    record = read_json(os.path.join(directory, f'branch_{branch["batch"]}.json'))
    assert record['heldout_loss'] == branch['heldout_loss'] == record['metrics']['loss']
    assert record['settings']['checkpoint'] == summary['checkpoint']
    # The rate is held, then falls over the last quarter of the branch's updates.
    assert record['cooldown_fraction'] == 0.25
    # The branch's weights are not kept, its events are.
    kept = os.listdir(os.path.join(directory, f'branch_{branch["batch"]}'))
    assert not [n for n in kept if n.startswith('ckpt-') or n == 'checkpoint'], kept
  # B_simple: the 2x branch's estimate (iter_size 2 measures it, noise_scale: auto); the 1x
  # branch, one worker at iter_size 1, measures none.
  two = read_json(os.path.join(directory, 'branch_16.json'))
  assert two['noise_scale']['updates'] == 16
  assert summary['noise_scale'] == two['noise_scale']['b_simple']
  assert read_json(os.path.join(directory, 'branch_8.json'))['noise_scale'] is None

  with open(os.path.join(logdir, 'critical_batch.png'), 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  # The table, then the last two lines.
  table = lines.index(next(l for l in lines if l.startswith('critical batch from ')))
  assert lines[table + 1].split()[:3] == ['batch', 'iter_size', 'updates']
  assert [l.split()[0] for l in lines[table + 2:table + 5]] == ['8', '16', '32']
  assert lines[-2].startswith(f'critical batch: {expected} {UNIT}')
  assert lines[-1].startswith('noise scale (B_simple): ')
  if summary['noise_scale'] is not None:
    assert summary['noise_scale_branch'] == 16
    assert '(measured in the branch at batch 16' in lines[-1]


def test_the_same_command_again_keeps_every_branch_and_another_tolerance_reads_them_again(
    measured, tmp_path):
  config, original, _ = measured
  logdir = str(tmp_path / 'run')
  shutil.copytree(original, logdir)
  # The copy names its own checkpoint: the records are moved with it.
  directory = os.path.join(logdir, 'critical_batch', 'ckpt-4')
  for name in os.listdir(directory):
    if name.endswith('.json'):
      path = os.path.join(directory, name)
      text = open(path, encoding='utf-8').read().replace(original, logdir)
      with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
  before = {n: v for n, v in files_of(directory).items() if n.endswith('.json')}
  first = read_json(os.path.join(original, 'critical_batch.json'))

  again = run(*command(config, logdir, '--tolerance', '0.5'))
  assert '3 of 3 branches measured before, kept: 8, 16, 32' in again.stdout
  assert not [l for l in again.stdout.splitlines() if l.startswith(('branch 1 of', 'training '))]
  assert {n: v for n, v in files_of(directory).items() if n.endswith('.json')} == before
  summary = read_json(os.path.join(logdir, 'critical_batch.json'))
  assert [b['wall_s'] for b in summary['branches']] == [b['wall_s'] for b in first['branches']]
  assert [b['heldout_loss'] for b in summary['branches']] == [
      b['heldout_loss'] for b in first['branches']]
  losses = [b['heldout_loss'] for b in summary['branches']]
  assert summary['tolerance'] == 0.5
  assert summary['critical_batch'] == max(b['batch'] for b, l in zip(summary['branches'], losses)
                                          if l <= losses[0] * 1.5)


def refused(result):
  """The one error line of a refusal with exit status 2."""
  errors = [l for l in result.stderr.splitlines() if l.startswith('error: ')]
  assert result.returncode == 2 and len(errors) == 1, (result.returncode, result.stdout,
                                                       result.stderr)
  assert 'Traceback' not in result.stderr
  return errors[0]


@pytest.mark.parametrize('extra, expected', [
    (['--max_batch', '4'], "error: --max_batch: 4 is below the config's global batch 8; allowed: "
                           '8 or more'),
    (['--branch_examples', '512'], 'error: --branch_examples: 512 images per branch is more '
                                   'than the training split holds (256 images); allowed: 256'),
    (['--max_batch', '64'], 'error: --max_batch: the largest branch (64 images) needs at least '
                            '8 updates, 512 images, but the training split holds 256 images'),
    (['--tolerance', '1.5'], 'error: --tolerance: 1.5 is outside (0, 1)'),
    (['--tolerance', '0'], 'error: --tolerance: 0 is outside (0, 1)'),
    (['--warmup_fraction', '1'], 'error: --warmup_fraction: 1 is outside (0, 1)'),
    (['--cooldown_fraction', '1'], 'error: --cooldown_fraction: 1 is outside [0, 1)'),
    # Another config: a layer of another shape than the checkpoint's.
    (['--set', 'data_layer_params.num_classes=5'], 'error: {logdir}/ckpt-4: does not fit the '
                                                   'model and optimizer of this config (other '
                                                   'shape: model/'),
    # Other branch settings against the finished branches: another rate.
    (['--set', 'lr_scaling.base_learning_rate=0.4'], 'error: {logdir}/critical_batch/ckpt-4/'
                                                     'branch_8.json: measured with other settings '
                                                     '(learning_rate 0.15'),
])
def test_bad_input_is_one_line_and_changes_nothing(measured, run_main, extra, expected):
  config, logdir, _ = measured
  before = files_of(logdir)
  line = refused(run_main(*command(config, logdir, *extra)))
  assert line.startswith(expected.format(logdir=logdir)), line
  assert files_of(logdir) == before


@pytest.mark.parametrize('mode, flag', [('train', '--max_batch=64'), ('eval', '--tolerance=0.1'),
                                        ('train_eval', '--warmup_fraction=0.5'),
                                        ('benchmark', '--branch_examples=256'),
                                        ('infer', '--cooldown_fraction=0.5')])
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


def start(*args):
  return Child([sys.executable, '-u', RUN, *map(str, args)], cwd=ROOT, env=env())


def stop_after(child, predicate, timeout=300):
  """Sends SIGTERM once a line of ``child`` matches; returns (status, its whole output)."""
  text = ''.join(child.wait_for_line(predicate, timeout))
  child.send_signal(signal.SIGTERM)
  rest, _ = child.communicate(timeout=300)
  return child.returncode, text + rest


def test_a_stop_in_the_warm_up_or_in_a_branch_goes_on_with_the_same_command(tmp_path):
  # Long enough for a signal to land inside: a warm-up of 300 steps, branches of 4096 images.
  config = write_config(tmp_path, examples=4096, print_every=4)
  logdir = str(tmp_path / 'run')
  args = command(config, logdir, '--set', 'max_steps=400', '--max_batch', '16',
                 '--warmup_fraction', '0.75')

  with start(*args) as child:
    status, out = stop_after(child, lambda l: l.startswith('step '))
  assert status == 143, out
  stopped = out.strip().splitlines()[-1]
  assert stopped.startswith('stopped by SIGTERM at step '), out
  assert ' of the warm-up before branching: saved ' in stopped, stopped
  assert stopped.endswith('--max_batch 16 --warmup_fraction 0.75'), stopped
  assert os.path.exists(os.path.join(logdir, 'critical_batch', 'warmup.json'))

  # The same command finishes the warm-up, then a stop in the 2x branch drops that branch only.
  seen = {'second': False}

  def in_second_branch(line):
    seen['second'] = seen['second'] or line.startswith('branch 2 of 2')
    return seen['second'] and line.startswith('step ')

  with start(*args) as child:
    status, out = stop_after(child, in_second_branch)
  assert status == 143, out
  assert 'continuing the warm-up before branching: ' in out and 'to step 300' in out
  assert out.strip().splitlines()[-1].startswith(
      'stopped by SIGTERM in the branch at batch 16 (update '), out
  directory = os.path.join(logdir, 'critical_batch', 'ckpt-300')
  assert sorted(n for n in os.listdir(directory) if n.endswith('.json')) == [
      'branch_8.json', 'start.json']
  first = files_of(directory)['branch_8.json']

  finished = run(*args)
  assert '1 of 2 branches measured before, kept: 8' in finished.stdout
  assert 'branch 2 of 2: batch 16' in finished.stdout
  assert files_of(directory)['branch_8.json'] == first
  summary = read_json(os.path.join(logdir, 'critical_batch.json'))
  assert [b['updates'] for b in summary['branches']] == [4096 // 8, 4096 // 16]
  assert summary['checkpoint_step'] == 300 and summary['warmup']['wall_s'] > 0


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
    with Child([*launcher, *command(config, logdir)], cwd=ROOT, env=env(),
               stderr=subprocess.STDOUT, start_new_session=True) as child:
      out, _ = child.communicate(timeout=700)
    assert child.returncode == 0, out[-4000:]
    summary = read_json(logdir / 'critical_batch.json')
    # The global batch spans the workers: 8 per worker x 2, and the ladder doubles that.
    assert summary['workers'] == 2 and summary['base_batch'] == 16
    assert [(b['batch'], b['iter_size'], b['updates']) for b in summary['branches']] == [
        (16, 1, 256 // 16), (32, 2, 256 // 32)]
    # The chief alone prints the summary and writes the records.
    assert out.count('critical batch from ckpt-') == 1, out[-4000:]
    assert sorted(os.listdir(logdir / 'critical_batch' / 'ckpt-4')) == [
        'branch_16', 'branch_16.json', 'branch_32', 'branch_32.json', 'start.json']
    summaries[name] = summary
  if len(summaries) == 2:
    one, other = summaries.values()
    assert [b['heldout_loss'] for b in one['branches']] == pytest.approx(
        [b['heldout_loss'] for b in other['branches']], rel=1e-5)
