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
masks from lists (``mask``, ``kept``, ``larc_mask``), finds the strings of a
list that match nothing (``unmatched``, ``warn_unmatched``: a list written for
one model's names silently excludes nothing of another's) and names a variable
in summaries and state (``variable_name``).
"""

import logging
import re

# The usual list of variables kept from weight decay and the layer adaptation:
# batch-normalization parameters and biases.
NORMALIZATION_AND_BIAS = ('batch_normalization', 'bias')

_LOG = logging.getLogger('optimizers')
# How many variables a warning names as examples.
EXAMPLES = 4
# Words of the names of normalization parameters and biases in Keras' and this
# framework's models ('bn_Conv1/gamma', 'conv1_bn/beta', 'layernorm/gamma').
_NORMALIZATION_WORDS = ('bn', 'norm', 'gamma', 'beta', 'batch')
_BIAS_WORDS = ('bias',)


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


def batch_norm_variables(model):
  """The variables of a model's batch-normalization layers (Keras' or a subclass), nested ones too.

  Found by what owns them, not by name: Keras' applications name their batch
  norms ``bn_Conv1``, ``conv1_bn``, ``block_1_expand_BN``.
  """
  import keras  # pylint: disable=import-outside-toplevel  # the name matching above needs none

  found, seen = [], set()

  def visit(layer):
    if id(layer) in seen:
      return
    seen.add(id(layer))
    if isinstance(layer, keras.layers.BatchNormalization):
      found.extend(layer.weights)
    for inner in getattr(layer, 'layers', None) or ():
      visit(inner)

  visit(model)
  return found


def regularized(model):
  """The trainable variables an L2 regularizer takes: neither batch-norm parameters nor biases.

  Those named as ``NORMALIZATION_AND_BIAS``, and the variables of batch-norm
  layers whatever their names, are left out. Where every batch norm's name
  holds 'batch_normalization' (this framework's models) this is the list
  ``kept(variables, NORMALIZATION_AND_BIAS)`` gives, in the same order.
  Layer and group normalization parameters stay regularized.
  """
  owned = {id(v) for v in batch_norm_variables(model)}
  return [v for v in kept(model.trainable_variables, NORMALIZATION_AND_BIAS) if id(v) not in owned]


def unmatched(variables, patterns):
  """The strings of ``patterns`` that match no variable's name or path, in order, each once."""
  return [p for p in dict.fromkeys(patterns or ())
          if not any(matches_any(v, [p]) for v in variables)]


def _words(text):
  return [w for w in re.split(r'[^a-z0-9]+', text.lower()) if w]


def look_alikes(variables, pattern, count=EXAMPLES):
  """Up to ``count`` names of ``variables`` that look like what ``pattern`` was meant to match.

  A pattern about normalization ('batch_normalization', 'BatchNorm', 'bn')
  finds names holding 'bn', 'norm', 'gamma' or 'beta'; one about biases finds
  'bias'; another one names holding a word of the pattern. Without such names,
  the first variables' names.
  """
  names = [str(getattr(v, 'path', None) or v.name) for v in variables]
  words = _words(pattern)
  if any(n in w for w in words for n in _NORMALIZATION_WORDS):
    wanted = _NORMALIZATION_WORDS
  elif any(b in w for w in words for b in _BIAS_WORDS):
    wanted = _BIAS_WORDS
  else:
    wanted = tuple(w for w in words if len(w) >= 3)
  alike = [n for n in names if any(w in n.lower() for w in wanted)]
  return (alike or names)[:count]


def exclusion_lists(optimizer, larc_params=None):
  """The exclusion lists a run's update uses: ``[(key path, strings, what a match is kept from)]``.

  Args:
    optimizer: the built optimizer; an ``AGNOptimizer`` is looked through to
      the optimizer it wraps. Only LARS and LAMB (``LayerwiseExclusions``)
      hold such lists.
    larc_params: checked ``larc_params``, or None.
  """
  optimizer = getattr(optimizer, 'local_optimizer', optimizer)
  lists = []
  if isinstance(optimizer, LayerwiseExclusions):
    decay = 'weight decay'
    if optimizer.explicit_adaptation_exclusions is None:
      decay += ' and the layer-wise adaptation'
    lists += [('optimizer_params.skip_list', optimizer.skip_list,
               'weight decay and the layer-wise adaptation'),
              ('optimizer_params.exclude_from_weight_decay', optimizer.decay_exclusions, decay),
              ('optimizer_params.exclude_from_layer_adaptation',
               optimizer.explicit_adaptation_exclusions, 'the layer-wise adaptation')]
  if larc_params is not None:
    lists += [(f'larc_params.{key}', larc_params.get(key), "LARC's adaptation")
              for key in ('skip_list', 'exclude_from_layer_adaptation')]
  return [(key, list(names), kept_from) for key, names, kept_from in lists if names]


def unmatched_warnings(variables, lists):
  """One line for each string of ``lists`` (``exclusion_lists``) that matches no variable."""
  variables = list(variables)
  lines = []
  for key, names, kept_from in lists:
    for pattern in unmatched(variables, names):
      examples = ', '.join(look_alikes(variables, pattern))
      lines.append(f'warning: {key}: {pattern!r} matches none of the model\'s {len(variables)} '
                   f'variables (e.g. {examples}, ...); those variables get {kept_from}')
  return lines


def warn_unmatched(variables, optimizer, larc_params=None):
  """Logs (``optimizers`` logger, WARNING) each exclusion string of the run that matches nothing.

  Called once, where a run's update is built for its variables.

  Returns:
    The lines logged.
  """
  lines = unmatched_warnings(variables, exclusion_lists(optimizer, larc_params))
  for line in lines:
    _LOG.warning(line)
  return lines


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
  ``__init__`` and ``take_masks(var_list)`` at the start of ``build``; the
  masks are then ``_decays`` and ``_adapts`` (one bool per built variable),
  and ``decays(var)`` / ``adapts(var)`` answer for any variable.
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

  def take_masks(self, var_list):
    """Decides once, before the optimizer is built, which of ``var_list`` decay and adapt."""
    self._decays = [self._decays_by_name(v) for v in var_list]
    self._adapts = [self._adapts_by_name(v) for v in var_list]

  def decays(self, var):
    """Whether ``var`` gets weight decay."""
    return self._masks_for(var)[0]

  def adapts(self, var):
    """Whether ``var`` gets the layer-wise trust ratio."""
    return self._masks_for(var)[1]

  def _masks_for(self, var):
    """(decays, adapts) of ``var``: as decided at build time when it was built with it."""
    if getattr(self, 'built', False):
      try:
        index = self._get_variable_index(var)
        return self._decays[index], self._adapts[index]
      except KeyError:
        pass
    return self._decays_by_name(var), self._adapts_by_name(var)

  def _decays_by_name(self, var):
    # Keras' exclude_from_weight_decay(...) is answered by Keras' own test.
    return mask([var], self.decay_exclusions, self.skip_list)[0] and self._use_weight_decay(var)

  def _adapts_by_name(self, var):
    if self.explicit_adaptation_exclusions is None:
      return self._decays_by_name(var)
    return mask([var], self.explicit_adaptation_exclusions, self.skip_list)[0]

  def _exclusion_config(self):
    return {'exclude_from_weight_decay': self.decay_exclusions or None,
            'exclude_from_layer_adaptation': self.explicit_adaptation_exclusions,
            'skip_list': self.skip_list}
