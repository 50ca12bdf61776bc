"""The config's kernel initializer in the built-in models: the distributions it draws, where, and with which seeds.

The expected moments are computed here from the definitions (TensorFlow 1.15's
``VarianceScaling`` and ``tf.contrib.layers.variance_scaling_initializer``),
not from the code under test: a truncated normal's variance factor from the
normal's density, a uniform's from its limit.
"""

import hashlib
import math

import keras
import numpy as np
import pytest

from models import MODELS
from models import initializer_names
from models.initializers import KernelInitializers
from models.initializers import PartsInitializer

CIFAR = {'depth': 8, 'weight_decay': 0.0}
TRANSFORMER = {'encoder_layers': 1, 'decoder_layers': 1, 'd_model': 16, 'num_heads': 2,
               'ff_size': 32, 'embedding_sharing': 'none'}
MOBILENET = {'name': 'MobileNetV2', 'extra_kwargs': {'alpha': 0.35}}


def truncated_variance_factor():
  """Var of a standard normal truncated to (-2, 2): 1 - 2 * 2 * phi(2) / (Phi(2) - Phi(-2))."""
  density = math.exp(-2.0) / math.sqrt(2.0 * math.pi)
  mass = math.erf(2.0 / math.sqrt(2.0))
  return 1.0 - 4.0 * density / mass


def kernels(initializer, **params):
  name, params = initializer_names.check(initializer, params)
  return KernelInitializers(name, params)


def build(model, params, facts, initializer=None, random_seed=0, **initializer_params):
  keras.utils.set_random_seed(random_seed)
  extra = {}
  if initializer is not None:
    extra['kernel_initializer'] = kernels(initializer, **initializer_params)
  return MODELS[model](params, *facts, **extra)


def cifar(initializer=None, random_seed=0, width=1, **initializer_params):
  return build('resnet_cifar', dict(CIFAR, width=width), ((28, 28, 1), 10), initializer,
               random_seed, **initializer_params)


def transformer(initializer=None, random_seed=0, **initializer_params):
  return build('transformer', TRANSFORMER, (11, 13), initializer, random_seed,
               **initializer_params)


def fingerprint(model):
  digest = hashlib.sha256()
  for variable in model.weights:
    digest.update(variable.path.encode())
    digest.update(np.asarray(variable.numpy()).tobytes())
  return digest.hexdigest()[:16]


def kernel_paths(model):
  return [v.path for v in model.weights if v.path.endswith('/kernel')]


def test_no_initializer_gives_the_weights_of_before():
  # sha256 of every weight at random_seed 0, from the builders before the key was read.
  assert fingerprint(cifar()) == '0ffeef5606d6d32b'
  assert fingerprint(transformer()) == '4f8adace698b86c4'
  keras.utils.set_random_seed(0)
  assert fingerprint(MODELS['keras_application'](MOBILENET, (32, 32, 3), 10)) == 'ac5b04f1956b47c1'


def test_variance_scaling_fan_in_truncated_normal_of_a_big_kernel():
  model = cifar('variance_scaling_initializer', width=4)  # tf.variance_scaling_initializer()
  w = model.get_layer('stage3_block1_conv2').kernel.numpy().astype(np.float64)
  assert w.shape == (3, 3, 256, 256)
  fan_in = 3 * 3 * 256
  variance = 1.0 / fan_in  # scale / fan_in, after the truncation
  n = w.size
  assert abs(w.mean()) < 5 * math.sqrt(variance / n)
  # The sample variance of a truncated normal varies by less than sqrt(2 / n) of it.
  assert w.var() == pytest.approx(variance, rel=5 * math.sqrt(2.0 / n))
  # Drawn from a normal of stddev sigma, redrawn beyond 2 sigma: sigma^2 * factor = variance.
  sigma = math.sqrt(variance / truncated_variance_factor())
  assert np.abs(w).max() <= 2 * sigma * (1 + 1e-6)
  assert np.abs(w).max() > 1.95 * sigma
  # Without the truncation's correction the variance would be 0.774 of it.
  assert truncated_variance_factor() == pytest.approx(0.7737, abs=1e-4)


def test_the_classifier_takes_it_and_biases_and_batch_norm_keep_theirs():
  model = cifar('ones_initializer')
  for layer in model.layers:
    if hasattr(layer, 'kernel'):
      np.testing.assert_array_equal(layer.kernel.numpy(), 1.0)
  logits = model.get_layer('logits')
  np.testing.assert_array_equal(logits.bias.numpy(), 0.0)
  norm = model.get_layer('stem_batch_normalization')
  np.testing.assert_array_equal(norm.gamma.numpy(), 1.0)
  np.testing.assert_array_equal(norm.beta.numpy(), 0.0)


def test_initializer_params_reach_the_layers():
  # TF 1's truncated_normal_initializer(mean, stddev): N(mean, stddev) redrawn beyond 2 stddev.
  model = cifar('truncated_normal_initializer', width=4, mean=0.5, stddev=0.01)
  w = model.get_layer('stage3_block1_conv2').kernel.numpy().astype(np.float64)
  assert w.mean() == pytest.approx(0.5, abs=5 * 0.01 / math.sqrt(w.size))
  assert w.std() == pytest.approx(0.01 * math.sqrt(truncated_variance_factor()), rel=0.01)
  assert w.min() >= 0.5 - 0.02 - 1e-6 and w.max() <= 0.5 + 0.02 + 1e-6
  # TF 1's default stddev is 1 (Keras' truncated_normal: 0.05).
  w = cifar('truncated_normal_initializer').get_layer('stage3_block1_conv2').kernel.numpy()
  assert w.std() == pytest.approx(math.sqrt(truncated_variance_factor()), rel=0.02)


def test_contrib_variance_scaling_and_xavier():
  # tf.contrib.layers.variance_scaling_initializer(factor=2, FAN_OUT, uniform=False): a
  # truncated normal of stddev sqrt(1.3 * factor / fan_out) before the truncation.
  model = cifar('variance_scaling_initializer', width=4, factor=2.0, mode='FAN_OUT')
  w = model.get_layer('stage3_block1_conv2').kernel.numpy().astype(np.float64)
  sigma = math.sqrt(1.3 * 2.0 / (3 * 3 * 256))
  assert w.var() == pytest.approx(sigma ** 2 * truncated_variance_factor(), rel=0.01)
  assert np.abs(w).max() <= 2 * sigma * (1 + 1e-6)
  # xavier_initializer(): uniform within sqrt(6 / (fan_in + fan_out)).
  model = cifar('xavier_initializer', width=4)
  w = model.get_layer('stage3_block1_conv2').kernel.numpy().astype(np.float64)
  limit = math.sqrt(6.0 / (2 * 3 * 3 * 256))
  assert np.abs(w).max() <= limit * (1 + 1e-6) and np.abs(w).max() > 0.999 * limit
  assert w.var() == pytest.approx(limit ** 2 / 3, rel=0.01)


def test_fused_projections_are_drawn_as_separate_kernels():
  # OpenSeq2Seq's q, k and v are three d x d kernels: Glorot uniform's limit is
  # sqrt(6 / 2d) for each, where one d x 3d kernel would have sqrt(6 / 4d).
  d = 256
  keras.utils.set_random_seed(0)
  params = dict(TRANSFORMER, d_model=d, num_heads=4, ff_size=64)
  model = MODELS['transformer'](params, 11, 13,
                                kernel_initializer=kernels('glorot_uniform_initializer'))
  attention = model.encoder_layers[0].self_attention
  w = attention.qkv.kernel.numpy().astype(np.float64)
  assert w.shape == (d, 3 * d)
  limit = math.sqrt(6.0 / (2 * d))
  for part in np.split(w, 3, axis=1):
    assert np.abs(part).max() <= limit * (1 + 1e-6) and np.abs(part).max() > 0.99 * limit
    assert part.var() == pytest.approx(limit ** 2 / 3, rel=0.02)
  # ... and no two of them the same numbers.
  q, k, v = np.split(w, 3, axis=1)
  assert not np.array_equal(q, k) and not np.array_equal(k, v)
  key_value = model.decoder_layers[0].cross_attention.key_value.kernel.numpy()
  assert np.abs(key_value).max() > 0.99 * limit


def test_the_transformer_keeps_its_embeddings_biases_and_layer_norms():
  model = transformer('zeros_initializer')
  # Encoder: qkv, output, two feed-forward; decoder: qkv, output, query, key_value, output,
  # two feed-forward; the logits.
  assert len(kernel_paths(model)) == 4 + 7 + 1
  for variable in model.weights:
    if variable.path.endswith('/kernel'):
      np.testing.assert_array_equal(variable.numpy(), 0.0)
  # The embeddings' own N(0, d^-1/2), as OpenSeq2Seq's.
  embedding = model.target_embedding.embeddings.numpy()
  assert embedding.std() == pytest.approx(16 ** -0.5, rel=0.15)
  for variable in model.weights:
    if 'layer_normalization' in variable.path and variable.path.endswith('gamma'):
      np.testing.assert_array_equal(variable.numpy(), 1.0)
    if variable.path.endswith('bias'):
      np.testing.assert_array_equal(variable.numpy(), 0.0)


def test_keras_application_kernels_are_drawn_again_and_the_rest_kept():
  keras.utils.set_random_seed(0)
  model = MODELS['keras_application'](MOBILENET, (32, 32, 3), 10,
                                      kernel_initializer=kernels('zeros_initializer'))
  drawn = [layer for layer in model.layers
           if any(hasattr(layer, a) for a in ('kernel', 'depthwise_kernel'))]
  assert any(isinstance(layer, keras.layers.DepthwiseConv2D) for layer in drawn)
  for layer in drawn:
    for attribute in ('kernel', 'depthwise_kernel'):
      if hasattr(layer, attribute):
        np.testing.assert_array_equal(getattr(layer, attribute).numpy(), 0.0)
  gammas = [v for v in model.weights if v.path.endswith('gamma')]
  assert gammas and all(np.all(v.numpy() == 1.0) for v in gammas)


def test_seeds_deterministic_distinct_per_kernel_and_independent_of_random_seed():
  unseeded = cifar('he_normal', random_seed=0)
  assert fingerprint(unseeded) == fingerprint(cifar('he_normal', random_seed=0))
  assert fingerprint(unseeded) != fingerprint(cifar('he_normal', random_seed=1))
  seeded = cifar('he_normal', random_seed=0, seed=7)
  assert fingerprint(seeded) == fingerprint(cifar('he_normal', random_seed=1, seed=7))
  assert fingerprint(seeded) != fingerprint(cifar('he_normal', random_seed=0, seed=8))
  # Two kernels of one shape never start equal (kernel k draws with seed + k).
  first = seeded.get_layer('stage1_block1_conv1').kernel.numpy()
  second = seeded.get_layer('stage1_block1_conv2').kernel.numpy()
  assert first.shape == second.shape and not np.array_equal(first, second)


def test_parts_initializer_round_trips():
  parts = PartsInitializer([keras.initializers.Constant(1.0), keras.initializers.Constant(2.0)])
  again = keras.initializers.deserialize(keras.initializers.serialize(parts))
  values = keras.ops.convert_to_numpy(again((2, 4)))
  np.testing.assert_array_equal(values, [[1, 1, 2, 2], [1, 1, 2, 2]])
  with pytest.raises(ValueError, match='does not split into 2 equal parts'):
    parts((2, 3))


@pytest.mark.parametrize('given,params,name,expected', [
    ('variance_scaling_initializer', {},
     'variance_scaling_initializer',
     ('VarianceScaling', {'scale': 1.0, 'mode': 'fan_in', 'distribution': 'truncated_normal'})),
    ('variance_scaling_initializer', {'distribution': 'normal', 'scale': 2.0},
     'variance_scaling_initializer',
     ('VarianceScaling', {'scale': 2.0, 'mode': 'fan_in', 'distribution': 'truncated_normal'})),
    ('uniform_unit_scaling_initializer', {'factor': 2.0}, 'uniform_unit_scaling_initializer',
     ('VarianceScaling', {'scale': 4.0, 'mode': 'fan_in', 'distribution': 'uniform'})),
    ('random_uniform_initializer', {}, 'random_uniform_initializer',
     ('RandomUniform', {'minval': 0.0, 'maxval': 1.0})),
    ('GlorotUniform', {}, 'glorot_uniform', ('GlorotUniform', {})),
    (keras.initializers.HeNormal, {}, 'he_normal', ('HeNormal', {})),
    (keras.initializers.VarianceScaling(2.0, mode='fan_out', seed=3), {}, 'variance_scaling',
     ('VarianceScaling', {'scale': 2.0, 'mode': 'fan_out', 'distribution': 'truncated_normal'})),
])
def test_names_classes_and_instances_read_as_keras_initializers(given, params, name, expected):
  checked, checked_params = initializer_names.check(given, params)
  assert checked == name
  assert initializer_names.keras_form(checked, checked_params)[:2] == expected
  # What config.yaml records reads back the same.
  assert initializer_names.check(checked, checked_params) == (checked, checked_params)
