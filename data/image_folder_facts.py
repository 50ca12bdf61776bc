"""What the ``image_folder`` data layer (``data/image_folder.py``) accepts, which splits it
evaluates on and how big its training split is, told without TensorFlow.

``data/__init__.py`` registers these with the layer, so that the config layer
checks ``data_layer_params``, counts a run's updates per epoch and knows the
split of the evaluation after training before TensorFlow is loaded. The
layer reads the same ``PARAMS`` and :func:`eval_splits`, and lists its files
with ``data.image_files`` as :func:`train_examples` does, so the two agree.
"""

from core.params import REQUIRED
from core.params import Param
from core.params import PathParam
from data import image_files
from data.shared_params import AUGMENTS
from data.shared_params import IMAGE_PARAMS
from data.shared_params import image_size_or_pair
from data.shared_params import unit_fraction

TASK = 'image_classification'
SPLITS = ('validation', 'eval')


def _below_one(value):
  return None if 0 <= value < 1 else 'must be in [0, 1)'


PARAMS = {
    'train_dir': PathParam(REQUIRED, doc='directory of class folders: train_dir/<class>/<image '
                       'files> (JPEG, PNG, BMP, GIF)'),
    'eval_dir': PathParam(None, doc="a tree of train_dir's class folders, or some of them (labels "
                                    "by folder name): the 'eval' split"),
    'validation_fraction': Param(float, 0.0, check=_below_one,
                                 doc="fraction of each class's training files held out as the "
                                     "'validation' split (chosen by hash, fixed by split_seed)"),
    'split_seed': Param(int, 0, doc='chooses the validation files'),
    'eval_split': Param(str, None, choices=SPLITS,
                        doc="the split eval mode reads; None: 'validation' when "
                            "validation_fraction > 0, else 'eval'"),
    'final_eval_split': Param(str, None, choices=SPLITS,
                              doc="train_eval: the split the best checkpoint is evaluated on "
                                  "after training; None: 'eval' when the run selects on "
                                  "'validation' and eval_dir is given, else no extra evaluation"),
    'image_size': Param((int, list), None, check=image_size_or_pair,
                        doc='int or [height, width]; None: the size all files share (headers)'),
    'channels': IMAGE_PARAMS['channels'],
    'augment': Param(str, 'flip', choices=AUGMENTS, doc=IMAGE_PARAMS['augment'].doc),
    'mean': IMAGE_PARAMS['mean'],
    'std': IMAGE_PARAMS['std'],
    'rebuild_statistics': IMAGE_PARAMS['rebuild_statistics'],
    'accept_changed_train_dir': Param(
        bool, False, doc='resume (and evaluate the validation split) although train_dir holds '
                         'other files than when the checkpoints were trained (its count or file '
                         'names, kept in image_statistics.json, or in train_set.json when mean '
                         'and std are given), recording the new ones; refused otherwise'),
    'skip_corrupt': Param(bool, False,
                          doc='skip (and count) files that cannot be decoded, instead of failing'),
    'max_corrupt_fraction': Param(float, 0.001, check=unit_fraction,
                                  doc='with skip_corrupt: fail once more than this fraction of '
                                  'the files read (at least one epoch\'s worth) was skipped'),
}


def eval_splits(params):
  """``(eval_split, final_eval_split)`` of the params, the None defaults resolved.

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


def train_examples(params):
  """The training files of ``train_dir`` (validation files removed); None when it cannot be listed."""
  try:
    return len(image_files.train_split(params)[1])
  except (image_files.FolderError, OSError):
    return None
