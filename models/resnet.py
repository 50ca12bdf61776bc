"""Residual networks: ResNet-50 v1.5 for ImageNet and the CIFAR ResNets.

Layer names are chosen for optimizers that select variables by path: every
batch-norm layer's name contains ``batch_normalization`` and no other layer's
does, and only the classifier has a bias (convolutions are followed by batch
norm), so a LARS skip list ``['batch_normalization', 'bias']`` matches exactly
the batch-norm variables and the classifier bias.

Kernels are He normal (convolutions) and N(0, 0.01) (the classifier); a
config's ``initializer`` replaces both (``models.initializers``), as
OpenSeq2Seq's did for its layers, which set no kernel initializer; batch norm
and the classifier bias keep theirs (ones, zeros).

Weight decay is an L2 penalty ``weight_decay / 2 * sum(w ** 2)`` on conv and
dense kernels, collected in ``model.losses``; its gradient is
``weight_decay * w``, the convention of the papers' "weight decay 1e-4".

References:
  He, Zhang, Ren, Sun. "Deep Residual Learning for Image Recognition", CVPR 2016.
  arXiv:1512.03385.
  Goyal et al. "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour",
  2017 (zero-initialised last batch-norm gamma of each residual block).
  ResNet-50 v1.5 (stride 2 in the 3x3 rather than the first 1x1 convolution
  of a downsampling bottleneck): the MLPerf and torchvision ResNet-50.
"""

import keras

from core.params import check_params
from models import initializers
from models import schemas
from models.batch_norm import BatchNormalization

RESNET50_STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))  # (blocks, bottleneck width)
BOTTLENECK_EXPANSION = 4


@keras.saving.register_keras_serializable(package='models')
class ZeroPadShortcut(keras.layers.Layer):
  """The parameter-free shortcut of He et al. 2016 (option A).

  Subsamples the input by ``stride`` and appends ``extra_channels`` zero
  channels, so it matches a block that downsamples and widens.
  """

  def __init__(self, stride, extra_channels, **kwargs):
    super().__init__(**kwargs)
    self.stride = stride
    self.extra_channels = extra_channels

  def call(self, inputs):
    x = inputs[:, ::self.stride, ::self.stride, :]
    return keras.ops.pad(x, [[0, 0], [0, 0], [0, 0], [0, self.extra_channels]])

  def get_config(self):
    return {**super().get_config(), 'stride': self.stride, 'extra_channels': self.extra_channels}


class _Builder:
  """Creates the layers of one model with its params, naming scheme and kernels' initializer."""

  def __init__(self, params, kernels=None):
    self.params = params
    # The config's initializer of the kernels (models.initializers), or None: He normal
    # convolutions and a classifier of stddev 0.01.
    self.kernels = kernels
    decay = params['weight_decay']
    # Keras' L2(l) adds l * sum(w**2); half the decay gives the gradient decay * w.
    self.regularizer = keras.regularizers.L2(decay / 2) if decay > 0 else None

  def conv(self, x, filters, kernel, stride, name):
    """A bias-free convolution; strided ones pad symmetrically as in the reference models."""
    padding = 'same'
    if stride > 1 and kernel > 1:
      # 'same' pads bottom/right only for stride 2; explicit padding keeps the
      # window centred, like the PyTorch and MLPerf ResNets.
      total = kernel - 1
      x = keras.layers.ZeroPadding2D(((total // 2, total - total // 2),) * 2, name=name + '_pad')(x)
      padding = 'valid'
    return keras.layers.Conv2D(
        filters, kernel, strides=stride, padding=padding, use_bias=False,
        kernel_initializer=initializers.kernel(self.kernels, 'he_normal'),
        kernel_regularizer=self.regularizer, name=name)(x)

  def batch_norm(self, x, name, zero_gamma=False):
    return BatchNormalization(
        momentum=self.params['bn_momentum'], epsilon=self.params['bn_epsilon'],
        ghost_batch_size=self.params['ghost_batch_size'],
        gamma_initializer='zeros' if zero_gamma else 'ones', name=name)(x)

  def conv_bn_relu(self, x, filters, kernel, stride, prefix, index):
    x = self.conv(x, filters, kernel, stride, f'{prefix}_conv{index}')
    x = self.batch_norm(x, f'{prefix}_batch_normalization_{index}')
    return keras.layers.ReLU(name=f'{prefix}_relu{index}')(x)

  def residual_output(self, x, shortcut, prefix, index):
    """Last batch norm of a block, the addition and the ReLU."""
    x = self.batch_norm(x, f'{prefix}_batch_normalization_{index}',
                        zero_gamma=self.params['zero_init_residual'])
    x = keras.layers.Add(name=f'{prefix}_add')([x, shortcut])
    return keras.layers.ReLU(name=f'{prefix}_out')(x)

  def projection(self, x, filters, stride, prefix):
    x = self.conv(x, filters, 1, stride, f'{prefix}_shortcut_conv')
    return self.batch_norm(x, f'{prefix}_shortcut_batch_normalization')

  def classifier(self, x, num_classes):
    x = keras.layers.GlobalAveragePooling2D(name='global_pool')(x)
    initializer = (keras.initializers.RandomNormal(stddev=0.01) if self.kernels is None
                   else self.kernels())
    # float32 logits whatever the policy, so the softmax and loss are exact.
    return keras.layers.Dense(num_classes, dtype='float32', kernel_initializer=initializer,
                              kernel_regularizer=self.regularizer, name='logits')(x)


def bottleneck_block(b, x, width, stride, prefix):
  """1x1 reduce, 3x3 (strided, v1.5), 1x1 expand; projection shortcut when the shape changes."""
  out_channels = width * BOTTLENECK_EXPANSION
  if stride != 1 or x.shape[-1] != out_channels:
    shortcut = b.projection(x, out_channels, stride, prefix)
  else:
    shortcut = x
  x = b.conv_bn_relu(x, width, 1, 1, prefix, 1)
  x = b.conv_bn_relu(x, width, 3, stride, prefix, 2)
  x = b.conv(x, out_channels, 1, 1, f'{prefix}_conv3')
  return b.residual_output(x, shortcut, prefix, 3)


def basic_block(b, x, filters, stride, prefix, shortcut_type):
  """Two 3x3 convolutions; an option-A or option-B shortcut when the shape changes."""
  in_channels = x.shape[-1]
  if stride == 1 and in_channels == filters:
    shortcut = x
  elif shortcut_type == 'A':
    shortcut = ZeroPadShortcut(stride, filters - in_channels, name=f'{prefix}_shortcut')(x)
  else:
    shortcut = b.projection(x, filters, stride, prefix)
  x = b.conv_bn_relu(x, filters, 3, stride, prefix, 1)
  x = b.conv(x, filters, 3, 1, f'{prefix}_conv2')
  return b.residual_output(x, shortcut, prefix, 2)


def build_resnet50(params, image_shape, num_classes, kernel_initializer=None):
  """ResNet-50 v1.5 (25,557,032 trainable parameters for 1000 classes at any input size).

  Args:
    params: ``model_params``, see ``build_resnet50.PARAMS``.
    image_shape: ``(height, width, channels)``; 224x224x3 for ImageNet.
    num_classes: width of the logits.
    kernel_initializer: the config's initializer of the convolutions' and the
      classifier's kernels (``models.initializers.KernelInitializers``), or
      None for He normal convolutions and a classifier of stddev 0.01.

  Returns:
    An uncompiled ``keras.Model`` named ``resnet50`` mapping images to float32 logits.

  Raises:
    ConfigError: for bad ``params``.
  """
  params = check_params(params, build_resnet50.PARAMS, 'model_params')
  b = _Builder(params, kernel_initializer)
  inputs = keras.Input(shape=tuple(image_shape), name='images')
  x = b.conv(inputs, 64, 7, 2, 'stem_conv')
  x = b.batch_norm(x, 'stem_batch_normalization')
  x = keras.layers.ReLU(name='stem_relu')(x)
  x = keras.layers.ZeroPadding2D(1, name='stem_pool_pad')(x)
  x = keras.layers.MaxPooling2D(3, strides=2, name='stem_pool')(x)
  for stage, (blocks, width) in enumerate(RESNET50_STAGES, start=1):
    for block in range(1, blocks + 1):
      stride = 2 if stage > 1 and block == 1 else 1
      x = bottleneck_block(b, x, width, stride, f'stage{stage}_block{block}')
  return keras.Model(inputs, b.classifier(x, num_classes), name='resnet50')


build_resnet50.PARAMS = schemas.RESNET50_PARAMS
build_resnet50.TAKES_INITIALIZER = True


def build_resnet_cifar(params, image_shape, num_classes, kernel_initializer=None):
  """The CIFAR ResNet of He et al. 2016 (section 4.2): 6n + 2 layers.

  A 3x3 convolution with 16 channels, three stages of n basic blocks with
  16, 32 and 64 channels (times ``width``; the first block of stages 2 and 3
  halves the resolution), global average pooling and the classifier. ResNet-20
  with option-A shortcuts has 0.27 M parameters.

  Args:
    params: ``model_params``, see ``build_resnet_cifar.PARAMS``.
    image_shape: ``(height, width, channels)``, e.g. ``(32, 32, 3)`` or ``(28, 28, 1)``.
    num_classes: width of the logits.
    kernel_initializer: as :func:`build_resnet50`'s.

  Returns:
    An uncompiled ``keras.Model`` named ``resnet_cifar`` mapping images to float32 logits.

  Raises:
    ConfigError: for bad ``params``.
  """
  params = check_params(params, build_resnet_cifar.PARAMS, 'model_params')
  b = _Builder(params, kernel_initializer)
  blocks = (params['depth'] - 2) // 6
  channels = [c * params['width'] for c in (16, 32, 64)]
  inputs = keras.Input(shape=tuple(image_shape), name='images')
  x = b.conv(inputs, channels[0], 3, 1, 'stem_conv')
  x = b.batch_norm(x, 'stem_batch_normalization')
  x = keras.layers.ReLU(name='stem_relu')(x)
  for stage, filters in enumerate(channels, start=1):
    for block in range(1, blocks + 1):
      stride = 2 if stage > 1 and block == 1 else 1
      x = basic_block(b, x, filters, stride, f'stage{stage}_block{block}', params['shortcut'])
  return keras.Model(inputs, b.classifier(x, num_classes), name='resnet_cifar')


build_resnet_cifar.PARAMS = schemas.RESNET_CIFAR_PARAMS
build_resnet_cifar.TAKES_INITIALIZER = True
