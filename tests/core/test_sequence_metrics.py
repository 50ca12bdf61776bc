"""Tests of the edit distance, PER and WER against hand-worked tables."""

import itertools

import pytest

from core.sequence_metrics import ErrorCounts, closest_reference, edit_distance, error_counts
from core.sequence_metrics import phone_error_rate, word_error_rate


@pytest.mark.parametrize('a, b, distance', [
    ('', '', 0),
    ('abc', 'abc', 0),
    ('', 'abc', 3),            # three insertions
    ('abc', '', 3),            # three deletions
    ('kitten', 'sitting', 3),  # k->s, e->i, +g
    ('flaw', 'lawn', 2),       # -f, +n
    ('intention', 'execution', 5),
    ('ab', 'ba', 2),           # no transpositions in Levenshtein's distance
    ('abc', 'cab', 2),         # +c at the front, -c at the end
    ('abcdef', 'azced', 3),    # b->z, -d, f->d
    (('K', 'AE', 'T'), ('K', 'AH', 'T'), 1),
    (('T', 'AH', 'M', 'EY', 'T', 'OW'), ('T', 'AH', 'M', 'AA', 'T', 'OW'), 1),
    (['HH', 'AH', 'L', 'OW'], ['HH', 'EH', 'L', 'OW', 'Z'], 2),
    ((1, 2, 3), [1, 2, 3], 0),  # any sequence type
])
def test_edit_distance_table(a, b, distance):
  assert edit_distance(a, b) == distance
  assert edit_distance(b, a) == distance


def _brute_force_distance(a, b):
  """The distance by exhaustive recursion, an independent definition for short strings."""
  if not a or not b:
    return len(a) + len(b)
  return min(_brute_force_distance(a[1:], b) + 1, _brute_force_distance(a, b[1:]) + 1,
             _brute_force_distance(a[1:], b[1:]) + (a[0] != b[0]))


def test_edit_distance_matches_exhaustive_recursion_on_all_short_strings():
  strings = [''.join(p) for n in range(4) for p in itertools.product('ab', repeat=n)]
  for a, b in itertools.product(strings, repeat=2):
    assert edit_distance(a, b) == _brute_force_distance(a, b), (a, b)


# Five words: (output, references, closest distance, that reference's length, right?)
TABLE = [
    (('K', 'AE', 'T'), [('K', 'AE', 'T')], 0, 3, True),
    # Equals the second pronunciation: right, scored against it (length 6).
    (('T', 'AH', 'M', 'AA', 'T', 'OW'),
     [('T', 'AH', 'M', 'EY', 'T', 'OW'), ('T', 'AH', 'M', 'AA', 'T', 'OW')], 0, 6, True),
    # One edit from both: the tie goes to the first (length 3).
    (('R', 'IY', 'D'), [('R', 'EH', 'D'), ('R', 'IY', 'D', 'Z')], 1, 3, False),
    ((), [('AH',)], 1, 1, False),
    (('D', 'AO', 'G', 'Z'), [('D', 'AO', 'G')], 1, 3, False),
]


def test_error_counts_on_a_hand_table():
  hypotheses = [row[0] for row in TABLE]
  references = [row[1] for row in TABLE]
  counts = error_counts(hypotheses, references)
  assert counts == ErrorCounts(token_errors=3, reference_tokens=16, word_errors=3, words=5)
  assert counts.per == pytest.approx(3 / 16)
  assert counts.wer == pytest.approx(3 / 5)
  assert phone_error_rate(hypotheses, references) == pytest.approx(0.1875)
  assert word_error_rate(hypotheses, references) == pytest.approx(0.6)
  for hypothesis, refs, distance, length, right in TABLE:
    found, reference = closest_reference(hypothesis, refs)
    assert (found, len(reference), found == 0) == (distance, length, right)


def test_counts_of_parts_add_up_to_the_whole():
  hypotheses = [row[0] for row in TABLE]
  references = [row[1] for row in TABLE]
  parts = error_counts(hypotheses[:2], references[:2]) + error_counts(hypotheses[2:], references[2:])
  assert parts == error_counts(hypotheses, references)
  assert ErrorCounts.ZERO + parts == parts
  assert ErrorCounts.ZERO.per == 0.0 and ErrorCounts.ZERO.wer == 0.0


def test_a_word_is_right_only_when_equal_to_a_reference():
  # Same phones in another order is wrong; an output equal to any reference is right.
  assert word_error_rate([('T', 'AE', 'K')], [[('K', 'AE', 'T')]]) == 1.0
  assert word_error_rate([('K', 'AE', 'T')], [[('K', 'AH', 'T'), ('K', 'AE', 'T')]]) == 0.0


def test_bad_arguments_raise():
  with pytest.raises(ValueError, match='2 outputs for 1 words'):
    error_counts([(), ()], [[('A',)]])
  with pytest.raises(ValueError, match='at least one reference'):
    error_counts([('A',)], [[]])

