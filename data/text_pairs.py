"""Sequence-to-sequence pairs from delimited text files (TSV by default) or parallel files.

Two formats; a config gives the keys of one:

* **Pairs a line**: each line of ``train_file``, ``eval_file`` and the
  optional ``test_file`` holds a pair: ``source<delimiter>target``
  (``delimiter`` a tab by default; ``columns`` picks the two fields of a line
  with more). Sources and targets are cut into their characters (the
  default) or their white-space separated words (``source_tokens``,
  ``target_tokens``), after an optional ``lowercase``. Blank lines are skipped.
* **Parallel files** (OpenSeq2Seq's ``ParallelTextDataLayer``): line n of
  ``source_file`` and line n of ``target_file`` are a pair, cut into words at
  ``delimiter`` (a space by default; two in a row make no empty word) or
  into characters. Each mode's view names its own files, as OpenSeq2Seq's
  ``train_params`` and ``eval_params`` do: a train layer reads the ``'train'``
  split from them, an eval layer the ``'eval'`` split. ``use_targets: false``
  reads the sources as their own targets. The vocabularies come from
  ``src_vocab_file`` and ``tgt_vocab_file`` when given (``read_vocabulary``:
  one token a line, what follows a tab ignored, ids in file order), else from
  the training pairs. OpenSeq2Seq's keys of its own input pipeline
  (``shuffle``, ``repeat``, buffer sizes) are read and left to this layer's
  batches.

Splits: ``'train'`` (``train_file``), ``'eval'`` (``eval_file``) and
``'test'`` (``test_file``). Eval mode reads ``eval_split`` (default
``'eval'``); a run with a test file picks its best checkpoint on the eval
split and evaluates it on ``'test'`` at the end
(``data.text_pairs_facts.eval_splits``).

Several lines with the same source are several references of it, in file
order (a pair repeated is kept once): train mode yields one example per
distinct pair; eval mode one example per distinct source, whose ``target`` is
its first reference (for a teacher-forced loss) and whose ``source_index``
leads to all of them in ``references`` (a prediction is right when it equals
any).

Length limits: a pair whose source or target has more tokens than
``max_length`` (256 by default; ``max_source_length`` / ``max_target_length``
for one side) is left out (``length_policy: drop``, one line on stderr with
the count) or refused (``refuse``: a DataError naming the first such line and
the count), in every split. A step over a pair of thousands of tokens would
end out of memory; infer refuses a longer source (``max_source_length``).
``max_examples`` then keeps the first pairs of each file.

Vocabularies: the sorted distinct tokens of the training pairs, one for the
sources and one for the targets (after the ``data.sequences.Vocabulary``
specials), or those of the vocabulary files. Given a run directory (``use_run_dir``), the first run writes them
to ``vocabulary.json`` there with the tokenization settings (worker 0, when it
first reads batches: a run refused for a bad eval file leaves nothing
behind), and every later
run of the directory (eval, export, infer, a resumed run) reads them back, so
the ids never drift from the checkpoint; a run whose tokenization settings
differ from the file's is refused. A resume whose training pairs changed (the
file edited, another file) is refused in one line, as ``data.train_set``
says, or goes on with them and the kept vocabularies
(``accept_changed_train_dir``). A token of an eval, test or served source
outside the vocabulary becomes ``<unk>``.
"""

import json
import os
import sys

from core.params import ConfigError
from data import text_pairs_facts, train_set
from data.base import DataError, holds_checkpoints, write_json_atomically
from data.seq2seq import SequenceDataLayer
from data.sequences import Vocabulary
from data.sequences import token_separator
# The readers of the files: pairs a line, parallel files, vocabulary files.
from data.text_files import limit_lengths
from data.text_files import read_pairs
from data.text_files import read_parallel
from data.text_files import read_vocabulary

VOCABULARY_FILE = 'vocabulary.json'
# The params that decide what a token is; a run directory's vocabulary holds for these only
# (and for the delimiter of parallel files).
TOKEN_SETTINGS = ('source_tokens', 'target_tokens', 'lowercase')


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

  # What it accepts and which splits it evaluates on: data/text_pairs_facts.py (no TensorFlow).
  PARAMS = text_pairs_facts.PARAMS

  def __init__(self, params, mode, num_workers=1, worker_index=0):
    super().__init__(params, mode, num_workers, worker_index)
    p = self.params
    self.parallel = p['source_file'] is not None
    self._check_format()
    self.batch_unit = p['batch_unit']
    default_unit = 'words' if self.parallel else 'chars'
    self.source_tokens = p['source_tokens'] or default_unit
    self.target_tokens = p['target_tokens'] or default_unit
    self.lowercase = p['lowercase']
    # Parallel files cut their words at the delimiter; a TSV's delimiter separates columns.
    self.token_delimiter = (p['delimiter'] or ' ') if self.parallel else None
    self.max_source_length = p['max_source_length'] or p['max_length']
    self.source_length_key = 'max_source_length' if p['max_source_length'] else 'max_length'
    self.max_target_length = p['max_target_length'] or p['max_length']
    self._unwritten = None  # the run directory's vocabulary file, to write with the first batches
    self._pending = None  # an eval layer's vocabulary file that training writes (parallel files)
    self._unrecorded = None  # the training set, to record with the first batches (data.train_set)
    if self.parallel:
      self.split = 'train' if mode == 'train' else 'eval'
      self.path = p['source_file']
      pairs = self._read(p['source_file'])
      if p['src_vocab_file']:
        self.source_vocabulary, self.target_vocabulary = (
            read_vocabulary(p[key], key, p['special_tokens_already_in_vocab'],
                            p['pad_vocab_to_eight']) for key in ('src_vocab_file', 'tgt_vocab_file'))
        self._tell_unknown(pairs)
      else:
        # Without vocabulary files an evaluation takes training's (use_run_dir); these
        # stand in until then.
        self.source_vocabulary, self.target_vocabulary = self._vocabularies(pairs)
        self._pending = mode == 'eval'
    else:
      eval_split, final_split = text_pairs_facts.eval_splits(p)
      for key, split in (('eval_split', eval_split), ('final_eval_split', final_split)):
        if split == 'test' and not p['test_file']:
          raise ConfigError(f"data_layer_params.{key}: 'test' needs a test_file")
      self.split = 'train' if mode == 'train' else eval_split
      self.path = {'train': p['train_file'], 'eval': p['eval_file'],
                   'test': p['test_file']}[self.split]
      # The training pairs give the vocabularies in every mode (the run directory's win).
      train_pairs = self._read(p['train_file'], tell=self.split == 'train')
      pairs = train_pairs if self.split == 'train' else self._read(self.path)
      self.source_vocabulary, self.target_vocabulary = self._vocabularies(train_pairs)
    self._source_token_tuples, self.references = group_references(pairs)
    distinct = len({(source, target) for _, source, target in pairs})
    if self.split == 'train' and distinct < len(pairs) and self.worker_index == 0:
      # Training reads each distinct pair once: say so before a count of examples surprises.
      print(f'text_pairs: {self.path}: {len(pairs) - distinct} of its {len(pairs)} pairs repeat '
            f'an earlier pair and are read once: {distinct} training examples', file=sys.stderr,
            flush=True)
    self.sources = tuple(token_separator(self.source_tokens, self.token_delimiter).join(s)
                         for s in self._source_token_tuples)
    self._encode()

  def _check_format(self):
    """Refuses keys of the other file format, and a format given incompletely.

    Raises:
      ConfigError: one line naming the key and what to give instead.
    """
    p, schema = self.params, text_pairs_facts.PARAMS
    given = [key for key in schema if p[key] != schema[key].default]
    if self.parallel:
      for key in given:
        if key in text_pairs_facts.TSV_KEYS:
          raise ConfigError(f'data_layer_params.{key}: not read with source_file (parallel files, '
                            "whose views name each mode's own source_file and target_file, as "
                            "OpenSeq2Seq's train_params and eval_params do); give one format")
      if p['target_file'] is None and p['use_targets']:
        raise ConfigError('data_layer_params.target_file: required with source_file (the '
                          'targets, line by line beside the sources), or use_targets: false')
      vocabularies = [p['src_vocab_file'], p['tgt_vocab_file']]
      if None in vocabularies and any(vocabularies):
        missing = 'tgt_vocab_file' if p['tgt_vocab_file'] is None else 'src_vocab_file'
        raise ConfigError(f'data_layer_params.{missing}: required beside the other vocabulary '
                          'file (or give neither: the vocabularies of the training pairs)')
    else:
      for key in given:
        if key in text_pairs_facts.PARALLEL_KEYS:
          raise ConfigError(f'data_layer_params.{key}: read only with source_file (parallel '
                            'files); train_file holds source and target on each line')
      for key in ('train_file', 'eval_file'):
        if p[key] is None:
          raise ConfigError(f'data_layer_params.{key}: required key is missing (give train_file '
                            'and eval_file, files of pairs a line, or source_file and '
                            'target_file, parallel files)', f'data_layer_params.{key}', 'missing')
    if self.mode == 'train':
      for key, instead in (('shuffle', 'the order of the training pairs is drawn anew every '
                                       'epoch'),
                           ('repeat', 'training repeats the split; give num_epochs or max_steps '
                                      'for its length')):
        if p[key] is False:
          raise ConfigError(f'data_layer_params.{key}: false is not read here: {instead} (remove '
                            'the key)')

  def _read(self, path, tell=True):
    """The pairs of one file (or parallel files), within the length limits, the first ``max_examples``.

    ``tell``: print the line of the pairs left out (worker 0), for the split read.
    """
    p = self.params
    if self.parallel:
      pairs = read_parallel(p['source_file'], p['target_file'] if p['use_targets'] else None,
                            self.token_delimiter, self.source_tokens, self.target_tokens,
                            p['lowercase'])
    else:
      pairs = read_pairs(path, p['delimiter'] or '\t', p['columns'], self.source_tokens,
                         self.target_tokens, p['lowercase'])
    limits = None
    if p['max_source_length'] is None and p['max_target_length'] is None:
      limits = f'max_length {p["max_length"]}'
    pairs, note = limit_lengths(pairs, path, self.max_source_length, self.max_target_length,
                                p['length_policy'], limits)
    if note is not None and tell and self.worker_index == 0:
      print(note, file=sys.stderr, flush=True)
    return pairs[:p['max_examples']] if p['max_examples'] else pairs

  @staticmethod
  def _vocabularies(pairs):
    """``(source, target)`` vocabularies of the sorted distinct tokens of ``pairs``."""
    return (Vocabulary(sorted({token for _, source, _ in pairs for token in source})),
            Vocabulary(sorted({token for _, _, target in pairs for token in target})))

  def _tell_unknown(self, pairs):
    """One line (worker 0, training) per side whose tokens the vocabulary file lacks."""
    if self.mode != 'train' or self.worker_index != 0:
      return
    for side, key, vocabulary in ((1, 'src_vocab_file', self.source_vocabulary),
                                  (2, 'tgt_vocab_file', self.target_vocabulary)):
      tokens = [token for pair in pairs for token in pair[side]]
      unknown = sum(vocabulary.id_of(token) == Vocabulary.UNK for token in tokens)
      if unknown:
        print(f'text_pairs: {unknown} of the {len(tokens)} tokens of '
              f'{self.params["source_file" if side == 1 else "target_file"]} are not in {key} '
              'and are read as <unk>', file=sys.stderr, flush=True)

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
    """``{setting: value}`` of the params that decide what a token is (``TOKEN_SETTINGS``, and
    the delimiter of parallel files), the defaults resolved."""
    settings = {'source_tokens': self.source_tokens, 'target_tokens': self.target_tokens,
                'lowercase': self.lowercase}
    if self.parallel:
      settings['delimiter'] = self.token_delimiter
    return settings

  def use_run_dir(self, run_dir):
    """Reads the run directory's vocabularies, or, on its first run, keeps them to write there.

    A train layer first holds its pairs to those the checkpoints were
    trained on (``data.train_set.hold``).

    Raises:
      ConfigError: the file was written with other tokenization settings.
      DataError: the file cannot be read, or the training pairs changed.
    """
    super().use_run_dir(run_dir)
    if run_dir is None:
      return
    if self.mode == 'train':
      now = self._train_set()
      self._unrecorded = now if train_set.hold(self, now, ', the vocabularies kept') else None
    path = os.path.join(run_dir, VOCABULARY_FILE)
    if os.path.exists(path):
      self._use_vocabularies(path)
      return
    if holds_checkpoints(run_dir):
      if not self.params['rebuild_vocabulary']:
        raise DataError(f'text_pairs: {path} is missing, and the checkpoints beside it were '
                        'trained with the token ids it held; built again from today\'s files they '
                        'may differ: put the file back, or build it again on purpose with --set '
                        'data_layer_params.rebuild_vocabulary=true')
      if self.worker_index == 0:
        print(f'text_pairs: {path} is missing: the vocabularies are built again from today\'s '
              'files (rebuild_vocabulary); the checkpoints were trained with the ids it held',
              file=sys.stderr, flush=True)
    if self._pending:
      self._pending = path  # the training run of this directory writes it before it evaluates
    elif self.worker_index == 0:
      self._unwritten = path

  def _train_set(self):
    """The training pairs now (``data.train_set.TrainSet``), by their tokens, in order."""
    p = self.params
    where = (f'source_file {p["source_file"]}' + (f' and target_file {p["target_file"]}'
                                                  if p['use_targets'] else '')
             if self.parallel else f'train_file {p["train_file"]}')
    pairs = ('\x1f'.join(source) + '\t' + '\x1f'.join(target)
             for source, references in zip(self._source_token_tuples, self.references)
             for target in references)
    return train_set.TrainSet('text_pairs', where, self.num_examples,
                              train_set.fingerprint(pairs), unit='pairs', parts='pairs')

  def _use_vocabularies(self, path):
    source, target = self._read_vocabularies(path)
    self._pending = None
    if (source, target) != (self.source_vocabulary, self.target_vocabulary):
      self.source_vocabulary, self.target_vocabulary = source, target
      self._encode()

  def _settle(self):
    """Takes training's vocabularies, where this evaluation of parallel files waits for them.

    Raises:
      DataError: no vocabulary files and no run directory that holds training's.
    """
    if not self._pending:
      return
    if isinstance(self._pending, str) and os.path.exists(self._pending):
      self._use_vocabularies(self._pending)
      return
    raise DataError(f'text_pairs: evaluating {self.params["source_file"]} needs the vocabularies '
                    'of training: give data_layer_params.src_vocab_file and tgt_vocab_file, or '
                    'the logdir of a training run (its vocabulary.json)')

  def dataset(self, batch_size, seed=0, start_batch=0):
    """The batches of ``data.seq2seq``; the first call writes the run directory's vocabularies
    and the record of its training set."""
    self._settle()
    if self._unrecorded is not None:
      train_set.record(self, self._unrecorded)
      self._unrecorded = None
    if self._unwritten is not None and os.path.exists(self._unwritten):
      # Another layer of this run (training, before this evaluation) wrote it first.
      self._use_vocabularies(self._unwritten)
      self._unwritten = None
    if self._unwritten is not None:
      os.makedirs(os.path.dirname(self._unwritten), exist_ok=True)
      files = (('source_file', 'target_file', 'src_vocab_file', 'tgt_vocab_file')
               if self.parallel else ('train_file',))
      write_json_atomically(self._unwritten, {
          'settings': self.token_settings(), **{key: self.params[key] for key in files},
          'source_vocabulary': list(self.source_vocabulary.symbols),
          'target_vocabulary': list(self.target_vocabulary.symbols)})
      self._unwritten = None
    return super().dataset(batch_size, seed, start_batch)

  def serving_input(self):
    self._settle()
    return super().serving_input()

  def unknown_source_tokens(self, texts):
    self._settle()
    return super().unknown_source_tokens(texts)

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
