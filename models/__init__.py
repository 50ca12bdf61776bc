"""Model builders, found by name from a config's ``model`` key.

A builder is ``build(params, image_shape, num_classes) -> keras.Model`` with a
``PARAMS`` attribute declaring its ``model_params``. It follows the global
Keras dtype policy, except that the logits are always float32.
"""

from core.registry import Registry

MODELS = Registry('model')

# Imported for their registrations; they need MODELS to exist already.
from models import resnet  # noqa: E402,F401
