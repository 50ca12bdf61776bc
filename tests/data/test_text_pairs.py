"""Tests of the text_pairs data layer: parsing, references, vocabularies in the run directory,
length limits, bad input, and the batches (resumed, sharded, evaluated once)."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf

from core.params import ConfigError
from data import DATA_LAYERS
from data import text_pairs_facts
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
  assert text_pairs_facts.eval_splits({'eval_split': 'train'}) == ('train', 'train')


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


# --- parallel files (OpenSeq2Seq's ParallelTextDataLayer) -------------------------------------

@pytest.fixture
def parallel(tmp_path):
  """Parallel files of words, and OpenSeq2Seq vocabulary files: with the specials, and without."""
  return {
      'source_file': write(tmp_path, 'train.en', 'the cat  sat\na dog\n\nthe dog\n'),
      'target_file': write(tmp_path, 'train.de', 'die katze sass\nein hund\n\nder hund\n'),
      # Its specials in OpenSeq2Seq's order and spelling, each with the count its tokenizer writes.
      'src_vocab_file': write(tmp_path, 'vocab.en', '<PAD>\t0\n</S>\t0\n<S>\t0\n<UNK>\t0\nthe\t9\n'
                                                    'cat\t4\n\ndog\t3\na\t2\n'),
      'tgt_vocab_file': write(tmp_path, 'vocab.de', 'der\ndie\nein\nhund\nkatze\n'),
      'special_tokens_already_in_vocab': False}


def test_parallel_files_keep_the_ids_of_their_vocabulary_files(parallel, capsys):
  tgt = dict(parallel, special_tokens_already_in_vocab=False)
  src = dict(parallel, tgt_vocab_file=parallel['src_vocab_file'],
             special_tokens_already_in_vocab=True)
  layer = TextPairsDataLayer(src, 'train')
  # The file's line n (blank lines not counted) is id n; its four specials are ours.
  assert layer.source_vocabulary.tokens == ('<pad>', '<s>', '</s>', '<unk>', 'the', 'cat', 'dog', 'a')
  target = TextPairsDataLayer(tgt, 'train').target_vocabulary
  # Without specials in the file, its tokens follow the four from id 4, in file order.
  assert target.tokens == ('<pad>', '<s>', '</s>', '<unk>', 'der', 'die', 'ein', 'hund', 'katze')
  capsys.readouterr()
  layer = TextPairsDataLayer(dict(src, tgt_vocab_file=parallel['tgt_vocab_file'],
                                  special_tokens_already_in_vocab=False), 'eval')
  assert layer.split == 'eval' and layer.path == parallel['source_file']
  # Words cut at the delimiter, two spaces no empty word; the blank line of both files skipped.
  assert layer.sources == ('the cat sat', 'a dog', 'the dog')
  assert layer.references == ((('die', 'katze', 'sass'),), (('ein', 'hund'),), (('der', 'hund'),))
  ids = layer.encode_sources(tf.constant(['the  cat sat', 'a dog']))
  # special_tokens_already_in_vocab false: the file's '<PAD>' ... are tokens 4-7, as there.
  assert ids.numpy().tolist() == [[8, 9, 3], [11, 10, 0]]
  assert layer.target_strings(tf.constant([[1, 5, 8, 2], [7, 4, 0, 0]])).numpy().tolist() == [
      b'die katze', b'hund der']
  assert capsys.readouterr().err == ''  # an eval layer says nothing of its unknown words


def test_parallel_files_take_openseq2seq_keys_and_their_own_delimiter(parallel, tmp_path, capsys):
  bars = {'source_file': write(tmp_path, 's.txt', 'a|b||c\nb\n'),
          'target_file': write(tmp_path, 't.txt', 'x|y\ny|x\n'), 'delimiter': '|',
          'shuffle': True, 'repeat': True, 'shuffle_buffer_size': 25000, 'map_parallel_calls': 16,
          'prefetch_buffer_size': 2, 'pad_lengths_to_eight': False, 'use_start_token': True,
          'max_length': 56}
  layer = TextPairsDataLayer(bars, 'train')
  assert layer.sources == ('a|b|c', 'b') and layer.source_vocabulary.symbols == ('a', 'b', 'c')
  assert layer.encode_sources(tf.constant(['c||a|z'])).numpy().tolist() == [[6, 4, 3]]
  assert layer.target_strings(tf.constant([[1, 5, 4, 2]])).numpy().tolist() == [b'y|x']
  assert layer.tokenize_source('|a||b|') == ('a', 'b')
  # pad_vocab_to_eight: OpenSeq2Seq's unused tokens up to a multiple of eight ids.
  padded = TextPairsDataLayer(dict(parallel, pad_vocab_to_eight=True), 'train')
  assert padded.target_vocabulary.size == 16
  assert padded.target_vocabulary.symbols[5:] == tuple(f'<${i}$>' for i in range(7))
  # Characters, and the sources as their own targets (OpenSeq2Seq's infer_params).
  chars = TextPairsDataLayer({'source_file': parallel['source_file'], 'use_targets': False,
                              'source_tokens': 'chars', 'target_tokens': 'chars'}, 'train')
  assert chars.references[1] == (tuple('a dog'),) and chars.target_separator == ''
  # Training tokens outside the vocabulary files: one line per side.
  capsys.readouterr()
  TextPairsDataLayer(parallel, 'train')
  assert capsys.readouterr().err.splitlines() == [
      f"text_pairs: 1 of the 7 tokens of {parallel['source_file']} are not in src_vocab_file "
      'and are read as <unk>',
      f"text_pairs: 1 of the 7 tokens of {parallel['target_file']} are not in tgt_vocab_file "
      'and are read as <unk>']


def test_an_evaluation_of_parallel_files_takes_the_vocabularies_of_training(parallel, tmp_path):
  plain = {'source_file': parallel['source_file'], 'target_file': parallel['target_file']}
  dev = {'source_file': write(tmp_path, 'dev.en', 'a cat\n'),
         'target_file': write(tmp_path, 'dev.de', 'eine katze\n')}
  run_dir = str(tmp_path / 'run')
  train = TextPairsDataLayer(plain, 'train')
  train.use_run_dir(run_dir)
  evaluation = TextPairsDataLayer(dev, 'eval')
  evaluation.use_run_dir(run_dir)  # before training has written them, as train_eval builds both
  train.dataset(2)
  batch = next(iter(evaluation.dataset(4)))
  assert evaluation.source_vocabulary == train.source_vocabulary
  assert batch['source'].numpy().tolist() == [[4, 5]]  # 'a', 'cat' of the training words
  assert batch['target'].numpy().tolist() == [[1, 3, 8, 2]]  # 'eine' unknown, 'katze'
  saved = json.loads((tmp_path / 'run' / VOCABULARY_FILE).read_text())
  assert saved['source_file'] == parallel['source_file']  # training's files, not the evaluation's
  assert saved['settings'] == {'source_tokens': 'words', 'target_tokens': 'words',
                               'lowercase': False, 'delimiter': ' '}
  alone = TextPairsDataLayer(dev, 'eval')
  alone.use_run_dir(str(tmp_path / 'empty'))
  with pytest.raises(DataError, match=r'^text_pairs: evaluating .*dev.en needs the vocabularies '
                                      r'of training: give data_layer_params.src_vocab_file and '
                                      r'tgt_vocab_file, or the logdir of a training run'):
    alone.dataset(4)


@pytest.mark.parametrize('change, error, message', [
    ({'train_file': 'x.tsv'}, ConfigError, r'^data_layer_params.train_file: not read with '
                                           r'source_file \(parallel files'),
    ({'columns': [1, 0]}, ConfigError, r'^data_layer_params.columns: not read with source_file'),
    ({'target_file': None}, ConfigError, r'^data_layer_params.target_file: required with '
                                         r'source_file .*, or use_targets: false$'),
    ({'tgt_vocab_file': None}, ConfigError, r'^data_layer_params.tgt_vocab_file: required beside '
                                            r'the other vocabulary file'),
    ({'shuffle': False}, ConfigError, r'^data_layer_params.shuffle: false is not read here: the '
                                      r'order of the training pairs is drawn anew every epoch'),
    ({'repeat': False}, ConfigError, r'^data_layer_params.repeat: false is not read here: '
                                     r'training repeats the split; give num_epochs'),
    ({'special_tokens_already_in_vocab': True}, DataError,
     r"^.*vocab.de: its first tokens \['der', 'die', 'ein', 'hund'\] are not the special tokens "
     r'<pad> </s> <s> <unk> \(special_tokens_already_in_vocab: true, the default\); for a file '
     r'of real tokens only set data_layer_params.special_tokens_already_in_vocab: false$'),
    ({'src_vocab_file': 'missing.vocab'}, DataError,
     r'^data_layer_params.src_vocab_file: .*missing.vocab not found$'),
])
def test_parallel_files_given_wrongly_are_one_line(parallel, change, error, message):
  params = dict(parallel, **change)
  if change.get('src_vocab_file') == 'missing.vocab':
    params['src_vocab_file'] = parallel['src_vocab_file'] + '.missing.vocab'
  with pytest.raises(error, match=message) as raised:
    TextPairsDataLayer(params, 'train')
  assert '\n' not in str(raised.value)


def test_the_keys_of_parallel_files_are_refused_beside_train_file(files):
  for key, value in (('target_file', 'x.de'), ('pad_vocab_to_eight', True), ('use_targets', False)):
    with pytest.raises(ConfigError, match=rf'^data_layer_params.{key}: read only with source_file '
                                          r'\(parallel files\); train_file holds source and '
                                          r'target on each line$'):
      TextPairsDataLayer(dict(files, **{key: value}), 'train')


def test_parallel_files_with_bad_lines_name_the_file_and_line(tmp_path, parallel):
  def refused(source, target, message, vocabulary=None):
    params = {'source_file': write(tmp_path, 's', source), 'target_file': write(tmp_path, 't', target)}
    if vocabulary is not None:
      params.update(src_vocab_file=write(tmp_path, 'v', vocabulary),
                    tgt_vocab_file=parallel['tgt_vocab_file'], special_tokens_already_in_vocab=False)
    with pytest.raises(DataError, match=message):
      TextPairsDataLayer(params, 'train')

  refused('a\nb\nc\n', 'x\ny\n', rf'^text_pairs: {re.escape(str(tmp_path))}/s has 3 lines and '
                                 r'.*/t 2; parallel files hold one line each per pair$')
  refused('a\n', 'x\ny\nz\n', r'/s has 1 lines and .*/t 3;')
  refused('a\n\nc\n', 'x\ny\nz\n', r'/s:2: the source is blank, beside a line of .*/t; parallel '
                                   r'files hold a pair on each line$')
  refused('a <s>\n', 'x\n', r"/s:1: the source holds '<s>', a token reserved for")
  refused('\n \n', '\n\n', r'^text_pairs: .*/s: holds no pair \(2 lines, all blank\)$')
  refused('a\n', 'x\n', r"/v:3: 'a' again \(first on line 1\); a vocabulary file lists each "
                        r'token once$', vocabulary='a\nb\na\n')
  refused('a\n', 'x\n', r"/v:2: '<unk>' is a special token among the real ones; when the file "
                        r'begins with the four specials set', vocabulary='a\n<unk>\n')
  refused('a\n', 'x\n', r'/v: holds no token', vocabulary='\n\n')


def test_a_long_pair_is_left_out_by_the_default_max_length(tmp_path, capsys):
  long = 'a' * 300
  train = write(tmp_path, 't.tsv', f'ab\tba\n{long}\t{long}\ncd\tdc\n')
  layer = TextPairsDataLayer({'train_file': train, 'eval_file': train}, 'train')
  assert layer.sources == ('ab', 'cd') and layer.max_source_length == 256
  assert capsys.readouterr().err == (
      f'text_pairs: {train}: left out 1 of 3 pairs longer than max_length 256\n')
  assert TextPairsDataLayer({'train_file': train, 'eval_file': train, 'max_length': None},
                            'train').num_examples == 3
