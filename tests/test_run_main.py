"""run.py's command line called in this process: the config it resolves and its one-line mistakes.

Each case ends before anything is built, so a child process would add only
TensorFlow's start-up (several seconds a case). tests/test_run.py runs run.py
as a user does, in a subprocess, for what trains and for mistakes met on the
way from the shell (a missing config file, a config that exits). An error
that escaped as a traceback would fail a test here as an exception.
"""

import os

import pytest
import tensorflow as tf
import yaml

import run as run_py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LARS_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')
RESNET50_PY = os.path.join(ROOT, 'configs', 'resnet50_lars.py')


def main(capsys, *args):
  """Runs run.py's ``main`` on ``args``; returns (exit status, stdout, stderr)."""
  capsys.readouterr()  # what earlier calls printed is not this call's
  try:
    status = run_py.main(list(args))
  except SystemExit as exc:
    status = exc.code
  out, err = capsys.readouterr()
  return status, out, err


def test_python_and_yaml_configs_resolve_identically(capsys):
  # The Python config picks float32 without a GPU; the YAML one is the GPU configuration.
  gpu = tf.config.list_physical_devices('GPU')
  _, py, _ = main(capsys, '--config', RESNET50_PY, '--print_config')
  assert yaml.safe_load(py)['dtype'] == ('mixed_float16' if gpu else 'float32')
  status, py, _ = main(capsys, '--config', RESNET50_PY, '--print_config',
                       '--set', 'dtype=mixed_float16')
  _, yml, _ = main(capsys, '--config', os.path.join(ROOT, 'configs', 'resnet50_lars.yaml'),
                   '--print_config')
  assert status == 0 and py == yml
  assert yaml.safe_load(py)['optimizer_params']['skip_list'] == ['batch_normalization', 'bias']


@pytest.mark.parametrize('args,message', [
    (['--set', 'optimizer_params.momentun=0.9'],
     'optimizer_params.momentun: unknown'),
    (['--set', 'batch_size_per_gpu=abc'], 'batch_size_per_gpu: expected an integer'),
    (['--set', 'dtype=float64'], "dtype: 'float64' is not allowed"),
    (['--set', 'max_steps=100', '--set', 'num_epochs=2'],
     'num_epochs, max_steps: give exactly one of them, got both'),
    (['--set', 'lr_policy=poly_decai'], "did you mean 'poly_decay'"),
    (['--set', 'larc_params={larc_mode: clip}'], 'larc_params.larc_eta'),
    (['--set', 'modle=resnet'], 'modle: unknown key (did you mean model?)'),
    (['--set', 'jit_compile=true', '--set', 'summaries=[gradients]'],
     "jit_compile: summaries ['gradients'] are written inside the train step"),
    (['--set', 'optimizer_params.momentum=abc'],
     "optimizer_params.momentum: rejected by LARSOptimizer: could not convert string to float: 'abc'"),
    (['--set', 'optimizer_params={eeta: -1}'],
     'optimizer_params.eeta: rejected by LARSOptimizer: LARSOptimizer: eeta must be >= 0, got -1'),
    (['--set', 'optimizer_params={skip_list: 5}'],
     'optimizer_params.skip_list: rejected by LARSOptimizer'),
    (['--set', 'loss_scaling=Backoff', '--set', 'loss_scaling_params={scale_maxx: 2}'],
     "loss_scaling_params.scale_maxx: rejected by loss_scaling 'Backoff': "),
    (['--set', 'random_seed=-1'], 'random_seed: must be in [0, 2**32), got -1'),
    (['--set', 'num_epochs=.inf'], 'num_epochs: must be a finite number > 0, got inf'),
    (['--set', 'lr_policy_params.warmup_epochs=9'],
     'lr_policy_params.warmup_epochs: the warm-up (2106 steps) is longer than training (1872 steps)'),
    (['--logdir', ROOT + '/README.md'], 'README.md is a file, not a directory'),
])
def test_config_mistakes_exit_2_with_one_line(capsys, args, message):
  status, _, err = main(capsys, '--config', LARS_CONFIG, '--mode', 'train', '--logdir',
                        '/nonexistent/x', *args)
  assert status == 2, err
  lines = [l for l in err.splitlines() if l.strip()]
  assert lines[-1].startswith('error: ') and message in lines[-1], err


SHORTENED = ('note: lr_policy_params.warmup_epochs: the warm-up (234 steps) is longer than this '
             'run (30 steps, max_steps from the command line); it is shortened to the whole run '
             '(lr_policy_params.warmup_steps: 30, begin_decay_at: 30)')


# What --print_config says of the main job's update before anything is built.
CHAIN = ('update chain: allreduce (with two or more workers) → finite check → noise_scale (with '
         'two or more small batches per update) → lars; each form is chosen when the first '
         'step builds it')


def test_a_smoke_run_is_one_override(capsys):
  # The config trains 8 epochs of 234 steps after a warm-up of one epoch.
  status, out, err = main(capsys, '--config', LARS_CONFIG, '--print_config',
                          '--set', 'max_steps=30')
  assert status == 0 and err.splitlines() == [SHORTENED, CHAIN], err
  printed = yaml.safe_load(out)
  assert (printed['max_steps'], printed['num_epochs']) == (30, None)
  # The warm-up of one epoch, shortened to raw steps, still ends before the decay begins.
  assert printed['lr_policy_params'] == {'power': 2.0, 'decay_fraction': 1.0, 'min_lr': 0.0,
                                         'learning_rate': 2.0, 'warmup_steps': 30,
                                         'begin_decay_at': 30}
  # A length in epochs replaces max_steps the same way; a warm-up the run holds stays.
  status, out, err = main(capsys, '--config', LARS_CONFIG, '--print_config',
                          '--set', 'train_params.num_epochs=2')
  printed = yaml.safe_load(out)
  assert (status, err, printed['num_epochs'], printed['max_steps']) == (0, CHAIN + '\n', 2.0,
                                                                         None)
  assert printed['lr_policy_params']['warmup_epochs'] == 1


def test_a_config_file_whose_warm_up_outlasts_its_run_is_still_refused(capsys, tmp_path):
  config = tmp_path / 'short.py'
  config.write_text(f'exec(open({LARS_CONFIG!r}).read())\n'
                    "base_params.update(num_epochs=None, max_steps=30)\n")
  status, _, err = main(capsys, '--config', str(config), '--print_config')
  assert status == 2 and err.strip() == (
      'error: lr_policy_params.warmup_epochs: the warm-up (234 steps) is longer than training '
      '(30 steps); shorten it or train longer'), err


@pytest.mark.slow
def test_a_smoke_run_trains_with_one_override(capsys, tmp_path):
  logdir = tmp_path / 'smoke'
  status, out, err = main(capsys, '--config', LARS_CONFIG, '--mode', 'train', '--logdir',
                          str(logdir), '--set', 'max_steps=30')
  assert status == 0, err
  assert (out + err).count(SHORTENED) == 1
  raw = yaml.safe_load((logdir / 'config.yaml').read_text())
  recorded = {**raw['base_params'], **(raw.get('train_params') or {})}
  assert recorded['max_steps'] == 30 and recorded['lr_policy_params']['warmup_steps'] == 30
  assert tf.train.latest_checkpoint(str(logdir)).endswith('ckpt-30')
  # The run directory resumes from its own config as a config file: nothing to refuse.
  status, out, err = main(capsys, '--config', str(logdir / 'config.yaml'), '--mode', 'train',
                          '--logdir', str(logdir), '--continue_learning')
  assert status == 0 and 'nothing to do' in out, err


@pytest.mark.parametrize('mode', ['eval', 'export'])
def test_eval_and_export_need_no_schedule(capsys, tmp_path, mode):
  # Decay over 0.3 epochs: no epoch is counted when nothing trains, so the schedule is left
  # out and the run goes on to look for its checkpoint (this directory has none).
  export = ['--export_dir', str(tmp_path / 'exported')] if mode == 'export' else []
  status, _, err = main(capsys, '--config', LARS_CONFIG, '--mode', mode, '--logdir', str(tmp_path),
                        *export, '--set', 'lr_policy_params={learning_rate: 0.1, decay_epochs: 0.3}')
  assert status == 2 and err.strip() == f'error: no checkpoint found in {tmp_path}', err


@pytest.mark.parametrize('mode', ['eval', 'export', 'infer', 'benchmark'])
def test_auto_resume_is_refused_outside_training_in_one_line(capsys, tmp_path, mode):
  export = ['--export_dir', str(tmp_path / 'x')] if mode == 'export' else []
  status, out, err = main(capsys, '--config', LARS_CONFIG, '--mode', mode, '--auto_resume',
                          *export)
  assert status == 2 and out == ''
  assert err == (f'error: --auto_resume: only used with --mode=train or train_eval, not '
                 f'--mode={mode}\n')


def test_more_local_workers_than_the_machine_runs_is_one_line(capsys, monkeypatch):
  from framework.engines import local_cluster  # pylint: disable=import-outside-toplevel
  monkeypatch.delenv('TF_CONFIG', raising=False)
  monkeypatch.setattr(local_cluster, 'gpu_count', lambda: 0)
  monkeypatch.setattr(local_cluster, 'available_cores', lambda: 2)
  status, out, err = main(capsys, '--config', LARS_CONFIG, '--num_workers', '64')
  assert (status, out) == (2, '')
  assert err == ('error: --num_workers: 64 workers on this machine, which has 2 CPU cores: each '
                 'worker is a whole process with its own copy of the model, useful up to one per '
                 'core; allowed: 1 to 2. For more, start one worker per machine with TF_CONFIG, '
                 'srun or horovodrun\n')
  monkeypatch.setattr(local_cluster, 'gpu_count', lambda: 4)
  status, _, err = main(capsys, '--config', LARS_CONFIG, '--num_workers', '8')
  assert status == 2 and 'which has 4 GPUs' in err and 'one per GPU; allowed: 1 to 4' in err


def test_the_bound_of_local_workers_counts_gpus_else_cores():
  from framework.engines import local_cluster  # pylint: disable=import-outside-toplevel
  assert local_cluster.most_workers(gpus=0, cores=2) == (2, '2 CPU cores')
  assert local_cluster.most_workers(gpus=0, cores=1) == (1, '1 CPU core')
  assert local_cluster.most_workers(gpus=1, cores=96) == (1, '1 GPU')
  assert local_cluster.available_cores() == len(os.sched_getaffinity(0))
