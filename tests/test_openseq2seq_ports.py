"""The five ports of configs/openseq2seq/, each its OpenSeq2Seq original with other imports, as a user runs them.

Each port is compared with a copy of its original (tests/openseq2seq_originals/,
as OpenSeq2Seq's repository holds it): they differ in import lines and paths
to data only. Each is read as its original means (the values below are the
original's, by hand), and each trains for a few steps on this machine's data
through run.py, as its small variant: the image ports on Fashion-MNIST, the
text ports on CMUdict written as parallel files by the page's own script
(read from docs/openseq2seq.md, so the page cannot drift from what runs).
"""

import difflib
import hashlib
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests import in_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, 'docs', 'openseq2seq.md')
PORTS = os.path.join(ROOT, 'configs', 'openseq2seq')
ORIGINALS = os.path.join(ROOT, 'tests', 'openseq2seq_originals')
IMAGE = os.path.join(PORTS, 'resnet50_larc_port_fashion_mnist.py')
TEXT = os.path.join(PORTS, 'transformer_big_port_small.py')

# Each port: its original (OpenSeq2Seq's path; the size and the start of the SHA-256 of
# the file there), and the lines other than imports the port changes: paths to data.
ORIGINAL_OF = {
    'resnet50_larc_port.py': ('example_configs/image2label/resnet-50-v1-larc.py', 1619,
                              '613411dacaa6949a', {}),
    'resnet50_v2_mp_port.py': ('example_configs/image2label/resnet-50-v2-mp.py', 1653,
                               'd5b99463660b08a6', {}),
    'resnet50v2_adamw_port.py': ('example_configs/image2label/resnet-50v2-adamw.py', 1719,
                                 'f343a562aabf7159', {}),
    'transformer_big_port.py': (
        'example_configs/text2text/en-de/transformer-big.py', 4148, '414a33250fee5fac',
        {'data_root = "/data/wmt16-ende-sp/"':
         'data_root = os.path.join(os.environ.get("WMT_DATA_ROOT", "/data/wmt16-ende-sp/"), "")'}),
    'transformer_base_port.py': (
        'example_configs/text2text/en-de/transformer-base.py', 4088, 'e7be727b7d2cae60',
        {'data_root = "[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]"':
         'data_root = os.path.join(os.environ.get("WMT_DATA_ROOT", "[REPLACE THIS TO THE PATH '
         'WITH YOUR WMT DATA]"), "")'}),
}
# What a port imports instead of open_seq2seq's modules.
PORT_IMPORTS = re.compile(r'(from (models|data)\.openseq2seq import \w+'
                          r'|from optimizers\.lr_policies import [\w, ]+|import os)$')


def run(*args, cwd=ROOT, env=None, stdin=None):
  """``run.py ARGS`` in this process (tests/in_process.py), which must end with status 0."""
  return in_process.run_py(*args, cwd=cwd, env=env, stdin=stdin, check=True)


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


# ---------------------------------------------------------------------------
# Each port is its original with other imports

def original_lines(port):
  source, size, digest, _ = ORIGINAL_OF[port]
  name = os.path.basename(source)
  with open(os.path.join(ORIGINALS, name), encoding='utf-8') as f:
    header, text = [next(f) for _ in range(3)], f.read()
  assert header[0].startswith(f"# OpenSeq2Seq's {source}, commit ")
  # The copy is the file of OpenSeq2Seq's repository: its size there, and its digest.
  assert (len(text), hashlib.sha256(text.encode()).hexdigest()[:16]) == (size, digest)
  return text.splitlines()


@pytest.mark.parametrize('port', sorted(ORIGINAL_OF))
def test_a_port_differs_from_its_original_in_imports_and_data_paths_only(port):
  with open(os.path.join(PORTS, port), encoding='utf-8') as f:
    ported = f.read().splitlines()
  removed, added = [], []
  for line in difflib.ndiff(original_lines(port), ported):
    if line[:2] in ('- ', '+ '):
      (removed if line[0] == '-' else added).append(line[2:])
  paths = ORIGINAL_OF[port][3]
  assert [l for l in removed if not l.startswith('from open_seq2seq.')] == list(paths)
  assert [l for l in added if not PORT_IMPORTS.match(l)] == list(paths.values())
  assert len([l for l in added if l.startswith('from ')]) >= 5  # the classes, from here


def test_the_page_shows_each_ports_diff_against_its_original():
  page = open(PAGE, encoding='utf-8').read()
  for port, (source, *_) in ORIGINAL_OF.items():
    with open(os.path.join(PORTS, port), encoding='utf-8') as f:
      ported = f.read().splitlines()
    shown = '\n'.join(difflib.unified_diff(original_lines(port), ported, source,
                                           f'configs/openseq2seq/{port}', n=0, lineterm=''))
    assert f'```diff\n{shown}\n```\n' in page, port


# What each port is read as: the original's values, in this framework's keys.
IMAGE_NET = {'data_layer': 'imagenet', 'initializer': 'variance_scaling_initializer',
             'num_epochs': 100, 'random_seed': 0, 'save_summaries_steps': 2000,
             'print_loss_steps': 100, 'eval_steps': 5000}
READ_AS = {
    'resnet50_larc_port.py': dict(
        IMAGE_NET, model='resnet50', num_gpus=8, use_horovod=False, batch_size_per_gpu=32,
        dtype='float32', print_samples_steps=2000, optimizer='Momentum',
        optimizer_params={'momentum': 0.9}, lr_policy='optimizers.lr_policies:poly_decay',
        lr_policy_params={'learning_rate': 0.5, 'power': 2.0}, regularizer='l2',
        regularizer_params={'scale': 0.0005}, logdir='experiments/resnet50-imagenet',
        model_params={'bn_momentum': 0.9, 'bn_epsilon': 1e-4, 'weight_decay': 0.0}),
    'resnet50_v2_mp_port.py': dict(
        IMAGE_NET, model='keras_application', num_gpus=1, use_horovod=True,
        batch_size_per_gpu=128, dtype='mixed', loss_scaling='Backoff', print_samples_steps=2000,
        optimizer='Momentum', optimizer_params={'momentum': 0.9},
        lr_policy='optimizers.lr_policies:poly_decay',
        lr_policy_params={'learning_rate': 0.4, 'power': 2}, regularizer='l2',
        regularizer_params={'scale': 0.0001}, model_params={'name': 'ResNet50V2',
                                                             'weight_decay': 0.0}),
    'resnet50v2_adamw_port.py': dict(
        IMAGE_NET, model='keras_application', num_gpus=8, use_horovod=False,
        batch_size_per_gpu=128, dtype='mixed', loss_scaling='Backoff', print_samples_steps=10000,
        optimizer='AdamW', optimizer_params={'beta1': 0.9, 'beta2': 0.999, 'epsilon': 1e-08,
                                             'weight_decay': 0.1},
        lr_policy='optimizers.compat.tf1_lr_policies:cosine_decay',
        lr_policy_params={'learning_rate': 0.002}, regularizer=None,
        model_params={'name': 'ResNet50V2', 'weight_decay': 0.0}),
}
TRANSFORMER = {'model': 'transformer', 'use_horovod': True, 'num_gpus': 1,
               'batch_size_per_gpu': 256, 'print_samples_steps': 100, 'eval_steps': 4001,
               'optimizer': 'optimizers.compat.tf1:LazyAdamOptimizer',
               'optimizer_params': {'beta1': 0.9, 'beta2': 0.997, 'epsilon': 1e-09},
               'lr_policy': 'optimizers.lr_policies:transformer_policy',
               'data_layer': 'text_pairs'}
LAYERS = {'encoder_layers': 6, 'decoder_layers': 6, 'attention_dropout': 0.1, 'beam_size': 4,
          'length_penalty': 0.6, 'decode_length_margin': 50, 'label_smoothing': 0.1}
READ_AS.update({
    'transformer_big_port.py': dict(
        TRANSFORMER, max_steps=440000, dtype='mixed', loss_scaling='Backoff',
        lr_policy_params={'learning_rate': 2.0, 'warmup_steps': 8000, 'd_model': 1024},
        model_params=dict(LAYERS, d_model=1024, num_heads=16, ff_size=4096, dropout=0.3)),
    'transformer_base_port.py': dict(
        TRANSFORMER, max_steps=300000, dtype='float32', loss_scaling=1.0,
        lr_policy_params={'learning_rate': 2.0, 'warmup_steps': 8000, 'd_model': 512},
        model_params=dict(LAYERS, d_model=512, num_heads=8, ff_size=2048, dropout=0.1)),
})


def view(path, mode='train'):
  from framework.config import config_file  # pylint: disable=import-outside-toplevel
  from framework.config import validation  # pylint: disable=import-outside-toplevel
  views = validation.load_configs(path, mode, construct=False)
  return {name: config_file.plain(v) for name, v in views.items() if v is not None}


@pytest.mark.parametrize('port', sorted(READ_AS))
def test_a_port_is_read_as_its_original(port):
  config = view(os.path.join(PORTS, port))['train']
  for key, value in READ_AS[port].items():
    if key == 'model_params':
      assert {k: config[key][k] for k in value} == value, key
    else:
      assert config[key] == value, key
  for key in ('base_model', 'encoder', 'encoder_params', 'decoder', 'decoder_params', 'loss'):
    assert key not in config


def test_the_image_ports_data_paths_are_the_originals():
  assert view(os.path.join(PORTS, 'resnet50_larc_port.py'))['train']['data_layer_params'][
      'data_dir'] == os.path.join(ROOT, 'data', 'tf-imagenet')
  mixed = view(os.path.join(PORTS, 'resnet50_v2_mp_port.py'))['train']['data_layer_params']
  assert (mixed['data_dir'], mixed['image_size'], mixed['num_classes']) == (
      os.path.join(ROOT, 'data'), 224, 1000)


def test_the_image_port_as_it_is_answers_print_config(run_main):
  # Before the port's keys were read: "num_gpus: unknown key", then print_samples_steps, larc_nu.
  result = run_main(f'--config={os.path.join(PORTS, "resnet50_larc_port.py")}', '--print_config')
  assert result.returncode == 0, result.stderr
  config = yaml.safe_load(result.stdout)
  assert (config['num_gpus'], config['print_samples_steps']) == (8, 2000)
  assert config['larc_params']['larc_eta'] == 0.001
  assert config['model_params']['weight_decay'] == 0.0  # the regularizer is the one L2 loss


# ---------------------------------------------------------------------------
# Each port trains, as its small variant

# The image ports' small variants: the keys of their ports kept in config.yaml.
IMAGE_VARIANTS = {
    'resnet50_larc_port_fashion_mnist.py': {
        'optimizer': 'Momentum', 'regularizer_params': {'scale': 0.0005},
        'lr_policy': 'optimizers.lr_policies:poly_decay',
        'lr_policy_params': {'learning_rate': 0.5, 'power': 2.0, 'decay_steps': 2}},
    'resnet50_v2_mp_port_fashion_mnist.py': {
        'optimizer': 'Momentum', 'regularizer_params': {'scale': 0.0001},
        'lr_policy_params': {'learning_rate': 0.4, 'power': 2, 'decay_steps': 2},
        'loss_scaling': 'Backoff'},
    'resnet50v2_adamw_port_fashion_mnist.py': {
        'optimizer': 'AdamW', 'regularizer': None,
        'lr_policy': 'optimizers.compat.tf1_lr_policies:cosine_decay',
        'lr_policy_params': {'learning_rate': 0.002, 'decay_steps': 2}},
}


@pytest.mark.slow
@pytest.mark.parametrize('variant', sorted(IMAGE_VARIANTS))
def test_an_image_port_trains_on_fashion_mnist(tmp_path, variant):
  logdir = str(tmp_path / 'run')
  # The per-variable summaries of the ports, traced into the step, take 30 s of a child's 40:
  # written by the first port's run, the learning rate's alone by the others'.
  summaries = [] if variant == os.path.basename(IMAGE) else ['--set', 'summaries=[learning_rate]']
  result = run(f'--config={os.path.join(PORTS, variant)}', '--mode=train', '--set', 'max_steps=2',
               f'--logdir={logdir}', '--set', 'print_samples_steps=2', *summaries)
  lines = result.stdout.splitlines()
  assert lines[0] == 'num_gpus: 1 is one worker, this process'
  assert 'training resnet_cifar for 2 steps' in result.stdout
  # print_samples_steps: at step 2, three examples of the next batch with their top classes.
  at = lines.index('samples at step 2 (the next training batch, the model as it is now):')
  assert all('label ' in l and 'top ' in l for l in lines[at + 1:at + 4]), lines[at:at + 4]
  train = recorded(logdir, 'train')
  assert (train['dtype'], train['initializer']) == ('float32', 'variance_scaling_initializer')
  for key, value in IMAGE_VARIANTS[variant].items():
    assert train[key] == value, key


def page_script(name):
  text = open(PAGE, encoding='utf-8').read()
  return re.search(rf'^File `{re.escape(name)}`:\n\n```python\n(.*?)^```', text, re.M | re.S).group(1)


@pytest.fixture(scope='module')
def cmudict_files(tmp_path_factory):
  """CMUdict's words as the text ports' parallel files, written by the page's script."""
  directory = tmp_path_factory.mktemp('cmudict')
  (directory / 'cmudict_parallel.py').write_text(page_script('cmudict_parallel.py'))
  subprocess.run([sys.executable, 'cmudict_parallel.py', 'cmu'], cwd=directory, check=True,
                 timeout=120)
  return directory


@pytest.mark.slow
def test_the_big_text_port_trains_on_cmudict_and_its_run_directory_keeps_infer_params(
    cmudict_files, run_main):
  tmp_path = cmudict_files
  result = run(f'--config={TEXT}', '--mode=train', '--set', 'max_steps=2', '--logdir=runs/g2p',
               cwd=tmp_path, env={'WMT_DATA_ROOT': 'cmu'})
  assert result.stdout.splitlines()[0] == 'num_gpus: 1 is one worker, this process'
  assert re.search(r'^training transformer for 2 steps \(31 steps/epoch\), global batch 64 ',
                   result.stdout, re.M)
  config = recorded(tmp_path / 'runs' / 'g2p')
  # The encoder's and decoder's keys of the port, made small, as the model's.
  assert config['base_params']['model_params'] == dict(
      config['base_params']['model_params'], encoder_layers=2, decoder_layers=2, d_model=64,
      num_heads=4, ff_size=256, dropout=0.3, attention_dropout=0.1, beam_size=2,
      length_penalty=0.6, decode_length_margin=50, label_smoothing=0.1)
  assert config['base_params']['optimizer'] == 'optimizers.compat.tf1:LazyAdamOptimizer'
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
    view_of = yaml.safe_load(answer.stdout)
    assert view_of['batch_size_per_gpu'] == batch and view_of['model_params']['d_model'] == 64
    assert view_of['data_layer_params']['source_file'] == str(tmp_path / 'cmu' / source)


@pytest.mark.slow
def test_the_base_text_port_trains_on_cmudict(cmudict_files):
  logdir = cmudict_files / 'runs' / 'g2p_base'
  result = run(f'--config={os.path.join(PORTS, "transformer_base_port_small.py")}',
               '--mode=train', '--set', 'max_steps=2', f'--logdir={logdir}',
               cwd=cmudict_files, env={'WMT_DATA_ROOT': 'cmu'})
  assert 'training transformer for 2 steps' in result.stdout
  train = recorded(logdir, 'train')
  assert train['dtype'] == 'float32' and train['loss_scaling'] == 1.0
  assert {k: train['model_params'][k] for k in ('d_model', 'dropout', 'encoder_layers')} == {
      'd_model': 64, 'dropout': 0.1, 'encoder_layers': 2}
