"""Error rates of sequence outputs: edit distance, phone (token) error rate, word error rate.

Plain Python, no TensorFlow, so that an evaluation, a script or a test can
score decoded outputs anywhere. A sequence is any sequence of hashable
tokens (a tuple of phone strings, a list of ids, a string of characters).

A *word* here is one input of a sequence-to-sequence set (a spelling in
grapheme-to-phoneme conversion) with one or more reference outputs (its
pronunciations). Over a set:

* the phone error rate (PER) is the sum of the edit distances between each
  output and its closest reference, over the sum of those references'
  lengths (the usual convention of G2P evaluation when a word has several
  pronunciations);
* the word error rate (WER) is the share of words whose output equals none of
  their references.

Both are aggregated from counts (:class:`ErrorCounts`), so partial counts of
several evaluation batches or workers add up to the rate of the whole set.

References:
  Levenshtein. "Binary codes capable of correcting deletions, insertions, and
  reversals", Soviet Physics Doklady 10(8), 1966.
  Bisani, Ney. "Joint-sequence models for grapheme-to-phoneme conversion",
  Speech Communication 50(5), 2008 (the PER and WER of G2P).
"""

import collections


def edit_distance(hypothesis, reference):
  """The Levenshtein distance: fewest insertions, deletions and substitutions from one to the other.

  Args:
    hypothesis: a sequence of hashable tokens.
    reference: a sequence of hashable tokens.

  Returns:
    A non-negative int; 0 exactly when the sequences are equal.
  """
  hypothesis, reference = list(hypothesis), list(reference)
  if len(hypothesis) < len(reference):
    # The distance is symmetric; keep the row as short as possible.
    hypothesis, reference = reference, hypothesis
  previous = list(range(len(reference) + 1))
  for i, h in enumerate(hypothesis, start=1):
    current = [i]
    for j, r in enumerate(reference, start=1):
      current.append(min(previous[j] + 1,              # delete h
                         current[j - 1] + 1,           # insert r
                         previous[j - 1] + (h != r)))  # substitute (or match)
    previous = current
  return previous[-1]


class ErrorCounts(collections.namedtuple(
    'ErrorCounts', ['token_errors', 'reference_tokens', 'word_errors', 'words'])):
  """The counts behind PER and WER; add two to pool them.

  Attributes:
    token_errors: summed edit distance of each output to its closest reference.
    reference_tokens: summed length of those closest references.
    word_errors: words whose output equals none of their references.
    words: words scored.
  """
  __slots__ = ()

  def __add__(self, other):
    return ErrorCounts(*(a + b for a, b in zip(self, other)))

  @property
  def per(self):
    """Phone (token) error rate; 0.0 for an empty set."""
    return self.token_errors / self.reference_tokens if self.reference_tokens else 0.0

  @property
  def wer(self):
    """Word error rate; 0.0 for an empty set."""
    return self.word_errors / self.words if self.words else 0.0


ErrorCounts.ZERO = ErrorCounts(0, 0, 0, 0)


def closest_reference(hypothesis, references):
  """The reference nearest to ``hypothesis`` and its edit distance.

  Ties go to the earlier reference in ``references``.

  Args:
    hypothesis: a sequence of tokens.
    references: a non-empty list of sequences of tokens.

  Returns:
    ``(distance, reference)``.

  Raises:
    ValueError: for an empty ``references``.
  """
  if not references:
    raise ValueError('every word needs at least one reference')
  best = None
  for reference in references:
    distance = edit_distance(hypothesis, reference)
    if best is None or distance < best[0]:
      best = (distance, reference)
  return best


def error_counts(hypotheses, references):
  """Scores a set of outputs against their references.

  Args:
    hypotheses: one output per word, each a sequence of tokens.
    references: one entry per word, each a non-empty list of its reference
      sequences (``[['K', 'AE', 'T']]``, or several pronunciations).

  Returns:
    An :class:`ErrorCounts`.

  Raises:
    ValueError: when the two lists differ in length or a word has no reference.
  """
  hypotheses, references = list(hypotheses), list(references)
  if len(hypotheses) != len(references):
    raise ValueError(f'{len(hypotheses)} outputs for {len(references)} words')
  token_errors = reference_tokens = word_errors = 0
  for hypothesis, refs in zip(hypotheses, references):
    distance, reference = closest_reference(hypothesis, refs)
    token_errors += distance
    reference_tokens += len(reference)
    word_errors += distance != 0
  return ErrorCounts(token_errors, reference_tokens, word_errors, len(hypotheses))


def phone_error_rate(hypotheses, references):
  """PER: summed edit distance to the closest reference over summed reference length; see the module doc."""
  return error_counts(hypotheses, references).per


def word_error_rate(hypotheses, references):
  """WER: the share of words whose output equals none of their references."""
  return error_counts(hypotheses, references).wer
