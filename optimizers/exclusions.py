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
This module is the one place that matches names (``matches_any``), builds
masks from lists (``mask``, ``kept``, ``larc_mask``) and names a variable in
summaries and state (``variable_name``).
"""

# The usual list of variables kept from weight decay and the layer adaptation:
# batch-normalization parameters and biases.
NORMALIZATION_AND_BIAS = ('batch_normalization', 'bias')


def variable_name(var):
  """The variable's Keras path (or its name), with ':' replaced so it can name a summary or a variable."""
  return str(getattr(var, 'path', None) or var.name).replace(':', '_')


def matches_any(var, patterns):
  """Whether any string of ``patterns`` is a substring of the variable's name or path."""
  if not patterns:
    return False
  names = [str(getattr(var, 'name', '') or '')]
  path = getattr(var, 'path', None)
  if path:
    names.append(str(path))
  return any(p in n for p in patterns for n in names)


def mask(variables, *name_lists):
  """One bool per variable: True when it matches no string of any of the lists (None: empty)."""
  patterns = [p for names in name_lists for p in (names or [])]
  return [not matches_any(v, patterns) for v in variables]


def kept(variables, *name_lists):
  """The variables that match no string of any of the lists."""
  return [v for v, keep in zip(variables, mask(variables, *name_lists)) if keep]


def larc_mask(variables, larc_params):
  """Whether LARC adapts each variable: it matches neither ``skip_list`` nor ``exclude_from_layer_adaptation``.

  The two keys mean the same for LARC (it has no weight decay): the first is
  the ``tf.contrib`` spelling, the second the name LARS and LAMB use.
  """
  return mask(variables, larc_params['skip_list'], larc_params['exclude_from_layer_adaptation'])


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
    # Keras' exclude_from_weight_decay(...) is answered by Keras' own test.
    return mask([var], self.decay_exclusions, self.skip_list)[0] and self._use_weight_decay(var)

  def adapts(self, var):
    """Whether ``var`` gets the layer-wise trust ratio."""
    if self.explicit_adaptation_exclusions is None:
      return self.decays(var)
    return mask([var], self.explicit_adaptation_exclusions, self.skip_list)[0]

  def _exclusion_config(self):
    return {'exclude_from_weight_decay': self.decay_exclusions or None,
            'exclude_from_layer_adaptation': self.explicit_adaptation_exclusions,
            'skip_list': self.skip_list}
