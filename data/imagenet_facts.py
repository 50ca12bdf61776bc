"""What the ``imagenet`` data layer (``data/imagenet.py``) accepts and how big its splits are,
told without TensorFlow and without reading the files.

``data/__init__.py`` registers these with the layer, so that the config layer
checks ``data_layer_params`` and counts a run's updates per epoch before
TensorFlow is loaded; the layer reads the same ``PARAMS`` and
``NUM_EXAMPLES``, and the ``tfrecord`` layer's ``imagenet`` preset its
``MEAN`` and ``STD``.
"""

from core.params import REQUIRED
from core.params import Param
from core.params import PathParam
from core.params import non_negative
from core.params import positive
from data.shared_params import ACCEPT_CHANGED_TRAIN_SET
from data.shared_params import unit_fraction

TASK = 'image_classification'
# The examples of ILSVRC-2012's splits, what the layer takes unless num_examples is given.
NUM_EXAMPLES = {'train': 1281167, 'eval': 50000}
# Per-channel statistics of the ImageNet training pixels, in [0, 1] units.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

PARAMS = {
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
    'max_corrupt_fraction': Param(float, 0.001, check=unit_fraction,
                                  doc='with skip_corrupt: fail once more than this fraction of '
                                  'the records read (at least one epoch\'s worth) was skipped'),
    'accept_changed_train_dir': ACCEPT_CHANGED_TRAIN_SET,
}


def train_examples(params):
  """``num_examples``, or the ImageNet training set's 1,281,167 (what the layer takes too)."""
  return params['num_examples'] or NUM_EXAMPLES['train']
