"""The config's kernel initializer as Keras objects, one for each kernel a built-in model creates.

A config's ``initializer`` and ``initializer_params`` (checked by
``models.initializer_names``) reach a built-in builder as its
``kernel_initializer`` argument: a :class:`KernelInitializers`, which makes
a new Keras initializer for each kernel (a convolution's, a dense layer's,
an attention projection's), so that no two kernels draw the same numbers. An
initializer without a seed takes one from Python's random generator when it
is made, as every Keras initializer does, and ``random_seed`` seeds that
generator: the initialization is the same on every run and every worker of a
seed. With ``initializer_params.seed`` s, the k-th kernel made draws with
seed s + k. A builder given None keeps its own initializers
(:func:`kernel`).

Where a built-in layer fuses projections that OpenSeq2Seq's layers keep
apart (the Transformer's query, key and value in one kernel ``[d, 3d]``),
the config's initializer draws each part as a kernel of its own
(:class:`PartsInitializer`), so its fans are those of the separate
projections.
"""

import keras

from models import initializer_names

# Keras' default kernel initializer, which a layer keeps when the config gives none.
KERAS_DEFAULT = 'glorot_uniform'


class KernelInitializers:
  """Makes the config's initializer, new for each kernel.

  Args:
    name: a checked ``initializer`` (``initializer_names.check``).
    params: its checked ``initializer_params``.
  """

  def __init__(self, name, params):
    self.name, self.params = name, dict(params)
    self.keras_class, self.kwargs, self.seeded = initializer_names.keras_form(name, params)
    self.made = 0  # initializers made, to give each kernel its own seed

  def _one(self):
    kwargs = dict(self.kwargs)
    if self.seeded and self.params.get('seed') is not None:
      kwargs['seed'] = self.params['seed'] + self.made
    self.made += 1
    return getattr(keras.initializers, self.keras_class)(**kwargs)

  def __call__(self, parts=1):
    """The initializer of one kernel whose last axis holds ``parts`` projections side by side."""
    if parts == 1:
      return self._one()
    return PartsInitializer([self._one() for _ in range(parts)])


def kernel(kernels, default, parts=1):
  """The initializer of one kernel: the config's (``kernels``) or, given None, the layer's ``default``."""
  return default if kernels is None else kernels(parts)


@keras.saving.register_keras_serializable(package='models')
class PartsInitializer(keras.initializers.Initializer):
  """Equal parts of a kernel's last axis, each drawn by its own initializer as a kernel of its shape.

  Args:
    parts: the initializers, one for each part, in order.
  """

  def __init__(self, parts):
    self.parts = [keras.initializers.get(p) for p in parts]

  def __call__(self, shape, dtype=None):
    *rest, width = shape
    if width % len(self.parts):
      raise ValueError(f'a kernel of shape {tuple(shape)} does not split into '
                       f'{len(self.parts)} equal parts of its last axis')
    part = (*rest, width // len(self.parts))
    return keras.ops.concatenate([p(part, dtype=dtype) for p in self.parts], axis=-1)

  def get_config(self):
    return {'parts': [keras.initializers.serialize(p) for p in self.parts]}


# A layer's kernels, by attribute: Dense and the convolutions' ``kernel``, a
# separable convolution's two, a depthwise convolution's filters.
KERNEL_ATTRIBUTES = ('kernel', 'depthwise_kernel', 'pointwise_kernel')


def reinitialize_kernels(model, kernels):
  """Draws every kernel of a built model's layers again with the config's initializer.

  For a model whose layers were made without it (``keras.applications``):
  the kernels of its convolutions (depthwise and pointwise ones too) and
  dense layers; biases and normalization parameters keep their values.

  Returns:
    How many kernels were drawn.
  """
  count = 0
  for layer in model.layers:
    for attribute in KERNEL_ATTRIBUTES:
      variable = getattr(layer, attribute, None)
      if isinstance(variable, keras.Variable):
        variable.assign(kernels()(tuple(variable.shape), dtype=variable.dtype))
        count += 1
  return count
