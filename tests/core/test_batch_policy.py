"""The batch policies' arithmetic (core/batch_policy.py) against hand-worked tables."""

import math

import pytest

from core import batch_policy as bp
from core.params import ConfigError


def state(step=0, updates=0, batch=256, start=256, unit=256, noise=None, noise_updates=0,
          epoch=None, per_epoch=234):
  return bp.BatchState(step=step, updates=updates,
                       epoch=step / per_epoch if epoch is None else epoch, batch=batch,
                       start_batch=start, unit=unit, noise_scale=noise,
                       noise_updates=noise_updates)


def test_fixed_keeps_the_batch():
  assert bp.fixed(state(step=5000, batch=512, start=512)) == 512


# (run step, batch) for batches [256, 512, 2048] with boundaries [100, 300].
STEPS_TABLE = [(0, 256), (99, 256), (100, 512), (101, 512), (299, 512), (300, 2048),
               (5000, 2048)]


@pytest.mark.parametrize('step,batch', STEPS_TABLE)
def test_steps_by_run_step(step, batch):
  assert bp.steps(state(step=step), batches=[256, 512, 2048], boundaries=[100, 300]) == batch


# 234 run steps per epoch; boundary_epochs [2, 5]: epoch 2 starts at step 468, 5 at 1170.
@pytest.mark.parametrize('step,batch', [(467, 256), (468, 1024), (1169, 1024), (1170, 4096)])
def test_steps_by_epoch(step, batch):
  assert bp.steps(state(step=step), batches=[256, 1024, 4096], boundary_epochs=[2, 5]) == batch


# (updates, B_simple, batch before, batch after) at interval 20, factor 1, max 4096:
# the batch doubles while twice it is within B_simple; checked only every 20 updates.
NOISE_TABLE = [
    (20, 511.0, 256, 256),     # 512 > 511: no
    (20, 512.0, 256, 512),     # 512 <= 512
    (20, 2047.0, 256, 1024),   # 512, 1024 <= 2047 < 2048
    (40, 1e9, 256, 4096),      # up to max_batch
    (21, 1e9, 256, 256),       # not a check
    (40, float('inf'), 256, 256),  # |G|^2 estimate not positive: no number to act on
    (60, 100.0, 1024, 1024),   # never shrinks
]


@pytest.mark.parametrize('updates,noise,before,after', NOISE_TABLE)
def test_noise_scale_growth(updates, noise, before, after):
  s = state(updates=updates, batch=before, noise=noise if math.isfinite(noise) else None,
            noise_updates=updates)
  assert bp.noise_scale(s, max_batch=4096) == after


def test_noise_scale_factor_interval_and_default_ceiling():
  # factor 2: the batch doubles while 2 x twice it is within B_simple: 4 x 256 <= 1100 < 4 x 512.
  assert bp.noise_scale(state(updates=10, batch=256, noise=1100.0, noise_updates=10),
                        factor=2.0, interval=10) == 512
  # Fewer measured updates than the interval: the estimate is not trusted yet.
  assert bp.noise_scale(state(updates=20, noise=1e6, noise_updates=19)) == 256
  # No max_batch: 16 x the start.
  assert bp.noise_scale(state(updates=20, noise=1e9, noise_updates=20)) == 16 * 256
  # The estimate's window (decay 0.99: 100 updates) not spanned yet: no change until it is.
  windowed = dict(noise_scale=1e9, noise_window=100)
  assert bp.noise_scale(bp.BatchState(**dict(vars(state(updates=80, noise_updates=80)),
                                             **windowed))) == 256
  assert bp.noise_scale(bp.BatchState(**dict(vars(state(updates=100, noise_updates=100)),
                                             **windowed))) == 16 * 256


def test_planned_batches():
  assert bp.planned_batches('noise_scale', {'max_batch': 3000}, 256) == [256, 512, 1024, 2048]
  assert bp.planned_batches('noise_scale', {}, 100) == [100, 200, 400, 800, 1600]
  assert bp.planned_batches('steps', {'batches': [64, 128]}, 64) == [64, 128]
  assert bp.planned_batches('fixed', {}, 64) == [64]


@pytest.mark.parametrize('rule,batch,expected', [('linear', 1024, 4.0), ('sqrt', 1024, 2.0),
                                                 ('linear', 256, 1.0), ('sqrt', 512,
                                                                        math.sqrt(2))])
def test_lr_factor(rule, batch, expected):
  assert bp.lr_factor(rule, batch, 256) == pytest.approx(expected, rel=1e-12)


def test_next_batch_refuses_what_a_run_cannot_take():
  s = state(step=40, batch=512)
  with pytest.raises(ConfigError, match=r'returned 768.5 at step 40; a batch policy returns the '
                                        'global batch as an integer'):
    bp.next_batch(lambda st: 768.5, {}, s, 'batch_policy my:policy')
  with pytest.raises(ConfigError, match='returned 256 at step 40, below the current global '
                                        'batch 512; a batch policy never shrinks'):
    bp.next_batch(lambda st: 256, {}, s)
  with pytest.raises(ConfigError, match='768 is not a multiple of the starting batch 512'):
    bp.next_batch(lambda st: 768, {}, state(step=40, batch=512, start=512, unit=256))
  with pytest.raises(ConfigError, match='1000 is not a multiple of 256'):
    bp.next_batch(lambda st: 1000, {}, s)
  assert bp.next_batch(lambda st, k: st.batch * k, {'k': 2}, s) == 1024
  assert bp.next_batch(lambda st: 1024.0, {}, s) == 1024


@pytest.mark.parametrize('name,params,message', [
    ('steps', {'batches': [256, 512], 'boundaries': [100], 'boundary_epochs': [2]},
     'give one of boundaries'),
    ('steps', {'batches': [256, 512, 1024], 'boundaries': [100]}, '3 batches for 1 boundaries'),
    ('steps', {'batches': [256, 1024, 512], 'boundaries': [100, 200]},
     r'batches: must increase.*\[256, 1024, 512\]'),
    ('steps', {'batches': [256, 512], 'boundaries': [0]}, 'boundaries: must increase'),
    ('steps', {'batches': [512, 1024], 'boundaries': [100]},
     'starts at 512, but the run starts at global batch 256'),
    ('steps', {'batches': [256, 640], 'boundaries': [100]},
     '640 is not a multiple of 256 .the micro-batch x the workers.'),
    ('steps', {'boundaries': [100]}, 'batches: required'),
    ('noise_scale', {'max_batch': 128}, 'max_batch: 128 is below the starting global batch 256'),
    ('noise_scale', {'max_batch': 3000}, r'max_batch: 3000 is not reached by doubling the '
                                         r'starting global batch 256; allowed: 512, 1024, 2048, '
                                         r'4096, \.\.\. \(or null: 16 x the start\)$'),
    ('noise_scale', {'max_batch': 256}, 'max_batch: 256 is not reached by doubling'),
    ('noise_scale', {'factor': 0}, 'factor: must be a positive number'),
    ('noise_scale', {'interval': 0}, r'interval: must be an integer >= 1'),
    ('noise_scale', {'max_batchsize': 4096}, r"unknown key\(s\) \['max_batchsize'\]"),
    ('fixed', {'batches': [1]}, r"unknown key\(s\) \['batches'\] for batch_policy 'fixed'"),
])
def test_check_refuses_in_one_line(name, params, message):
  with pytest.raises(ConfigError, match=message) as info:
    bp.check(name, params, start_batch=256, unit=256)
  assert '\n' not in str(info.value)
  assert str(info.value).startswith('batch_policy_params')


def test_check_before_the_workers_are_known_leaves_the_start_out():
  bp.check('steps', {'batches': [512, 1024], 'boundaries': [10]})  # two workers may start at 512
  bp.check('noise_scale', {'max_batch': 128})


def test_a_batch_of_whole_micro_batches_that_is_no_multiple_of_the_start():
  # Two micro-batches of 256 to start: 768 is three, but not a whole number of starting batches.
  with pytest.raises(ConfigError, match='768 is not a multiple of the starting batch 512'):
    bp.check('steps', {'batches': [512, 768], 'boundaries': [10]}, start_batch=512, unit=256)
