"""Data layers, found by name from a config's ``data_layer`` key.

``DATA_LAYERS[name](params, mode, num_workers, worker_index)`` builds one; see
:class:`data.base.DataLayer` for what it provides.

``import data`` loads no TensorFlow: ``DATA_LAYERS`` names each layer class,
its ``PARAMS`` (declared in ``data.schemas``) and its ``TASK`` (the workload
family its batches are for, ``framework.tasks``), and imports the class on its
first lookup. Optional facts: ``TRAIN_EXAMPLES`` (``params -> size of the
training split or None``, told without TensorFlow: ``data.split_sizes``) and ``EVAL_SPLITS``
(``params -> (eval_split, final_eval_split)`` with the layer's defaults
resolved, read by ``Task.final_eval_config``).
"""

from core.registry import Registry
from data import schemas
from data import split_sizes

DATA_LAYERS = Registry('data layer')
_IMAGES, _SEQUENCES = 'image_classification', 'sequence_to_sequence'
DATA_LAYERS.register_lazy('cifar10', 'data.cifar10:Cifar10DataLayer', PARAMS=schemas.CIFAR10_PARAMS,
                          TASK=_IMAGES, TRAIN_EXAMPLES=split_sizes.cifar10_train_examples)
DATA_LAYERS.register_lazy('cmudict', 'data.cmudict:CmudictDataLayer', PARAMS=schemas.CMUDICT_PARAMS,
                          TASK=_SEQUENCES)
DATA_LAYERS.register_lazy('fashion_mnist', 'data.fashion_mnist:FashionMnistDataLayer',
                          PARAMS=schemas.FASHION_MNIST_PARAMS, TASK=_IMAGES,
                          TRAIN_EXAMPLES=split_sizes.fashion_mnist_train_examples)
DATA_LAYERS.register_lazy('image_folder', 'data.image_folder:ImageFolderDataLayer',
                          PARAMS=schemas.IMAGE_FOLDER_PARAMS, TASK=_IMAGES,
                          TRAIN_EXAMPLES=split_sizes.image_folder_train_examples,
                          EVAL_SPLITS=schemas.image_folder_eval_splits)
DATA_LAYERS.register_lazy('imagenet', 'data.imagenet:ImageNetDataLayer',
                          PARAMS=schemas.IMAGENET_PARAMS, TASK=_IMAGES,
                          TRAIN_EXAMPLES=split_sizes.imagenet_train_examples)
DATA_LAYERS.register_lazy('text_pairs', 'data.text_pairs:TextPairsDataLayer',
                          PARAMS=schemas.TEXT_PAIRS_PARAMS, TASK=_SEQUENCES,
                          EVAL_SPLITS=schemas.text_pairs_eval_splits)
DATA_LAYERS.register_lazy('tfds', 'data.tfds:TfdsDataLayer', PARAMS=schemas.TFDS_PARAMS,
                          TASK=_IMAGES, TRAIN_EXAMPLES=split_sizes.tfds_train_examples)
DATA_LAYERS.register_lazy('tfrecord', 'data.tfrecord:TFRecordDataLayer',
                          PARAMS=schemas.TFRECORD_PARAMS, TASK=_IMAGES,
                          TRAIN_EXAMPLES=split_sizes.tfrecord_train_examples)
DATA_LAYERS.register_lazy('synthetic', 'data.synthetic:SyntheticDataLayer',
                          PARAMS=schemas.SYNTHETIC_PARAMS, TASK=_IMAGES,
                          TRAIN_EXAMPLES=split_sizes.synthetic_train_examples)
