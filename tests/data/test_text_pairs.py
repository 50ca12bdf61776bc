"""Tests of the text_pairs data layer: parsing, references, vocabularies in the run directory,
length limits, bad input, and the batches (resumed, sharded, evaluated once)."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf

from core.params import ConfigError
from data import DATA_LAYERS
from data import schemas
from data.base import DataError
from data.text_pairs import VOCABULARY_FILE, TextPairsDataLayer, read_pairs


def write(tmp_path, name, text, encoding='utf-8'):
  path = tmp_path / name
  path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
  return str(path)


def reversal_lines(count, seed, letters='abcdefgh'):
  """``source<TAB>reversed source`` lines of random letter strings (1-7 letters)."""
  rng = np.random.default_rng(seed)
  lines = []
  for _ in range(count):
    word = ''.join(rng.choice(list(letters), rng.integers(1, 8)))
    lines.append(f'{word}\t{word[::-1]}')
  return '\n'.join(lines) + '\n'


@pytest.fixture
def files(tmp_path):
  return {'train_file': write(tmp_path, 'train.tsv', reversal_lines(400, 0)),
          'eval_file': write(tmp_path, 'eval.tsv', reversal_lines(90, 1))}


def test_registered_for_the_sequence_task_with_its_splits():
  assert DATA_LAYERS['text_pairs'] is TextPairsDataLayer
  facts = DATA_LAYERS.facts('text_pairs')
  assert facts['TASK'] == 'sequence_to_sequence'
  resolve = facts['EVAL_SPLITS']
  assert resolve({}) == ('eval', 'eval')
  assert resolve({'test_file': 'x'}) == ('eval', 'test')
  assert resolve({'test_file': 'x', 'final_eval_split': 'eval'}) == ('eval', 'eval')
  assert schemas.text_pairs_eval_splits({'eval_split': 'train'}) == ('train', 'train')


# --- parsing ------------------------------------------------------------------------------

def test_lines_become_token_pairs(tmp_path):
  path = write(tmp_path, 'p.csv', 'id,The Cat,le Chat\r\n\n  \n7,a  dog , un chien\n')
  pairs = read_pairs(path, ',', (1, 2), 'words', 'chars', lowercase=True)
  assert pairs == [(1, ('the', 'cat'), tuple('le chat')), (4, ('a', 'dog'), tuple('un chien'))]
  # Columns in the other order, case kept.
  assert read_pairs(path, ',', (2, 1), 'chars', 'words')[0] == (1, tuple('le Chat'), ('The', 'Cat'))


def test_several_lines_of_one_source_are_its_references(tmp_path):
  train = write(tmp_path, 't.tsv', 'ab\tx\nab\ty\ncd\tz\nab\tx\nAB\tw\n')
  params = {'train_file': train, 'eval_file': train}
  layer = TextPairsDataLayer(params, 'train')
  assert layer.sources == ('ab', 'cd', 'AB')
  assert layer.references == ((('x',), ('y',)), (('z',),), (('w',),))
  assert layer.num_examples == 4  # the repeated pair (line 4) once
  lowered = TextPairsDataLayer(dict(params, lowercase=True), 'eval')
  assert lowered.sources == ('ab', 'cd')
  assert lowered.references == ((('x',), ('y',), ('w',)), (('z',),))
  assert lowered.num_examples == 2  # eval: one example per source, its first reference
  batch = next(iter(lowered.dataset(8)))
  for index, target in zip(batch['source_index'].numpy(), batch['target'].numpy()):
    assert lowered.decode_target(target) == lowered.references[index][0]


def test_words_are_encoded_and_decoded_in_tensorflow(tmp_path):
  train = write(tmp_path, 't.tsv', 'the cat\tle chat\na dog\tun chien\n')
  layer = TextPairsDataLayer({'train_file': train, 'eval_file': train, 'source_tokens': 'words',
                              'target_tokens': 'words'}, 'eval')
  assert layer.source_vocabulary.symbols == ('a', 'cat', 'dog', 'the')
  assert layer.target_vocabulary.symbols == ('chat', 'chien', 'le', 'un')
  ids = layer.encode_sources(tf.constant(['the  dog', 'a cow cat', '']))
  # Ids after the four specials; 'cow' is unknown (3).
  assert ids.numpy().tolist() == [[7, 6, 0], [4, 3, 5], [0, 0, 0]]
  assert layer.unknown_source_tokens(['the  dog', 'a cow cat']) == 1
  rows = tf.constant([[1, 6, 4, 2, 7], [7, 5, 0, 0, 0], [2, 4, 4, 4, 4]])
  assert layer.target_strings(rows).numpy().tolist() == [b'le chat', b'un chien', b'']
  assert layer.decode_target([1, 6, 4, 2, 7]) == ('le', 'chat')


def test_characters_join_without_a_separator(files):
  layer = TextPairsDataLayer(files, 'eval')
  assert layer.target_separator == '' and layer.source_vocabulary.symbols == tuple('abcdefgh')
  ids = layer.encode_sources(tf.constant(['bad', 'z']))
  assert ids.numpy().tolist() == [[5, 4, 7], [3, 0, 0]]
  assert layer.target_strings(ids).numpy().tolist() == [b'bad', b'<unk>']


# --- the vocabularies of the run directory -------------------------------------------------

def test_the_vocabularies_are_written_once_and_read_back(files, tmp_path):
  run_dir = tmp_path / 'run'
  first = TextPairsDataLayer(files, 'train')
  first.use_run_dir(str(run_dir))
  assert not run_dir.exists()  # until the first batches: a run refused before leaves nothing
  first.dataset(8)
  saved = json.loads((run_dir / VOCABULARY_FILE).read_text())
  assert saved['settings'] == {'source_tokens': 'chars', 'target_tokens': 'chars',
                               'lowercase': False}
  assert saved['source_vocabulary'] == saved['target_vocabulary'] == list('abcdefgh')
  # The training file changes (a new letter): the run directory's vocabularies still hold.
  changed = dict(files, train_file=write(tmp_path, 'new.tsv', 'zab\tbaz\n' + reversal_lines(50, 2)))
  fresh = TextPairsDataLayer(changed, 'eval')
  assert 'z' in fresh.source_vocabulary.symbols
  fresh.use_run_dir(str(run_dir))
  assert fresh.source_vocabulary == first.source_vocabulary
  assert fresh.target_vocabulary == first.target_vocabulary
  # Its examples were encoded again with them: the same eval batches as a layer of the old file.
  old = TextPairsDataLayer(dict(files), 'eval')
  for a, b in zip(old.dataset(32), fresh.dataset(32)):
    for key in a:
      np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
  train = TextPairsDataLayer(changed, 'train')
  train.use_run_dir(str(run_dir))
  assert train.encode_sources(tf.constant(['zab'])).numpy().tolist() == [[3, 4, 5]]
  assert (run_dir / VOCABULARY_FILE).read_text() == json.dumps(saved, indent=1, sort_keys=True) + '\n'


def test_other_token_settings_are_refused_in_one_line(files, tmp_path):
  first = TextPairsDataLayer(files, 'train')
  first.use_run_dir(str(tmp_path))
  first.dataset(8)
  layer = TextPairsDataLayer(dict(files, lowercase=True), 'eval')
  with pytest.raises(ConfigError, match=r"^data_layer_params.lowercase: True, but the vocabularies "
                                        r'of this run directory \(.*vocabulary.json\) were built '
                                        r'with False; give the same setting or a new logdir$'):
    layer.use_run_dir(str(tmp_path))
  (tmp_path / VOCABULARY_FILE).write_text('{"settings": ')
  with pytest.raises(DataError, match=r'^text_pairs: .*vocabulary.json cannot be read'):
    TextPairsDataLayer(files, 'eval').use_run_dir(str(tmp_path))


def test_only_worker_0_writes_and_no_run_dir_writes_nothing(files, tmp_path):
  for worker, run_dir in ((1, str(tmp_path)), (0, None)):
    layer = TextPairsDataLayer(files, 'train', num_workers=2, worker_index=worker)
    layer.use_run_dir(run_dir)
    layer.dataset(8)
  assert not (tmp_path / VOCABULARY_FILE).exists()


# --- length limits --------------------------------------------------------------------------

def test_long_pairs_are_dropped_with_a_count_or_refused(tmp_path, capsys):
  train = write(tmp_path, 't.tsv', 'abc\tcba\nabcdef\tfedcba\na\ta\nab\tbaaaaa\n')
  params = {'train_file': train, 'eval_file': train, 'max_source_length': 4,
            'max_target_length': 5}
  layer = TextPairsDataLayer(params, 'train')
  assert layer.sources == ('abc', 'a')
  assert capsys.readouterr().err == (
      f'text_pairs: {train}: left out 2 of 4 pairs longer than max_source_length 4, '
      'max_target_length 5\n')
  TextPairsDataLayer(params, 'eval')  # the train file's line is the train layer's to say
  assert capsys.readouterr().err.count('left out') == 1
  with pytest.raises(DataError, match=rf'^{re.escape(train)}:2: 2 of 4 pairs are longer than max_source_length '
                                      r'4, max_target_length 5 \(this one: 6 source and 6 target '
                                      r'tokens\); raise the limits or set length_policy: drop$'):
    TextPairsDataLayer(dict(params, length_policy='refuse'), 'train')
  assert TextPairsDataLayer(dict(params, max_examples=1), 'train').sources == ('abc',)


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize('content, message', [
    ('ab\tba\nabba\n', r':2: expected 2 fields separated by .\\t. \(columns \[0, 1\]\), got 1: '
                       r"'abba'$"),
    ('ab\t\n', r':1: the target \(column 1\) is empty$'),
    ('  \tba\n', r':1: the source \(column 0\) is empty$'),
    (b'ab\tba\nc\xffd\tdc\n', r':2: not UTF-8 text \(invalid start byte at byte 1\)$'),
    ('', r': holds no pair \(expected lines "source\ttarget"; delimiter .\\t.\)$'),
    ('\n\n', r': holds no pair'),
])
def test_bad_lines_are_one_data_error_naming_file_and_line(tmp_path, files, content, message):
  bad = write(tmp_path, 'bad.tsv', content)
  for params in (dict(files, train_file=bad), dict(files, eval_file=bad)):
    with pytest.raises(DataError, match=f'^{re.escape(bad)}{message}') as error:
      TextPairsDataLayer(params, 'eval')
    assert '\n' not in str(error.value).replace('"source\ttarget"', '')


def test_more_bad_input_and_params(tmp_path, files):
  words = write(tmp_path, 'w.tsv', 'a <s> b\tx\n')
  with pytest.raises(DataError, match=r":1: the source holds '<s>', a token reserved for"):
    TextPairsDataLayer(dict(files, train_file=words, source_tokens='words'), 'train')
  with pytest.raises(DataError, match=r'^text_pairs: .*nothing.tsv not found$'):
    TextPairsDataLayer(dict(files, eval_file=str(tmp_path / 'nothing.tsv')), 'eval')
  with pytest.raises(DataError, match=r':1: expected 3 fields'):
    TextPairsDataLayer(dict(files, columns=[0, 2]), 'train')
  with pytest.raises(ConfigError, match=r"^data_layer_params.eval_split: 'test' needs a test_file"):
    TextPairsDataLayer(dict(files, eval_split='test'), 'eval')
  with pytest.raises(ConfigError, match=r'^data_layer_params.columns: must be two different'):
    TextPairsDataLayer(dict(files, columns=[1, 1]), 'train')
  with pytest.raises(ConfigError, match=r"^data_layer_params.source_tokens: 'bytes' is not allowed"):
    TextPairsDataLayer(dict(files, source_tokens='bytes'), 'train')
  test = TextPairsDataLayer(dict(files, test_file=files['eval_file'], eval_split='test'), 'eval')
  assert test.split == 'test' and test.num_examples == TextPairsDataLayer(files, 'eval').num_examples


# --- batches ----------------------------------------------------------------------------------

def _epoch(layer, batch_size, seed=0, start_batch=0, count=None):
  count = layer.batches_per_epoch(batch_size) if count is None else count
  return [{k: v.numpy() for k, v in b.items()}
          for b in layer.dataset(batch_size, seed, start_batch).take(count)]


def _example_ids(batch):
  return [(int(i), tuple(t[t > 0])) for i, t in zip(batch['source_index'], batch['target'])]


def test_the_stream_resumes_exactly(files):
  layer = TextPairsDataLayer(files, 'train')
  per_epoch = layer.batches_per_epoch(32)
  whole = _epoch(layer, 32, seed=5, count=2 * per_epoch)
  resumed = _epoch(layer, 32, seed=5, start_batch=per_epoch - 2, count=per_epoch + 2)
  assert len(resumed) == per_epoch + 2
  for a, b in zip(whole[per_epoch - 2:], resumed):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize('unit, batch_size', [('words', 16), ('tokens', 200)])
def test_two_workers_read_disjoint_batches(files, unit, batch_size):
  shards = [TextPairsDataLayer(dict(files, batch_unit=unit), 'train', 2, w) for w in range(2)]
  seen = [{e for b in _epoch(s, batch_size, seed=1) for e in _example_ids(b)} for s in shards]
  assert seen[0] and seen[1] and seen[0].isdisjoint(seen[1])


def test_eval_reads_every_source_once_over_two_workers(files):
  shards = [TextPairsDataLayer(files, 'eval', 2, w) for w in range(2)]
  read = [int(i) for s in shards for b in _epoch(s, 8) for i in b['source_index']]
  assert sorted(read) == list(range(len(shards[0].sources)))
