"""Reading the files of text pairs: pairs a line, parallel files, vocabulary files.

The ``text_pairs`` data layer (``data.text_pairs``) reads its splits and
OpenSeq2Seq's vocabulary files with these; each returns plain Python tuples
of tokens, and every problem is one ``DataError`` line naming the file (and
the line).
"""

import itertools
import os

from data.base import DataError, text_lines
from data.sequences import Vocabulary
from data.sequences import tokenize


def read_pairs(path, delimiter='\t', columns=(0, 1), source_tokens='chars',
               target_tokens='chars', lowercase=False):
  """Reads the token pairs of a delimited text file.

  Args:
    path: the file (UTF-8).
    delimiter: what separates the fields of a line.
    columns: ``(source column, target column)``, indices into the fields.
    source_tokens: ``'chars'`` or ``'words'``.
    target_tokens: ``'chars'`` or ``'words'``.
    lowercase: lower-case both sides first.

  Returns:
    A list of ``(line number, source tokens, target tokens)`` in file order,
    the tokens tuples of strings.

  Raises:
    DataError: one line naming the file (and line): a missing file, bytes
      that are not UTF-8, a line with fewer fields than ``columns`` asks for,
      an empty side, a reserved token (``<s>`` ...) or a file holding no pair.
  """
  if not os.path.isfile(path):
    raise DataError(f'text_pairs: {path} not found')
  needed = max(columns) + 1
  pairs = []
  for number, line in text_lines(path):
    line = line.rstrip('\r\n')
    if not line.strip():
      continue
    fields = line.split(delimiter)
    if len(fields) < needed:
      raise DataError(f'{path}:{number}: expected {needed} fields separated by {delimiter!r} '
                      f'(columns {list(columns)}), got {len(fields)}: {line[:60]!r}')
    sides = []
    for name, column, unit in (('source', columns[0], source_tokens),
                               ('target', columns[1], target_tokens)):
      tokens = tokenize(fields[column].strip(), unit, lowercase)
      if not tokens:
        raise DataError(f'{path}:{number}: the {name} (column {column}) is empty')
      _refuse_reserved(tokens, path, number, name)
      sides.append(tokens)
    pairs.append((number, sides[0], sides[1]))
  if not pairs:
    raise DataError(f'{path}: holds no pair (expected lines "source{delimiter}target"; '
                    f'delimiter {delimiter!r})')
  return pairs


def limit_lengths(pairs, path, max_source, max_target, policy, limits=None):
  """The pairs within the length limits; see the module docstring.

  Args:
    pairs: ``read_pairs``'s list.
    path: the file they come from, for the messages.
    max_source: the longest source in tokens, or None.
    max_target: the longest target in tokens, or None.
    policy: ``'drop'`` or ``'refuse'``.
    limits: how the messages name the limits (default: both keys and values).

  Returns:
    ``(kept pairs, the line saying how many were dropped or None)``.

  Raises:
    DataError: ``refuse`` and a pair over a limit (naming the first and the count).
  """
  def too_long(pair):
    _, source, target = pair
    return ((max_source is not None and len(source) > max_source)
            or (max_target is not None and len(target) > max_target))

  over = [pair for pair in pairs if too_long(pair)]
  if not over:
    return pairs, None
  limits = limits or f'max_source_length {max_source}, max_target_length {max_target}'
  if policy == 'refuse':
    number, source, target = over[0]
    raise DataError(f'{path}:{number}: {len(over)} of {len(pairs)} pairs are longer than '
                    f'{limits} (this one: {len(source)} source and {len(target)} target '
                    'tokens); raise the limits or set length_policy: drop')
  kept = [pair for pair in pairs if not too_long(pair)]
  if not kept:
    raise DataError(f'{path}: all {len(pairs)} pairs are longer than {limits}')
  return kept, f'text_pairs: {path}: left out {len(over)} of {len(pairs)} pairs longer than {limits}'


def read_parallel(source_path, target_path, delimiter=' ', source_tokens='words',
                  target_tokens='words', lowercase=False):
  """Reads the token pairs of two parallel files: line n of each is one pair.

  Args:
    source_path: the sources, one a line (UTF-8).
    target_path: the targets, line by line beside them; None: the sources
      stand for the targets.
    delimiter: what separates two words of a line (``words``).
    source_tokens: ``'words'`` or ``'chars'``.
    target_tokens: ``'words'`` or ``'chars'``.
    lowercase: lower-case both sides first.

  Returns:
    A list of ``(line number, source tokens, target tokens)`` in file order.
    A line blank in both files is skipped.

  Raises:
    DataError: one line naming the file (and line): a missing file, bytes
      that are not UTF-8, files of different lengths, one side of a pair
      blank, a reserved token (``<s>`` ...) or files holding no pair.
  """
  for path in (source_path, target_path):
    if path is not None and not os.path.isfile(path):
      raise DataError(f'text_pairs: {path} not found')
  sides = [text_lines(source_path), text_lines(target_path or source_path)]
  units = (source_tokens, target_tokens)
  pairs = []
  number = 0
  for number, (source, target) in enumerate(itertools.zip_longest(*sides), start=1):
    if source is None or target is None:
      counts = [number - 1 + (line is not None) + sum(1 for _ in rest)
                for line, rest in zip((source, target), sides)]
      raise DataError(f'text_pairs: {source_path} has {counts[0]} lines and {target_path} '
                      f'{counts[1]}; parallel files hold one line each per pair')
    texts = (source[1].strip(), target[1].strip())
    if not texts[0] and not texts[1]:
      continue
    tokens = []
    for name, path, text, unit in zip(('source', 'target'), (source_path, target_path), texts, units):
      if not text:
        other = target_path if name == 'source' else source_path
        raise DataError(f'{path}:{number}: the {name} is blank, beside a line of {other}; '
                        'parallel files hold a pair on each line')
      cut = tokenize(text, unit, lowercase, delimiter if unit == 'words' else None)
      _refuse_reserved(cut, path, number, name)
      tokens.append(cut)
    pairs.append((number, tokens[0], tokens[1]))
  if not pairs:
    raise DataError(f'text_pairs: {source_path}: holds no pair ({number} lines, all blank)')
  return pairs


# OpenSeq2Seq's names of its four special tokens, in any case; a vocabulary file that holds
# them (special_tokens_already_in_vocab) gives them its first four lines.
FILE_SPECIALS = ('<pad>', '</s>', '<s>', '<unk>')


def read_vocabulary(path, key, specials_in_file=True, pad_to_eight=False):
  """The vocabulary of a vocabulary file in OpenSeq2Seq's format.

  One token a line; what follows a tab on its line (a count, a score) is
  ignored, and so are blank lines. The file's tokens keep the ids of their
  places: with ``specials_in_file`` (OpenSeq2Seq's
  ``special_tokens_already_in_vocab``, the files its tokenizer writes) the
  first four tokens are the special tokens and the n-th token (from 0) has id
  n; without it, the specials take ids 0-3 and the n-th token has id n + 4.
  Either way the four specials are ``data.sequences.Vocabulary``'s, in its
  order (``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3).

  Args:
    path: the file (UTF-8).
    key: its config key, for the messages (``src_vocab_file``).
    specials_in_file: whether the file begins with the four special tokens.
    pad_to_eight: add unused tokens (``<$0$>`` ...) up to a multiple of 8 ids.

  Returns:
    A :class:`data.sequences.Vocabulary`.

  Raises:
    DataError: one line naming the file (and line): a missing file, a token
      listed twice, first lines that are not the specials when they should
      be, a special token among the real ones, or no token.
  """
  if not os.path.isfile(path):
    raise DataError(f'data_layer_params.{key}: {path} not found')
  tokens, lines = [], {}
  for number, line in text_lines(path):
    text = line.rstrip()
    if not text:
      continue
    token = text.split('\t', 1)[0]
    if not token:
      raise DataError(f'{path}:{number}: no token before the tab ({text[:60]!r})')
    if token in lines:
      raise DataError(f'{path}:{number}: {token!r} again (first on line {lines[token]}); a '
                      'vocabulary file lists each token once')
    lines[token] = number
    tokens.append(token)
  if specials_in_file:
    first = tokens[:len(FILE_SPECIALS)]
    if sorted(t.lower() for t in first) != sorted(FILE_SPECIALS):
      raise DataError(f'{path}: its first tokens {first} are not the special tokens '
                      f'{" ".join(FILE_SPECIALS)} (special_tokens_already_in_vocab: true, '
                      'the default); for a file of real tokens only set data_layer_params.'
                      'special_tokens_already_in_vocab: false')
    tokens = tokens[len(FILE_SPECIALS):]
  for token in tokens:
    if token in Vocabulary.SPECIALS:
      raise DataError(f'{path}:{lines[token]}: {token!r} is a special token among the real ones; '
                      'when the file begins with the four specials set data_layer_params.'
                      'special_tokens_already_in_vocab: true')
  if not tokens:
    raise DataError(f'{path}: holds no token (one token a line)')
  if pad_to_eight:
    extra = 0
    while (len(Vocabulary.SPECIALS) + len(tokens)) % 8:
      if f'<${extra}$>' not in lines:
        tokens.append(f'<${extra}$>')
      extra += 1
  return Vocabulary(tokens)


def _refuse_reserved(tokens, path, number, name):
  """Refuses, in one line, a side of line ``number`` of ``path`` holding a special token."""
  reserved = set(tokens) & set(Vocabulary.SPECIALS)
  if reserved:
    raise DataError(f'{path}:{number}: the {name} holds {sorted(reserved)[0]!r}, a token '
                    f'reserved for {", ".join(Vocabulary.SPECIALS)}')
