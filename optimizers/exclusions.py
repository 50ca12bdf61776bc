"""Which variables get weight decay and the layer-wise adaptation: one vocabulary for LARS, LAMB and LARC.

The same three arguments mean the same thing everywhere:

* ``exclude_from_weight_decay``: strings; a variable whose name or path
  contains one of them gets no weight decay.
* ``exclude_from_layer_adaptation``: strings; such a variable keeps the base
  learning rate (a LARS/LAMB trust ratio or LARC factor of 1). When it is not
  given it is the same as ``exclude_from_weight_decay`` (TF Model Garden's
  convention), so one list usually says both.
* ``skip_list``: the ``tf.contrib.opt.LARSOptimizer`` spelling; its strings are
  excluded from both.

Keras' own ``optimizer.exclude_from_weight_decay(var_list=..., var_names=...)``,
called before the optimizer is built, excludes from weight decay too (and,
with no ``exclude_from_layer_adaptation``, from the adaptation), with Keras'
own matching (a regular expression searched in the variable's name).

Names match as substrings of the variable's ``name`` or its Keras ``path``
(``model/batch_normalization/gamma``), as ``tf.contrib``'s ``skip_list`` did.
"""

from optimizers import tf1_compat

EXCLUSION_KEYS = ('exclude_from_weight_decay', 'exclude_from_layer_adaptation', 'skip_list')


def check_names(owner, key, names):
  """Returns ``names`` as a list of strings (None stays None).

  Raises:
    ValueError: when ``names`` is a single string or holds a non-string,
      naming ``owner`` and ``key``.
  """
  if names is None:
    return None
  if isinstance(names, str) or not all(isinstance(n, str) for n in names):
    raise ValueError(f'{owner}: {key} must be a list of strings, got {names!r}')
  return list(names)


class LayerwiseExclusions:
  """The exclusion arguments of a Keras optimizer with weight decay and a trust ratio.

  A mixin for Keras 3 optimizer classes: call ``_set_exclusions`` in
  ``__init__`` and read ``decays(var)`` / ``adapts(var)`` in ``build``.
  """

  def _set_exclusions(self, exclude_from_weight_decay=None, exclude_from_layer_adaptation=None,
                      skip_list=None):
    owner = type(self).__name__
    self.decay_exclusions = check_names(owner, 'exclude_from_weight_decay',
                                        exclude_from_weight_decay) or []
    self.explicit_adaptation_exclusions = check_names(owner, 'exclude_from_layer_adaptation',
                                                      exclude_from_layer_adaptation)
    self.skip_list = check_names(owner, 'skip_list', skip_list)

  @property
  def adaptation_exclusions(self):
    """The names excluded from the layer adaptation: the explicit list, or the weight-decay one."""
    if self.explicit_adaptation_exclusions is None:
      return list(self.decay_exclusions)
    return list(self.explicit_adaptation_exclusions)

  def decays(self, var):
    """Whether ``var`` gets weight decay."""
    excluded = self.decay_exclusions + (self.skip_list or [])
    # Keras' exclude_from_weight_decay(...) is answered by Keras' own test.
    return not tf1_compat.matches_any(var, excluded) and self._use_weight_decay(var)

  def adapts(self, var):
    """Whether ``var`` gets the layer-wise trust ratio."""
    if self.explicit_adaptation_exclusions is None:
      return self.decays(var)
    excluded = self.explicit_adaptation_exclusions + (self.skip_list or [])
    return not tf1_compat.matches_any(var, excluded)

  def _exclusion_config(self):
    return {'exclude_from_weight_decay': self.decay_exclusions or None,
            'exclude_from_layer_adaptation': self.explicit_adaptation_exclusions,
            'skip_list': self.skip_list}
