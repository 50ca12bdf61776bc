"""What the ``tfds`` data layer (``data/tfds.py``) accepts and how big its training split is,
told without TensorFlow (nor TensorFlow Datasets) and without reading the records.

``data/__init__.py`` registers these with the layer, so that the config layer
checks ``data_layer_params`` and counts a run's updates per epoch before
TensorFlow is loaded; the layer reads the same ``PARAMS``.
"""

import json
import os
import re

from core.params import REQUIRED
from core.params import Param
from core.params import PathParam
from core.params import non_negative
from data.shared_params import AUGMENTS
from data.shared_params import IMAGE_PARAMS
from data.shared_params import image_size_or_pair

TASK = 'image_classification'

PARAMS = {
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
    'image_size': Param((int, list), None, check=image_size_or_pair,
                        doc="model input side or [height, width]; None: the image feature's "
                            'shape when it is fixed'),
    **IMAGE_PARAMS,
    'channels': Param(int, None, choices=(1, 3),
                      doc="1 (grey) or 3 (RGB); None: the image feature's (1 or 3), else 3"),
    'augment': Param(str, 'crop_flip', choices=AUGMENTS, doc=IMAGE_PARAMS['augment'].doc),
    'shuffle_buffer': Param(
        int, None, check=non_negative,
        doc='records permuted together (window shuffle); 0 or 1 disables; None: the whole worker '
            "share of the split (a full permutation each epoch) when its encoded images take at "
            'most 256 MB, else 10000'),
}


def dataset_dir(name, data_dir):
  """The directory of a prepared TFDS data set (``name[/config][:version]``), or None.

  Without a version the highest prepared one is taken, as TensorFlow Datasets does.
  """
  data_dir = data_dir or os.environ.get('TFDS_DATA_DIR') or os.path.join(
      os.path.expanduser('~'), 'tensorflow_datasets')
  name, _, version = name.partition(':')
  base = os.path.join(data_dir, *name.split('/'))
  if version:
    versions = [version]
  else:
    try:
      versions = [v for v in os.listdir(base) if re.fullmatch(r'\d+\.\d+\.\d+', v)]
    except OSError:
      return None
    versions.sort(key=lambda v: tuple(int(p) for p in v.split('.')), reverse=True)
  for v in versions:
    if os.path.isfile(os.path.join(base, v, 'dataset_info.json')):
      return os.path.join(base, v)
  return None


def train_examples(params):
  """The examples of ``train_split`` in the prepared data set's dataset_info.json; None when it
  is not prepared or the split is a slice (``train[:90%]``)."""
  directory = dataset_dir(params['name'], params['data_dir'])
  if directory is None:
    return None
  try:
    with open(os.path.join(directory, 'dataset_info.json'), encoding='utf-8') as f:
      info = json.load(f)
    for split in info.get('splits', []):
      if split.get('name') == params['train_split']:
        return sum(int(n) for n in split.get('shardLengths', [])) or None
  except (OSError, ValueError, TypeError, AttributeError):
    return None
  return None
