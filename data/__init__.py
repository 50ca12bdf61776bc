"""Data layers, found by name from a config's ``data_layer`` key.

``DATA_LAYERS[name](params, mode, num_workers, worker_index)`` builds one; see
:class:`data.base.DataLayer` for what it provides.
"""

from core.registry import Registry

DATA_LAYERS = Registry('data layer')

# Imported for their registrations; they need DATA_LAYERS to exist already.
from data import cifar10, fashion_mnist, imagenet, synthetic  # noqa: E402,F401
