"""Keras 3's Muon for every kind of variable a training loop hands it.

Keras' ``Muon`` chooses, per variable, between its orthogonalized momentum
update and its AdamW fallback by the variable's Keras ``path`` (embeddings and
``exclude_layers`` fall back to AdamW). A plain ``tf.Variable``, as
``optimize_loss`` takes from an OpenSeq2Seq-style model, has no ``path``; its
name serves in its place, so the same rule applies to it.
"""

import keras


class _Named:
  """A variable's shape, and its name (without TensorFlow's ``:0``) as its path."""

  def __init__(self, variable):
    self.shape = variable.shape
    self.path = variable.name.split(':')[0]


class Muon(keras.optimizers.Muon):
  """``keras.optimizers.Muon``; a variable without a Keras path is chosen for by its name."""

  def _should_use_adamw(self, variable):
    if not hasattr(variable, 'path'):
      variable = _Named(variable)
    return super()._should_use_adamw(variable)
