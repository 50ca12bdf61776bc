"""Memory through run.py: a step that cannot fit is refused before it runs; out of memory is one line.

One text pair of 20,000 characters in a batch of 32 needs attention scores
of [32, heads, 20000, 20000] floats: the floor of framework/run/memory.py
refuses the run before its first step, in this process (nothing trains). A
step that runs out of memory all the same (a model of the user's that
allocates a tensor no machine holds, at its third step) ends in one line that
names the batch, the image size, the tensor and the checkpoint kept.
"""

import os
import random
import subprocess
import sys

import pytest

from data import text_pairs_facts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PAIRS = '''
base_params:
  model: transformer
  model_params: {encoder_layers: 1, decoder_layers: 1, d_model: 16, num_heads: 2, ff_size: 16}
  data_layer: text_pairs
  data_layer_params: {train_file: TRAIN, eval_file: TRAIN}
  batch_size_per_gpu: 32
  max_steps: 2
  optimizer: Adam
  lr_policy: fixed_lr
  lr_policy_params: {learning_rate: 0.001}
  dtype: float32
'''


def test_a_step_that_cannot_fit_is_refused_before_it_runs(tmp_path, run_main):
  rng = random.Random(0)
  lines = []
  for i in range(31):
    word = ''.join(rng.choice('abcdefgh') for _ in range(rng.randint(2, 9))) + str(i)
    lines.append(f'{word}\t{word[::-1]}\n')
  long = ''.join(rng.choice('abcdefgh') for _ in range(20000))
  lines.append(f'{long}\t{long[::-1]}\n')
  (tmp_path / 'train.tsv').write_text(''.join(lines))
  (tmp_path / 'pairs.yaml').write_text(PAIRS.replace('TRAIN', str(tmp_path / 'train.tsv')))
  # No length limit, whatever the default: the pair is trained on.
  unlimited = (['--set', 'data_layer_params.max_length=null']
               if 'max_length' in text_pairs_facts.PARAMS else [])
  logdir = tmp_path / 'run'
  result = run_main('--config', tmp_path / 'pairs.yaml', '--mode', 'train', '--logdir', logdir,
                    *unlimited)
  assert result.returncode == 2
  assert 'Traceback' not in result.stderr
  line = result.stderr.strip().splitlines()[-1]
  # The 32 pairs are one batch: every row padded to the long source, in 2 heads, the scores
  # and their softmax in float32 at once.
  attention = 2 * 32 * 2 * 20000 * 20000 * 4
  assert line.startswith(f'error: memory: one training step of this run needs at least '
                         f'{attention / 1e9:.1f} GB (the attention of the pass holding the '
                         'longest source: scores and softmax of [32, 2, 20000, 20000] in float32, '
                         'plus '), line
  assert ('this machine has available; leave the longest pairs out (data_layer_params.'
          in line) and line.endswith('Nothing was trained')
  assert not logdir.exists()


USER_MODEL = '''
import keras
import tensorflow as tf


class HugeAtTheThirdStep(keras.layers.Layer):
  """From its third call on, reads a tensor of 2**52 floats, which no allocator gives."""

  def build(self, input_shape):
    self.calls = self.add_weight(shape=(), initializer='zeros', trainable=False, name='calls')

  def call(self, x):
    self.calls.assign_add(1.0)
    extra = tf.cond(self.calls > 2.5,
                    lambda: tf.reduce_sum(tf.broadcast_to(x[:1, :1], [2**25, 2**25, 4])),
                    lambda: tf.constant(0.0))
    return x + 0.0 * extra


def build(params, image_shape, num_classes):
  inputs = keras.Input(image_shape)
  x = keras.layers.Dense(num_classes)(keras.layers.Flatten()(inputs))
  return keras.Model(inputs, HugeAtTheThirdStep(dtype='float32')(x))
'''


@pytest.mark.slow
def test_out_of_memory_in_a_step_is_one_line_naming_the_batch_and_what_was_kept(tmp_path):
  (tmp_path / 'oom_model.py').write_text(USER_MODEL)
  (tmp_path / 'run.yaml').write_text('''
base_params:
  model: oom_model:build
  data_layer: synthetic
  data_layer_params: {image_shape: [8, 8, 3], num_classes: 3, num_examples: 64}
  batch_size_per_gpu: 8
  max_steps: 6
  save_checkpoint_steps: 2
  optimizer: Momentum
  optimizer_params: {momentum: 0.9}
  lr_policy: fixed_lr
  lr_policy_params: {learning_rate: 0.01}
  dtype: float32
''')
  logdir = tmp_path / 'run'
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'run.py'), '--config',
                           str(tmp_path / 'run.yaml'), '--mode', 'train', '--logdir', str(logdir)],
                          cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'),
                          capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 1, result.stdout + result.stderr
  assert 'Traceback' not in result.stderr, result.stderr
  size = 2**52 * 4 / 1e15
  assert result.stderr.strip().splitlines()[-1] == (
      'error: out of memory in a training step: batch_size_per_gpu 8 images, images of 8x8x3; '
      f'TensorFlow could not allocate a float tensor of shape [33554432, 33554432, 4] '
      f'({size:.1f} PB). Use a smaller batch_size_per_gpu (iter_size keeps the global batch), '
      f'or a smaller data_layer_params.image_size; kept: {logdir}/ckpt-2')
  assert os.path.exists(f'{logdir}/ckpt-2.index')
