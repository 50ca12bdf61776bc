"""A run's one source of weight decay: the model's L2 loss, the regularizer, or the optimizer's own.

Two sources would stack: ``model_params.weight_decay`` (L2 on the kernels, in
the loss), ``regularizer: l2`` and the decay of an optimizer that has one (LARS,
LAMB, AdamW, Muon: ``OWN_WEIGHT_DECAY`` in ``optimizers/registry.py``).
framework.config.validation.validate applies :func:`one_weight_decay` and
:func:`no_regularizer_beside_decay` to every config, giving them what the
optimizer declares as ``framework.config.config_names.resolve_names`` read it:
they look nothing up.
"""

from core.params import ConfigError


def one_weight_decay(result, given_model_params, entry):
  """The run's one source of weight decay: the model's L2 loss or the optimizer's own decay.

  ``model_params.weight_decay`` (L2 on the kernels, in the loss; 1e-4 unless
  given) would stack on the decay of an optimizer that has one (LARS, LAMB,
  AdamW, Muon: ``OWN_WEIGHT_DECAY`` in ``optimizers/registry.py``) or that is given
  Keras' ``weight_decay``. So the optimizer's is the run's where it has one
  or one is given, and the model's default is turned off; a model decay the
  config gives turns an optimizer's own default off instead. Given both
  (other than 0) is a mistake. ``regularizer: l2`` (a scale other than 0)
  turns the model's default off too: it is the run's L2 loss (an OpenSeq2Seq
  config gives its decay so).
  An optimizer that keeps its decay in more arguments than ``weight_decay``
  (``OWN_DECAY_ARGUMENTS``: Muon's ``adam_weight_decay`` as well) has them
  all turned off, or refused, together.

  Args:
    result: the config being validated.
    given_model_params: its ``model_params`` as given, before the model's
      declared defaults filled them in.
    entry: the optimizer that takes ``optimizer_params`` (AGN's inner one),
      resolved (``config_names.resolve_names``): its ``value`` and the facts
      ``OWN_WEIGHT_DECAY`` and ``OWN_DECAY_ARGUMENTS``.

  Returns:
    ``result``, or a new dict with the source not taken at 0.

  Raises:
    ConfigError: naming both keys, when both are given.
  """
  model_params = result['model_params']
  if not isinstance(model_params, dict) or 'weight_decay' not in model_params:
    return result  # the model has no such parameter, or declares none
  model_given = (given_model_params or {}).get('weight_decay')
  if (result['regularizer'] is not None and (result['regularizer_params'] or {}).get('scale')
      and 'weight_decay' not in (given_model_params or {})):
    # The regularizer is the run's L2 loss; the model's default L2 would be a second one.
    result = dict(result, model_params=dict(model_params, weight_decay=0.0))
  own = entry['OWN_WEIGHT_DECAY']
  # Muon holds its own decay in two arguments (its AdamW fallback's is adam_weight_decay).
  names = entry['OWN_DECAY_ARGUMENTS'] or ('weight_decay',)
  given = {name: result['optimizer_params'].get(name) for name in names}
  optimizer_given = given['weight_decay']
  for name, value in given.items():
    if model_given and value:
      raise ConfigError(f'model_params.weight_decay: {model_given} given together with '
                        f'optimizer_params.{name}: {value}; a run takes one source '
                        'of weight decay (the L2 loss of the model, or the optimizer\'s own): set '
                        'the other to 0')
  if model_given:
    if own and optimizer_given is None:  # the optimizer's defaults would stack on it
      return dict(result, optimizer_params=dict(
          result['optimizer_params'], **{name: 0.0 for name, value in given.items()
                                         if value is None}))
    return result
  if optimizer_given or own is not None:
    return dict(result, model_params=dict(model_params, weight_decay=0.0))
  return result


def no_regularizer_beside_decay(result, entry):
  """Refuses ``regularizer: l2`` beside an optimizer's own weight decay, as two sources of decay.

  The optimizer's decay is what it trains with after :func:`one_weight_decay`:
  the value given, else its own default (LARS 1e-4, AdamW and Muon 0.004;
  LAMB's is 0). Unlike the model's default L2, which gives way to the
  optimizer's, the regularizer is always given, so neither is turned off
  silently: the config says which one to keep.

  ``entry`` is the optimizer that takes ``optimizer_params``, resolved, as
  :func:`one_weight_decay` takes it.

  Raises:
    ConfigError: naming the regularizer and the optimizer's decay, when both are other than 0.
  """
  scale = (result['regularizer_params'] or {}).get('scale')
  if result['regularizer'] is None or not scale:
    return
  own = entry['OWN_WEIGHT_DECAY']
  names = entry['OWN_DECAY_ARGUMENTS'] or ('weight_decay',)
  optimizer = entry['value']
  optimizer = optimizer if isinstance(optimizer, str) else getattr(optimizer, '__name__',
                                                                    'the optimizer')
  values = {name: result['optimizer_params'].get(name) for name in names}
  defaults = [f'optimizer_params.{name}' for name, value in values.items()
              if value is None and own]
  decays = [f'optimizer_params.{name}: {value}' for name, value in values.items() if value]
  if defaults:
    decays.insert(0, f"{optimizer}'s own weight decay ({' and '.join(defaults)}, {own} by "
                     'default)')
  taken = [f'optimizer_params.{name}' for name, value in values.items()
           if value or (value is None and own)]
  if decays:
    raise ConfigError(f'regularizer: {result["regularizer"]} (regularizer_params.scale: {scale}) '
                      f'given together with {" and ".join(decays)}; a run takes one source of '
                      'weight decay (the L2 loss of the regularizer, or the optimizer\'s own): set '
                      f'{" and ".join(taken)} to 0, or drop the regularizer')
