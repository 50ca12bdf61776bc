"""Data layers, found by name from a config's ``data_layer`` key.

``DATA_LAYERS[name](params, mode, num_workers, worker_index)`` builds one; see
:class:`data.base.DataLayer` for what it provides.

``import data`` loads no TensorFlow: ``DATA_LAYERS`` names each layer class
and imports it on its first lookup, and registers with it the facts the
config layer needs before that, read from the layer's facts module beside it
(``data/imagenet.py`` has ``data/imagenet_facts.py``), which the class reads
too: its ``PARAMS`` and its ``TASK`` (the workload family its batches are
for, ``framework.tasks``); where the module has them, ``TRAIN_EXAMPLES``
(its ``train_examples``: ``params -> size of the training split or None``,
told without TensorFlow or reading the data) and ``EVAL_SPLITS`` (its
``eval_splits``: ``params -> (eval_split, final_eval_split)`` with the
layer's defaults resolved, read by ``Task.final_eval_config``). A user's own
layer, named by import path, declares its ``PARAMS`` and ``TASK`` as
attributes of its class (docs/your_data.md).
"""

from core.registry import Registry
from data import cifar10_facts
from data import cmudict_facts
from data import fashion_mnist_facts
from data import image_folder_facts
from data import imagenet_facts
from data import synthetic_facts
from data import text_pairs_facts
from data import tfds_facts
from data import tfrecord_facts

DATA_LAYERS = Registry('data layer')


def _register(name, target, facts):
  """Registers the class at ``target`` under ``name`` with the facts its facts module declares."""
  declared = {'PARAMS': facts.PARAMS, 'TASK': facts.TASK}
  if hasattr(facts, 'train_examples'):
    declared['TRAIN_EXAMPLES'] = facts.train_examples
  if hasattr(facts, 'eval_splits'):
    declared['EVAL_SPLITS'] = facts.eval_splits
  DATA_LAYERS.register_lazy(name, target, **declared)


_register('cifar10', 'data.cifar10:Cifar10DataLayer', cifar10_facts)
_register('cmudict', 'data.cmudict:CmudictDataLayer', cmudict_facts)
_register('fashion_mnist', 'data.fashion_mnist:FashionMnistDataLayer', fashion_mnist_facts)
_register('image_folder', 'data.image_folder:ImageFolderDataLayer', image_folder_facts)
_register('imagenet', 'data.imagenet:ImageNetDataLayer', imagenet_facts)
_register('text_pairs', 'data.text_pairs:TextPairsDataLayer', text_pairs_facts)
_register('tfds', 'data.tfds:TfdsDataLayer', tfds_facts)
_register('tfrecord', 'data.tfrecord:TFRecordDataLayer', tfrecord_facts)
_register('synthetic', 'data.synthetic:SyntheticDataLayer', synthetic_facts)
