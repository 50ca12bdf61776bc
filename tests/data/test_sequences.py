"""Tests of the vocabulary, the length-bucketed batch plans and the padding measures (NumPy only)."""

import numpy as np
import pytest

from data.sequences import Vocabulary, batch_bounds, batch_padding_waste, length_sort_key
from data.sequences import padding_waste, token_batch_bounds, word_batch_bounds
from data.sequences import token_separator, tokenize


def test_vocabulary_ids_and_round_trip():
  vocab = Vocabulary(['K', 'AE', 'T'])
  assert vocab.tokens == ('<pad>', '<s>', '</s>', '<unk>', 'K', 'AE', 'T')
  assert (vocab.PAD, vocab.START, vocab.END, vocab.UNK) == (0, 1, 2, 3)
  assert vocab.size == 7 and vocab.symbols == ('K', 'AE', 'T')
  assert vocab.encode(['K', 'AE', 'T']) == [4, 5, 6]
  assert vocab.encode(['K', 'AE', 'T'], start_end=True) == [1, 4, 5, 6, 2]
  assert vocab.encode(['K', 'ZZ']) == [4, 3]
  assert vocab.decode([1, 4, 5, 6, 2, 0, 0]) == ('K', 'AE', 'T')
  assert vocab.decode([6, 5, 0, 4]) == ('T', 'AE')  # stops at padding
  assert vocab.decode([4, 1, 5]) == ('K', '<s>', 'AE')  # only a leading <s> is skipped
  assert vocab == Vocabulary(['K', 'AE', 'T']) and vocab != Vocabulary(['K', 'T', 'AE'])


def test_vocabulary_rejects_specials_and_repeats():
  with pytest.raises(ValueError, match='special tokens'):
    Vocabulary(['a', '<unk>'])
  with pytest.raises(ValueError, match='distinct'):
    Vocabulary(['a', 'b', 'a'])


def test_sort_key_orders_by_source_then_target():
  key = length_sort_key([2, 1, 2, 1], [5, 9, 3, 9])
  assert np.argsort(key, kind='stable').tolist() == [1, 3, 2, 0]


def test_word_bounds():
  assert word_batch_bounds(10, 4).tolist() == [0, 4, 8]
  assert word_batch_bounds(10, 4, keep_partial=True).tolist() == [0, 4, 8, 10]
  assert word_batch_bounds(8, 4, keep_partial=True).tolist() == [0, 4, 8]
  assert word_batch_bounds(3, 4).tolist() == [0]


def test_token_bounds_hand_table():
  # Sorted (source, target) lengths; a budget of 20 padded tokens.
  source = [2, 2, 3, 3, 3, 5, 9]
  target = [3, 4, 3, 6, 4, 5, 11]
  # [0,3): 3 x (3 + 4) = 21 > 20, so [0,2): 2 x 6 = 12; then [2,4): 2 x 9 = 18 (3 more: 3 x 9 = 27);
  # [4,6): 2 x 10 = 20; [6,7): 1 x 20 = 20.
  assert token_batch_bounds(source, target, 20).tolist() == [0, 2, 4, 6, 7]
  assert batch_bounds('tokens', 20, source, target).tolist() == [0, 2, 4, 6, 7]
  assert batch_bounds('words', 3, source, target).tolist() == [0, 3, 6]
  with pytest.raises(ValueError, match='cannot hold the longest example \\(20 tokens'):
    token_batch_bounds(source, target, 19)
  with pytest.raises(ValueError, match="batch unit 'lines' is not allowed"):
    batch_bounds('lines', 3, source, target)


def test_padding_waste_hand_table():
  source = [1, 3, 2, 2]
  target = [2, 2, 4, 4]
  # Batch [0,2): real 1+3+2+2 = 8 of 2 x (3 + 2) = 10; batch [2,4): real 12 of 2 x 6 = 12.
  assert padding_waste(source, target, [0, 2, 4]) == pytest.approx(1 - 20 / 22)
  assert padding_waste(source, target, [0, 4]) == pytest.approx(1 - 20 / 28)
  assert padding_waste(source, target, [0]) == 0.0


def test_batch_padding_waste_counts_pad_ids():
  batches = [{'source': np.array([[5, 6, 0], [7, 0, 0]]), 'target': np.array([[1, 4, 2]] * 2)},
             {'source': np.array([[5]]), 'target': np.array([[1, 2, 0]])}]
  # Pads: 3 + 0 in the first batch, 0 + 1 in the second, of 6 + 6 + 1 + 3 positions.
  assert batch_padding_waste(batches) == pytest.approx(4 / 16)
  assert batch_padding_waste(batches, keys=('target',)) == pytest.approx(1 / 9)
  assert batch_padding_waste([]) == 0.0


def test_a_text_is_cut_into_characters_or_words():
  assert tokenize('Ab c', 'chars') == ('A', 'b', ' ', 'c')
  assert tokenize(' Ab\tc  d ', 'words', lowercase=True) == ('ab', 'c', 'd')
  assert tokenize('', 'words') == ()
  assert (token_separator('chars'), token_separator('words')) == ('', ' ')
  with pytest.raises(ValueError, match=r"token unit 'bytes' is not allowed; allowed: 'chars', "
                                       r"'words'"):
    tokenize('x', 'bytes')
