"""Keras 3's Lion and Muon, registered by name: their updates against numbers worked out by hand.

Lion (Chen et al. 2023) steps by the sign of an interpolation of the gradient
and its momentum; Muon (Jordan et al. 2024, Keras' version with the RMS
matching of Liu et al. 2025) orthogonalizes the momentum of a 2-D variable
with Newton-Schulz iterations and falls back to AdamW for every other
variable. Which variable takes which path is a matter of its shape and path,
so it is checked on plain variables and on the Transformer's.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import keras
import tensorflow as tf

from models import MODELS
from optimizers import OPTIMIZER_CLS_NAMES
from optimizers.catalog import make_optimizer


def test_both_are_registered_by_name_in_any_case():
  assert OPTIMIZER_CLS_NAMES['lion'] is keras.optimizers.Lion
  # Keras' Muon, taking plain tf.Variables too (optimizers.catalog.Muon).
  assert issubclass(OPTIMIZER_CLS_NAMES['Muon'], keras.optimizers.Muon)
  # Muon decays weights by its own algorithm (two arguments); Lion only when given Keras' decay.
  assert OPTIMIZER_CLS_NAMES.facts('Muon')['OWN_WEIGHT_DECAY'] == 0.004
  assert OPTIMIZER_CLS_NAMES.facts('Muon')['OWN_DECAY_ARGUMENTS'] == ('weight_decay',
                                                                      'adam_weight_decay')
  assert 'OWN_WEIGHT_DECAY' not in OPTIMIZER_CLS_NAMES.facts('Lion')


def test_lion_two_updates_by_hand():
  w = keras.Variable(np.array([1.0, -2.0, 0.5], np.float32), name='w')
  opt = make_optimizer('Lion', {'beta_1': 0.9, 'beta_2': 0.99}, 0.1)
  opt.apply_gradients([(tf.constant([1.0, -1.0, 2.0]), w)])
  # m = 0: the step is -lr * sign(g) = -0.1 * [1, -1, 1]; then m = 0.01 * g.
  np.testing.assert_allclose(w.numpy(), [0.9, -1.9, 0.4], rtol=1e-6)
  opt.apply_gradients([(tf.constant([-0.05, 0.2, -0.1]), w)])
  # c = 0.9 * [0.01, -0.01, 0.02] + 0.1 * [-0.05, 0.2, -0.1] = [0.004, 0.011, 0.008]:
  # the momentum outvotes the gradient's sign in the first and third entries.
  np.testing.assert_allclose(w.numpy(), [0.8, -2.0, 0.3], rtol=1e-6)


def test_lion_decays_weights_only_when_given_keras_weight_decay():
  w = keras.Variable(np.array([1.0, -2.0, 0.5], np.float32), name='w')
  opt = make_optimizer('Lion', {'weight_decay': 0.5}, 0.1)
  opt.apply_gradients([(tf.constant([1.0, 1.0, -1.0]), w)])
  # Decoupled: w <- w * (1 - lr * wd), then the sign step.
  np.testing.assert_allclose(w.numpy(), [0.95 - 0.1, -1.9 - 0.1, 0.475 + 0.1], rtol=1e-6)


def numpy_newton_schulz(g, steps=5, a=3.4445, b=-4.7750, c=2.0315):
  """The quintic Newton-Schulz iteration of Muon, in float64, on the wide side of ``g``."""
  x = np.array(g, np.float64)
  tall = x.shape[0] > x.shape[1]
  if tall:
    x = x.T
  x = x / (np.linalg.norm(x) + 1e-7)
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if tall else x


def test_muon_first_update_of_a_matrix_by_hand():
  rng = np.random.default_rng(0)
  w0 = rng.normal(size=(6, 4)).astype(np.float32)
  g = rng.normal(size=(6, 4)).astype(np.float32)
  w = keras.Variable(w0, name='kernel')
  opt = make_optimizer('Muon', {'weight_decay': 0.1}, 0.02)
  opt.apply_gradients([(tf.constant(g), w)])
  # First step: m = g; Nesterov looks ahead to g + 0.95 m = 1.95 g, which the
  # normalization inside the iteration makes g again. The update is scaled by
  # 0.2 sqrt(max(6, 4)) (rms_rate) and follows the decoupled decay w (1 - lr wd).
  ortho = numpy_newton_schulz(1.95 * g.astype(np.float64))
  want = w0 * (1 - 0.02 * 0.1) - 0.02 * 0.2 * np.sqrt(6.0) * ortho
  np.testing.assert_allclose(w.numpy(), want, rtol=1e-4, atol=1e-5)
  # What the iteration is for: the update's singular values are all near 1
  # (the quintic's fixed band, about 0.7-1.2), whatever the gradient's.
  singular = np.linalg.svd(ortho, compute_uv=False)
  assert singular.min() > 0.6 and singular.max() < 1.25
  assert np.linalg.svd(g, compute_uv=False).max() / np.linalg.svd(g, compute_uv=False).min() > 2


def adam_first_step(w0, g, lr, eps, wd):
  """AdamW's first update: m̂ = g, v̂ = g², after the decoupled decay."""
  return w0 * (1 - lr * wd) - lr * g / (np.abs(g) + eps)


@pytest.mark.parametrize('variable', [keras.Variable, tf.Variable])
def test_muon_falls_back_to_adamw_for_vectors_and_embeddings(variable):
  # Keras variables and the plain ones of an OpenSeq2Seq-style model (no Keras path) alike.
  b0 = np.array([0.5, -1.0, 2.0], np.float32)
  bias = variable(b0, name='bias')
  table = variable(np.ones((3, 2), np.float32), name='embeddings')
  kernel = variable(np.ones((3, 2), np.float32), name='kernel')
  opt = make_optimizer('Muon', {'weight_decay': 0.0, 'adam_weight_decay': 0.5, 'epsilon': 1e-7},
                       0.1)
  grads = [np.array([0.2, -0.4, 1.0], np.float32), np.full((3, 2), 0.3, np.float32),
           np.full((3, 2), 0.3, np.float32)]
  opt.apply_gradients([(tf.constant(g), v) for g, v in zip(grads, [bias, table, kernel])])
  # A plain variable's path is its name: 'embeddings' takes AdamW like a vector.
  np.testing.assert_allclose(bias.numpy(), adam_first_step(b0, grads[0], 0.1, 1e-7, 0.5),
                             rtol=1e-5)
  np.testing.assert_allclose(table.numpy(), adam_first_step(np.ones((3, 2)), grads[1], 0.1, 1e-7,
                                                            0.5), rtol=1e-5)
  # The kernel is orthogonalized and takes weight_decay (0 here), not adam_weight_decay.
  want = 1.0 - 0.1 * 0.2 * np.sqrt(3.0) * numpy_newton_schulz(1.95 * grads[2])
  np.testing.assert_allclose(kernel.numpy(), want, rtol=1e-4)


def muon_paths(model, **params):
  opt = keras.optimizers.Muon(**params)
  opt.build(model.trainable_variables)
  # The AdamW fallback is the variables given a velocity slot.
  return {v.path: ('adamw' if opt.adam_velocities[i] is not None else 'muon')
          for i, v in enumerate(model.trainable_variables)}


def test_which_transformer_variables_muon_orthogonalizes():
  keras.utils.set_random_seed(0)
  params = {'encoder_layers': 1, 'decoder_layers': 1, 'd_model': 16, 'num_heads': 2,
            'ff_size': 32}
  paths = muon_paths(MODELS['transformer'](params, 11, 9))
  muon = sorted(p for p, kind in paths.items() if kind == 'muon')
  # Every 2-D kernel of attention and feed-forward: 4 in the encoder layer (qkv,
  # output, hidden, output), 7 in the decoder's (and query, key_value, output of
  # the cross attention). qkv is fused: its three projections are orthogonalized
  # as one matrix.
  assert len(muon) == 11 and all(p.endswith('/kernel') for p in muon)
  assert 'transformer/encoder_layer_0/self_attention/qkv/kernel' in muon
  # The embeddings (the target's also makes the logits: the output is tied) and
  # every bias and layer-norm vector take AdamW.
  adamw = [p for p, kind in paths.items() if kind == 'adamw']
  assert sorted(p for p in adamw if 'embedding' in p) == [
      'transformer/source_embedding/embeddings', 'transformer/target_embedding/embeddings']
  assert all(p.endswith(('bias', 'gamma', 'beta', 'embeddings')) for p in adamw)
  # An untied output layer is a 2-D kernel Muon would orthogonalize unless excluded.
  untied = MODELS['transformer']({**params, 'embedding_sharing': 'none'}, 11, 9)
  assert muon_paths(untied)['transformer/logits/kernel'] == 'muon'
  assert muon_paths(untied, exclude_layers=['logits'])['transformer/logits/kernel'] == 'adamw'


def test_muon_and_lion_configs_round_trip():
  for name, params in (('Muon', {'momentum': 0.9, 'exclude_layers': ['logits']}),
                       ('Lion', {'beta_1': 0.95})):
    opt = make_optimizer(name, params, 0.01)
    assert type(opt).from_config(opt.get_config()).get_config() == opt.get_config()


@pytest.mark.parametrize('bad, message', [({'beta_1': 0.0}, 'beta_1')])
def test_lion_refuses_a_beta_that_makes_it_sign_sgd(bad, message):
  with pytest.raises(ValueError, match=message):
    make_optimizer('Lion', bad, 0.01)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A Transformer small enough to take 60 updates in seconds, on the first 64 words.
TINY_MUON = """
base_params = {
    'model': 'transformer',
    'model_params': {'encoder_layers': 1, 'decoder_layers': 1, 'd_model': 32, 'num_heads': 2,
                     'ff_size': 64, 'dropout': 0.0, 'label_smoothing': 0.0},
    'data_layer': 'cmudict',
    'data_layer_params': {'max_words': 64, 'eval_split': 'train', 'final_eval_split': 'train'},
    'batch_size_per_gpu': 32,
    'iter_size': 2,
    'max_steps': 60,
    'optimizer': 'Muon',
    'optimizer_params': {'momentum': 0.95},
    'lr_policy': 'poly_decay',
    'lr_policy_params': {'learning_rate': 0.02, 'warmup_fraction': 0.1, 'decay_fraction': 1.0},
    'dtype': 'mixed_bfloat16',
    'random_seed': 0,
    'print_loss_steps': 10,
    'save_checkpoint_steps': None,
}
"""


@pytest.mark.slow
def test_muon_trains_the_transformer_through_run_py(tmp_path):
  # run.py's whole path: the config layer (Muon's own decay taken, the model's
  # turned off), optimize_loss with accumulation over two micro-batches and
  # bfloat16 compute, Keras' Muon applying the update.
  config = tmp_path / 'muon.py'
  config.write_text(TINY_MUON)
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'run.py'), '--config', str(config),
                           '--mode', 'train', '--logdir', str(tmp_path / 'run')], cwd=ROOT,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  losses = [float(v) for v in re.findall(r'^step +\d+.* loss (\d+\.\d+)', result.stdout,
                                         re.MULTILINE)]
  assert len(losses) >= 5
  # From about ln(43 phones) = 3.76 to well below it: the update moved the weights the right way.
  assert losses[0] > 3.0 and losses[-1] < 0.75 * losses[0]
