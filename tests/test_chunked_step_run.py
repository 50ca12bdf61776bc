"""A chunked step through run.py: one batch of text pairs gives the numbers of one pass.

Issue 51 found ``grad_norm`` 2.391 for ``train_chunk_size`` null and 2.439
for 1, with the same loss. The chunked number is the gradient's norm: the
source embedding's gradient of one pass is sparse (``tf.IndexedSlices``, one
row per source token), and the norm was taken over its rows without adding
the rows of a token that occurs twice, while a chunk's gradient is summed
densely (tests/models/test_chunked_dropout.py checks the chunked gradient
against one pass's, dropout on). The pipeline's norms now add those rows
first (optimizers/stages.py, summed_rows). Two runs here, each one step of
32 pairs.
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow

CONFIG = """
base_params:
  model: transformer
  model_params: {encoder_layers: 1, decoder_layers: 1, d_model: 32, num_heads: 2, ff_size: 64,
                 dropout: 0.0}
  data_layer: text_pairs
  data_layer_params: {train_file: TRAIN, eval_file: TRAIN}
  batch_size_per_gpu: 32
  max_steps: 1
  optimizer: Adam
  lr_policy: fixed_lr
  lr_policy_params: {learning_rate: 0.001}
  dtype: float32
  deterministic: true
  print_loss_steps: 1
"""


def step_line(tmp_path, chunk):
  """The numbers of run.py's line for step 1 with ``train_chunk_size: chunk``."""
  logdir = tmp_path / f'run_{chunk}'
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'run.py'), '--config', str(tmp_path / 'pairs.yaml'),
       '--mode', 'train', '--logdir', str(logdir), '--set',
       f'model_params.train_chunk_size={chunk}'],
      cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'), capture_output=True, text=True,
      timeout=600, check=False)
  assert result.returncode == 0, result.stdout + result.stderr
  line = next(l for l in result.stdout.splitlines() if l.startswith('step 1 '))
  return {k: float(v) for k, v in re.findall(r'(loss|grad_norm) (\S+)', line)}


@pytest.fixture(scope='module')
def steps(tmp_path_factory):
  """Step 1 of one pass (``train_chunk_size: null``) and of chunks of one pair, on one batch."""
  tmp_path = tmp_path_factory.mktemp('pairs')
  # Letters repeat within a source: the source embedding's sparse gradient repeats its rows.
  words = ['abcab', 'hello', 'banana', 'mississippi', 'aaaa', 'xyz', 'level', 'noon']
  sources = [w + 'q' * j for j in range(4) for w in words]  # 32 distinct pairs
  pairs = [(s, s[::-1]) for s in sources]
  (tmp_path / 'train.tsv').write_text(''.join(f'{s}\t{t}\n' for s, t in pairs))
  (tmp_path / 'pairs.yaml').write_text(CONFIG.replace('TRAIN', str(tmp_path / 'train.tsv')))
  return step_line(tmp_path, 'null'), step_line(tmp_path, 1)


def test_one_step_gives_the_loss_of_one_pass_whatever_the_chunk_size(steps):
  one_pass, chunked = steps
  assert chunked['loss'] == pytest.approx(one_pass['loss'], rel=2e-4)


def test_one_step_gives_the_grad_norm_of_one_pass_whatever_the_chunk_size(steps):
  one_pass, chunked = steps
  assert chunked['grad_norm'] == pytest.approx(one_pass['grad_norm'], rel=2e-3)
