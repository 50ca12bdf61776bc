"""The ``data_layer_params`` several data layers declare alike, importable without TensorFlow.

A layer's own parameters are in its facts module (``data/<layer>_facts.py``);
what is here is what more than one of them accepts with the same meaning: the
key that accepts a changed training set on resume, the preprocessing of
encoded images (``tfrecord``, ``tfds``, ``image_folder``; ``data/images.py``
implements it) and the checks of their values.
"""

from core.params import Param
from core.params import non_negative

# What a train image goes through (data.images.train_image applies it).
AUGMENTS = ('none', 'flip', 'crop_flip', 'inception_crop')

# The key of every layer that records its training set in the run directory (data.train_set).
ACCEPT_CHANGED_TRAIN_SET = Param(
    bool, False, doc='resume although the training set differs from the one the checkpoints were '
                     'trained on (its count or the fingerprint of its files, kept in '
                     'train_set.json), recording the new one; refused otherwise')


def unit_fraction(value):
  """A check: the value is a fraction in [0, 1] (``max_corrupt_fraction``)."""
  return None if 0 <= value <= 1 else 'must be in [0, 1]'


def image_size_or_pair(value):
  """A check: the value is a side (a positive int) or ``[height, width]``."""
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


# The preprocessing params of the layers that read encoded images (tfrecord, tfds; image_folder
# takes some of them); data/images.py implements them.
IMAGE_PARAMS = {
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
