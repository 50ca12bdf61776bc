"""How long a run is and which learning rate it uses, from a validated config.

One place for the arithmetic the trainer and the tools (scripts/plot_lr.py)
share: updates per epoch, the run's length in updates, and the lr policy with
its epoch-valued durations converted to steps.
"""

import functools
import math

from framework.config import epochs_to_steps
from core.params import ConfigError
from optimizers.lr_policies import LR_POLICIES


def steps_per_epoch(train_data, batch_size, iter_size):
  """Applied updates per epoch: one worker's full micro-batches / iter_size.

  A fraction where ``iter_size`` does not divide an epoch's micro-batches
  (Fashion-MNIST at batch 8192 has 7; with ``iter_size: 2``, 3.5 updates):
  the data is one stream of micro-batches across epochs, so ``num_epochs``
  epochs are ``ceil(num_epochs × 3.5)`` updates and read the micro-batches of
  that many epochs, as at ``iter_size: 1``, rather than dropping one an epoch.
  An int where it divides them.
  """
  batches = train_data.train_batches_per_epoch(batch_size)
  return batches // iter_size if batches % iter_size == 0 else batches / iter_size


def total_steps(cfg, per_epoch):
  """The run's length in updates: ``max_steps``, or ``num_epochs`` × updates per epoch."""
  if cfg['max_steps'] is not None:
    return cfg['max_steps']
  return int(math.ceil(cfg['num_epochs'] * per_epoch))


def learning_rate_fn(cfg, per_epoch):
  """``f(global_step) -> lr`` for the config's policy, durations in epochs or fractions of the
  run converted to steps.

  Raises:
    ConfigError: when the policy rejects its parameters.
  """
  policy = LR_POLICIES.resolve(cfg['lr_policy'])
  params = epochs_to_steps(cfg['lr_policy_params'], per_epoch, total_steps(cfg, per_epoch))
  try:
    policy(0, **params)
  except (TypeError, ValueError) as exc:
    raise ConfigError(f'lr_policy_params: {exc}') from None
  return functools.partial(policy, **params)
