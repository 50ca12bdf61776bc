"""print_samples_steps: the samples of a training batch each task prints (framework/run/samples.py)."""

import math
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from data.text_pairs import TextPairsDataLayer
from framework.run import samples
from framework.tasks.image_classification import ImageClassificationTask
from framework.tasks.sequence_to_sequence import SequenceToSequenceTask


def parts(task, model, batch):
  """The loop's parts samples reads: the task, the model, and the batches from the data position."""
  return types.SimpleNamespace(task=task, model=model, open_batches=lambda: iter([batch]))


def test_an_image_sample_names_its_label_and_the_top_classes(capsys):
  task = ImageClassificationTask({'label_smoothing': 0.0, 'model': 'x', 'model_params': {}})
  task.samples_data = types.SimpleNamespace(class_names=('daisy', 'rose', 'tulip'), num_classes=3)
  # Logits log(1), log(3), log(6) for every image: probabilities 0.1, 0.3, 0.6.
  inputs = keras.Input((2, 2, 1))
  bias = keras.initializers.Constant([math.log(1.0), math.log(3.0), math.log(6.0)])
  logits = keras.layers.Dense(3, kernel_initializer='zeros', bias_initializer=bias)(
      keras.layers.Flatten()(inputs))
  model = keras.Model(inputs, logits)
  batch = (tf.zeros([5, 2, 2, 1]), tf.constant([2, 0, 1, 1, 0], tf.int32))
  lines = samples.print_samples(parts(task, model, batch), step=40, count=3)
  assert lines == [
      'samples at step 40 (the next training batch, the model as it is now):',
      '  sample 1: label tulip; top tulip 0.60, rose 0.30, daisy 0.10',
      '  sample 2: label daisy; top tulip 0.60, rose 0.30, daisy 0.10',
      '  sample 3: label rose; top tulip 0.60, rose 0.30, daisy 0.10']
  assert capsys.readouterr().out.splitlines() == lines


def test_a_sequence_sample_is_source_reference_and_the_decoded_output(tmp_path):
  train = tmp_path / 'train.tsv'
  train.write_text('abc\tcba\nde\ted\nfgh\thgf\n')
  layer = TextPairsDataLayer({'train_file': str(train), 'eval_file': str(train)}, 'train')
  config = {'model': 'transformer', 'data_layer': 'text_pairs',
            'data_layer_params': {'train_file': str(train)}, 'batch_size_per_gpu': 3,
            'label_smoothing': 0.0,
            'model_params': {'encoder_layers': 1, 'decoder_layers': 1, 'd_model': 8,
                             'num_heads': 2, 'ff_size': 8, 'dropout': 0.0, 'beam_size': 1,
                             'decode_length_margin': 3}}
  task = SequenceToSequenceTask(config)
  model = task.build_model(layer)
  batch = next(iter(layer.dataset(3)))
  lines = samples.print_samples(parts(task, model, batch), step=7, count=2)
  assert lines[0] == 'samples at step 7 (the next training batch, the model as it is now):'
  # The reference is the pair's target; the output, the model's greedy decoding of the source.
  decoded = model.greedy_decode(batch['source'][:2]).numpy()
  pairs = {'abc': 'cba', 'de': 'ed', 'fgh': 'hgf'}
  assert len(lines) == 3
  for number, (line, source_index, row) in enumerate(
      zip(lines[1:], batch['source_index'][:2].numpy(), decoded), start=1):
    source = layer.sources[source_index]
    output = ''.join(layer.decode_target(row))
    assert line == (f'  sample {number}: source {source!r} | reference {pairs[source]!r} | '
                    f'output {output!r}')


def test_only_the_chief_prints(monkeypatch):
  from framework.engines import distributed  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(distributed, 'is_chief', lambda: False)
  opened = []
  quiet = types.SimpleNamespace(task=None, model=None, open_batches=lambda: opened.append(1))
  assert samples.print_samples(quiet, step=1) == [] and not opened


@pytest.mark.parametrize('count', [1, 3])
def test_a_task_without_samples_prints_nothing(capsys, count):
  from framework.tasks import base  # pylint: disable=import-outside-toplevel
  task = base.Task({})
  assert samples.print_samples(parts(task, None, np.zeros(2)), step=1, count=count) == []
  assert capsys.readouterr().out == ''
