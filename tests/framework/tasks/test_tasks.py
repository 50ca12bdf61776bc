"""The task interface: which task a config gets, what a sequence evaluation counts, the best checkpoint by WER."""

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from core.params import ConfigError
from data import DATA_LAYERS
from framework import tasks
from framework.config import validation as config_lib
from framework.run import checkpoints
from framework.run import summaries
from framework.tasks.image_classification import ImageClassificationTask
from framework.tasks.sequence_to_sequence import SequenceToSequenceTask
from models import MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REGISTRIES = {'model': MODELS, 'data_layer': DATA_LAYERS}


# --- which task --------------------------------------------------------------------------

@pytest.mark.parametrize('model, data_layer, task', [
    ('resnet_cifar', 'fashion_mnist', 'image_classification'),
    ('resnet50', 'synthetic', 'image_classification'),
    ('transformer', 'cmudict', 'sequence_to_sequence'),
])
def test_the_task_is_the_one_the_model_and_data_layer_declare(model, data_layer, task):
  assert tasks.task_of({'model': model, 'data_layer': data_layer}, REGISTRIES) == task


def test_an_object_declares_its_task_by_attribute_and_an_undeclared_one_is_an_image_classifier():
  def build(params, image_shape, num_classes):
    del params, image_shape, num_classes

  assert tasks.task_of({'model': build, 'data_layer': 'fashion_mnist'},
                       REGISTRIES) == 'image_classification'
  build.TASK = 'sequence_to_sequence'
  assert tasks.task_of({'model': build, 'data_layer': 'cmudict'},
                       REGISTRIES) == 'sequence_to_sequence'


def test_a_model_and_data_layer_of_different_tasks_are_refused_in_one_line():
  with pytest.raises(ConfigError) as error:
    tasks.task_of({'model': 'transformer', 'data_layer': 'fashion_mnist'}, REGISTRIES)
  assert str(error.value) == (
      "model: 'transformer' is a sequence_to_sequence model, but data_layer 'fashion_mnist' "
      'gives image_classification data; choose a model and a data layer of the same task')


def test_the_config_check_refuses_them_before_tensorflow_is_needed():
  config = {'model': 'resnet_cifar', 'data_layer': 'cmudict', 'batch_size_per_gpu': 8,
            'max_steps': 1, 'optimizer': 'SGD'}
  with pytest.raises(ConfigError, match=r"^model: 'resnet_cifar' is a image_classification "
                                        r"model, but data_layer 'cmudict' gives "
                                        r'sequence_to_sequence data'):
    config_lib.validate(config, config_lib.default_registries(), construct=False)


def test_the_tasks_name_their_metrics_and_directions():
  assert (ImageClassificationTask.BEST_METRIC, ImageClassificationTask.HIGHER_IS_BETTER) == (
      'accuracy', True)
  assert (SequenceToSequenceTask.BEST_METRIC, SequenceToSequenceTask.HIGHER_IS_BETTER) == (
      'wer', False)
  assert SequenceToSequenceTask.EVAL_METRICS == ('wer', 'per', 'loss', 'token_accuracy')


# --- a sequence evaluation ---------------------------------------------------------------

DICTIONARY = """cat K AE1 T
dog D AO1 G
dog(2) D AA1 G
emu IY1 M Y UW0
fig F IH1 G
"""
# What the stub model decodes for each word: right, its second pronunciation, one
# phone left out (of 4), one substituted (of 3).
DECODED = {'cat': 'K AE T', 'dog': 'D AA G', 'emu': 'IY M UW', 'fig': 'F IY G'}


class StubModel:
  """Uniform logits for teacher forcing; decodes each word (known by its first letter) as DECODED."""

  def __init__(self, layer):
    self.vocab = layer.target_vocab_size
    table = np.zeros([layer.source_vocab_size, 8], np.int32)
    for word, phones in DECODED.items():
      ids = layer.target_vocabulary.encode(phones.split())
      table[layer.source_vocabulary.id_of(word[0]), :len(ids)] = ids
    self.table = tf.constant(table)

  def __call__(self, inputs, training=False):
    del training
    _, decoder_inputs = inputs
    return tf.zeros(tf.concat([tf.shape(decoder_inputs), [self.vocab]], 0))

  def greedy_decode(self, source):
    return tf.gather(self.table, source[:, 0])


def sequence_config(dict_path, **model_params):
  return {'model': 'transformer', 'data_layer': 'cmudict', 'label_smoothing': 0.0,
          'model_params': {'beam_size': 1, **model_params},
          'data_layer_params': {'dict_path': str(dict_path), 'eval_split': 'train'}}


def test_a_sequence_evaluation_scores_every_word_against_all_its_references(tmp_path):
  path = tmp_path / 'tiny.dict'
  path.write_text(DICTIONARY)
  layer = DATA_LAYERS['cmudict']({'dict_path': str(path), 'eval_split': 'train'}, 'eval')
  assert sorted(layer.sources) == sorted(DECODED)  # all four words fall in the train split
  task = SequenceToSequenceTask(sequence_config(path))
  metrics = task.evaluate(StubModel(layer), layer, batch_size=3)
  # By hand: 2 of 4 words wrong; 0 + 0 + 1 + 1 edits over 3 + 3 + 4 + 3 reference phones.
  assert metrics['wer'] == 0.5
  assert metrics['per'] == pytest.approx(2 / 13, abs=1e-12)
  assert metrics['examples'] == 4
  # Uniform logits: ln(V) per token, and argmax 0 (<pad>) is never a label.
  assert metrics['loss'] == pytest.approx(math.log(layer.target_vocab_size), rel=1e-6)
  assert metrics['token_accuracy'] == 0.0
  assert task.describe_eval(metrics) == (
      f'loss {math.log(43):.4f}, wer 0.5000, per 0.1538, token_accuracy 0.0000 (4 words)')


def test_infer_writes_a_line_per_word_in_input_order(tmp_path):
  path = tmp_path / 'tiny.dict'
  path.write_text(DICTIONARY)
  layer = DATA_LAYERS['cmudict']({'dict_path': str(path), 'eval_split': 'train'}, 'eval')
  task = SequenceToSequenceTask(sequence_config(path))
  lines = task.infer(StubModel(layer), layer, ['Fig', '', '  emu ', 'cat'], batch_size=2)
  assert lines == ['Fig\tF IY G', 'emu\tIY M UW', 'cat\tK AE T']


def test_the_classification_label_smoothing_is_refused_for_a_sequence_model(tmp_path):
  with pytest.raises(ConfigError, match=r'^label_smoothing: .*model_params.label_smoothing'):
    SequenceToSequenceTask(dict(sequence_config(tmp_path / 'x'), label_smoothing=0.1))


def test_the_final_split_is_evaluated_only_when_it_differs(tmp_path):
  task = SequenceToSequenceTask(sequence_config(tmp_path / 'x'))
  view = {'data_layer_params': {'eval_split': 'dev', 'final_eval_split': 'test'}}
  assert task.final_eval_config(view)['data_layer_params']['eval_split'] == 'test'
  assert view['data_layer_params']['eval_split'] == 'dev'  # the eval view is not changed
  assert task.final_eval_config({'data_layer_params': {'eval_split': 'dev',
                                                       'final_eval_split': 'dev'}}) is None
  assert task.final_eval_config({'data_layer_params': {'augment': False}}) is None


def test_the_final_split_is_decoded_with_its_own_beam_and_says_so(tmp_path):
  config = sequence_config(tmp_path / 'x', final_beam_size=4)
  view = dict(config, data_layer_params={'eval_split': 'dev', 'final_eval_split': 'test'})
  task = SequenceToSequenceTask(config, view)
  final_view = task.final_eval_config(view)
  assert final_view['model_params']['beam_size'] == 4
  assert view['model_params']['beam_size'] == 1  # the dev evaluations stay greedy
  assert task.beam_size == 1 and SequenceToSequenceTask(config, final_view).beam_size == 4
  metrics = {'loss': 0.25, 'wer': 0.3, 'per': 0.08, 'token_accuracy': 0.9, 'examples': 7}
  assert task.describe_eval(metrics) == (
      'loss 0.2500, wer 0.3000, per 0.0800, token_accuracy 0.9000 (7 words)')
  assert SequenceToSequenceTask(config, final_view).describe_eval(metrics) == (
      'loss 0.2500, wer 0.3000, per 0.0800, token_accuracy 0.9000 (7 words, beam 4)')
  # Without final_beam_size the final split decodes as the dev split does.
  plain = sequence_config(tmp_path / 'x')
  plain_view = dict(plain, data_layer_params=view['data_layer_params'])
  assert task.final_eval_config(plain_view)['model_params']['beam_size'] == 1


# --- the best checkpoint by a metric that falls --------------------------------------------

def test_the_best_checkpoint_by_wer_keeps_the_lowest(tmp_path):
  weight = tf.Variable(0.0)
  checkpoint = tf.train.Checkpoint(weight=weight)
  best = checkpoints.BestCheckpoint(checkpoint, str(tmp_path / 'best'), metric='wer',
                                    higher_is_better=False)
  for step, wer in ((1, 0.5), (2, 0.3), (3, 0.4), (4, 0.3)):
    weight.assign(float(step))
    best.offer(step, wer)
  record = json.loads((tmp_path / 'best' / 'best.json').read_text())
  assert (record['step'], record['wer']) == (2, 0.3) and 'accuracy' not in record
  assert [s for s, _ in checkpoints.find(str(tmp_path / 'best'), 'best')] == [2]
  # A new run reads the record back, in the same direction.
  again = checkpoints.BestCheckpoint(checkpoint, str(tmp_path / 'best'), metric='wer',
                                     higher_is_better=False)
  assert again.best == 0.3
  again.offer(5, 0.35)
  assert json.loads((tmp_path / 'best' / 'best.json').read_text())['step'] == 2


def test_a_lost_wer_record_is_read_back_from_the_eval_events(tmp_path):
  checkpoint = tf.train.Checkpoint(weight=tf.Variable(1.0))
  best = checkpoints.BestCheckpoint(checkpoint, str(tmp_path / 'best'), metric='wer',
                                    higher_is_better=False)
  best.offer(3, 0.25)
  writer = summaries.LazyWriter(str(tmp_path / 'eval'))
  summaries.write_eval_metrics(writer, 3, {'wer': 0.25, 'per': 0.06}, ('wer', 'per'))
  writer.close()
  (tmp_path / 'best' / 'best.json').unlink()
  lines = []
  again = checkpoints.BestCheckpoint(checkpoint, str(tmp_path / 'best'), log=lines.append,
                                     metric='wer', higher_is_better=False)
  assert again.best == 0.25
  assert 'the wer of' in lines[0] and 'was read back' in lines[0]
  again.offer(4, 0.26)  # worse: kept
  assert json.loads((tmp_path / 'best' / 'best.json').read_text())['step'] == 3


# --- sweeps read the metrics by name -----------------------------------------------------

def write_record(logdir, task, evaluations, final, step):
  """A run's record as the train loop writes it: the task's metric names and numbers."""
  from framework.run import record  # pylint: disable=import-outside-toplevel
  run = record.Record(str(logdir), True, 0)
  run.add('start', 0, metric=task.BEST_METRIC, higher_is_better=task.HIGHER_IS_BETTER)
  for at, metrics in evaluations:
    run.add('eval', at, split='dev', metrics=metrics)
  run.add('final', step, split='test', selected_on='dev', metrics=final)
  run.add('end', step, updates=step)


def test_a_sweep_reads_a_sequence_run_by_the_names_of_its_record(tmp_path):
  from framework.sweep import results  # pylint: disable=import-outside-toplevel
  task = SequenceToSequenceTask(sequence_config(tmp_path / 'x'))
  dev = {'wer': 0.4, 'per': 0.1, 'loss': 0.3, 'token_accuracy': 0.9, 'examples': 6289}
  test = {'wer': 0.35, 'per': 0.0864, 'loss': 0.2634, 'token_accuracy': 0.9343, 'examples': 6315}
  write_record(tmp_path / 'run', task, [(10, dict(dev, wer=0.5)), (20, dev)], test, 20)
  assert results.run_metrics(str(tmp_path / 'run')) == {
      'accuracy': None, 'top5': None, 'loss': 0.2634, 'steps': 20, 'wer': 0.35, 'per': 0.0864,
      'token_accuracy': 0.9343}
  assert results.run_curve_metric(str(tmp_path / 'run')) == 'wer'
  assert results.eval_curve(str(tmp_path / 'run'), 'wer') == [(10, 0.5), (20, 0.4)]


def test_an_image_run_reads_as_before(tmp_path):
  from framework.sweep import results  # pylint: disable=import-outside-toplevel
  task = ImageClassificationTask({'label_smoothing': 0.0})
  metrics = {'loss': 0.2345, 'accuracy': 0.9069, 'top5_accuracy': 0.9979, 'examples': 10000}
  # The console's words, for people; the record is what a sweep reads.
  log = (f'eval at step 5: {task.describe_eval(metrics)}\n'
         f'final test {task.describe_final(metrics)} at step 5\n')
  assert log == ('eval at step 5: loss 0.2345, top-1 0.9069, top-5 0.9979 (10000 examples)\n'
                 'final test accuracy: 0.9069 (top-5 0.9979, loss 0.2345) at step 5\n')
  write_record(tmp_path, task, [(5, metrics)], metrics, 5)
  assert results.run_metrics(str(tmp_path)) == {'accuracy': 0.9069, 'top5': 0.9979,
                                                'loss': 0.2345, 'steps': 5}
  assert results.run_curve_metric(str(tmp_path)) == 'accuracy'
  assert results.eval_curve(str(tmp_path), 'top5') == [(5, 0.9979)]


def test_the_sweep_knows_the_direction_of_each_tasks_metric():
  # The sweep picks its best point without TensorFlow, from its own table of directions.
  from framework.sweep import results  # pylint: disable=import-outside-toplevel
  for task in (ImageClassificationTask, SequenceToSequenceTask):
    assert results.HIGHER_IS_BETTER[task.BEST_METRIC] == task.HIGHER_IS_BETTER, task.NAME


# --- a text-pairs task names its error rates for what they count -------------------------------

class ReversingModel:
  """Decodes a source as its tokens reversed (source and target ids agree in the test's layer)."""

  def __init__(self, layer):
    self.vocab = layer.target_vocab_size

  def __call__(self, inputs, training=False):
    del training
    _, decoder_inputs = inputs
    return tf.zeros(tf.concat([tf.shape(decoder_inputs), [self.vocab]], 0))

  def greedy_decode(self, source):
    lengths = tf.reduce_sum(tf.cast(source > 0, tf.int32), axis=1)
    return tf.reverse_sequence(source, lengths, seq_axis=1, batch_axis=0)


def test_a_text_pairs_task_counts_sequence_and_token_errors(tmp_path, capsys):
  from framework.sweep import results  # pylint: disable=import-outside-toplevel
  path = tmp_path / 'pairs.tsv'
  # 'abc' has a second reference, 'dd': one of its tokens differs from the decoded 'cba'.
  path.write_text('abc\tcba\nabc\tdd\nba\tab\ncab\tbca\n')
  params = {'train_file': str(path), 'eval_file': str(path)}
  config = {'model': 'transformer', 'data_layer': 'text_pairs', 'label_smoothing': 0.0,
            'model_params': {'beam_size': 1}, 'data_layer_params': params}
  task = SequenceToSequenceTask(config)
  assert task.EVAL_METRICS == ('ser', 'ter', 'loss', 'token_accuracy')
  assert task.BEST_METRIC == 'ser' and results.HIGHER_IS_BETTER['ser'] is False
  assert SequenceToSequenceTask(sequence_config(tmp_path / 'x')).BEST_METRIC == 'wer'
  layer = DATA_LAYERS['text_pairs'](params, 'eval')
  metrics = task.evaluate(ReversingModel(layer), layer, batch_size=2)
  # By hand: 'cab' decodes to 'bac' (2 substitutions of 3), the others to a reference.
  assert metrics['ser'] == pytest.approx(1 / 3) and metrics['examples'] == 3
  assert metrics['ter'] == pytest.approx(2 / 8)
  assert task.describe_eval(metrics).startswith('loss ') and ', ser 0.3333, ter 0.2500, ' in (
      task.describe_eval(metrics)) and task.describe_eval(metrics).endswith('(3 sources)')
  assert task.describe_final(metrics).startswith('ser: 0.3333 (ter 0.2500, loss ')
  assert task.describe_export(layer) == (
      "takes a batch of sources (string [None], input 'sources'), returns the decoded targets "
      "as strings of characters ('predictions')")
  capsys.readouterr()
  lines = task.infer(ReversingModel(layer), layer, ['abc', '', ' xab '], batch_size=2)
  assert lines == ['abc\tcba', 'xab\tba<unk>']  # 'x' is <unk>, and the stub copies it
  assert capsys.readouterr().out == (
      'note: 1 of the 6 source tokens are outside the vocabulary of the training data and were '
      'read as <unk>\n')


# --- a task's own config keys ----------------------------------------------------------------

def test_the_image_keys_are_the_image_tasks_and_every_config_holds_them():
  from framework.config import schema  # pylint: disable=import-outside-toplevel
  from framework.tasks import image_keys  # pylint: disable=import-outside-toplevel
  assert 'label_smoothing' not in schema.SCHEMA and 'precise_bn' not in schema.SCHEMA
  keys = schema.top_level_keys()
  assert keys['label_smoothing'] is image_keys.KEYS['label_smoothing']
  assert keys['precise_bn'] is image_keys.KEYS['precise_bn']
  # The run directory's config lists them for every task, at their defaults elsewhere.
  configs = config_lib.load_configs(os.path.join(ROOT, 'configs', 'cmudict_transformer_lamb.py'),
                                    'train', construct=False)
  assert configs['train']['label_smoothing'] == 0.0 and configs['train']['precise_bn'] is None


@pytest.mark.parametrize('override, message', [
    ('label_smoothing=0.1',
     'label_smoothing: a setting of the image_classification task (for the classification loss), '
     'but this config is a sequence_to_sequence one; a sequence model smooths its loss with '
     'model_params.label_smoothing'),
    ('precise_bn={num_batches: 3}',
     'precise_bn: a setting of the image_classification task (recompute batch-norm moving '
     'statistics as a plain average over training batches after training), but this config is '
     'a sequence_to_sequence one'),
])
def test_an_image_key_in_a_sequence_config_is_one_line(override, message):
  path = os.path.join(ROOT, 'configs', 'cmudict_transformer_lamb.py')
  with pytest.raises(ConfigError) as error:
    config_lib.load_configs(path, 'train', [override], construct=False)
  assert str(error.value) == message
  # At its default the key is no setting: old run directories' configs hold it.
  config_lib.load_configs(path, 'train', ['label_smoothing=0.0', 'precise_bn=null'],
                          construct=False)


def test_an_image_config_keeps_its_keys_where_it_writes_them():
  configs = config_lib.load_configs(os.path.join(ROOT, 'configs', 'resnet50_lars.py'), 'train',
                                    ['label_smoothing=0.1', 'precise_bn.num_batches=7'],
                                    construct=False)
  assert configs['train']['label_smoothing'] == 0.1
  assert configs['train']['precise_bn']['num_batches'] == 7
