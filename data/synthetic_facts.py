"""What the ``synthetic`` data layer (``data/synthetic.py``) accepts and how long its epoch is,
told without TensorFlow.

``data/__init__.py`` registers these with the layer; the layer reads the same
``PARAMS``.
"""

from core.params import Param
from core.params import positive

TASK = 'image_classification'


def _shape_check(value):
  if not value or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value):
    return 'must be a non-empty list of positive integers'
  return None


PARAMS = {
    'image_shape': Param(list, [224, 224, 3], check=_shape_check, doc='shape of one image'),
    'num_classes': Param(int, 1000, check=positive),
    'num_examples': Param(int, 1281167, check=positive, doc='examples per epoch, all workers'),
}


def train_examples(params):
  """``num_examples``: the length of a synthetic epoch."""
  return params['num_examples']
