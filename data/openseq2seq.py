"""OpenSeq2Seq's data layer classes and token ids, as a ported config imports them.

A port swaps ``from open_seq2seq.data import ImagenetDataLayer`` (or
``...text2text.text2text import ParallelTextDataLayer, SpecialTextTokens``,
``...text2text.tokenizer import EOS_ID``) for ``from data.openseq2seq import
...``. ``data_layer: ImagenetDataLayer`` is read as ``data_layer: imagenet``
and ``ParallelTextDataLayer`` as ``text_pairs`` (the same files and keys,
docs/your_data.md), each class naming its layer in ``NAME``. The special
token ids are OpenSeq2Seq's numbers: a config that gives them to its decoder
(``GO_SYMBOL: SpecialTextTokens.S_ID.value``) names those tokens, and the
data layer gives each its own id (``models.openseq2seq.SPECIAL_IDS``).
Nothing here imports TensorFlow.
"""

import enum


class ImagenetDataLayer:
  """OpenSeq2Seq's ImageNet TFRecords: the ``imagenet`` data layer."""

  NAME = 'imagenet'


class ParallelTextDataLayer:
  """OpenSeq2Seq's parallel text files with vocabulary files: the ``text_pairs`` data layer."""

  NAME = 'text_pairs'


class SpecialTextTokens(enum.Enum):
  """OpenSeq2Seq's ids of its special tokens."""

  PAD_ID = 0
  EOS_ID = 1
  S_ID = 2
  UNK_ID = 3
  OUT_OF_BUCKET = 1234567890
  END_OF_CHOICE = -100


# open_seq2seq.data.text2text.tokenizer's names of the same ids.
PAD_ID = SpecialTextTokens.PAD_ID.value
EOS_ID = SpecialTextTokens.EOS_ID.value

DATA_LAYER_CLASSES = (ImagenetDataLayer, ParallelTextDataLayer)
