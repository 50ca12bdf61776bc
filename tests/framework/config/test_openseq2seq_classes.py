"""OpenSeq2Seq's classes in a config, read as model, model_params and data_layer (framework/config/openseq2seq.py, models/openseq2seq.py).

The expectations are OpenSeq2Seq's meaning of each param (its ResNetEncoder's
defaults: version 2, batch norm of momentum 0.997 and epsilon 1e-5, batch norm
regularized; its Transformer's params by name) mapped by docs/openseq2seq.md's
tables, written here by hand.
"""

import pytest

from core.params import ConfigError
from data.openseq2seq import ImagenetDataLayer
from data.openseq2seq import ParallelTextDataLayer
from data.openseq2seq import SpecialTextTokens
from framework.config.openseq2seq import read_classes
from models.openseq2seq import CrossEntropyLoss
from models.openseq2seq import FullyConnectedDecoder
from models.openseq2seq import Image2Label
from models.openseq2seq import PaddedCrossEntropyLossWithSmoothing
from models.openseq2seq import ResNetEncoder
from models.openseq2seq import Text2Text
from models.openseq2seq import TransformerDecoder
from models.openseq2seq import TransformerEncoder


def image(encoder_params=None, output_dim=1000, **keys):
  config = {'base_model': Image2Label, 'encoder': ResNetEncoder,
            'encoder_params': {'resnet_size': 50, 'version': 1, **(encoder_params or {})},
            'decoder': FullyConnectedDecoder, 'decoder_params': {'output_dim': output_dim},
            'loss': CrossEntropyLoss, 'data_layer': ImagenetDataLayer,
            'data_layer_params': {'data_dir': 'data/tf-imagenet'}, 'num_epochs': 100}
  config.update(keys)
  return config


def layers(**keys):
  return {'hidden_size': 512, 'num_heads': 8, 'filter_size': 2048, 'attention_dropout': 0.1,
          'relu_dropout': 0.1, 'layer_postprocess_dropout': 0.1, **keys}


def text(encoder=None, decoder=None, **keys):
  config = {'base_model': Text2Text, 'encoder': TransformerEncoder,
            'encoder_params': layers(encoder_layers=6, **(encoder or {})),
            'decoder': TransformerDecoder,
            'decoder_params': layers(num_hidden_layers=5, beam_size=4, alpha=0.6,
                                     extra_decode_length=50, **(decoder or {})),
            'loss': PaddedCrossEntropyLossWithSmoothing, 'data_layer': ParallelTextDataLayer}
  config.update(keys)
  return config


def refusal(config):
  with pytest.raises(ConfigError) as info:
    read_classes(config, [])
  return str(info.value)


def test_resnet_50_version_1_is_resnet50_with_openseq2seqs_batch_norm_defaults():
  notes = []
  result = read_classes(image(), notes)
  assert result == {'model': 'resnet50', 'data_layer': 'imagenet', 'num_epochs': 100,
                    'data_layer_params': {'data_dir': 'data/tf-imagenet'},
                    'model_params': {'bn_momentum': 0.997, 'bn_epsilon': 1e-5,
                                     'weight_decay': 0.0}}
  assert notes == ['note: encoder: ResNetEncoder (resnet_size 50, version 1) read as model: '
                   "resnet50 (stride 2 in the 3x3 convolution of a block, as OpenSeq2Seq's)"]


def test_the_encoders_batch_norm_settings_are_the_models():
  result = read_classes(image({'bn_momentum': 0.9, 'bn_epsilon': 1e-4}), [])
  assert result['model_params'] == {'bn_momentum': 0.9, 'bn_epsilon': 1e-4, 'weight_decay': 0.0}


def test_version_2_openseq2seqs_default_is_keras_resnet50v2():
  config = image()
  del config['encoder_params']['version']
  assert read_classes(config, [])['model_params'] == {'name': 'ResNet50V2', 'weight_decay': 0.0}
  deeper = read_classes(image({'resnet_size': 152, 'version': 2}), [])
  assert (deeper['model'], deeper['model_params']['name']) == ('keras_application', 'ResNet152V2')


def test_a_resnet_not_built_here_is_one_line_naming_what_is():
  assert refusal(image({'resnet_size': 101})) == (
      'encoder_params.resnet_size: 101 with version 1 is not built here; allowed: 50 with '
      'version 1, 50 with version 2, 101 with version 2, 152 with version 2')
  assert refusal(image({'resnet_size': 34})) == (
      "encoder_params.resnet_size: 34 is not allowed; allowed: 50, 101, 152")


def test_batch_norm_settings_of_version_2_are_refused():
  assert refusal(image({'version': 2, 'bn_momentum': 0.9})).startswith(
      "encoder_params.bn_momentum: Keras' ResNet50V2, which is version 2 here, sets its own "
      'batch norm (momentum 0.99, epsilon 1.001e-5); allowed: ')


def test_regularize_bn_with_a_regularizer_is_noted_as_a_departure():
  notes = []
  read_classes(image(regularizer='l2', regularizer_params={'scale': 0.0005}), notes)
  assert ('note: encoder_params.regularize_bn: true, but the regularizer takes the kernels alone '
          "here (batch norm's gamma and beta are never regularized)") in notes
  quiet = []
  read_classes(image({'regularize_bn': False}, regularizer='l2',
                     regularizer_params={'scale': 0.0005}), quiet)
  assert not any('regularize_bn' in n for n in quiet)


def test_output_dim_is_the_data_layers_classes_or_one_more():
  notes = []
  read_classes(image(output_dim=1001), notes)
  assert notes[-1].startswith("note: decoder_params.output_dim: 1001 read as the data layer's "
                              '1000 classes')
  assert refusal(image(output_dim=10)) == (
      'decoder_params.output_dim: 10, but the data layer gives 1000 classes '
      '(data_layer_params.num_classes); allowed: 1000, or 1001 with a background class')
  read_classes(image(output_dim=10, data_layer_params={'data_dir': 'x', 'num_classes': 10}), [])


def test_a_param_the_encoder_does_not_read_is_refused_with_the_allowed_keys():
  message = refusal(image({'block_sizes': [3, 4, 6, 3]}))
  assert message.startswith('encoder_params.block_sizes: unknown key')
  assert message.endswith('allowed keys: bn_epsilon, bn_momentum, data_format, regularize_bn, '
                          'resnet_size, version')


@pytest.mark.parametrize('change, message', [
    ({'decoder': TransformerDecoder},
     'decoder: TransformerDecoder is not read with base_model Image2Label; allowed: '
     'FullyConnectedDecoder (models.openseq2seq)'),
    ({'loss': None},
     'loss: required with base_model Image2Label; allowed: CrossEntropyLoss (models.openseq2seq)'),
    ({'base_model': None},
     "encoder: OpenSeq2Seq's encoder is read with its base_model; allowed: base_model = "
     'Image2Label or Text2Text (models.openseq2seq) with encoder, decoder and loss, or model and '
     'model_params without them'),
    ({'base_model': dict},
     'base_model: dict is not read here; allowed: Image2Label, Text2Text (models.openseq2seq)'),
    ({'model': 'resnet50'},
     'model: given beside base_model Image2Label, which gives the model from its encoder and '
     'decoder; allowed: one of them (for a change of the model, set encoder_params or '
     'decoder_params)'),
])
def test_classes_that_do_not_fit_are_one_line(change, message):
  assert refusal(image(**change)) == message


def test_model_params_beside_base_model_add_what_the_encoder_does_not_set():
  result = read_classes(image(model_params={'ghost_batch_size': 32, 'bn_epsilon': 1e-5}), [])
  assert result['model_params'] == {'bn_momentum': 0.997, 'bn_epsilon': 1e-5, 'weight_decay': 0.0,
                                    'ghost_batch_size': 32}
  assert refusal(image(model_params={'bn_momentum': 0.9})) == (
      'model_params.bn_momentum: 0.9, but base_model Image2Label reads 0.997 from encoder_params '
      'and decoder_params; give it there (docs/openseq2seq.md maps the keys)')


def test_a_config_without_the_classes_is_returned_as_it_is():
  config = {'model': 'resnet50', 'model_params': {}, 'data_layer': 'imagenet'}
  assert read_classes(config, []) is config


def test_the_transformers_params_are_the_models():
  notes = []
  result = read_classes(text(encoder={'pad_embeddings_2_eight': True}), notes)
  assert result == {'model': 'transformer', 'data_layer': 'text_pairs', 'model_params': {
      'encoder_layers': 6, 'decoder_layers': 5, 'd_model': 512, 'num_heads': 8, 'ff_size': 2048,
      'attention_dropout': 0.1, 'dropout': 0.1, 'beam_size': 4, 'length_penalty': 0.6,
      'decode_length_margin': 50,
      'label_smoothing': 0.0}}  # OpenSeq2Seq's loss without loss_params does not smooth
  assert len(notes) == 1 and notes[0].startswith('note: encoder_params.pad_embeddings_2_eight: ')


def test_loss_params_label_smoothing_is_left_for_the_task():
  result = read_classes(text(loss_params={'label_smoothing': 0.1}), [])
  assert 'label_smoothing' not in result['model_params']
  assert result['loss_params'] == {'label_smoothing': 0.1}


def test_the_special_ids_are_openseq2seqs_and_others_are_refused():
  ids = {'EOS_ID': 1, 'GO_SYMBOL': SpecialTextTokens.S_ID.value,
         'END_SYMBOL': SpecialTextTokens.EOS_ID.value, 'PAD_SYMBOL': SpecialTextTokens.PAD_ID.value}
  assert ids == {'EOS_ID': 1, 'GO_SYMBOL': 2, 'END_SYMBOL': 1, 'PAD_SYMBOL': 0}
  read_classes(text(decoder=ids), [])
  assert refusal(text(decoder={'GO_SYMBOL': 1})) == (
      'decoder_params.GO_SYMBOL: 1 is not allowed; allowed: 2')


@pytest.mark.parametrize('encoder, decoder, message', [
    ({}, {'hidden_size': 256},
     'decoder_params.hidden_size: 256, but encoder_params.hidden_size says 512; the encoder and '
     'decoder here are one Transformer; allowed: 512'),
    ({}, {'relu_dropout': 0.3},
     'decoder_params.relu_dropout: 0.3, but encoder_params.relu_dropout says 0.1; the '
     'Transformer here has one dropout rate for both (model_params.dropout); allowed: 0.1'),
    ({'layer_postprocess_dropout': 0.2}, {},
     'encoder_params.layer_postprocess_dropout: 0.2, but encoder_params.relu_dropout says 0.1; '
     'the Transformer here has one dropout rate for both (model_params.dropout); allowed: 0.1'),
])
def test_settings_the_encoder_and_decoder_give_differently_are_one_line(encoder, decoder, message):
  assert refusal(text(encoder, decoder)) == message
