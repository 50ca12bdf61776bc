"""Tests of the ResNet builders: sizes, naming, weight decay, precision and a forward pass."""

import json

import keras
import numpy as np
import pytest

from core.params import ConfigError
from core.registry import UnknownNameError
from models import MODELS
from models.resnet import ZeroPadShortcut

LARS_SKIP = ['batch_normalization', 'bias']


def sizes(variables):
  return sum(int(np.prod(v.shape)) for v in variables)


@pytest.fixture(scope='module')
def resnet50():
  return MODELS['resnet50']({}, (224, 224, 3), 1000)


def cifar_counts(depth, width=1, classes=10, channels_in=3, shortcut='A'):
  """(trainable, batch-norm moving) parameter counts of a CIFAR ResNet, from its definition."""
  n = (depth - 2) // 6
  widths = [16 * width, 32 * width, 64 * width]
  conv, bn = 9 * channels_in * widths[0], widths[0]
  previous = widths[0]
  for c in widths:
    for block in range(n):
      conv += 9 * previous * c + 9 * c * c
      bn += 2 * c
      if shortcut == 'B' and previous != c:
        conv += previous * c
        bn += c
      previous = c
  dense = widths[2] * classes + classes
  return conv + 2 * bn + dense, 2 * bn


def test_registry_names():
  assert sorted(MODELS) == ['keras_application', 'resnet50', 'resnet_cifar', 'transformer']
  with pytest.raises(UnknownNameError, match="did you mean 'resnet50'"):
    MODELS['resnet_50']


def test_resnet50_v1_5_parameter_count_and_strides(resnet50):
  # torchvision's resnet50 (v1.5) has 25,557,032 parameters; Keras also counts
  # the moving mean and variance of the 26,560 batch-norm channels.
  assert sizes(resnet50.trainable_variables) == 25_557_032
  assert sizes(resnet50.non_trainable_variables) == 2 * 26_560
  assert resnet50.count_params() == 25_557_032 + 53_120
  # v1.5: the downsampling stride sits on the 3x3 convolution.
  assert resnet50.get_layer('stage2_block1_conv1').strides == (1, 1)
  assert resnet50.get_layer('stage2_block1_conv2').strides == (2, 2)
  assert resnet50.get_layer('stage2_block1_shortcut_conv').strides == (2, 2)
  assert resnet50.get_layer('stage4_block3_out').output.shape == (None, 7, 7, 2048)
  assert resnet50.output.shape == (None, 1000)


def test_resnet50_forward_pass_gives_float32_logits(resnet50):
  images = np.random.default_rng(0).normal(size=(1, 224, 224, 3)).astype(np.float32)
  logits = resnet50(images, training=False)
  assert logits.shape == (1, 1000) and logits.dtype == 'float32'
  assert np.isfinite(logits.numpy()).all()


@pytest.mark.parametrize('depth, width, shortcut',
                         [(8, 1, 'A'), (20, 1, 'A'), (56, 1, 'A'), (14, 2, 'A'), (20, 1, 'B')])
def test_resnet_cifar_parameter_counts(depth, width, shortcut):
  params = {'depth': depth, 'width': width, 'shortcut': shortcut}
  model = MODELS['resnet_cifar'](params, (32, 32, 3), 10)
  trainable, moving = cifar_counts(depth, width, shortcut=shortcut)
  assert sizes(model.trainable_variables) == trainable
  assert sizes(model.non_trainable_variables) == moving
  assert len([l for l in model.layers if isinstance(l, keras.layers.Conv2D)]) == depth - 1 + (
      2 if shortcut == 'B' else 0)


def test_resnet20_has_the_published_0_27_million_parameters():
  model = MODELS['resnet_cifar']({'depth': 20}, (32, 32, 3), 10)
  assert sizes(model.trainable_variables) == 269_722
  assert abs(sizes(model.trainable_variables) - 0.27e6) < 0.005e6


def test_lars_skip_list_selects_exactly_batch_norm_and_bias(resnet50):
  cifar = MODELS['resnet_cifar']({'depth': 8, 'shortcut': 'B'}, (28, 28, 1), 10)
  for model in (resnet50, cifar):
    skipped = [v for v in model.variables if any(s in v.path for s in LARS_SKIP)]
    bn_layers = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
    bn_variables = {id(v) for l in bn_layers for v in l.variables}
    assert len(bn_variables) == 4 * len(bn_layers)
    biases = [v for v in model.variables if v.name == 'bias']
    assert [v.path for v in biases] == ['logits/bias']
    assert {id(v) for v in skipped} == bn_variables | {id(v) for v in biases}
    for v in model.variables:
      if v.name == 'kernel':
        assert not any(s in v.path for s in LARS_SKIP), v.path
      if id(v) in bn_variables:
        assert 'batch_normalization' in v.path


def test_weight_decay_is_half_l2_on_kernels_only(resnet50):
  assert len(resnet50.losses) == 53 + 1  # 53 convolutions and the classifier
  model = MODELS['resnet_cifar']({'depth': 8, 'weight_decay': 5e-4}, (32, 32, 3), 10)
  kernels = [v for v in model.trainable_variables if v.name == 'kernel']
  assert len(model.losses) == len(kernels) == 7 + 1
  expected = 5e-4 / 2 * sum(float(np.sum(np.square(v.numpy()))) for v in kernels)
  assert float(sum(model.losses)) == pytest.approx(expected, rel=1e-5)
  assert MODELS['resnet_cifar']({'depth': 8, 'weight_decay': 0.0}, (32, 32, 3), 10).losses == []


def test_batch_norm_settings_and_zero_init_residual():
  params = {'depth': 8, 'zero_init_residual': True, 'bn_momentum': 0.97, 'bn_epsilon': 1e-3}
  model = MODELS['resnet_cifar'](params, (32, 32, 3), 10)
  bns = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
  assert all(l.momentum == 0.97 and l.epsilon == 1e-3 for l in bns)
  zero = sorted(l.name for l in bns if not l.gamma.numpy().any())
  assert zero == [f'stage{s}_block1_batch_normalization_2' for s in (1, 2, 3)]
  assert all((l.gamma.numpy() == 1).all() for l in bns if l.name not in zero)
  # With zero-initialised residuals each block starts as its (option-A) shortcut.
  images = np.random.default_rng(1).normal(size=(2, 32, 32, 3)).astype(np.float32)
  stem = keras.Model(model.input, model.get_layer('stem_relu').output)(images).numpy()
  features = keras.Model(model.input, model.get_layer('stage3_block1_out').output)(images).numpy()
  expected = np.zeros_like(features)
  expected[..., :16] = stem[:, ::4, ::4, :]
  np.testing.assert_allclose(features, expected, atol=1e-6)


def test_forward_pass_ends_in_a_float32_dense_on_pooled_features():
  model = MODELS['resnet_cifar']({'depth': 8, 'width': 2}, (28, 28, 1), 10)
  images = np.random.default_rng(2).normal(size=(3, 28, 28, 1)).astype(np.float32)
  pooled = keras.Model(model.input, model.get_layer('global_pool').output)(images).numpy()
  kernel, bias = model.get_layer('logits').get_weights()
  logits = model(images).numpy()
  assert pooled.shape == (3, 128)
  np.testing.assert_allclose(logits, pooled @ kernel + bias, rtol=1e-5, atol=1e-5)
  # 28 -> 14 -> 7 with symmetric padding on the strided convolutions.
  assert model.get_layer('stage3_block1_out').output.shape == (None, 7, 7, 128)


def test_mixed_bfloat16_keeps_float32_logits_and_variables():
  keras.mixed_precision.set_dtype_policy('mixed_bfloat16')
  try:
    model = MODELS['resnet_cifar']({'depth': 8}, (32, 32, 3), 10)
  finally:
    keras.mixed_precision.set_dtype_policy('float32')
  assert model.get_layer('stage2_block1_conv1').compute_dtype == 'bfloat16'
  assert model.get_layer('stage2_block1_shortcut').compute_dtype == 'bfloat16'
  assert all(v.dtype == 'float32' for v in model.variables)
  logits = model(np.ones((2, 32, 32, 3), np.float32))
  assert logits.dtype == 'float32' and model.get_layer('logits').compute_dtype == 'float32'


def test_zero_pad_shortcut_and_serialization():
  x = np.random.default_rng(3).normal(size=(2, 6, 6, 4)).astype(np.float32)
  y = ZeroPadShortcut(2, 3)(x).numpy()
  np.testing.assert_array_equal(y[..., :4], x[:, ::2, ::2, :])
  assert y.shape == (2, 3, 3, 7) and not y[..., 4:].any()
  model = MODELS['resnet_cifar']({'depth': 8}, (32, 32, 3), 10)
  clone = keras.models.model_from_json(json.dumps(json.loads(model.to_json())))
  assert clone.count_params() == model.count_params()


@pytest.mark.parametrize('params, message', [
    ({'depth': 21}, r"model_params.depth: 21 is not allowed.*allowed: 8, 14, 20, 32, 44, 56, 110"),
    ({'weight_decay': -1e-4}, r'model_params.weight_decay: must be >= 0'),
    ({'bn_momentum': 1.0}, r'model_params.bn_momentum: must be in \[0, 1\)'),
    ({'shortcut': 'C'}, r"model_params.shortcut: 'C' is not allowed"),
    ({'wieght_decay': 1e-4},
     r'model_params.wieght_decay: unknown key \(did you mean model_params.weight_decay\?\)'),
])
def test_bad_params_are_config_errors(params, message):
  with pytest.raises(ConfigError, match=message):
    MODELS['resnet_cifar'](params, (32, 32, 3), 10)
