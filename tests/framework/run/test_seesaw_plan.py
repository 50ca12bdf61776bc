"""``batch_policy: seesaw`` in the run (framework/run/batch_policy.py): where the batch doubles and
the rate of every update, against tables written here from the schedules' closed forms."""

import functools
import math

import pytest
import tensorflow as tf

from core.params import ConfigError
from framework.run.batch_policy import BatchControl
from framework.run.batch_policy import schedule_rates
from optimizers import lr_policies


def control(params=None, batch_size=256, workers=1, iter_size=1, max_steps=1000, examples=None,
            lr_policy='cosine_decay'):
  config = {'batch_policy': 'seesaw', 'batch_policy_params': params or {},
            'iter_size': iter_size, 'lr_scaling': None, 'lr_policy': lr_policy,
            'noise_scale_params': {'decay': 0.99}}
  return BatchControl(config, batch_size, workers, max_steps, examples)


def run_through(batch_control, lr_fn, max_steps):
  """Each update as the train loop makes it: ``[(run step, global batch, rate)]``."""
  rows, updates = [], 0
  batch_control.fit_to_end(max_steps)
  while int(batch_control.step.numpy()) < max_steps:
    batch = int(batch_control.iter_size.numpy()) * batch_control.unit
    rows.append((int(batch_control.step.numpy()), batch, float(lr_fn())))
    batch_control.count(tf.constant(True))
    updates += 1
    batch_control.decide({'updates': updates}, steps_per_epoch=100)
    batch_control.fit_to_end(max_steps)
  return rows


def expected_rows(rate, halvings, start, levels, max_steps, exponent):
  """The same from the halving steps and the schedule's formula: the batch doubles at each
  halving passed (at most ``levels`` times), and the rate is the formula's x (B/B0)^exponent."""
  rows, step = [], 0
  while step < max_steps:
    doublings = min(sum(1 for h in halvings if h <= step), levels)
    advance = min(2 ** doublings, max_steps - step)  # the last update reads what is left
    rows.append((step, start * advance, rate(step) * advance ** exponent))
    step += advance
  return rows


def assert_rows(got, expected):
  assert [r[:2] for r in got] == [r[:2] for r in expected]
  for (step, _, rate), (_, _, want) in zip(got, expected):
    assert rate == pytest.approx(want, rel=2e-6, abs=1e-12), step


def test_a_cosine_doubles_where_its_closed_form_halves_with_the_rate_of_seesaw():
  d, r0 = 1000, 0.3
  schedule = functools.partial(lr_policies.cosine_decay, learning_rate=r0, decay_steps=d)
  batch_control = control()
  lr_fn = batch_control.learning_rate_fn(schedule)
  # r0 (1 + cos(pi s / D)) / 2 = r0 / 2^k at s = D arccos(2^(1 - k) - 1) / pi: 500, 666.7, ...
  halvings = [math.ceil(d * math.acos(2.0 ** (1 - k) - 1) / math.pi - 1e-9) for k in range(1, 5)]
  assert halvings == [500, 667, 770, 840]
  assert list(batch_control.params['halvings']) == halvings  # four: max_batch is 16 x the start
  rows = run_through(batch_control, lr_fn, 1000)
  rate = lambda s: r0 * 0.5 * (1 + math.cos(math.pi * s / d))
  # Seesaw's 1/sqrt(2) at each doubling: the rate is the schedule's x sqrt(B/B0).
  assert_rows(rows, expected_rows(rate, halvings, 256, 4, 1000, 0.5))
  assert 'halves at steps 500, 667, 770, 840: the batch doubles there to 512, 1024, 2048, 4096 ' \
         '(max_batch 4096), the rate x0.70711 at each instead of x0.5' in batch_control.describe()
  assert batch_control.plan_note() is None


def test_a_piecewise_schedule_with_the_sgd_factor_and_a_ceiling():
  # 0.4, 0.2 after step 100, 0.05 after step 200 (a fall by 4: two halvings at 201). Two
  # micro-batches of 32 to start (64); max_batch 128 leaves room for one doubling only.
  schedule = functools.partial(lr_policies.piecewise_constant, learning_rate=0.4,
                               boundaries=[100, 200], decay_rates=[0.5, 0.125])
  batch_control = control({'factor': 1.0, 'max_batch': 128}, batch_size=32, iter_size=2,
                          max_steps=300, lr_policy='piecewise_constant')
  lr_fn = batch_control.learning_rate_fn(schedule)
  assert list(batch_control.params['halvings']) == [101]
  rate = lambda s: 0.4 if s <= 100 else 0.2 if s <= 200 else 0.05
  # Factor 1 (SGD's equivalence): the rate is the schedule's x B/B0, 0.4 on at step 101.
  rows = run_through(batch_control, lr_fn, 300)
  assert_rows(rows, expected_rows(rate, [101], 64, 1, 300, 1.0))
  assert rows[50] == (50, 64, pytest.approx(0.4))
  assert rows[101][:2] == (101, 128) and rows[101][2] == pytest.approx(0.4)
  # Past the ceiling the schedule's fall is the rate's; the last update reads the one step left.
  assert rows[-2] == (297, 128, pytest.approx(0.1)) and rows[-1] == (299, 64, pytest.approx(0.05))


def test_a_warm_up_halves_nothing_on_its_way_up():
  # transformer_policy rises to its peak at step W - 1 and falls as (s + 1)^-1/2 after:
  # half at s + 1 = 4W, a quarter at 16W.
  w = 40
  schedule = functools.partial(lr_policies.transformer_policy, learning_rate=1.0, d_model=64,
                               warmup_steps=w)
  batch_control = control(max_steps=1000, lr_policy='transformer_policy')
  batch_control.learning_rate_fn(schedule)
  assert list(batch_control.params['halvings']) == [4 * w - 1, 16 * w - 1]
  rates = schedule_rates(schedule, 1000)
  assert rates.index(max(rates)) == w - 1
  assert rates[w - 1] == pytest.approx(64 ** -0.5 * w ** -0.5, rel=1e-6)


def test_no_halving_in_the_run_is_a_note_and_a_fixed_batch():
  schedule = functools.partial(lr_policies.fixed_lr, learning_rate=0.1)
  batch_control = control(max_steps=50, lr_policy='fixed_lr')
  lr_fn = batch_control.learning_rate_fn(schedule)
  assert batch_control.plan_note() == (
      "note: batch_policy seesaw: the lr schedule (fixed_lr) does not fall to half its peak "
      "within the run's 50 steps, so the batch stays 256")
  rows = run_through(batch_control, lr_fn, 50)
  assert rows == [(s, 256, pytest.approx(0.1)) for s in range(50)]


def test_the_default_ceiling_stays_within_the_training_split():
  schedule = functools.partial(lr_policies.cosine_decay, learning_rate=0.3, decay_steps=1000)
  batch_control = control(examples=1500)
  batch_control.learning_rate_fn(schedule)
  assert batch_control.params['max_batch'] == 1024
  assert list(batch_control.params['halvings']) == [500, 667]
  small = control(examples=300)
  small.learning_rate_fn(schedule)
  assert not small.params['halvings']
  assert small.plan_note() == ('note: batch_policy seesaw: twice the starting global batch 256 '
                               'is more than the 300 examples of the training split, so the '
                               'batch stays 256')


def test_a_resumed_plan_below_the_checkpoints_batch_is_refused_in_one_line():
  schedule = functools.partial(lr_policies.cosine_decay, learning_rate=0.3, decay_steps=1000)
  batch_control = control()
  batch_control.learning_rate_fn(schedule)
  batch_control.step.assign(600)
  batch_control.set(2048, 550)  # a checkpoint of another policy, at 2048 by step 600
  with pytest.raises(ConfigError, match=r'^batch_policy: seesaw plans global batch 512 at step '
                                        r'600 \(the lr schedule halves at steps \[500, 667, 770, '
                                        r'840\]\), below the global batch 2048') as info:
    batch_control.check_restored(steps_per_epoch=100)
  assert '\n' not in str(info.value)
  batch_control.set(512, 500)
  batch_control.check_restored(steps_per_epoch=100)
