"""The optimizer names of OpenSeq2Seq's configs are TensorFlow 1's classes: formulas, arguments, defaults.

Each expectation is TF 1's update written out in numpy from the classes'
documented formulas (tf.train.MomentumOptimizer, AdamOptimizer,
RMSPropOptimizer, AdagradOptimizer, FtrlOptimizer, GradientDescentOptimizer,
tf.contrib.opt.LazyAdamOptimizer and AdamWOptimizer), in float64, never read
back from the code under test. The rate changes between steps wherever the
formula lets it matter (Momentum keeps it outside its accumulator).
"""

import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import optimizers
from optimizers import OPTIMIZER_CLS_NAMES
from optimizers.catalog import make_optimizer

W0 = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.5], [2.0, 0.0, -0.75], [-1.0, 1.0, 0.1]])
RATES = [0.1, 0.1, 0.02, 0.5]  # a drop, then a rise: the rate at each of four steps


def gradient(step):
  """A dense gradient shaped like W0 that differs at every step."""
  return np.sin(np.arange(W0.size).reshape(W0.shape) + 1.7 * step) + 0.3 * step


def train(optimizer, grads, rates=RATES, how='apply'):
  """Applies ``grads[k]`` at rate ``rates[k]`` to a variable starting at W0; returns it and the optimizer.

  ``how``: 'apply' (the optimizer's own apply, fused where it has a fused
  form), 'reference' (Keras' per-variable update_step) or 'function' (apply
  inside a tf.function).
  """
  var = keras.Variable(W0.astype(np.float32), name='w')
  optimizer.build([var])
  apply = getattr(optimizer, 'reference_apply', optimizer.apply) if how == 'reference' \
      else optimizer.apply
  if how == 'function':
    apply = tf.function(lambda grads, variables, step=apply: step(grads, [var]))
  for grad, rate in zip(grads, rates):
    optimizer.learning_rate = rate
    if not isinstance(grad, tf.IndexedSlices):
      grad = tf.constant(np.asarray(grad, np.float32))
    apply([grad], [var])
  return var.numpy(), optimizer


def dense(n=4):
  return [gradient(k) for k in range(n)]


# --- Momentum --------------------------------------------------------------------------------

def tf1_momentum(grads, rates, m, nesterov=False):
  w, a = W0.copy(), np.zeros_like(W0)
  for g, lr in zip(grads, rates):
    a = m * a + g
    w = w - lr * (g + m * a) if nesterov else w - lr * a
  return w, a


def keras_momentum(grads, rates, m):
  w, v = W0.copy(), np.zeros_like(W0)
  for g, lr in zip(grads, rates):
    v = m * v - lr * g
    w = w + v
  return w


@pytest.mark.parametrize('how', ['apply', 'reference', 'function'])
@pytest.mark.parametrize('nesterov', [False, True])
def test_momentum_is_tf1s_accumulator_with_the_rate_outside(how, nesterov):
  optimizer = make_optimizer('Momentum', {'momentum': 0.9, 'use_nesterov': nesterov}, 0.1)
  assert type(optimizer) is optimizers.MomentumOptimizer
  got, optimizer = train(optimizer, dense(), how=how)
  want_w, want_a = tf1_momentum(dense(), RATES, 0.9, nesterov)
  np.testing.assert_allclose(got, want_w, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(optimizer.momentums[0].numpy(), want_a, rtol=1e-5, atol=1e-5)
  if not nesterov:
    # Keras' momentum SGD, the rate inside the velocity, is another update once the rate changes.
    assert np.abs(got - keras_momentum(dense(), RATES, 0.9)).max() > 0.05


def test_keras_momentum_keeps_keras_formula():
  got, _ = train(make_optimizer('KerasMomentum', {'momentum': 0.9}, 0.1), dense())
  np.testing.assert_allclose(got, keras_momentum(dense(), RATES, 0.9), rtol=1e-5, atol=1e-5)
  # Keras' class given as a class keeps Keras' formula too.
  got, _ = train(make_optimizer(keras.optimizers.SGD, {'momentum': 0.9}, 0.1), dense())
  np.testing.assert_allclose(got, keras_momentum(dense(), RATES, 0.9), rtol=1e-5, atol=1e-5)


def test_momentum_has_tf1s_arguments_and_keras_names_beside_them():
  optimizer = optimizers.MomentumOptimizer(0.1, 0.9, use_locking=True, nesterov=True)
  assert optimizer.use_nesterov and optimizer.get_config()['use_nesterov']
  assert optimizer.name == 'Momentum'
  with pytest.raises(TypeError, match='momentum'):
    optimizers.MomentumOptimizer(0.1)  # TF 1's momentum has no default
  with pytest.raises(ValueError, match='use_nesterov=True and nesterov=False are the same argument'):
    optimizers.MomentumOptimizer(0.1, 0.9, use_nesterov=True, nesterov=False)


def test_momentum_sparse_gradient_moves_its_rows_only():
  rows = tf.IndexedSlices(tf.constant([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5], [1.0, 0.0, -1.0]]),
                          tf.constant([2, 0, 2]), tf.constant(W0.shape))
  dense_of = np.zeros_like(W0)
  dense_of[0] = [0.5, 0.5, 0.5]
  dense_of[2] = [2.0, 2.0, 2.0]  # the two slices of row 2 summed
  got, _ = train(make_optimizer('Momentum', {'momentum': 0.5}, 0.1), [rows, rows],
                 rates=[0.1, 0.3])
  want, _ = tf1_momentum([dense_of, dense_of], [0.1, 0.3], 0.5)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  np.testing.assert_array_equal(got[[1, 3]], W0[[1, 3]].astype(np.float32))


# --- SGD -------------------------------------------------------------------------------------

def test_sgd_is_gradient_descent_and_refuses_keras_momentum():
  got, _ = train(make_optimizer('SGD', {}, 0.1), dense())
  want = W0 - sum(lr * g for lr, g in zip(RATES, dense()))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match='momentum is no argument of TF 1.s gradient descent'):
    make_optimizer('SGD', {'momentum': 0.9}, 0.1)


# --- Adam, LazyAdam, AdamW -----------------------------------------------------------------

def tf1_adam(grads, rates, beta1=0.9, beta2=0.999, epsilon=1e-8, decay=None, rows=None):
  """TF 1's Adam; ``decay(w, lr)`` is subtracted first (AdamW); ``rows``: LazyAdam's rows per step."""
  w, m, v = W0.copy(), np.zeros_like(W0), np.zeros_like(W0)
  for t, (g, lr) in enumerate(zip(grads, rates), start=1):
    if decay is not None:
      w = w - decay(w, lr)
    lr_t = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
    touched = slice(None) if rows is None else rows[t - 1]
    m[touched] = beta1 * m[touched] + (1 - beta1) * g[touched]
    v[touched] = beta2 * v[touched] + (1 - beta2) * g[touched] ** 2
    w[touched] = w[touched] - lr_t * m[touched] / (np.sqrt(v[touched]) + epsilon)
  return w


def test_adam_has_tf1s_epsilon_and_takes_beta1_and_beta2():
  optimizer = make_optimizer('Adam', {'beta1': 0.8, 'beta2': 0.99}, 0.01)
  assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.8, 0.99, 1e-8)
  # Tiny gradients make epsilon matter: 1e-8 (TF 1) against Keras' 1e-7.
  grads = [1e-7 * g for g in dense()]
  got, _ = train(optimizer, grads)
  np.testing.assert_allclose(got, tf1_adam(grads, RATES, 0.8, 0.99), rtol=1e-5, atol=1e-6)
  assert np.abs(got - tf1_adam(grads, RATES, 0.8, 0.99, epsilon=1e-7)).max() > 1e-3
  # Keras' names are accepted beside TF 1's; both with different values are refused.
  keras_named = make_optimizer('Adam', {'beta_1': 0.8, 'beta_2': 0.99}, 0.01)
  assert (keras_named.beta_1, keras_named.beta_2) == (0.8, 0.99)
  with pytest.raises(ValueError, match='beta1=0.8 and beta_1=0.7 are the same argument'):
    make_optimizer('Adam', {'beta1': 0.8, 'beta_1': 0.7}, 0.01)


def sparse_grads():
  """Two sparse gradients on rows {0, 2} (row 2 twice) and {3}, and their dense sums."""
  first = tf.IndexedSlices(tf.constant([[1.0, -2.0, 0.5], [0.3, 0.3, 0.3], [1.0, 1.0, 1.0]]),
                           tf.constant([2, 0, 2]), tf.constant(W0.shape))
  second = tf.IndexedSlices(tf.constant([[0.5, -0.5, 2.0]]), tf.constant([3]),
                            tf.constant(W0.shape))
  return [first, second], [tf.convert_to_tensor(first).numpy(), tf.convert_to_tensor(second).numpy()]


def test_lazy_adam_moves_only_the_rows_of_a_sparse_gradient_and_adam_moves_all():
  grads, sums = sparse_grads()
  lazy, _ = train(optimizers.LazyAdamOptimizer(0.1, beta1=0.8), grads, rates=[0.1, 0.05])
  want = tf1_adam(sums, [0.1, 0.05], beta1=0.8, rows=[[0, 2], [3]])
  np.testing.assert_allclose(lazy, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(lazy[1], W0[1].astype(np.float32))  # never read
  adam, _ = train(optimizers.AdamOptimizer(0.1, beta1=0.8), grads, rates=[0.1, 0.05])
  np.testing.assert_allclose(adam, tf1_adam(sums, [0.1, 0.05], beta1=0.8), rtol=1e-5, atol=1e-6)
  assert np.abs(adam[0] - lazy[0]).max() > 1e-3  # row 0's moments decayed at step 2 in Adam only
  # Dense gradients: LazyAdam is Adam.
  got, _ = train(optimizers.LazyAdamOptimizer(0.1), dense())
  np.testing.assert_allclose(got, tf1_adam(dense(), RATES), rtol=1e-5, atol=1e-5)


def test_adamw_name_decays_by_the_rate_and_the_tf1_class_does_not():
  # OpenSeq2Seq's optimizer "AdamW": weight_decay times the step's rate.
  got, _ = train(make_optimizer('AdamW', {'weight_decay': 0.1}, 0.1), dense())
  want = tf1_adam(dense(), RATES, decay=lambda w, lr: lr * 0.1 * w)
  # Adam's steps of about the rate in float32 against float64: a few ulps of |w| ~ 3 apart.
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # tf.contrib.opt.AdamWOptimizer itself: weight_decay·w, the rate left out.
  got, _ = train(optimizers.AdamWOptimizer(0.1, learning_rate=0.1), dense())
  want = tf1_adam(dense(), RATES, decay=lambda w, lr: 0.1 * w)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="missing 1 required positional argument: 'weight_decay'"):
    make_optimizer('AdamW', {}, 0.1)  # TF 1's weight_decay has no default


# --- RMSProp ---------------------------------------------------------------------------------

def tf1_rmsprop(grads, rates, decay=0.9, momentum=0.0, epsilon=1e-10, centered=False, rows=None):
  w, ms, mom, mg = W0.copy(), np.ones_like(W0), np.zeros_like(W0), np.zeros_like(W0)
  for k, (g, lr) in enumerate(zip(grads, rates)):
    r = slice(None) if rows is None else rows[k]
    ms[r] = decay * ms[r] + (1 - decay) * g[r] ** 2
    denominator = ms[r] + epsilon
    if centered:
      mg[r] = decay * mg[r] + (1 - decay) * g[r]
      denominator = denominator - mg[r] ** 2
    mom[r] = momentum * mom[r] + lr * g[r] / np.sqrt(denominator)
    w[r] = w[r] - mom[r]
  return w


@pytest.mark.parametrize('params', [{}, {'momentum': 0.5}, {'decay': 0.5, 'centered': True},
                                    {'rho': 0.7, 'momentum': 0.9, 'centered': True}])
def test_rmsprop_mean_square_starts_at_one(params):
  got, optimizer = train(make_optimizer('RMSProp', params, 0.1), dense())
  tf1 = {('decay' if k == 'rho' else k): v for k, v in params.items()}
  np.testing.assert_allclose(got, tf1_rmsprop(dense(), RATES, **tf1), rtol=1e-5, atol=1e-6)
  assert optimizer.epsilon == 1e-10
  # The first step of plain RMSProp: the root of 0.9 + 0.1 g², not of 0.1 g² (Keras' start at 0).
  if not params:
    first, _ = train(make_optimizer('RMSProp', {}, 0.1), dense(1), rates=[0.1])
    g = gradient(0)
    np.testing.assert_allclose(first, W0 - 0.1 * g / np.sqrt(0.9 + 0.1 * g ** 2), rtol=1e-5)


def test_rmsprop_sparse_gradient_updates_its_rows_only():
  grads, sums = sparse_grads()
  got, _ = train(make_optimizer('RMSProp', {'momentum': 0.5, 'centered': True}, 0.1), grads,
                 rates=[0.1, 0.2])
  want = tf1_rmsprop(sums, [0.1, 0.2], momentum=0.5, centered=True, rows=[[0, 2], [3]])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# --- Adagrad, Ftrl ---------------------------------------------------------------------------

def test_adagrad_has_no_epsilon():
  got, _ = train(make_optimizer('Adagrad', {'initial_accumulator_value': 0.2}, 0.1), dense())
  w, a = W0.copy(), np.full_like(W0, 0.2)
  for g, lr in zip(dense(), RATES):
    a = a + g ** 2
    w = w - lr * g / np.sqrt(a)
  np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
  # A sparse gradient: its repeated row summed before it is squared, as TF 1 does.
  grads, sums = sparse_grads()
  got, _ = train(make_optimizer('Adagrad', {}, 0.1), grads, rates=[0.1, 0.2])
  w, a = W0.copy(), np.full_like(W0, 0.1)
  for g, lr in zip(sums, [0.1, 0.2]):
    a = a + g ** 2
    w = w - lr * g / np.sqrt(a)
  np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match='initial_accumulator_value must be positive'):
    make_optimizer('Adagrad', {'initial_accumulator_value': 0.0}, 0.1)


@pytest.mark.parametrize('params', [
    {}, {'l1_regularization_strength': 0.05, 'l2_regularization_strength': 0.1},
    {'l2_shrinkage_regularization_strength': 0.2, 'learning_rate_power': -0.7, 'beta': 0.5}])
def test_ftrl_is_tf1s(params):
  got, _ = train(make_optimizer('Ftrl', params, 0.1), dense())
  power = params.get('learning_rate_power', -0.5)
  l1 = params.get('l1_regularization_strength', 0.0)
  l2 = params.get('l2_regularization_strength', 0.0) + params.get('beta', 0.0) / (2 * 0.1)
  shrinkage = params.get('l2_shrinkage_regularization_strength', 0.0)
  w, n, z = W0.copy(), np.full_like(W0, 0.1), np.zeros_like(W0)
  for g, lr in zip(dense(), RATES):
    l2_step = params.get('l2_regularization_strength', 0.0) + params.get('beta', 0.0) / (2 * lr)
    shrunk = g + 2 * shrinkage * w
    n_new = n + g ** 2
    z = z + shrunk - (n_new ** -power - n ** -power) / lr * w
    quadratic = n_new ** -power / lr + 2 * l2_step
    w = np.where(np.abs(z) > l1, (np.sign(z) * l1 - z) / quadratic, 0.0)
    n = n_new
  del l2
  np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


# --- every name, and the TF 1 classes a config names ------------------------------------------

def test_each_name_is_its_tf1_class():
  expected = {'Momentum': 'MomentumOptimizer', 'SGD': 'GradientDescentOptimizer',
              'Adam': 'AdamOptimizer', 'RMSProp': 'RMSPropOptimizer',
              'Adagrad': 'AdagradOptimizer', 'AdamW': 'AdamW', 'Ftrl': 'Ftrl'}
  for name, cls in expected.items():
    assert OPTIMIZER_CLS_NAMES[name].__name__ == cls
  assert issubclass(OPTIMIZER_CLS_NAMES['AdamW'], optimizers.AdamWOptimizer)


@pytest.mark.parametrize('name', ['MomentumOptimizer', 'GradientDescentOptimizer', 'AdamOptimizer',
                                  'LazyAdamOptimizer', 'AdamWOptimizer', 'RMSPropOptimizer',
                                  'AdagradOptimizer'])
def test_the_tf1_classes_round_trip_through_keras_config(name):
  cls = getattr(optimizers, name)
  args = {'MomentumOptimizer': (0.1, 0.9), 'AdamWOptimizer': (0.01,)}.get(name, (0.1,))
  optimizer = cls(*args)
  clone = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
  assert type(clone) is cls
  assert clone.get_config() == optimizer.get_config()


# --- through run.py ----------------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MOMENTUM_RUN = """
exec(open({sgd!r}).read())
base_params.update(optimizer={optimizer!r}, lr_scaling=None, lr_policy='piecewise_constant',
                   lr_policy_params={{'learning_rate': 0.1, 'boundaries': [1], 'decay_rates': [0.5]}},
                   batch_size_per_gpu=32, num_epochs=None, max_steps=3,
                   save_checkpoint_steps=1, num_checkpoints=5)
"""


_IN_LAYER = {'_kernel': 0, 'kernel': 0, 'bias': 1, 'gamma': 0, 'beta': 1}


def checkpointed(logdir, step):
  """The model's trainable variables at ``step`` and their momentum slots, as two aligned lists.

  The optimizer's variables are saved as one list (its iteration count, its
  rate, then a slot per trainable variable in the model's order: layer by
  layer, kernel before bias, gamma before beta).
  """
  path = os.path.join(logdir, f'ckpt-{step}')
  reader = tf.train.load_checkpoint(path)
  weights, slots = [], {}
  for key, _ in tf.train.list_variables(path):
    parts = key.split('/')
    if key.startswith('model/_operations/') and parts[3] in _IN_LAYER:
      weights.append(((int(parts[2]), _IN_LAYER[parts[3]]), reader.get_tensor(key)))
    elif key.startswith('optimizer_variables/'):
      slots[int(parts[1])] = reader.get_tensor(key)
  weights = [value for _, value in sorted(weights, key=lambda item: item[0])]
  return weights, [slots[i] for i in sorted(slots) if i >= 2]


@pytest.mark.slow
@pytest.mark.parametrize('optimizer, tf1', [('Momentum', True), ('KerasMomentum', False)])
def test_run_py_momentum_steps_by_the_rate_times_the_accumulator(tmp_path, optimizer, tf1):
  # The third update (step 2 -> 3) is at rate 0.05 after two at 0.1. TF 1's Momentum moves each
  # variable by 0.05 times its accumulator after that update; Keras' by its velocity, which
  # holds the earlier rates (w3 = w2 + v3).
  config = tmp_path / 'momentum.py'
  config.write_text(MOMENTUM_RUN.format(sgd=os.path.join(ROOT, 'configs', 'fashion_mnist_sgd.py'),
                                        optimizer=optimizer))
  logdir = tmp_path / 'run'
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'run.py'), '--config', str(config),
                           '--mode', 'train', '--logdir', str(logdir)], cwd=ROOT,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'), capture_output=True,
                          text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  w2, _ = checkpointed(str(logdir), 2)
  w3, slots3 = checkpointed(str(logdir), 3)
  assert len(slots3) == len(w3) > 10
  for k, (before, after, slot) in enumerate(zip(w2, w3, slots3)):
    assert before.shape == slot.shape, k
    scale = float(np.abs(before).max())
    expected = 0.05 * slot if tf1 else -slot
    np.testing.assert_allclose(before - after, expected, rtol=1e-3, atol=1e-6 * scale,
                               err_msg=str(k))
