"""The worked ports of docs/openseq2seq.md, run as a user runs them, and run.py's answers to OpenSeq2Seq's keys.

The image port trains on this machine's Fashion-MNIST, the text port on its
CMUdict written as parallel files by the page's own script (read from the
page, so the page cannot drift from what runs), each for a few steps.
"""

import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, 'docs', 'openseq2seq.md')
PORTS = os.path.join(ROOT, 'configs', 'openseq2seq')
IMAGE = os.path.join(PORTS, 'resnet50_larc_port_fashion_mnist.py')
TEXT = os.path.join(PORTS, 'transformer_big_port_small.py')


def run(*args, cwd=ROOT, env=None, stdin=None):
  environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', **(env or {}))
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'run.py'), *args], cwd=cwd,
                          env=environ, capture_output=True, text=True, timeout=600, input=stdin)
  assert result.returncode == 0, f'run.py {" ".join(args)}:\n{result.stdout}\n{result.stderr}'
  return result


def recorded(logdir, mode=None):
  """The run directory's config.yaml, or its view of ``mode``."""
  with open(os.path.join(logdir, 'config.yaml'), encoding='utf-8') as f:
    config = yaml.safe_load(f)
  if mode is None:
    return config
  from framework.config import config_resolve  # pylint: disable=import-outside-toplevel
  return config_resolve.resolve(config, mode)


@pytest.fixture
def cores(monkeypatch):
  """This machine as one of 2 CPU cores and no GPU, whatever it is."""
  from framework.engines import local_cluster  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(local_cluster, 'most_workers', lambda: (2, '2 CPU cores'))
  return local_cluster


def test_num_gpus_beyond_the_machine_is_one_line_and_nothing_is_written(run_main, cores, tmp_path):
  logdir = tmp_path / 'run'
  result = run_main(f'--config={IMAGE}', '--set', 'num_gpus=8', f'--logdir={logdir}')
  assert result.returncode == 2
  assert result.stderr == (
      'error: num_gpus: 8 workers on this machine, which has 2 CPU cores: here each is a process '
      'with its own copy of the model (OpenSeq2Seq put one on each GPU), useful up to one per '
      'core; allowed: 1 to 2 (--set num_gpus=2). For more, start one worker per machine with '
      'TF_CONFIG, srun or horovodrun\n')
  assert not logdir.exists()


def test_num_gpus_starts_that_many_workers_as_num_workers_does(run_main, cores, monkeypatch,
                                                                tmp_path):
  started = []
  monkeypatch.setattr(cores, 'run', lambda command, count: started.append((command, count)) or 0)
  result = run_main(f'--config={IMAGE}', '--mode=train', '--set', 'num_gpus=2',
                    f'--logdir={tmp_path / "run"}')
  assert result.returncode == 0, result.stderr
  assert result.stdout == ('num_gpus: 2 is 2 workers on this machine, as run.py --num_workers=2 '
                           '(multi_worker_mirrored, one process each)\n')
  (command, count), = started
  # The workers run the same command; the launcher's environment tells them apart.
  assert count == 2 and command[1:] == [os.path.join(ROOT, 'run.py'), f'--config={IMAGE}',
                                        '--mode=train', '--set', 'num_gpus=2',
                                        f'--logdir={tmp_path / "run"}']


def test_the_image_port_as_it_is_answers_print_config(run_main):
  # Before the port's keys were read: "num_gpus: unknown key", then print_samples_steps, larc_nu.
  result = run_main(f'--config={os.path.join(PORTS, "resnet50_larc_port.py")}', '--print_config')
  assert result.returncode == 0, result.stderr
  config = yaml.safe_load(result.stdout)
  assert (config['num_gpus'], config['print_samples_steps']) == (8, 2000)
  assert config['larc_params']['larc_eta'] == 0.001
  assert config['model_params']['weight_decay'] == 0.0  # the regularizer is the one L2 loss


@pytest.mark.slow
def test_the_image_port_trains_on_fashion_mnist(tmp_path):
  logdir = str(tmp_path / 'run')
  result = run(f'--config={IMAGE}', '--mode=train', '--set', 'max_steps=3', f'--logdir={logdir}',
               '--set', 'print_samples_steps=3')
  lines = result.stdout.splitlines()
  # print_samples_steps: at step 3, three examples of the next batch with their top classes.
  at = lines.index('samples at step 3 (the next training batch, the model as it is now):')
  assert [l.split(':')[0] for l in lines[at + 1:at + 4]] == [f'  sample {i}' for i in (1, 2, 3)]
  assert all('label ' in l and 'top ' in l for l in lines[at + 1:at + 4]), lines[at:at + 4]
  assert lines[:4] == [
      'num_gpus: 1 is one worker, this process',
      "note: larc_params.larc_nu: read as larc_eta: 0.001, the trust coefficient (larc_nu is its "
      "name in OpenSeq2Seq's LARC configs, larc_eta in its code and here)",
      'note: regularizer: keras.src.regularizers.regularizers.L2 read as regularizer: l2 (scale * '
      'sum(w**2) / 2 over the kernels, as tf.contrib.layers.l2_regularizer)',
      "note: lr_policy_params.decay_steps: not given; 3 steps, the run's last step (3), as "
      'OpenSeq2Seq fills it (config.yaml records it)']
  train = recorded(logdir, 'train')
  # poly_decay without decay_steps decays over the whole run, as OpenSeq2Seq has it.
  assert train['lr_policy_params'] == {'learning_rate': 0.5, 'power': 2.0, 'decay_steps': 3}
  assert train['lr_policy'] == 'optimizers.lr_policies:poly_decay'
  assert train['larc_params']['larc_eta'] == 0.001
  assert (train['regularizer'], train['regularizer_params']) == ('l2', {'scale': 0.0005})
  assert train['model_params']['weight_decay'] == 0.0
  assert 'training resnet_cifar for 3 steps' in result.stdout


def page_script(name):
  text = open(PAGE, encoding='utf-8').read()
  return re.search(rf'^File `{re.escape(name)}`:\n\n```python\n(.*?)^```', text, re.M | re.S).group(1)


@pytest.mark.slow
def test_the_text_port_trains_on_cmudict_and_its_run_directory_keeps_infer_params(tmp_path,
                                                                                   run_main):
  (tmp_path / 'cmudict_parallel.py').write_text(page_script('cmudict_parallel.py'))
  subprocess.run([sys.executable, 'cmudict_parallel.py', 'cmu'], cwd=tmp_path, check=True,
                 timeout=120)
  data = {'WMT_DATA_ROOT': 'cmu'}
  result = run(f'--config={TEXT}', '--mode=train', '--set', 'max_steps=4', '--logdir=runs/g2p',
               cwd=tmp_path, env=data)
  assert result.stdout.splitlines()[0] == 'num_gpus: 1 is one worker, this process'
  assert re.search(r'^training transformer for 4 steps \(31 steps/epoch\), global batch 64 ',
                   result.stdout, re.M)
  config = recorded(tmp_path / 'runs' / 'g2p')
  assert config['base_params']['model_params']['label_smoothing'] == 0.1
  assert config['train_params']['batch_size_per_gpu'] == 64
  assert config['eval_params']['batch_size_per_gpu'] == 16
  assert config['infer_params']['batch_size_per_gpu'] == 1
  assert config['infer_params']['data_layer_params']['source_file'] == str(
      tmp_path / 'cmu' / 'wmt14-en-de.src.BPE_common.32K.tok')
  # From anywhere, the run directory's own config evaluates and infers as the port does.
  for mode, batch, source in (('eval', 16, 'wmt13-en-de.src.BPE_common.32K.tok'),
                              ('infer', 1, 'wmt14-en-de.src.BPE_common.32K.tok')):
    answer = run_main(f'--config={tmp_path / "runs" / "g2p" / "config.yaml"}', f'--mode={mode}',
                      '--print_config')
    assert answer.returncode == 0, answer.stderr
    view = yaml.safe_load(answer.stdout)
    assert view['batch_size_per_gpu'] == batch and view['model_params']['d_model'] == 64
    assert view['data_layer_params']['source_file'] == str(tmp_path / 'cmu' / source)
