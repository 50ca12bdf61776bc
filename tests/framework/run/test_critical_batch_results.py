"""Tests of --mode=critical_batch's records, summary and flags (critical_batch_results, critical_branches)."""

import argparse
import json
import math

import pytest

from framework.run import critical_branches
from framework.run import critical_batch_results as results


def test_the_ladder_doubles_the_batch_up_to_max_batch():
  assert results.branch_batches(256, 4096) == [256, 512, 1024, 2048, 4096]
  assert results.branch_batches(256, 3000) == [256, 512, 1024, 2048]
  assert results.branch_batches(256, 512) == [256, 512]


def test_a_max_batch_that_leaves_one_batch_is_one_line():
  with pytest.raises(results.ResultsError) as raised:
    results.branch_batches(256, 511)
  assert str(raised.value).startswith("--max_batch: 511 leaves only the config's global batch "
                                      '256 to branch at, and a fit needs two batches or more; '
                                      'allowed: 512 or more')


def test_a_finished_branch_stands_only_with_the_same_settings(tmp_path):
  settings = {'checkpoint': '/r/ckpt-4', 'checkpoint_step': 4, 'window': 64, 'fewest': 64,
              'most': 256, 'eval_every': 1, 'heldout_batches': 1, 'branch_loss': 'online',
              'batch_size_per_gpu': 8}
  record = {'batch': 16, 'curve': [[16, 1.0]], 'settings': settings}
  results.write_json(results.branch_path(str(tmp_path), 16), record)
  kept = results.read_branch(str(tmp_path), 16)
  assert kept == record and results.settings_change(kept, settings) is None
  assert results.settings_change(kept, dict(settings, window=128)) == 'window 64, now 128'
  assert results.settings_change(kept, dict(settings, branch_loss='heldout')) == (
      "branch_loss 'online', now 'heldout'")
  # A record without its curve (of another form of the mode) is not a finished branch.
  results.write_json(results.branch_path(str(tmp_path), 32), {'settings': settings})
  assert results.read_branch(str(tmp_path), 32) is None
  assert results.read_branch(str(tmp_path), 64) is None


def test_the_json_keeps_infinities_out(tmp_path):
  path = str(tmp_path / 'x.json')
  results.write_json(path, {'interval': [100.0, math.inf], 'b': float('nan'), 'n': [1, (2, 3)]})
  with open(path, encoding='utf-8') as f:
    assert json.load(f) == {'interval': [100.0, None], 'b': None, 'n': [1, [2, 3]]}


def test_batches_and_intervals_read_as_numbers_a_user_writes():
  assert results.describe_batch(4281.4) == '4,281'
  assert results.describe_batch(12.44) == '12.4'
  assert results.describe_interval([2712.0, 6301.0], 4096) == '2,712-6,301'
  assert results.describe_interval([2712.0, None], 4096) == '2,712 to more than 4,096'
  assert results.describe_interval([2712.0, math.inf], 4096) == '2,712 to more than 4,096'
  assert results.describe_interval(None, 4096) == 'no interval'


def point(step, share, b_crit, interval, updates, b_simple=None, measured=True, shape=None):
  return {'step': step, 'share_of_run': share, 'b_crit': b_crit, 'interval': interval,
          'updates': updates, 'b_simple': b_simple, 'measured': measured, 'shape': shape,
          's_min': 10.0 if b_crit else None}


def test_the_table_has_a_line_per_point_with_updates_by_batch_and_the_ratio():
  points = [point(468, 0.25, 1000.0, [700.0, 1500.0], {'256': 50.0, '512': 30.0, '1024': None},
                  b_simple=500.0),
            point(936, 0.5, None, None, {'256': 40.0, '512': None, '1024': None}, measured=False)]
  lines = results.table_lines(points, [256, 512, 1024], 'images')
  assert lines[0].split() == ['step', 'of', 'run', '256', '512', '1024', 'B_crit', '(90%',
                              'interval)', 'B_simple', 'ratio']
  assert lines[1].split() == ['468', '25%', '50.0', '30.0', '-', '1,000', '(700-1,500)', '500',
                              '0.50']
  assert lines[2].split() == ['936', '50%', '40.0', '-', '-', 'not', 'measured', '-', '-']
  assert lines[-1].startswith("(updates to each point's target by global batch in images")
  # A point that grew one rung past the ladder: the others leave its column blank, and it
  # says "more than" of its own largest branch.
  points = [point(468, 0.25, None, None, {'256': 50.0, '512': 25.0, '1024': 12.5}, shape='no_level'),
            dict(point(936, 0.5, None, None, {'256': 40.0, '512': 20.0}, shape='no_level'),
                 largest_batch=512)]
  lines = results.table_lines(points, [256, 512, 1024], 'images')
  assert lines[1].split()[2:8] == ['50.0', '25.0', '12.5', 'more', 'than', '1,024']
  assert lines[2][:lines[0].index('1024') + 4].split() == ['936', '50%', '40.0', '20.0']
  assert lines[2].split()[4:7] == ['more', 'than', '512']


def test_the_tables_last_row_is_the_whole_runs_updates_and_their_fit():
  points = [point(468, 0.25, 1000.0, [700.0, 1500.0], {'256': 50.0, '512': 30.0, '1024': None})]
  lines = results.table_lines(points, [256, 512, 1024], 'images', {
      'base_batch': 256, 'critical_batch': 3672.4, 'interval': [1900.0, 9100.0],
      'run_updates': {'256': 1872.0, '512': 1119.4}})
  assert lines[2].split() == ['run', '1872', '1119', '3,672', '(1,900-9,100)']
  assert lines[-1].endswith("run: the whole run's updates, its parts' summed, at the batches "
                            'every point reached, and their fit)')


def grown_measurement(batches):
  """A measurement with the state its ladder's rules read (no run behind it)."""
  from framework.run import critical_batch  # pylint: disable=import-outside-toplevel
  measurement = object.__new__(critical_batch.Measurement)
  measurement.__dict__.update(extend=True, batches=list(batches), base_batch=batches[0],
                              run_steps=10**6, rung_limit=10**6, branch_loss='heldout',
                              unit='images')
  return measurement


def branch_records(branches, base):
  return {b: {'batch': b, 'iter_size': b // base, 'curve': r['curve'], 'diverged': None,
              'target': None if b == base else 1.0, 'reached': True,
              'examples': r['curve'][-1][0], 'updates': r['curve'][-1][0] // b, 'wall_s': 0.0,
              'noise_scale': None}
          for b, r in branches.items()}


@pytest.mark.parametrize('b_noise, seed, open_at_top', [(4096, 1, True), (4096, 2, True),
                                                        (256, 0, False)])
def test_the_ladder_grows_a_rung_while_the_whole_runs_updates_still_halve(b_noise, seed,
                                                                          open_at_top):
  from tests.core.test_critical_batch_law import quadratic_branches  # pylint: disable=import-outside-toplevel
  # SGD on a quadratic with B_noise known (docs/math.md), branched at 1x to 16x of 64: at
  # B_noise 4096 (64x) the updates still halve at 1,024; at 256 they level off within it.
  branches, loss, window = quadratic_branches(b_noise, 64, (1, 2, 4, 8, 16), 400, seed)
  measurement, records = grown_measurement([64, 128, 256, 512, 1024]), branch_records(branches, 64)
  start = {'loss': loss, 'wall_s': 0.0}
  point = measurement.point_result(468, '/run/ckpt-468', start, records, window)
  point['share_of_run'] = 0.5
  assert results.open_above(point) == open_at_top, point
  assert sorted(point['updates']) == sorted(str(b) for b in records)
  reached = [int(b) for b, updates in point['updates'].items() if updates is not None]
  assert point['largest_batch'] == max(reached) == (1024 if open_at_top else max(reached))
  # A point can grow while its largest branch reached the target and the limits allow...
  assert measurement.next_rung(point) == (2048 if max(reached) == 1024 else None)
  # ...and it does while the whole run (here one point) is open above.
  assert measurement.rungs([point]) == ({468: 2048} if open_at_top else None)
  if not open_at_top:
    return
  # Not with --max_batch given, past one epoch's examples, with fewer than 8 updates in the
  # cap (4 windows), or when the largest branch did not reach the target.
  for change in ({'extend': False}, {'rung_limit': 1024}, {'run_steps': 468 + 4 * 2048 // 64}):
    held = grown_measurement([64, 128, 256, 512, 1024])
    held.__dict__.update(change)
    assert held.next_rung(point) is None, change
    assert held.rungs([point]) is None, change
  records[1024]['reached'] = False
  held = measurement.point_result(468, '/run/ckpt-468', start, records, window)
  assert measurement.next_rung(held) is None
  # One point that cannot grow holds every point back: the run's updates are known only at
  # the batches every point reached.
  assert measurement.rungs([point, dict(point, step=936, share_of_run=0.75)]) == {
      468: 2048, 936: 2048}
  assert measurement.rungs([point, dict(held, step=936, share_of_run=0.75)]) is None
  # "More than" is of the largest branch the fit has: one that never crossed the target has
  # no updates to it.
  records[1024]['curve'] = [[x, loss] for x, _ in records[1024]['curve']]
  point = measurement.point_result(468, '/run/ckpt-468', start, records, window)
  assert point['updates']['1024'] is None and point['largest_batch'] == 512, point['updates']
  assert grown_measurement([64, 128]).ladder()[-1] == 2 ** 19  # doublings to the epoch's limit


def test_the_plot_is_a_png_written_whole(tmp_path):
  path = str(tmp_path / 'critical_batch.png')
  points = [point(468, 0.25, 1000.0, [700.0, None], {'256': 50.0, '512': 30.0}, b_simple=400.0),
            point(936, 0.5, 3000.0, [2000.0, 5000.0], {'256': 80.0, '512': 45.0})]
  results.plot(path, points, 1800.0, 'images', 'title')
  with open(path, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['critical_batch.png']


def test_the_schedule_is_a_config_snippet_and_set_arguments():
  text = results.schedule_text([256, 512, 2048], [468, 936], 'fashion_mnist_lars.py')
  assert text.splitlines()[-2:] == ['batch_policy: steps',
                                    'batch_policy_params: {batches: [256, 512, 2048], '
                                    'boundaries: [468, 936]}']
  import yaml  # pylint: disable=import-outside-toplevel
  assert yaml.safe_load(text) == {'batch_policy': 'steps', 'batch_policy_params': {
      'batches': [256, 512, 2048], 'boundaries': [468, 936]}}
  assert results.set_arguments([256, 512], [468]) == (
      "--set batch_policy=steps --set 'batch_policy_params={batches: [256, 512], "
      "boundaries: [468]}'")


def summary(**changes):
  base = {'unit': 'images', 'batches': [256, 512, 1024, 2048, 4096], 'base_batch': 256,
          'critical_batch': 4100.0, 'interval': [2700.0, 6300.0],
          'points': [point(468, 0.25, 3000.0, [2000.0, 5000.0], {}, b_simple=900.0)],
          'schedule': {'batches': [256, 2048], 'boundaries': [468]},
          'noise_scale_setting': 'auto'}
  base.update(changes)
  return base


def test_the_last_lines_answer_the_fixed_and_the_growing_batch():
  first, second, third = results.last_lines(summary())
  assert first == ('critical batch: 4,100 images (2,700-6,300) for a fixed batch over the whole '
                   'run, from 1 point')
  assert second == ("growing batch: 256 -> 2,048 images at steps 468: --set batch_policy=steps "
                    "--set 'batch_policy_params={batches: [256, 2048], boundaries: [468]}'")
  assert third == 'noise scale (B_simple): 900 at step 468 images'
  first, second, third = results.last_lines(summary(
      critical_batch=None, schedule=None, noise_scale_setting=False,
      points=[dict(point(468, 0.25, None, None, {}), measured=False, why='flat')]))
  assert first == ('critical batch: none measured (at no point did the 1x branch learn enough '
                   'to measure anything: flat)')
  assert second.startswith('growing batch: none proposed')
  assert third == 'noise scale (B_simple): not measured (the config says noise_scale: false)'
  # The whole run's updates still halve at the largest batch every point reached: a lower bound.
  first, _, _ = results.last_lines(summary(
      critical_batch=None, interval=None, critical_batch_at_least=2048,
      run_updates={'256': 1872.0, '512': 936.0, '1024': 468.0, '2048': 234.0},
      points=[point(468, 0.25, 3809.0, [975.0, None], {}),
              dict(point(936, 0.5, None, None, {}, shape='no_level'), largest_batch=8192)]))
  assert first == ('critical batch: more than 2,048 images for a fixed batch over the whole run, '
                   "a lower bound (the run's updates, its parts' summed, still halve at the "
                   'largest batch every point reached), from 2 points')
  # An open upper end is past the largest batch of the run's fit, not of the ladder.
  first, _, _ = results.last_lines(summary(
      interval=[2700.0, math.inf], run_updates={'256': 1872.0, '512': 1000.0, '1024': 600.0}))
  assert first == ('critical batch: 4,100 images (2,700 to more than 1,024) for a fixed batch '
                   'over the whole run, from 1 point')
  first, _, _ = results.last_lines(summary(
      critical_batch=None, interval=None, run_updates={'256': 1872.0},
      run_fit={'shape': 'few'}))
  assert first == ("critical batch: no fit for the whole run (no fit (fewer than two batches "
                   "reached every point's target))")


def flags(mode='critical_batch', **given):
  values = dict(mode=mode, points=None, max_batch=None, branch_examples=None, branch_loss=None,
                heldout_examples=None, checkpoint='latest')
  values.update(given)
  return argparse.Namespace(**values)


@pytest.mark.parametrize('given, expected', [
    ({'points': '0.5,0.25'}, '--points: 0.5,0.25 must be increasing shares of the run in (0, 1)'),
    ({'points': '0,0.5'}, '--points: 0,0.5 must be increasing shares'),
    ({'points': 'a,b'}, "--points: 'a,b' is not a comma-separated list of numbers"),
    ({'points': '0.5', 'checkpoint': 'best'}, '--points: not with --checkpoint=best'),
    ({'max_batch': 0}, '--max_batch: must be >= 1, got 0'),
    ({'branch_examples': -4}, '--branch_examples: must be >= 1, got -4'),
    ({'heldout_examples': 64, 'branch_loss': 'online'},
     '--heldout_examples: only used with --branch_loss=heldout'),
])
def test_flags_out_of_range_are_one_line(given, expected):
  assert critical_branches.flag_problem(flags(**given)).startswith(expected)


def test_the_flags_of_the_mode_are_refused_with_another_mode():
  assert critical_branches.flag_problem(flags()) is None
  assert critical_branches.flag_problem(flags(points='0.2,0.4', max_batch=4096)) is None
  assert critical_branches.flag_problem(flags(branch_loss='heldout', heldout_examples=64)) is None
  assert critical_branches.flag_problem(flags('train')) is None
  assert critical_branches.flag_problem(flags('train_eval', max_batch=4096)) == (
      '--max_batch: only used with --mode=critical_batch, not --mode=train_eval')
  assert critical_branches.flag_problem(flags('eval', points='0.5')) == (
      '--points: only used with --mode=critical_batch, not --mode=eval')


def lr_config(rule=None, iter_size=1):
  scaling = None if rule is None else {'rule': rule, 'base_learning_rate': 2.0,
                                       'reference_batch': 256}
  return {'batch_size_per_gpu': 256, 'iter_size': iter_size, 'lr_scaling': scaling}


def test_a_branch_rate_is_the_schedule_at_its_examples_times_the_rule():
  assert critical_branches.rate_ratio(lr_config('sqrt'), 4, 1) == pytest.approx(2.0)
  assert critical_branches.rate_ratio(lr_config('linear'), 4, 1) == pytest.approx(4.0)
  assert critical_branches.rate_ratio(lr_config('sqrt', 2), 4, 2) == pytest.approx(2.0)
  assert critical_branches.rate_ratio(lr_config(), 8, 1) == pytest.approx(8.0)  # no rule: linear
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  # A branch of 4x from step 100: before its update u it has read 4u steps of the run.
  rate = critical_branches.branch_rate_fn(lambda s: 1.0 - tf.cast(s, tf.float32) / 1000.0,
                                          100, 4, 2.0)
  assert [float(rate(tf.constant(u, tf.int64))) for u in (0, 1, 10)] == pytest.approx(
      [2 * (1 - 0.1), 2 * (1 - 0.104), 2 * (1 - 0.14)])
  # Under the linear rule the ratio ramps from 1 over the first 8 updates (Goyal et al.).
  assert critical_branches.ramp_updates(4, 2.0) == 0
  assert critical_branches.ramp_updates(4, 4.0) == 8
  rate = critical_branches.branch_rate_fn(lambda s: 1.0 - tf.cast(s, tf.float32) / 1000.0,
                                          100, 4, 4.0)
  assert [float(rate(tf.constant(u, tf.int64))) for u in (0, 3, 7, 10)] == pytest.approx(
      [(1 + 3 / 8) * (1 - 0.1), (1 + 3 * 4 / 8) * (1 - 0.112), 4 * (1 - 0.128), 4 * (1 - 0.14)])
  branch = critical_branches.branch_config(dict(lr_config('sqrt', 2), save_checkpoint_steps=200), 4)
  assert branch['iter_size'] == 8 and branch['save_checkpoint_steps'] is None


def test_the_points_are_counted_as_measured_of_all():
  assert results.points_text(3, 3) == '3 points'
  assert results.points_text(1, 1) == '1 point'
  assert results.points_text(2, 3) == '2 of 3 points'
