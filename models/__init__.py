"""Model builders, found by name from a config's ``model`` key.

An image classifier's builder is ``build(params, image_shape, num_classes) ->
keras.Model``; the sequence-to-sequence ``transformer``'s is ``build(params,
source_vocab_size, target_vocab_size)``. Each has a ``PARAMS`` attribute
declaring its ``model_params``, a ``TASK`` fact naming its workload family
(``framework.tasks``: ``image_classification`` or ``sequence_to_sequence``)
and a ``TAKES_INITIALIZER`` fact: the builder takes the config's kernel
initializer as ``kernel_initializer=`` (``models.initializers``) when the
config gives one. Each follows the global Keras dtype policy,
except that the logits are always float32.

``import models`` loads no TensorFlow: ``MODELS`` names each builder and its
``PARAMS`` (declared in ``models.schemas``), and imports the builder on its
first lookup. When Keras is loaded already the builders' module is imported
with the package, so ``keras.models.load_model`` finds its layers by name.
"""

import sys

from core.registry import Registry
from models import schemas

MODELS = Registry('model')
MODELS.register_lazy('resnet50', 'models.resnet:build_resnet50', PARAMS=schemas.RESNET50_PARAMS,
                     TASK='image_classification', TAKES_INITIALIZER=True)
MODELS.register_lazy('resnet_cifar', 'models.resnet:build_resnet_cifar',
                     PARAMS=schemas.RESNET_CIFAR_PARAMS, TASK='image_classification',
                     TAKES_INITIALIZER=True)
MODELS.register_lazy('keras_application', 'models.keras_application:build_keras_application',
                     PARAMS=schemas.KERAS_APPLICATION_PARAMS, TASK='image_classification',
                     TAKES_INITIALIZER=True)
MODELS.register_lazy('transformer', 'models.transformer:build_transformer',
                     PARAMS=schemas.TRANSFORMER_PARAMS, TASK='sequence_to_sequence',
                     TAKES_INITIALIZER=True)

if 'keras' in sys.modules:
  for _name in MODELS:
    MODELS[_name]  # pylint: disable=pointless-statement
