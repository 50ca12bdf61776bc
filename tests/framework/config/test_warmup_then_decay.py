"""A warm-up in the project's units ends before the decay; one in raw steps is OpenSeq2Seq's.

The lr policies' ``warmup_steps`` and ``begin_decay_at`` mean what they mean
in OpenSeq2Seq (the decay counts from ``begin_decay_at``, the warm-up
multiplies it); ``warmup_epochs`` and ``warmup_fraction`` mean "warm up, then
decay" (framework/config/schedule.py, ``warmup_then_decay``). The expected
rates are written from those two sentences, step by step.
"""

import os

import pytest

from framework.config import schedule
from framework.config import validation as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LARS = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')


def train_config(**lr_params):
  """The main job's config over 100 steps with ``lr_policy_params`` replaced (poly_decay, power 1)."""
  config = config_lib.load_configs(LARS, 'train', ['max_steps=100'], construct=False)['train']
  return dict(config, lr_scaling=None,
              lr_policy_params=dict({'learning_rate': 1.0, 'power': 1.0}, **lr_params))


def rates(config, steps, per_epoch=10):
  rate = schedule.learning_rate_fn(config, per_epoch)
  return [float(rate(step)) for step in steps]


def warm_up_then_decay(s, W, D, b=0):
  """The rate of "warm up over W, then decay linearly over D from max(b, W)" (lr 1, to 0)."""
  start = max(b, W)
  if s < W:
    return s / W
  if s < start:
    return 1.0
  return 1.0 - min(s - start, D) / D


def openseq2seqs(s, W, D, b=0):
  """OpenSeq2Seq's poly_decay (lr 1, power 1, to 0): the warm-up times a decay counted from b."""
  r = s / W if s < W else 1.0
  return r if s < b else r * (1.0 - min(s - b, D) / D)


STEPS = [0, 1, 5, 10, 19, 20, 21, 30, 50, 79, 80, 99, 100]


@pytest.mark.parametrize('warmup', [{'warmup_epochs': 2}, {'warmup_fraction': 0.2}])
def test_a_warmup_in_epochs_or_a_fraction_ends_before_the_decay(warmup):
  # 10 updates an epoch: 2 epochs, or 0.2 of 100 steps, are 20 steps of warm-up.
  config = train_config(decay_steps=80, **warmup)
  assert rates(config, STEPS) == pytest.approx([warm_up_then_decay(s, 20, 80) for s in STEPS],
                                               abs=1e-7)
  # begin_decay_at below the warm-up's end is raised to it; past it, it holds.
  config = train_config(decay_steps=50, begin_decay_at=10, **warmup)
  assert rates(config, STEPS) == pytest.approx(
      [warm_up_then_decay(s, 20, 50, b=10) for s in STEPS], abs=1e-7)
  config = train_config(decay_steps=50, begin_decay_at=40, **warmup)
  assert rates(config, STEPS) == pytest.approx(
      [warm_up_then_decay(s, 20, 50, b=40) for s in STEPS], abs=1e-7)


def test_a_warmup_in_raw_steps_overlaps_the_decay_as_in_openseq2seq():
  config = train_config(warmup_steps=20, decay_steps=80)
  got = rates(config, STEPS)
  assert got == pytest.approx([openseq2seqs(s, 20, 80) for s in STEPS], abs=1e-7)
  # At step 10: half the rate, decayed for 10 of its 80 steps; at 80 the decay has ended.
  assert got[STEPS.index(10)] == pytest.approx(0.5 * 70 / 80)
  assert got[STEPS.index(80)] == 0.0
  config = train_config(warmup_steps=20, begin_decay_at=5, decay_steps=80)
  assert rates(config, STEPS) == pytest.approx([openseq2seqs(s, 20, 80, b=5) for s in STEPS],
                                               abs=1e-7)


def test_a_warmup_shortened_to_the_run_still_ends_before_the_decay():
  # 40 epochs of warm-up in a run of 100 steps given on the command line: the whole
  # run warms up, as before the policies took OpenSeq2Seq's rule.
  config = train_config(warmup_epochs=40, decay_fraction=1.0)
  fitted, note = schedule.fit_warmup(config, per_epoch=10, run_length_given=True)
  assert fitted['lr_policy_params']['warmup_steps'] == 100
  assert fitted['lr_policy_params']['begin_decay_at'] == 100
  assert note.endswith('(lr_policy_params.warmup_steps: 100, begin_decay_at: 100)')
  assert rates(fitted, STEPS) == pytest.approx([s / 100 for s in STEPS], abs=1e-7)


def test_a_policy_without_begin_decay_at_is_given_none():
  # transformer_policy takes warmup_steps and no begin_decay_at: nothing is added to it.
  config = dict(train_config(), lr_policy='transformer_policy',
                lr_policy_params={'learning_rate': 2.0, 'd_model': 64, 'warmup_epochs': 1})
  rate = schedule.learning_rate_fn(config, per_epoch=10)
  assert 'begin_decay_at' not in rate.keywords
  assert rate.keywords['warmup_steps'] == 10
