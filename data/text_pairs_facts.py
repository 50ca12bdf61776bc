"""What the ``text_pairs`` data layer (``data/text_pairs.py``) accepts and which splits it
evaluates on, told without TensorFlow.

``data/__init__.py`` registers these with the layer, so that the config layer
checks ``data_layer_params`` and knows the split of the evaluation after
training before TensorFlow is loaded; the layer reads the same ``PARAMS``,
format keys and :func:`eval_splits`. Its splits are as long as its files
(after the length limits); the config layer does not size its epochs.
"""

from core.params import Param
from core.params import PathParam
from core.params import positive
from data.shared_params import ACCEPT_CHANGED_TRAIN_SET

TASK = 'sequence_to_sequence'
SPLITS = ('train', 'eval', 'test')


def _two_columns(value):
  if (len(value) != 2 or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                                 for c in value) or value[0] == value[1]):
    return 'must be two different column indices >= 0, [source, target]'
  return None


def _non_empty(value):
  return None if value else 'must not be empty'


# The longest source and target by default, in tokens: OpenSeq2Seq's max_length of
# its Transformer's evaluation; a step over one pair of 20,000 characters would need
# 32 x heads x 20,000^2 attention weights and end out of memory.
MAX_LENGTH = 256

PARAMS = {
    'train_file': PathParam(None, doc='UTF-8 text, one pair a line: source<delimiter>target; '
                            "the 'train' split and the vocabularies (or source_file and "
                            'target_file)'),
    'eval_file': PathParam(None, doc="the same format: the 'eval' split (required with train_file)"),
    'test_file': PathParam(None, doc="the same format: the 'test' split (None: no test split)"),
    'source_file': PathParam(None, doc="parallel files, OpenSeq2Seq's format: the sources of the "
                             "mode's split, one a line (train_params and eval_params each name "
                             'their own); instead of train_file'),
    'target_file': PathParam(None, doc='with source_file: the targets, line by line beside it'),
    'src_vocab_file': PathParam(None, doc='with source_file: the source vocabulary, one token a line '
                                '(what follows a tab is ignored), ids in file order; None: the '
                                'tokens of the training pairs'),
    'tgt_vocab_file': PathParam(None, doc='with source_file: the target vocabulary, the same way'),
    'special_tokens_already_in_vocab': Param(
        bool, True, doc='the vocabulary files begin with the four special tokens (<pad> </s> <s> '
                        '<unk>, any order) and each line keeps its number as its id; false: the '
                        "specials take ids 0-3 and the file's tokens follow from 4"),
    'pad_vocab_to_eight': Param(bool, False, doc='add unused tokens to each vocabulary up to a '
                                'multiple of 8 ids'),
    'use_targets': Param(bool, True, doc="false: parallel files without target_file, the sources "
                         "stand for the targets (OpenSeq2Seq's infer_params)"),
    'delimiter': Param(str, None, check=_non_empty,
                       doc='train_file: what separates the columns of a line (None: a tab); '
                           'source_file: what separates the words of a line (None: a space)'),
    'columns': Param(list, [0, 1], check=_two_columns,
                     doc='[source, target]: the indices of the two columns read from each line'),
    'source_tokens': Param(str, None, choices=('chars', 'words'),
                           doc="a source is cut into its characters ('chars') or its words "
                               "('words': separated by white space, or by delimiter in parallel "
                               "files); None: 'chars' for train_file, 'words' for source_file"),
    'target_tokens': Param(str, None, choices=('chars', 'words'),
                           doc="the same for a target; predictions join characters with '' and "
                               "words with ' ' (parallel files: with delimiter)"),
    'lowercase': Param(bool, False, doc='lower-case sources and targets as they are read'),
    'max_length': Param((int, type(None)), MAX_LENGTH, check=positive,
                        doc='longest source and longest target in tokens (<s> and </s> not '
                            'counted); longer pairs: see length_policy; infer refuses a longer '
                            'source; None: no limit'),
    'max_source_length': Param(int, None, check=positive,
                               doc='longest source in tokens, in place of max_length'),
    'max_target_length': Param(int, None, check=positive,
                               doc='longest target in tokens, in place of max_length'),
    'length_policy': Param(str, 'drop', choices=('drop', 'refuse'),
                           doc="a pair over a length limit is left out, counted in one line "
                               "('drop'), or the run is refused naming the first ('refuse')"),
    'batch_unit': Param(str, 'words', choices=('words', 'tokens'),
                        doc="unit of batch_size: 'words' (examples) or 'tokens' (padded source "
                            '+ target tokens)'),
    'eval_split': Param(str, None, choices=SPLITS,
                        doc="the split eval mode reads (train mode reads train); None: 'eval'"),
    'final_eval_split': Param(str, None, choices=SPLITS,
                              doc="train_eval: the split the best checkpoint is evaluated on after "
                                  "training; None: 'test' when test_file is given, else no extra "
                                  'evaluation'),
    'max_examples': Param(int, None, check=positive,
                          doc='only the first N pairs of each file (after the length limits; '
                              'smoke runs); None: all'),
    'rebuild_vocabulary': Param(bool, False,
                                doc='build vocabulary.json again when a run directory with '
                                    'checkpoints lacks it (eval, export, infer, resume refuse '
                                    'otherwise: the checkpoints were trained with its ids)'),
    'accept_changed_train_dir': ACCEPT_CHANGED_TRAIN_SET,
    # OpenSeq2Seq's ParallelTextDataLayer keys of its own input pipeline, read so that its
    # configs port as they are; the batches here are drawn as data.seq2seq says.
    'shuffle': Param(bool, None, doc="OpenSeq2Seq's: training batches are always shuffled "
                     '(false refused there), an evaluation is one ordered pass'),
    'repeat': Param(bool, None, doc="OpenSeq2Seq's: training always repeats the split (false "
                    'refused there; give num_epochs), an evaluation reads it once'),
    'shuffle_buffer_size': Param(int, None, doc="OpenSeq2Seq's; not used: every epoch permutes the "
                                 'whole split'),
    'map_parallel_calls': Param(int, None, doc="OpenSeq2Seq's; not used: tf.data tunes itself"),
    'prefetch_buffer_size': Param(int, None, doc="OpenSeq2Seq's; not used: tf.data tunes itself"),
    'pad_lengths_to_eight': Param(bool, None, doc="OpenSeq2Seq's; not used: a batch is padded to "
                                  'its longest pair'),
    'use_start_token': Param(bool, None, doc="OpenSeq2Seq's; not used: sources are read without "
                             '<s> and </s>, targets with both'),
}

# The keys of each of the two file formats, refused in the other one.
TSV_KEYS = ('train_file', 'eval_file', 'test_file', 'columns', 'eval_split',
            'final_eval_split')
PARALLEL_KEYS = ('source_file', 'target_file', 'src_vocab_file', 'tgt_vocab_file',
                 'special_tokens_already_in_vocab', 'pad_vocab_to_eight', 'use_targets')


def eval_splits(params):
  """``(eval_split, final_eval_split)`` of the params, the None defaults resolved.

  ``eval_split`` None reads ``'eval'``; ``final_eval_split`` None is
  ``'test'`` when ``test_file`` is given, else the eval split itself (no
  evaluation after training). Read by ``Task.final_eval_config`` (the
  ``EVAL_SPLITS`` fact) and by the layer.
  """
  eval_split = params.get('eval_split') or 'eval'
  final = params.get('final_eval_split')
  if final is None:
    final = 'test' if params.get('test_file') else eval_split
  return eval_split, final
