"""The keras_application builder: head, sizes, weight decay, precision, weights, one-line errors."""

import importlib.metadata
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from core.params import ConfigError
from core.params import check_params
from models import MODELS
from models import contract
from models import schemas
from models.keras_application import application
from models.keras_application import application_names
from optimizers import exclusions
from optimizers.pipeline import GradientPipeline
from optimizers.settings import UpdateSettings

MOBILENET = {'name': 'MobileNetV2', 'extra_kwargs': {'alpha': 0.35}}


def build(params, shape=(32, 32, 3), classes=10):
  return MODELS['keras_application'](params, shape, classes)


def sizes(variables):
  return sum(int(np.prod(v.shape)) for v in variables)


def error_of(params, shape=(32, 32, 3)):
  with pytest.raises(ConfigError) as info:
    build(params, shape)
  message = str(info.value)
  assert '\n' not in message
  return message


@pytest.fixture(scope='module')
def mobilenet():
  return build(dict(MOBILENET, weight_decay=4e-5))


def test_the_declared_names_are_those_of_keras_applications():
  if importlib.metadata.version('keras') != schemas.KERAS_VERSION:
    pytest.skip(f'the list is that of Keras {schemas.KERAS_VERSION}')
  assert application_names() == sorted(schemas.KERAS_APPLICATIONS)
  assert MODELS.facts('keras_application')['TASK'] == 'image_classification'


def test_mobilenet_v2_gives_float32_logits_on_its_pooled_features(mobilenet):
  backbone = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35,
                                            include_top=False, weights=None, pooling='avg')
  # The backbone's variables, and a Dense of 1280 features (alpha < 1 keeps 1280) x 10 classes.
  head_size = 1280 * 10 + 10
  assert sizes(mobilenet.trainable_variables) == sizes(backbone.trainable_variables) + head_size
  assert mobilenet.output_shape == (None, 10)
  head = mobilenet.get_layer('logits')
  assert head.dtype_policy.name == 'float32' and head.activation is keras.activations.linear
  assert contract.output_activation(mobilenet) is None
  images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
  logits = mobilenet(images, training=False)
  pooled = keras.Model(mobilenet.input, head.input)(images, training=False).numpy()
  kernel, bias = head.kernel.numpy(), head.bias.numpy()
  assert logits.dtype == 'float32' and logits.shape == (2, 10)
  np.testing.assert_allclose(logits.numpy(), pooled @ kernel + bias, rtol=1e-5, atol=1e-5)


def test_weight_decay_is_half_l2_on_kernels_but_not_depthwise_filters(mobilenet):
  layers = mobilenet.layers
  depthwise = [l for l in layers if isinstance(l, keras.layers.DepthwiseConv2D)]
  kernels = [l.kernel for l in layers if isinstance(l, (keras.layers.Conv2D, keras.layers.Dense))
             and not isinstance(l, keras.layers.DepthwiseConv2D)]
  # MobileNetV2: a stem, 17 blocks of 1x1 expansion and projection (the first
  # without expansion) around a depthwise filter, the last 1x1 convolution, the logits.
  assert (len(kernels), len(depthwise)) == (1 + 2 * 17 - 1 + 1 + 1, 17)
  assert len(mobilenet.losses) == len(kernels)
  expected = 4e-5 / 2 * sum(float(np.sum(np.square(k.numpy()))) for k in kernels)
  assert float(sum(mobilenet.losses)) == pytest.approx(expected, rel=1e-5)
  assert mobilenet.get_layer('logits').kernel_regularizer.l2 == pytest.approx(2e-5)
  assert build(dict(MOBILENET, weight_decay=0.0)).losses == []


def test_a_tiny_mobilenet_on_grey_images_with_max_pooling_and_dropout():
  model = build({'name': 'MobileNet', 'pooling': 'max', 'dropout': 0.2,
                 'extra_kwargs': {'alpha': 0.25}}, (32, 32, 1), 3)
  assert model.output_shape == (None, 3)
  assert isinstance(model.get_layer('global_max_pooling2d'), keras.layers.GlobalMaxPooling2D)
  assert model.get_layer('head_dropout').rate == 0.2
  assert model.get_layer('conv1').kernel.shape == (3, 3, 1, 8)  # 32 x alpha filters, 1 channel


def test_include_preprocessing_is_off_unless_asked():
  def rescales(model):
    return any(isinstance(l, keras.layers.Rescaling) for l in model.layers)
  small = {'name': 'MobileNetV3Small', 'extra_kwargs': {'alpha': 0.75, 'minimalistic': True}}
  assert not rescales(build(small))
  assert rescales(build(dict(small, include_preprocessing=True)))
  assert error_of(dict(MOBILENET, include_preprocessing=True)) == (
      "model_params.include_preprocessing: keras.applications.MobileNetV2 has no such argument "
      "(its input is the data layer's, normalized); remove it")


def test_mixed_bfloat16_keeps_float32_logits_and_variables():
  keras.mixed_precision.set_dtype_policy('mixed_bfloat16')
  try:
    model = build(MOBILENET)
  finally:
    keras.mixed_precision.set_dtype_policy('float32')
  assert model.get_layer('Conv1').compute_dtype == 'bfloat16'
  assert all(v.dtype == 'float32' for v in model.variables)
  assert model(np.ones((2, 32, 32, 3), np.float32)).dtype == 'float32'


def test_names_are_checked_with_the_known_ones():
  with pytest.raises(ConfigError, match=r"^model_params.name: 'mobilenetv2' is not a "
                                        r"keras.applications model \(did you mean 'MobileNetV2'\?\)"
                                        r"; known: ConvNeXtBase, .*, Xception$"):
    application('mobilenetv2')
  if schemas.KERAS_APPLICATION_PARAMS['name'].choices is not None:  # the pinned Keras
    with pytest.raises(ConfigError, match="did you mean 'ResNet50'"):
      check_params({'name': 'Resnet50'}, schemas.KERAS_APPLICATION_PARAMS, 'model_params')
  assert 'did you mean' in error_of({'name': 'MobileNetv2'})


def test_an_input_the_application_refuses_is_one_line():
  assert error_of(MOBILENET, (16, 16, 3)) == (
      "model_params.name: keras.applications.MobileNetV2(input_shape=(16, 16, 3), "
      "{'alpha': 0.35}) refused: Input size must be at least 32x32; Received: "
      "input_shape=(16, 16, 3)")


def test_extra_kwargs_are_the_applications_own():
  assert error_of(dict(MOBILENET, extra_kwargs={'alhpa': 0.5})) == (
      "model_params.extra_kwargs.alhpa: keras.applications.MobileNetV2 takes no argument "
      "'alhpa' (did you mean 'alpha'?); its own: alpha, name")
  assert error_of(dict(MOBILENET, extra_kwargs={'classes': 5})).startswith(
      'model_params.extra_kwargs.classes: set by the builder')


def test_weights_from_a_local_file(tmp_path):
  assert error_of(dict(MOBILENET, weights=str(tmp_path / 'none.weights.h5'))) == (
      f'model_params.weights: {tmp_path / "none.weights.h5"}: no such file (give the path of a '
      'weights file of the application without its top, or null)')
  with pytest.raises(ConfigError, match="model_params.weights: Keras' download is not used"):
    check_params(dict(MOBILENET, weights='imagenet'), schemas.KERAS_APPLICATION_PARAMS,
                 'model_params')
  saved = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, include_top=False,
                                         weights=None)
  path = str(tmp_path / 'notop.weights.h5')
  saved.save_weights(path)
  model = build(dict(MOBILENET, weights=path))
  for layer in ('Conv1', 'block_16_project_BN', 'Conv_1'):
    for mine, theirs in zip(model.get_layer(layer).weights, saved.get_layer(layer).weights):
      np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
  # A file of another width does not fit: one line under model_params.weights naming the file,
  # how many layers differ and one of them, whole (Keras' message is cut after a sentence).
  message = error_of({'name': 'MobileNetV2', 'extra_kwargs': {'alpha': 0.5}, 'weights': path})
  assert re.fullmatch(
      rf"model_params\.weights: {re.escape(path)}: \d+ of its layers have variables of other "
      r"shapes than the model's \(e\.g\. \w+: \([\d, ]+\) in the file, \([\d, ]+\) in the "
      r"model\); it does not load into keras\.applications\.MobileNetV2\(include_top=False, "
      r"input_shape=\(32, 32, 3\), \{'alpha': 0\.5\}\): give a weights file saved from that "
      r'model, or null', message), message
  garbled = tmp_path / 'garbled.weights.h5'
  garbled.write_text('not HDF5\n')
  message = error_of(dict(MOBILENET, weights=str(garbled)))
  assert message.startswith(f'model_params.weights: {garbled}: not a readable Keras weights file '
                            '('), message


def test_two_updates_of_lars_through_the_gradient_pipeline(caplog):
  model = build(MOBILENET, (32, 32, 3), 4)
  rng = np.random.default_rng(1)
  batches = [(tf.constant(rng.normal(size=(4, 32, 32, 3)), tf.float32),
              tf.constant(rng.integers(0, 4, 4), tf.int32)) for _ in range(2)]
  with caplog.at_level('WARNING', logger='optimizers'):
    pipeline = GradientPipeline(
        model.trainable_variables, UpdateSettings(
            'LARS', {'learning_rate': 0.1, 'momentum': 0.9, 'weight_decay': 1e-4,
                     'skip_list': ['batch_normalization', 'gamma', 'beta', 'bias']}))
  # The ResNet spelling matches nothing here, and says so once; the other three do.
  assert [r.getMessage().split(' matches')[0] for r in caplog.records] == [
      "warning: optimizer_params.skip_list: 'batch_normalization'"]
  adapted = [v.path for v in model.trainable_variables if pipeline.optimizer.adapts(v)]
  assert len(adapted) == len(exclusions.regularized(model)) == 52 + 1  # kernels of convs and logits
  before = [v.numpy() for v in model.trainable_variables]

  @tf.function
  def step(images, labels):
    def loss():
      logits = model(images, training=True)
      return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
          labels, logits, from_logits=True))
    return pipeline(loss)

  metrics = [step(*batch) for batch in batches]
  assert [int(m['global_step']) for m in metrics] == [1, 2]
  assert all(np.isfinite(float(m['loss'])) for m in metrics)
  changed = [not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables)]
  assert all(changed)
