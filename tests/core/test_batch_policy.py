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


# --- seesaw ----------------------------------------------------------------------------------

# piecewise_constant 0.4 with boundaries [100, 200], decay_rates [0.5, 0.125]: TensorFlow's
# convention, a boundary step keeps the earlier value; the fall by 4 at step 201 is two halvings.
PIECEWISE = [0.4] * 101 + [0.2] * 100 + [0.05] * 99


def test_halving_points_of_a_piecewise_schedule():
  assert bp.halving_points(PIECEWISE, levels=4) == [101, 201, 201]
  assert bp.halving_points(PIECEWISE, levels=1) == [101]
  assert bp.halving_points([0.4] * 300, levels=4) == []
  assert bp.halving_points([0.0] * 30, levels=4) == []


def test_halving_points_count_from_the_peak_after_a_warm_up():
  # A warm-up over 10 steps to 1.0, held to step 20, then 0.5, 0.25: the rise halves nothing.
  rates = [s / 10 for s in range(10)] + [1.0] * 11 + [0.5] * 5 + [0.3, 0.25, 0.6, 0.1]
  assert bp.halving_points(rates, levels=8) == [21, 27, 29]


def test_halving_points_of_a_cosine_are_its_closed_form():
  # r(s) = r0 x (1 + cos(pi s / D)) / 2 is r0 / 2^k at s_k = D arccos(2^(1 - k) - 1) / pi:
  # D / 2, 2D / 3, ...; the point is the first whole step at or after s_k.
  d, r0 = 1000, 0.3
  rates = [r0 * 0.5 * (1 + math.cos(math.pi * s / d)) for s in range(d)]
  expected = [math.ceil(d * math.acos(2.0 ** (1 - k) - 1) / math.pi - 1e-9) for k in range(1, 6)]
  assert expected[:2] == [500, 667]
  assert bp.halving_points(rates, levels=5) == expected


# (run step, batch) for halvings [101, 201, 201] from 256: 512 from 101, 2048 from 201 (capped
# at max_batch 1024: 1024).
@pytest.mark.parametrize('step,max_batch,batch', [
    (0, None, 256), (100, None, 256), (101, None, 512), (200, None, 512), (201, None, 2048),
    (5000, None, 2048), (201, 1024, 1024), (201, 512, 512), (201, 2 ** 20, 2048)])
def test_seesaw_doubles_at_each_halving_passed(step, max_batch, batch):
  assert bp.seesaw(state(step=step), halvings=[101, 201, 201], max_batch=max_batch) == batch


def test_seesaw_default_ceiling_and_no_halving():
  many = list(range(1, 40))
  assert bp.seesaw(state(step=100), halvings=many) == 16 * 256
  assert bp.seesaw(state(step=100), halvings=[]) == 256


@pytest.mark.parametrize('factor,ratio,expected', [
    (1 / math.sqrt(2), 4, 2.0), (1 / math.sqrt(2), 8, math.sqrt(8)), (1.0, 8, 8.0),
    (0.5, 8, 1.0)])
def test_seesaw_exponent(factor, ratio, expected):
  # Seesaw's rate over the schedule's: (2 x factor) for each doubling of the start.
  assert ratio ** bp.seesaw_exponent(factor) == pytest.approx(expected, rel=1e-12)


def test_seesaw_planned_batches():
  assert bp.planned_batches('seesaw', {'max_batch': 1024}, 256) == [256, 512, 1024]
  assert bp.planned_batches('seesaw', {'max_batch': 4096, 'halvings': [10]}, 256) == [256, 512]
  assert bp.planned_batches('seesaw', {'max_batch': 512, 'halvings': [10, 20]}, 256) == [256, 512]


@pytest.mark.parametrize('params,message', [
    ({'factor': 0.3}, r'factor: 0.3 is no rate factor Seesaw takes; allowed: a number from 0.5 '
                      r'to 1.0: 0.70711 \(1/sqrt\(2\), the default: Adam, LAMB, LARS\), 1 '
                      r'\(plain SGD or momentum\)$'),
    ({'factor': 1.5}, 'factor: 1.5 is no rate factor'),
    ({'factor': True}, 'factor: True is no rate factor'),
    ({'factor': 'sqrt'}, "factor: 'sqrt' is no rate factor"),
    ({'max_batch': 3000}, 'max_batch: 3000 is not reached by doubling the starting global batch'),
    ({'max_batch': 128}, 'max_batch: 128 is below the starting global batch 256'),
    ({'halvings': [10]}, r"unknown key\(s\) \['halvings'\] for batch_policy 'seesaw'; allowed: "
                         'factor, max_batch'),
])
def test_seesaw_check_refuses_in_one_line(params, message):
  with pytest.raises(ConfigError, match=message) as info:
    bp.check('seesaw', params, start_batch=256, unit=256)
  assert '\n' not in str(info.value) and str(info.value).startswith('batch_policy_params')


def test_seesaw_check_takes_its_defaults_and_both_rules():
  for params in ({}, {'factor': 1}, {'factor': 0.5}, {'max_batch': 4096, 'factor': 0.7071}):
    bp.check('seesaw', params, start_batch=256, unit=256)
  bp.check('seesaw', {'max_batch': 100})  # before the workers are known
