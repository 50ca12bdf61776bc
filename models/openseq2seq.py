"""OpenSeq2Seq's model classes, as a ported config names them: what this framework builds for each.

A port of an OpenSeq2Seq config swaps ``from open_seq2seq.models import
Image2Label`` (and its encoders, decoders and losses) for ``from
models.openseq2seq import Image2Label, ...`` and keeps its keys::

  base_model = Image2Label
  base_params = {'encoder': ResNetEncoder, 'encoder_params': {...},
                 'decoder': FullyConnectedDecoder, 'decoder_params': {...},
                 'loss': CrossEntropyLoss, ...}

These classes build nothing themselves: each declares the params of its
OpenSeq2Seq namesake that are read here (``PARAMS``, with OpenSeq2Seq's
defaults), and a base model reads its encoder's and decoder's params into
this framework's ``model`` and ``model_params`` (:meth:`Image2Label.model_keys`,
:meth:`Text2Text.model_keys`); ``framework.config.openseq2seq.read_classes`` calls
them as a config is read. A param with no counterpart here is refused in one
line, one that changes nothing is noted in one line (docs/openseq2seq.md has
the tables). Nothing here imports TensorFlow.
"""

from core.params import ConfigError
from core.params import Param
from core.params import REQUIRED
from core.params import check_params
from core.params import fraction_below_one
from core.params import non_negative
from core.params import positive


class OpenSeq2SeqClass:
  """A class of OpenSeq2Seq that a config names; ``KIND`` is the key it is given to."""

  KIND = None
  PARAMS = {}

  @classmethod
  def params(cls, given, path):
    """``given`` checked against ``PARAMS``, OpenSeq2Seq's defaults filled in."""
    return check_params(given, cls.PARAMS, path)


# ---------------------------------------------------------------------------
# Image2Label

# ResNet-50 by version: this framework's model and its model_params. OpenSeq2Seq's
# version 1 is TensorFlow's official ResNet v1 (stride 2 in the 3x3 convolution of a
# block: v1.5), this framework's resnet50; version 2 (pre-activation) is Keras'.
RESNETS = {(50, 1): ('resnet50', {}),
           (50, 2): ('keras_application', {'name': 'ResNet50V2'}),
           (101, 2): ('keras_application', {'name': 'ResNet101V2'}),
           (152, 2): ('keras_application', {'name': 'ResNet152V2'})}


class ResNetEncoder(OpenSeq2SeqClass):
  """OpenSeq2Seq's ResNet encoder: ``resnet_size`` 50 and ``version`` 1 or 2 (101 and 152 with 2)."""

  KIND = 'encoder'
  PARAMS = {
      'resnet_size': Param(int, REQUIRED, choices=sorted({s for s, _ in RESNETS})),
      'version': Param(int, 2, choices=(1, 2), doc="OpenSeq2Seq's default: 2"),
      'regularize_bn': Param(bool, True, doc='the regularizer on batch norm too (default true)'),
      'bn_momentum': Param(float, 0.997, check=fraction_below_one),
      'bn_epsilon': Param(float, 1e-5, check=positive),
      'data_format': Param(str, 'channels_first', choices=('channels_first', 'channels_last')),
  }


class FullyConnectedDecoder(OpenSeq2SeqClass):
  """OpenSeq2Seq's classifier head: one dense layer of ``output_dim`` logits."""

  KIND = 'decoder'
  PARAMS = {'output_dim': Param(int, REQUIRED, check=positive)}


class CrossEntropyLoss(OpenSeq2SeqClass):
  """OpenSeq2Seq's softmax cross-entropy of an image classifier; ``loss_params`` as the task's."""

  KIND = 'loss'


class Image2Label(OpenSeq2SeqClass):
  """OpenSeq2Seq's image classifier: a ResNet encoder, a fully connected decoder, cross-entropy."""

  KIND = 'base_model'
  PARTS = {'encoder': (ResNetEncoder,), 'decoder': (FullyConnectedDecoder,),
           'loss': (CrossEntropyLoss,)}

  @staticmethod
  def model_keys(params, num_classes, regularized, notes):
    """``{'model': ..., 'model_params': ...}`` for the encoder's and decoder's params.

    Args:
      params: ``{'encoder': ..., 'decoder': ..., 'loss': ...}``: the
        encoder's and decoder's params as ``PARAMS`` checked them, and the
        config's ``loss_params``.
      num_classes: the classes of the config's data layer, or None where it
        does not say.
      regularized: whether the config gives a regularizer of a scale above 0.
      notes: a list the one-line notes are appended to.

    Raises:
      ConfigError: a ResNet this framework does not build, batch-norm settings
        for Keras' ResNet v2, or ``output_dim`` that is not the data layer's classes.
    """
    encoder, decoder = params['encoder'], params['decoder']
    size, version = encoder['resnet_size'], encoder['version']
    if (size, version) not in RESNETS:
      allowed = ', '.join(f'{s} with version {v}' for s, v in RESNETS)
      raise ConfigError(f'encoder_params.resnet_size: {size} with version {version} is not built '
                        f'here; allowed: {allowed}', 'encoder_params.resnet_size', 'invalid')
    model, model_params = RESNETS[(size, version)]
    # OpenSeq2Seq regularizes by its regularizer key alone: no L2 of the model's own.
    model_params = dict(model_params, weight_decay=0.0)
    if model == 'resnet50':
      model_params.update(bn_momentum=encoder['bn_momentum'], bn_epsilon=encoder['bn_epsilon'])
      notes.append(f'note: encoder: ResNetEncoder (resnet_size {size}, version 1) read as model: '
                   'resnet50 (stride 2 in the 3x3 convolution of a block, as OpenSeq2Seq\'s)')
    else:
      for key in ('bn_momentum', 'bn_epsilon'):
        if encoder[key] != ResNetEncoder.PARAMS[key].default:
          raise ConfigError(f'encoder_params.{key}: Keras\' {model_params["name"]}, which is '
                            f'version 2 here, sets its own batch norm (momentum 0.99, epsilon '
                            f'1.001e-5); allowed: version 1 with {key}, or no {key}',
                            f'encoder_params.{key}', 'invalid')
      notes.append(f'note: encoder: ResNetEncoder (resnet_size {size}, version {version}) read as '
                   f'model: keras_application, model_params.name: {model_params["name"]} (Keras\' '
                   'pre-activation ResNet, its batch norm of momentum 0.99 and epsilon 1.001e-5 '
                   "for OpenSeq2Seq's 0.997 and 1e-5)")
    if encoder['regularize_bn'] and regularized:
      notes.append('note: encoder_params.regularize_bn: true, but the regularizer takes the '
                   'kernels alone here (batch norm\'s gamma and beta are never regularized)')
    if encoder['data_format'] != ResNetEncoder.PARAMS['data_format'].default:
      notes.append(f'note: encoder_params.data_format: {encoder["data_format"]!r} changes nothing '
                   'here: Keras lays out the images (channels_last)')
    _output_dim(decoder['output_dim'], num_classes, notes)
    return {'model': model, 'model_params': model_params}


def _output_dim(output_dim, num_classes, notes):
  """Checks the decoder's ``output_dim`` against the data layer's classes (1001 for 1000: a background)."""
  if num_classes is None or output_dim == num_classes:
    return
  if output_dim == num_classes + 1:
    notes.append(f'note: decoder_params.output_dim: {output_dim} read as the data layer\'s '
                 f'{num_classes} classes (the extra logit of TensorFlow\'s ImageNet records, '
                 'class 0, is a background no image has)')
    return
  raise ConfigError(f'decoder_params.output_dim: {output_dim}, but the data layer gives '
                    f'{num_classes} classes (data_layer_params.num_classes); allowed: '
                    f'{num_classes}, or {num_classes + 1} with a background class',
                    'decoder_params.output_dim', 'invalid')


# ---------------------------------------------------------------------------
# Text2Text

# OpenSeq2Seq's ids of the special tokens (its SpecialTextTokens); the data layer here
# gives each token its own id (data.sequences.Vocabulary: <pad> 0, <s> 1, </s> 2).
SPECIAL_IDS = {'PAD_SYMBOL': ('<pad>', 0), 'GO_SYMBOL': ('<s>', 2), 'END_SYMBOL': ('</s>', 1),
               'EOS_ID': ('</s>', 1)}

_LAYER_PARAMS = {
    'hidden_size': Param(int, REQUIRED, check=positive, doc='model_params.d_model'),
    'num_heads': Param(int, REQUIRED, check=positive),
    'filter_size': Param(int, REQUIRED, check=positive, doc='model_params.ff_size'),
    'attention_dropout': Param(float, REQUIRED, check=fraction_below_one),
    'relu_dropout': Param(float, REQUIRED, check=fraction_below_one, doc='model_params.dropout'),
    'layer_postprocess_dropout': Param(float, REQUIRED, check=fraction_below_one,
                                       doc='model_params.dropout'),
}


class TransformerEncoder(OpenSeq2SeqClass):
  """OpenSeq2Seq's Transformer encoder (pre-norm, sinusoidal positions)."""

  KIND = 'encoder'
  PARAMS = {
      'encoder_layers': Param(int, REQUIRED, check=positive),
      **_LAYER_PARAMS,
      'pad_embeddings_2_eight': Param(bool, False),
      'remove_padding': Param(bool, None, doc='changes nothing here'),
  }


class TransformerDecoder(OpenSeq2SeqClass):
  """OpenSeq2Seq's Transformer decoder, with its beam search."""

  KIND = 'decoder'
  PARAMS = {
      'num_hidden_layers': Param(int, REQUIRED, check=positive),
      **_LAYER_PARAMS,
      'beam_size': Param(int, REQUIRED, check=positive),
      'alpha': Param(float, REQUIRED, check=non_negative, doc='model_params.length_penalty'),
      'extra_decode_length': Param(int, REQUIRED, check=positive,
                                   doc='model_params.decode_length_margin'),
      **{key: Param(int, default, choices=(default,), doc=f'{token}: the data layer\'s')
         for key, (token, default) in SPECIAL_IDS.items()},
  }


class PaddedCrossEntropyLossWithSmoothing(OpenSeq2SeqClass):
  """OpenSeq2Seq's token cross-entropy with label smoothing (``loss_params.label_smoothing``, default 0)."""

  KIND = 'loss'


class Text2Text(OpenSeq2SeqClass):
  """OpenSeq2Seq's sequence-to-sequence model: a Transformer encoder and decoder."""

  KIND = 'base_model'
  PARTS = {'encoder': (TransformerEncoder,), 'decoder': (TransformerDecoder,),
           'loss': (PaddedCrossEntropyLossWithSmoothing,)}

  @staticmethod
  def model_keys(params, num_classes, regularized, notes):  # pylint: disable=unused-argument
    """``{'model': 'transformer', 'model_params': ...}`` for the encoder's and decoder's params.

    Args:
      params: ``{'encoder': ..., 'decoder': ..., 'loss': ...}``: the
        encoder's and decoder's params as ``PARAMS`` checked them, and the
        config's ``loss_params`` (``{}`` when none).
      num_classes, regularized: as :meth:`Image2Label.model_keys` (not used).
      notes: a list the one-line notes are appended to.

    Raises:
      ConfigError: a setting the encoder and the decoder give differently
        (one Transformer here), or dropout rates that differ.
    """
    encoder, decoder = params['encoder'], params['decoder']
    for key in ('hidden_size', 'num_heads', 'filter_size', 'attention_dropout'):
      _agree(encoder, decoder, key)
    rates = {f'{part}_params.{key}': params[part][key] for part in ('encoder', 'decoder')
             for key in ('relu_dropout', 'layer_postprocess_dropout')}
    if len(set(rates.values())) > 1:
      (first, rate), = list(rates.items())[:1]
      other = next(k for k, v in rates.items() if v != rate)
      raise ConfigError(f'{other}: {rates[other]!r}, but {first} says {rate!r}; the Transformer '
                        'here has one dropout rate for both (model_params.dropout); allowed: '
                        f'{rate!r}', other, 'invalid')
    if encoder['pad_embeddings_2_eight']:
      notes.append('note: encoder_params.pad_embeddings_2_eight: the embeddings are as large as '
                   "the vocabularies here, which the data layer's pad_vocab_to_eight pads to a "
                   'multiple of 8')
    if encoder['remove_padding'] is not None:
      notes.append(f'note: encoder_params.remove_padding: {encoder["remove_padding"]} changes '
                   'nothing here: padded positions are masked, the same numbers')
    # OpenSeq2Seq's loss smooths by loss_params.label_smoothing alone, 0 when not given.
    smoothing = {} if 'label_smoothing' in params['loss'] else {'label_smoothing': 0.0}
    return {'model': 'transformer', 'model_params': {
        **smoothing,
        'encoder_layers': encoder['encoder_layers'],
        'decoder_layers': decoder['num_hidden_layers'],
        'd_model': encoder['hidden_size'],
        'num_heads': encoder['num_heads'],
        'ff_size': encoder['filter_size'],
        'attention_dropout': encoder['attention_dropout'],
        'dropout': encoder['relu_dropout'],
        'beam_size': decoder['beam_size'],
        'length_penalty': decoder['alpha'],
        'decode_length_margin': decoder['extra_decode_length'],
    }}


def _agree(encoder, decoder, key):
  if encoder[key] != decoder[key]:
    raise ConfigError(f'decoder_params.{key}: {decoder[key]!r}, but encoder_params.{key} says '
                      f'{encoder[key]!r}; the encoder and decoder here are one Transformer; '
                      f'allowed: {encoder[key]!r}', f'decoder_params.{key}', 'invalid')


BASE_MODELS = (Image2Label, Text2Text)
