"""The ``model_params`` each model builder declares, importable without TensorFlow.

The registry entries of ``models`` point here (their ``PARAMS`` fact), so the
config layer checks a config's ``model_params`` before TensorFlow is loaded;
each builder validates its ``params`` against the same schema.
"""

import importlib.metadata

from core.params import REQUIRED
from core.params import Param
from core.params import fraction_below_one
from core.params import non_negative
from core.params import positive

CIFAR_DEPTHS = (8, 14, 20, 32, 44, 56, 110)


COMMON_PARAMS = {
    'weight_decay': Param(float, 1e-4, check=non_negative,
                          doc='L2 on conv/dense kernels: loss += wd / 2 * sum(w**2); 0 disables'),
    'zero_init_residual': Param(bool, False,
                                doc='start the last batch-norm gamma of each residual block at 0'),
    'bn_momentum': Param(float, 0.9, check=fraction_below_one, doc='moving-statistics decay'),
    'bn_epsilon': Param(float, 1e-5, check=positive),
    'ghost_batch_size': Param(int, None, check=positive,
                              doc='ghost batch norm: statistics over groups of this many examples '
                                  'of a training batch (None: the whole batch)'),
}

RESNET50_PARAMS = dict(COMMON_PARAMS)

# The models of keras.applications, as of this Keras version: under it a config's
# model_params.name is checked against them before TensorFlow is loaded; under
# another version the builder checks the name against keras.applications itself.
# tests/models/test_keras_application.py holds the list against the real module.
KERAS_VERSION = '3.15.1'
KERAS_APPLICATIONS = (
    'ConvNeXtBase', 'ConvNeXtLarge', 'ConvNeXtSmall', 'ConvNeXtTiny', 'ConvNeXtXLarge',
    'DenseNet121', 'DenseNet169', 'DenseNet201',
    'EfficientNetB0', 'EfficientNetB1', 'EfficientNetB2', 'EfficientNetB3', 'EfficientNetB4',
    'EfficientNetB5', 'EfficientNetB6', 'EfficientNetB7',
    'EfficientNetV2B0', 'EfficientNetV2B1', 'EfficientNetV2B2', 'EfficientNetV2B3',
    'EfficientNetV2L', 'EfficientNetV2M', 'EfficientNetV2S',
    'InceptionResNetV2', 'InceptionV3', 'MobileNet', 'MobileNetV2', 'MobileNetV3Large',
    'MobileNetV3Small', 'NASNetLarge', 'NASNetMobile', 'ResNet101', 'ResNet101V2', 'ResNet152',
    'ResNet152V2', 'ResNet50', 'ResNet50V2', 'VGG16', 'VGG19', 'Xception')


def _installed_keras():
  try:
    return importlib.metadata.version('keras')
  except importlib.metadata.PackageNotFoundError:
    return None


def _local_weights(value):
  if value == 'imagenet':
    # A download from every worker at start-up, into ~/.keras: a run takes a file it names.
    return ("Keras' download is not used: give the path of a local weights file (e.g. the "
            "application's *_notop.h5 from ~/.keras/models)")
  return None


def _mapping_of_names(value):
  return None if all(isinstance(k, str) for k in value) else 'keys must be argument names'


KERAS_APPLICATION_PARAMS = {
    'name': Param(str, REQUIRED,
                  choices=KERAS_APPLICATIONS if _installed_keras() == KERAS_VERSION else None,
                  doc="a keras.applications model by its function name ('MobileNetV2', "
                      "'ResNet50', 'EfficientNetB0'), case-sensitive"),
    'weights': Param(str, None, check=_local_weights,
                     doc='None (random initialization) or the path of a weights file of the '
                         'application without its top (include_top=False)'),
    'pooling': Param(str, 'avg', choices=('avg', 'max'),
                     doc='global pooling of the last feature map before the logits'),
    'dropout': Param(float, 0.0, check=fraction_below_one,
                     doc='dropout rate on the pooled features, before the logits'),
    'include_preprocessing': Param(bool, False,
                                   doc="the application's own input scaling, where it has the "
                                       'argument (EfficientNetV2, ConvNeXt, MobileNetV3); off: '
                                       "the data layer's normalization is the one used"),
    'extra_kwargs': Param(dict, {}, check=_mapping_of_names,
                          doc="more arguments of the application, e.g. {alpha: 0.35} for "
                              'MobileNetV2'),
    'weight_decay': Param(float, 1e-4, check=non_negative,
                          doc='L2 on conv/dense kernels (not depthwise): loss += wd / 2 * '
                              'sum(w**2); 0 disables'),
}

RESNET_CIFAR_PARAMS = {
    'depth': Param(int, 20, choices=CIFAR_DEPTHS, doc='6n + 2 layers; 8 for smoke runs'),
    'width': Param(int, 1, check=positive, doc='channel multiplier of the 16/32/64 stages'),
    'shortcut': Param(str, 'A', choices=('A', 'B'),
                      doc="'A': subsample and zero-pad channels (no parameters); 'B': 1x1 conv + BN"),
    **COMMON_PARAMS,
}

TRANSFORMER_PARAMS = {
    'encoder_layers': Param(int, 3, check=positive),
    'decoder_layers': Param(int, 3, check=positive),
    'd_model': Param(int, 256, check=positive, doc='width of the model; a multiple of 2 x num_heads'),
    'num_heads': Param(int, 4, check=positive),
    'ff_size': Param(int, 1024, check=positive, doc='width of the feed-forward hidden layer'),
    'dropout': Param(float, 0.1, check=fraction_below_one,
                     doc='on embeddings, sub-layer outputs and the feed-forward hidden layer'),
    'attention_dropout': Param(float, 0.0, check=fraction_below_one,
                               doc='on the attention probabilities'),
    'label_smoothing': Param(float, 0.1, check=fraction_below_one,
                             doc="the training loss's target: 1 - e on the label, e / V on every id"),
    'positions': Param(str, 'sinusoidal', choices=('sinusoidal', 'learned')),
    'max_length': Param(int, 64, check=positive,
                        doc='positions of the learned table; decoding produces fewer tokens'),
    'embedding_sharing': Param(str, 'decoder', choices=('none', 'decoder', 'all'),
                               doc="'decoder': target embedding = output projection; 'all': the "
                                   'source embedding too (one vocabulary); \'none\''),
    'norm': Param(str, 'pre', choices=('pre', 'post'),
                  doc='layer normalization before each sub-layer (pre) or after its residual sum'),
    'beam_size': Param(int, 1, check=positive, doc='decoding: 1 is greedy, more is beam search'),
    'final_beam_size': Param(int, None, check=positive,
                             doc='decoding of the evaluation after training (on final_eval_split): '
                                 'its beam; default beam_size (the dev evaluations keep beam_size)'),
    'length_penalty': Param(float, 0.6, check=non_negative,
                            doc="beam search: alpha of GNMT's ((5 + length) / 6) ** alpha"),
    'decode_length_margin': Param(int, 16, check=positive,
                                  doc="decoding: most tokens beyond each source's own length"),
    'train_chunk_size': Param((int, type(None)), 1024, check=positive,
                              doc='training: a larger micro-batch runs its forward and backward '
                                  'passes in chunks of this many examples, adding their '
                                  'gradients (the memory and speed per example of a chunk); '
                                  'null: one pass'),
}
