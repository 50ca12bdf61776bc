"""Sequence-to-sequence pairs from delimited text files (TSV by default).

Each line of ``train_file``, ``eval_file`` and the optional ``test_file``
holds a pair: ``source<delimiter>target`` (``columns`` picks the two fields
of a line with more). Sources and targets are cut into tokens, their
characters or their white-space separated words (``source_tokens``,
``target_tokens``), after an optional ``lowercase``. Blank lines are skipped.

Splits: ``'train'`` (``train_file``), ``'eval'`` (``eval_file``) and
``'test'`` (``test_file``). Eval mode reads ``eval_split`` (default
``'eval'``); a run with a test file picks its best checkpoint on the eval
split and evaluates it on ``'test'`` at the end
(``data.schemas.text_pairs_eval_splits``).

Several lines with the same source are several references of it, in file
order (a pair repeated is kept once): train mode yields one example per
distinct pair; eval mode one example per distinct source, whose ``target`` is
its first reference (for a teacher-forced loss) and whose ``source_index``
leads to all of them in ``references`` (a prediction is right when it equals
any).

Length limits: a pair whose source or target has more tokens than
``max_source_length`` / ``max_target_length`` is left out (``length_policy:
drop``, one line on stderr with the count) or refused (``refuse``: a
DataError naming the first such line and the count), in every split.
``max_examples`` then keeps the first pairs of each file.

Vocabularies: the sorted distinct tokens of the training pairs, one for the
sources and one for the targets (after the ``data.sequences.Vocabulary``
specials). Given a run directory (``use_run_dir``), the first run writes them
to ``vocabulary.json`` there with the tokenization settings (worker 0, when it
first reads batches: a run refused for a bad eval file leaves nothing
behind), and every later
run of the directory (eval, export, infer, a resumed run) reads them back, so
the ids never drift from the checkpoint, even when the training file changes;
a run whose tokenization settings differ from the file's is refused. A token
of an eval, test or served source outside the vocabulary becomes ``<unk>``.
"""

import json
import os
import sys

from core.params import ConfigError
from data import schemas
from data.base import DataError, text_lines, write_json_atomically
from data.seq2seq import SequenceDataLayer
from data.sequences import Vocabulary
from data.sequences import token_separator
from data.sequences import tokenize

VOCABULARY_FILE = 'vocabulary.json'
# The params that decide what a token is; a run directory's vocabulary holds for these only.
TOKEN_SETTINGS = ('source_tokens', 'target_tokens', 'lowercase')


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
      reserved = set(tokens) & set(Vocabulary.SPECIALS)
      if reserved:
        raise DataError(f'{path}:{number}: the {name} holds {sorted(reserved)[0]!r}, a token '
                        f'reserved for {", ".join(Vocabulary.SPECIALS)}')
      sides.append(tokens)
    pairs.append((number, sides[0], sides[1]))
  if not pairs:
    raise DataError(f'{path}: holds no pair (expected lines "source{delimiter}target"; '
                    f'delimiter {delimiter!r})')
  return pairs


def limit_lengths(pairs, path, max_source, max_target, policy):
  """The pairs within the length limits; see the module docstring.

  Args:
    pairs: ``read_pairs``'s list.
    path: the file they come from, for the messages.
    max_source: the longest source in tokens, or None.
    max_target: the longest target in tokens, or None.
    policy: ``'drop'`` or ``'refuse'``.

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
  limits = f'max_source_length {max_source}, max_target_length {max_target}'
  if policy == 'refuse':
    number, source, target = over[0]
    raise DataError(f'{path}:{number}: {len(over)} of {len(pairs)} pairs are longer than '
                    f'{limits} (this one: {len(source)} source and {len(target)} target '
                    'tokens); raise the limits or set length_policy: drop')
  kept = [pair for pair in pairs if not too_long(pair)]
  if not kept:
    raise DataError(f'{path}: all {len(pairs)} pairs are longer than {limits}')
  return kept, f'text_pairs: {path}: left out {len(over)} of {len(pairs)} pairs longer than {limits}'


def group_references(pairs):
  """``(sources, references)``: distinct source token tuples in first-seen order, and per
  source the tuple of its distinct target token tuples in file order."""
  table = {}
  for _, source, target in pairs:
    known = table.setdefault(source, [])
    if target not in known:
      known.append(target)
  return tuple(table), tuple(tuple(targets) for targets in table.values())


class TextPairsDataLayer(SequenceDataLayer):
  """Sequence pairs from delimited text files; see the module docstring.

  Attributes (beyond :class:`data.seq2seq.SequenceDataLayer`'s):
    split: ``'train'``, ``'eval'`` or ``'test'``.
    path: the file of the split.

  Raises:
    ConfigError: for bad params (a test split without ``test_file``), or a
      run directory whose vocabulary was built with other tokenization settings.
    DataError: a missing or malformed file (file and line).
  """

  PARAMS = schemas.TEXT_PAIRS_PARAMS

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    p = self.params
    self.batch_unit = p['batch_unit']
    self.source_tokens, self.target_tokens = p['source_tokens'], p['target_tokens']
    self.lowercase = p['lowercase']
    eval_split, final_split = schemas.text_pairs_eval_splits(p)
    for key, split in (('eval_split', eval_split), ('final_eval_split', final_split)):
      if split == 'test' and not p['test_file']:
        raise ConfigError(f"data_layer_params.{key}: 'test' needs a test_file")
    self._unwritten = None  # the run directory's vocabulary file, to write with the first batches
    self.split = 'train' if mode == 'train' else eval_split
    self.path = {'train': p['train_file'], 'eval': p['eval_file'],
                 'test': p['test_file']}[self.split]

    # The training pairs give the vocabularies in every mode (the run directory's win).
    train_pairs = self._read(p['train_file'], tell=self.split == 'train')
    pairs = train_pairs if self.split == 'train' else self._read(self.path)
    self.source_vocabulary = Vocabulary(sorted({token for _, source, _ in train_pairs
                                                for token in source}))
    self.target_vocabulary = Vocabulary(sorted({token for _, _, target in train_pairs
                                                for token in target}))
    self._source_token_tuples, self.references = group_references(pairs)
    self.sources = tuple(token_separator(self.source_tokens).join(s)
                         for s in self._source_token_tuples)
    self._encode()

  def _read(self, path, tell=True):
    """The pairs of one file, within the length limits, the first ``max_examples``.

    ``tell``: print the line of the pairs left out (worker 0), for the split read.
    """
    p = self.params
    pairs = read_pairs(path, p['delimiter'], p['columns'], p['source_tokens'],
                       p['target_tokens'], p['lowercase'])
    pairs, note = limit_lengths(pairs, path, p['max_source_length'], p['max_target_length'],
                                p['length_policy'])
    if note is not None and tell and self.worker_index == 0:
      print(note, file=sys.stderr, flush=True)
    return pairs[:p['max_examples']] if p['max_examples'] else pairs

  def _encode(self):
    """The split's examples as ids of the current vocabularies (again after they are replaced)."""
    sources, targets, source_index = [], [], []
    for index, (source, references) in enumerate(zip(self._source_token_tuples, self.references)):
      if self.mode == 'eval':
        references = references[:1]
      for target in references:
        sources.append(self.source_vocabulary.encode(source))
        targets.append(self.target_vocabulary.encode(target, start_end=True))
        source_index.append(index)
    self.set_examples(sources, targets, source_index)

  # --- the vocabulary file of the run directory -------------------------------------------------

  def token_settings(self):
    """``{setting: value}`` of the params that decide what a token is (``TOKEN_SETTINGS``)."""
    return {key: self.params[key] for key in TOKEN_SETTINGS}

  def use_run_dir(self, run_dir):
    """Reads the run directory's vocabularies, or, on its first run, keeps them to write there.

    Raises:
      ConfigError: the file was written with other tokenization settings.
      DataError: the file cannot be read.
    """
    super().use_run_dir(run_dir)
    if run_dir is None:
      return
    path = os.path.join(run_dir, VOCABULARY_FILE)
    if os.path.exists(path):
      source, target = self._read_vocabularies(path)
      if (source, target) != (self.source_vocabulary, self.target_vocabulary):
        self.source_vocabulary, self.target_vocabulary = source, target
        self._encode()
    elif self.worker_index == 0:
      self._unwritten = path

  def dataset(self, batch_size, seed=0, start_batch=0):
    """The batches of ``data.seq2seq``; the first call writes the run directory's vocabularies."""
    if self._unwritten is not None:
      os.makedirs(os.path.dirname(self._unwritten), exist_ok=True)
      write_json_atomically(self._unwritten, {
          'settings': self.token_settings(), 'train_file': self.params['train_file'],
          'source_vocabulary': list(self.source_vocabulary.symbols),
          'target_vocabulary': list(self.target_vocabulary.symbols)})
      self._unwritten = None
    return super().dataset(batch_size, seed, start_batch)

  def _read_vocabularies(self, path):
    try:
      with open(path, encoding='utf-8') as f:
        saved = json.load(f)
      settings = saved['settings']
      source = Vocabulary(saved['source_vocabulary'])
      target = Vocabulary(saved['target_vocabulary'])
    except (OSError, ValueError, KeyError, TypeError) as exc:
      raise DataError(f'text_pairs: {path} cannot be read ({type(exc).__name__}: {exc}); it '
                      'holds the vocabularies of the checkpoints beside it') from None
    for key, value in self.token_settings().items():
      if settings.get(key) != value:
        raise ConfigError(f'data_layer_params.{key}: {value!r}, but the vocabularies of this '
                          f'run directory ({path}) were built with {settings.get(key)!r}; '
                          'give the same setting or a new logdir')
    return source, target
