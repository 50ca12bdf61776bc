"""OpenSeq2Seq's config keys, read as OpenSeq2Seq reads them or refused in one line (framework/config/openseq2seq.py).

Every expectation is written from OpenSeq2Seq's meaning of the key (its
Model docstring, its example configs) or from the arithmetic of the key,
not read back from the code under test.
"""

import os
import textwrap

import keras
import pytest

from core.params import ConfigError
from framework.config import config_file
from framework.config import config_resolve
from framework.config import openseq2seq
from framework.config import schedule
from framework.config import validation as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PORTS = os.path.join(ROOT, 'configs', 'openseq2seq')
IMAGE_PORT = os.path.join(PORTS, 'resnet50_larc_port.py')
TEXT_PORT = os.path.join(PORTS, 'transformer_big_port.py')
SGD = os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py')


def train_view(path, *overrides, notes=None):
  return config_lib.load_configs(path, 'train', list(overrides), construct=False, notes=notes)['train']


def error(function, *args, **kwargs):
  with pytest.raises(ConfigError) as info:
    function(*args, **kwargs)
  return str(info.value)


# ---------------------------------------------------------------------------
# The image port: the four keys the issue found unknown, and the regularizer

def test_the_image_port_reads_its_openseq2seq_keys():
  notes = []
  config = train_view(IMAGE_PORT, notes=notes)
  assert config['num_gpus'] == 8
  assert config['print_samples_steps'] == 2000
  assert config['larc_params']['larc_eta'] == 0.001 and 'larc_nu' not in config['larc_params']
  # tf.contrib.layers.l2_regularizer with its scale: scale * sum(w**2) / 2.
  assert (config['regularizer'], config['regularizer_params']) == ('l2', {'scale': 0.0005})
  # The regularizer is the run's L2 loss: ResNet-50's default 1e-4 would have been a second one.
  assert config['model_params']['weight_decay'] == 0.0
  # decay_steps is the run's to fill in (its workers set its length): not here yet.
  assert config['lr_policy_params'] == {'learning_rate': 0.5, 'power': 2.0}
  assert ("note: larc_params.larc_nu: read as larc_eta: 0.001, the trust coefficient (larc_nu is "
          "its name in OpenSeq2Seq's LARC configs, larc_eta in its code and here)") in notes


def test_the_text_port_reads_its_loss_params_and_infer_params():
  config = train_view(TEXT_PORT)
  assert config['model_params']['label_smoothing'] == 0.1
  assert config['dtype'] == 'mixed' and config['use_horovod'] is True
  views = config_lib.load_configs(TEXT_PORT, 'infer', [], construct=False)
  assert views['train'] is None
  # infer_params over the eval view: its batch and its files.
  assert views['eval']['batch_size_per_gpu'] == 1
  assert views['eval']['data_layer_params']['source_file'].endswith(
      'wmt14-en-de.src.BPE_common.32K.tok')
  evaluation = config_lib.load_configs(TEXT_PORT, 'eval', [], construct=False)['eval']
  assert evaluation['batch_size_per_gpu'] == 16


# ---------------------------------------------------------------------------
# Keys that have no counterpart: one line that says what to write instead

@pytest.mark.parametrize('key, instead', [
    ('gpu_ids', 'give num_gpus'),
    ('eval_batch_size_per_gpu', 'give eval_params: {batch_size_per_gpu: N}'),
    ('load_model', 'run.py --init_checkpoint=LOGDIR'),
    ('use_xla_jit', 'give jit_compile: true'),
])
def test_a_key_with_no_counterpart_is_refused_with_what_to_write(key, instead):
  message = error(train_view, SGD, f'{key}=something')
  assert message.startswith(f'{key}: a key of OpenSeq2Seq that is not read here; ')
  assert instead in message and '\n' not in message


def test_larc_nu_and_larc_eta_given_differently_are_one_line():
  assert error(train_view, SGD, 'larc_params={larc_nu: 0.001, larc_eta: 0.002}') == (
      'larc_params.larc_nu: 0.001, but larc_params.larc_eta says 0.002; they are one setting '
      '(the trust coefficient): give larc_eta alone')
  same = train_view(SGD, 'larc_params={larc_nu: 0.002, larc_eta: 0.002, larc_mode: scale}')
  assert same['larc_params']['larc_eta'] == 0.002 and same['larc_params']['larc_mode'] == 'scale'
  # larc_nu is checked as larc_eta is.
  assert error(train_view, SGD, 'larc_params={larc_nu: -1}').startswith('larc_params.larc_eta: ')


# ---------------------------------------------------------------------------
# regularizer given as a callable

def l2_regularizer(scale):  # the name of OpenSeq2Seq's tf.contrib.layers.l2_regularizer
  return scale


def my_regularizer(scale):
  return scale


def read(config):
  notes = []
  return openseq2seq.read_keys(config, notes)[0], notes


@pytest.mark.parametrize('regularizer, params, scale', [
    # OpenSeq2Seq's scale keeps its meaning, scale * sum(w**2) / 2 ...
    (keras.regularizers.l2, {'scale': 5e-4}, 5e-4),
    (l2_regularizer, {'scale': 5e-4}, 5e-4),
    # ... and Keras' l2, which adds l2 * sum(w**2), is twice that scale.
    (keras.regularizers.L2, {'l2': 5e-4}, 1e-3),
    (keras.regularizers.l2(5e-4), None, 1e-3),
])
def test_an_l2_regularizer_callable_is_regularizer_l2(regularizer, params, scale):
  config, notes = read({'regularizer': regularizer, 'regularizer_params': params})
  assert config['regularizer'] == 'l2'
  assert config['regularizer_params']['scale'] == pytest.approx(scale)
  assert len(notes) == 1 and notes[0].startswith('note: regularizer: ')


def test_another_regularizer_callable_is_refused():
  for regularizer in (keras.regularizers.L1, my_regularizer):
    message = error(openseq2seq.read_keys, {'regularizer': regularizer,
                                            'regularizer_params': {'scale': 1e-4}})
    assert message.startswith('regularizer: ') and 'is not read here; regularizer takes l2' in message
  assert error(openseq2seq.read_keys, {'regularizer': keras.regularizers.l2(1e-4),
                                       'regularizer_params': {'scale': 1e-4}}) == (
      'regularizer: keras.src.regularizers.regularizers.L2(0.0001) holds its factor already; drop '
      'regularizer_params')


def test_a_regularizer_given_turns_the_models_default_decay_off_but_not_one_given():
  config = train_view(SGD, 'model_params={depth: 8}', 'regularizer=l2',
                      'regularizer_params.scale=5e-4')
  assert config['model_params']['weight_decay'] == 0.0
  config = train_view(SGD, 'model_params={depth: 8, weight_decay: 2e-4}', 'regularizer=l2',
                      'regularizer_params.scale=5e-4')
  assert config['model_params']['weight_decay'] == 2e-4
  # Without a regularizer the model's default stays (an optimizer with no decay of its own).
  assert train_view(SGD, 'model_params={depth: 8}')['model_params']['weight_decay'] == 1e-4


# ---------------------------------------------------------------------------
# loss_params

def test_loss_params_label_smoothing_is_the_tasks_own_key():
  assert train_view(SGD, 'loss_params={label_smoothing: 0.1}')['label_smoothing'] == 0.1
  text = train_view(TEXT_PORT, 'loss_params.label_smoothing=0.2')
  assert text['model_params']['label_smoothing'] == 0.2 and text['label_smoothing'] == 0.0
  # Given twice alike is one setting; differently, one line.
  assert train_view(SGD, 'loss_params={label_smoothing: 0.1}', 'label_smoothing=0.1')[
      'label_smoothing'] == 0.1
  assert error(train_view, SGD, 'loss_params={label_smoothing: 0.1}', 'label_smoothing=0.2') == (
      'loss_params.label_smoothing: 0.1, but label_smoothing says 0.2; give one of them')
  assert error(train_view, TEXT_PORT, 'model_params.label_smoothing=0.3') == (
      'loss_params.label_smoothing: 0.1, but model_params.label_smoothing says 0.3; give one of '
      'them')


def test_other_loss_params_are_refused():
  assert error(train_view, TEXT_PORT, 'loss_params.batch_size=256') == (
      "loss_params.batch_size: not read here; the loss is the sequence_to_sequence task's, and its "
      'one setting is label_smoothing (loss_params.label_smoothing, or '
      'model_params.label_smoothing): drop the key')
  assert error(train_view, SGD, 'loss_params={label_smoothing: 1.5}') == (
      'loss_params.label_smoothing: must be in [0, 1), got 1.5')


# ---------------------------------------------------------------------------
# decay_steps as OpenSeq2Seq fills it

def schedule_config(**lr_params):
  config = train_view(SGD, 'model_params={depth: 8}', 'lr_policy=poly_decay', 'max_steps=100',
                      'lr_policy_params={learning_rate: 0.1}')
  return dict(config, lr_policy_params=dict(learning_rate=0.1, **lr_params))


def test_decay_steps_is_the_last_step_less_begin_decay_at():
  config, note = schedule.default_decay_steps(schedule_config(), per_epoch=10)
  assert config['lr_policy_params']['decay_steps'] == 100
  assert note == ("note: lr_policy_params.decay_steps: not given; 100 steps, the run's last step "
                  '(100), as OpenSeq2Seq fills it (config.yaml records it)')
  config, note = schedule.default_decay_steps(schedule_config(begin_decay_at=30), per_epoch=10)
  assert config['lr_policy_params']['decay_steps'] == 70
  assert 'less begin_decay_at (30)' in note
  # begin_decay_at in epochs: 2 epochs of 10 updates.
  config, _ = schedule.default_decay_steps(schedule_config(begin_decay_at_epochs=2), per_epoch=10)
  assert config['lr_policy_params']['decay_steps'] == 80
  # num_epochs: 3 epochs of 7 updates are 21.
  epochs = dict(schedule_config(), max_steps=None, num_epochs=3)
  assert schedule.default_decay_steps(epochs, per_epoch=7)[0]['lr_policy_params'][
      'decay_steps'] == 21


def test_a_decay_given_or_a_policy_without_one_is_left_as_it_is():
  for given in ({'decay_steps': 40}, {'decay_epochs': 4}, {'decay_fraction': 0.5}):
    config = schedule_config(**given)
    assert schedule.default_decay_steps(config, per_epoch=10) == (config, None)
  fixed = dict(schedule_config(), lr_policy='fixed_lr')
  assert schedule.default_decay_steps(fixed, per_epoch=10) == (fixed, None)


def my_policy(global_step, learning_rate, decay_steps):
  return learning_rate * (1.0 - min(global_step, decay_steps) / decay_steps)


def test_a_policy_of_your_own_that_takes_decay_steps_gets_it():
  config = dict(schedule_config(), lr_policy=my_policy)
  assert schedule.default_decay_steps(config, per_epoch=10)[0]['lr_policy_params'][
      'decay_steps'] == 100
  # The learning rate of the run, from its policy: half-way down at step 50.
  assert float(schedule.learning_rate_fn(config, per_epoch=10)(50)) == pytest.approx(0.05)


def test_a_decay_that_has_no_step_left_is_one_line():
  assert error(schedule.default_decay_steps, schedule_config(begin_decay_at=100), 10) == (
      'lr_policy_params.decay_steps: not given, and begin_decay_at (100 steps) leaves no step of '
      'the run (100 steps) to decay in; give decay_steps, or begin the decay earlier')


def test_fit_warmup_fills_decay_steps_for_the_run_and_only_checks_it_for_the_config():
  config = schedule_config(warmup_steps=10)
  filled, note = schedule.fit_warmup(config, per_epoch=10)
  assert filled['lr_policy_params']['decay_steps'] == 100 and 'decay_steps' in note
  assert schedule.fit_warmup(config, per_epoch=10, default_decay=False) == (config, None)


# ---------------------------------------------------------------------------
# infer_params

def test_infer_params_overlay_the_eval_view_in_infer_mode_only(tmp_path):
  path = tmp_path / 'c.yaml'
  path.write_text(textwrap.dedent("""
      base_params: {batch_size_per_gpu: 32, data_layer_params: {a: 1, b: 1}}
      eval_params: {batch_size_per_gpu: 16, data_layer_params: {b: 2}}
      infer_params: {batch_size_per_gpu: 1, data_layer_params: {a: 3}}
      """))
  raw = config_file.load_config_file(str(path))
  assert config_resolve.resolve(raw, 'infer') == {'batch_size_per_gpu': 1,
                                                  'data_layer_params': {'a': 3, 'b': 2}}
  assert config_resolve.resolve(raw, 'eval')['batch_size_per_gpu'] == 16
  assert config_resolve.resolve(raw, 'export')['batch_size_per_gpu'] == 16
  assert config_resolve.resolve(raw, 'train')['batch_size_per_gpu'] == 32
  assert config_resolve.resolve(raw, 'infer', ['infer_params.batch_size_per_gpu=4'])[
      'batch_size_per_gpu'] == 4
  # A file without the section reads as before.
  assert 'infer_params' not in config_file.load_config_file(SGD)


def test_the_run_directory_records_infer_params_so_that_it_infers_as_the_file_does():
  raw = {'base_params': {'x': 1}, 'eval_params': {'x': 2},
         'infer_params': {'x': 3, 'd': {'p': 1}}}
  # An override of the whole view reaches the section where it holds the key.
  assert config_resolve.infer_section(raw, ['x=9', 'y=1', 'infer_params.d.q=2']) == {
      'x': 9, 'd': {'p': 1, 'q': 2}}
  assert config_resolve.infer_section({'base_params': {}}, ['x=1']) is None
  train, evaluation = {'x': 1, 'd': {'p': 0}}, {'x': 2, 'd': {'p': 0}}
  recorded = config_file.run_config(train, evaluation, {'x': 3, 'd': {'p': 1}})
  assert recorded['infer_params'] == {'x': 3, 'd': {'p': 1}}
  assert config_resolve.resolve(recorded, 'infer') == {'x': 3, 'd': {'p': 1}}
  assert config_resolve.resolve(recorded, 'eval') == evaluation
  assert 'infer_params' not in config_file.run_config(train, evaluation)


# ---------------------------------------------------------------------------
# num_gpus

PLAIN = {'num_gpus': 4, 'use_horovod': False, 'distribution': 'auto'}


@pytest.fixture
def four_cores(monkeypatch):
  from framework.engines import local_cluster  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(local_cluster, 'most_workers', lambda: (4, '4 CPU cores'))


def test_num_gpus_starts_that_many_workers_here(four_cores):
  assert openseq2seq.local_workers(PLAIN, 'train', environ={}) == (
      4, 'num_gpus: 4 is 4 workers on this machine, as run.py --num_workers=4 '
         '(multi_worker_mirrored, one process each)')
  assert openseq2seq.local_workers(dict(PLAIN, num_gpus=1), 'train', environ={}) == (
      1, 'num_gpus: 1 is one worker, this process')
  assert openseq2seq.local_workers(dict(PLAIN, num_gpus=None), 'train', environ={}) == (1, None)


def test_num_gpus_beyond_the_machine_is_one_line(four_cores):
  assert error(openseq2seq.local_workers, dict(PLAIN, num_gpus=8), 'train', environ={}) == (
      'num_gpus: 8 workers on this machine, which has 4 CPU cores: here each is a process with '
      'its own copy of the model (OpenSeq2Seq put one on each GPU), useful up to one per core; '
      'allowed: 1 to 4 (--set num_gpus=4). For more, start one worker per machine with '
      'TF_CONFIG, srun or horovodrun')
  assert error(openseq2seq.local_workers, dict(PLAIN, distribution='none'), 'train',
               environ={}) == ('num_gpus: 4 starts 4 workers, but distribution: none trains in one '
                               'process; set num_gpus: 1, or distribution: auto')


def test_num_gpus_is_one_worker_per_process_under_a_launcher(four_cores):
  horovod = 'num_gpus: 4 is read as 1, as OpenSeq2Seq reads it under Horovod'
  workers, line = openseq2seq.local_workers(PLAIN, 'train', environ={'HOROVOD_RANK': '0'})
  assert workers == 1 and line.startswith(horovod)
  # Rank 0 says it once for the job.
  assert openseq2seq.local_workers(PLAIN, 'train', environ={'HOROVOD_RANK': '1'}) == (1, None)
  workers, line = openseq2seq.local_workers(dict(PLAIN, use_horovod=True), 'train', environ={})
  assert workers == 1 and line.startswith(horovod)
  workers, line = openseq2seq.local_workers(PLAIN, 'train', environ={'TF_CONFIG': '{"x": 1}'})
  assert workers == 1 and 'one worker of the cluster TF_CONFIG describes' in line
  # The workers run.py started itself: their launcher said it.
  assert openseq2seq.local_workers(PLAIN, 'train', environ={'LARGEBATCH_NUM_WORKERS': '4'}) == (
      1, None)
  # --num_workers above 1 wins.
  assert openseq2seq.local_workers(PLAIN, 'train', num_workers=2, environ={}) == (
      2, 'num_gpus: 4 is replaced by --num_workers=2')
  assert openseq2seq.local_workers(PLAIN, 'infer', environ={}) == (
      1, 'num_gpus: 4 is not used: --mode=infer runs in one process')
