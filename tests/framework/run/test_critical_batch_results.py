"""--mode=critical_batch without a model: the ladder, the examples, the rule, the records."""

import argparse
import json
import math

import pytest

from framework.run import critical_branches
from framework.run import critical_batch_results as results


def test_the_ladder_doubles_the_batch_up_to_max_batch():
  assert results.branch_batches(256, 4096) == [256, 512, 1024, 2048, 4096]
  # A max_batch off the ladder ends it at the last doubling below.
  assert results.branch_batches(256, 5000) == [256, 512, 1024, 2048, 4096]
  assert results.branch_batches(96, 96) == [96]


def test_a_max_batch_below_the_config_batch_is_one_line():
  with pytest.raises(results.ResultsError) as info:
    results.branch_batches(256, 128)
  assert str(info.value) == (
      "--max_batch: 128 is below the config's global batch 256; allowed: 256 or more (the "
      'branches run at 1x, 2x, 4x, ... of it; the default is 4096, 16x)')


def test_the_default_examples_are_one_epoch_in_whole_updates_of_the_largest_branch():
  # Fashion-MNIST at 256: 234 full batches, 59,904 images; 14 updates of 4096.
  assert results.choose_examples(None, 59904, 4096, 'images') == 14 * 4096
  assert results.choose_examples(8 * 4096, 59904, 4096, 'images') == 8 * 4096


@pytest.mark.parametrize('given, largest, expected', [
    (65536, 4096, '--branch_examples: 65536 images per branch is more than the training split '
                  'holds (59904 images); allowed: 32768 to 57344, in steps of 4096'),
    (50000, 4096, '--branch_examples: 50000 images must be a whole number of updates of the '
                  'largest branch (4096 images), at least 8 of them; allowed: 32768 to 57344, in '
                  'steps of 4096'),
    (4 * 4096, 4096, '--branch_examples: 16384 images must be a whole number of updates of the '
                     'largest branch (4096 images), at least 8 of them; allowed: 32768 to 57344, '
                     'in steps of 4096'),
    (None, 8192, '--max_batch: the largest branch (8192 images) needs at least 8 updates, 65536 '
                 'images, but the training split holds 59904 images; allowed: a --max_batch of '
                 'at most 7488 images'),
])
def test_branches_the_data_set_cannot_feed_are_one_line(given, largest, expected):
  with pytest.raises(results.ResultsError) as info:
    results.choose_examples(given, 59904, largest, 'images')
  assert str(info.value) == expected


def branches(*losses, base=256):
  return [{'batch': base * 2 ** i, 'heldout_loss': loss} for i, loss in enumerate(losses)]


def test_the_critical_batch_is_the_largest_within_the_tolerance_of_the_1x_loss():
  critical, gaps = results.critical_batch(branches(0.40, 0.404, 0.407, 0.45, 0.60), 0.02)
  assert critical == 1024
  assert gaps == pytest.approx([0.0, 0.01, 0.0175, 0.125, 0.5])
  # A larger batch that does better is within; the rule takes the largest within, even past
  # one that is not (as measured, not smoothed).
  critical, _ = results.critical_batch(branches(0.40, 0.39, 0.43, 0.405), 0.02)
  assert critical == 2048
  # The edge is inside: a gap of exactly the tolerance keeps up.
  assert results.critical_batch(branches(0.5, 0.5 * 1.25), 0.25)[0] == 512


def test_a_diverged_branch_is_never_critical_and_a_diverged_1x_gives_none():
  critical, gaps = results.critical_batch(branches(0.40, 0.401, None), 0.02)
  assert critical == 512 and gaps[2] is None
  assert results.critical_batch(branches(None, 0.4), 0.02) == (None, [None, None])


def test_the_noise_scale_is_the_2x_branchs_else_the_smallest_measured():
  def measured(*values):
    return [{'batch': 256 * 2 ** i, 'noise_scale': None if v is None else {'b_simple': v}}
            for i, v in enumerate(values)]
  assert results.noise_scale(measured(None, 900.0, 1200.0), 256) == (900.0, 512)
  assert results.noise_scale(measured(700.0, 900.0, 1200.0), 256) == (900.0, 512)
  assert results.noise_scale(measured(700.0, math.inf, 1200.0), 256) == (700.0, 256)
  assert results.noise_scale(measured(None, None, 1200.0), 256) == (1200.0, 1024)
  assert results.noise_scale(measured(None, None), 256) == (None, None)


def test_a_finished_branch_stands_only_with_the_same_settings(tmp_path):
  settings = {'checkpoint': '/run/ckpt-468', 'checkpoint_step': 468, 'examples': 57344,
              'batch_size_per_gpu': 256, 'learning_rate': 0.7071067811865476,
              'cooldown_fraction': 0.25}
  results.write_json(results.branch_path(str(tmp_path), 512),
                     {'batch': 512, 'settings': settings})
  record = results.read_branch(str(tmp_path), 512)
  assert results.settings_change(record, dict(settings)) is None
  # The same rate computed another way (a float's last bit) is the same setting.
  assert results.settings_change(record, dict(settings, learning_rate=0.5 ** 0.5)) is None
  assert results.settings_change(record, dict(settings, examples=32768)) == (
      'examples 57344, now 32768')
  assert results.settings_change(record, dict(settings, cooldown_fraction=0.0)) == (
      'cooldown_fraction 0.25, now 0.0')
  # No record, or a record a failed disk cut short, is a branch still to measure.
  assert results.read_branch(str(tmp_path), 1024) is None
  (tmp_path / 'branch_1024.json').write_text('{"batch": 10')
  assert results.read_branch(str(tmp_path), 1024) is None


def test_the_json_refuses_a_value_that_is_not_a_number(tmp_path):
  with pytest.raises(ValueError):
    results.write_json(str(tmp_path / 'x.json'), {'loss': math.nan})
  assert not (tmp_path / 'x.json').exists()
  results.write_json(str(tmp_path / 'x.json'), {'loss': results.finite_or_none(math.nan)})
  assert json.loads((tmp_path / 'x.json').read_text()) == {'loss': None}


def test_the_table_has_a_line_per_branch_and_marks_the_critical_batch():
  records = [{'batch': 256, 'iter_size': 1, 'updates': 224, 'heldout_loss': 0.4, 'wall_s': 20.0},
             {'batch': 512, 'iter_size': 2, 'updates': 112, 'heldout_loss': 0.404,
              'wall_s': 19.5},
             {'batch': 1024, 'iter_size': 4, 'updates': 56, 'heldout_loss': None, 'wall_s': 3.0}]
  critical, gaps = results.critical_batch(records, 0.02)
  lines = results.table_lines(records, gaps, critical, 'images')
  assert lines[0].split() == ['batch', 'iter_size', 'updates', 'held-out', 'loss', 'gap', 'to',
                              '1x', 'wall']
  assert lines[1].split() == ['256', '1', '224', '0.4000', '+0.00%', '20.0s']
  assert lines[2].split() == ['512', '2', '112', '0.4040', '+1.00%', '19.5s', '<-', 'critical',
                              'batch']
  assert lines[3].split() == ['1024', '4', '56', 'diverged', '3.0s']
  assert lines[4] == '(batch in images; gap relative to the 1x branch)'


def test_the_plot_is_a_png_written_whole(tmp_path):
  records = [dict(b, iter_size=1, updates=1, wall_s=1.0)
             for b in branches(0.40, 0.404, 0.45, None)]
  path = tmp_path / 'critical_batch.png'
  results.plot(str(path), records, 0.02, 512, 700.0, 'images', 'a title')
  assert path.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert [p.name for p in tmp_path.iterdir()] == ['critical_batch.png']


def flags(mode='critical_batch', **given):
  values = dict.fromkeys(critical_branches.FLAGS)
  values.update(given)
  return argparse.Namespace(mode=mode, **values)


@pytest.mark.parametrize('given, expected', [
    ({'tolerance': 0.0}, '--tolerance: 0 is outside (0, 1)'),
    ({'tolerance': 1.0}, '--tolerance: 1 is outside (0, 1)'),
    ({'tolerance': math.nan}, '--tolerance: nan is outside (0, 1)'),
    ({'warmup_fraction': 1.5}, '--warmup_fraction: 1.5 is outside (0, 1)'),
    ({'cooldown_fraction': 1.0}, '--cooldown_fraction: 1 is outside [0, 1)'),
    ({'cooldown_fraction': -0.1}, '--cooldown_fraction: -0.1 is outside [0, 1)'),
    ({'max_batch': 0}, '--max_batch: must be >= 1, got 0'),
    ({'branch_examples': -4}, '--branch_examples: must be >= 1, got -4'),
])
def test_flags_out_of_range_are_one_line(given, expected):
  assert critical_branches.flag_problem(flags(**given)).startswith(expected)


def test_the_flags_of_the_mode_are_refused_with_another_mode():
  assert critical_branches.flag_problem(flags()) is None
  assert critical_branches.flag_problem(flags(tolerance=0.05, max_batch=4096)) is None
  assert critical_branches.flag_problem(flags(cooldown_fraction=0.0)) is None
  assert critical_branches.flag_problem(flags('train')) is None
  assert critical_branches.flag_problem(flags('train_eval', max_batch=4096)) == (
      '--max_batch: only used with --mode=critical_batch, not --mode=train_eval')
  assert critical_branches.flag_problem(flags('eval', tolerance=0.05)) == (
      '--tolerance: only used with --mode=critical_batch, not --mode=eval')


def lr_config(rule=None, iter_size=1):
  scaling = None if rule is None else {'rule': rule, 'base_learning_rate': 2.0,
                                       'reference_batch': 256}
  return {'batch_size_per_gpu': 256, 'iter_size': iter_size, 'lr_scaling': scaling}


def test_a_branch_rate_follows_the_lr_scaling_rule_from_the_rate_at_the_checkpoint():
  # The schedule's rate at the checkpoint, 0.5, times the rule's ratio of the two batches.
  assert critical_branches.branch_learning_rate(lr_config('sqrt'), 0.5, 4, 1) == pytest.approx(1.0)
  assert critical_branches.branch_learning_rate(lr_config('linear'), 0.5, 4, 1) == pytest.approx(2.0)
  assert critical_branches.branch_learning_rate(lr_config('sqrt', 2), 0.5, 4, 2) == pytest.approx(1.0)
  # Without a rule, linear.
  assert critical_branches.branch_learning_rate(lr_config(), 0.5, 8, 1) == pytest.approx(4.0)


def test_a_branch_grows_the_batch_by_iter_size_at_the_rate_held_then_cooled_down():
  cfg = dict(lr_config('sqrt', 2), lr_policy='poly_decay', num_epochs=8, max_steps=None,
             lr_policy_params={'power': 2.0, 'warmup_epochs': 1}, save_checkpoint_steps=200)
  branch = critical_branches.branch_config(cfg, 4, 14, 1.25)
  assert branch['iter_size'] == 8 and branch['batch_size_per_gpu'] == 256
  assert branch['lr_policy'] == 'fixed_lr' and branch['lr_policy_params'] == {'learning_rate': 1.25}
  assert branch['lr_scaling'] is None
  assert (branch['max_steps'], branch['num_epochs'], branch['save_checkpoint_steps']) == (14, None,
                                                                                         None)
  assert cfg['iter_size'] == 2 and cfg['lr_policy'] == 'poly_decay'  # not modified
  # A quarter of 14 updates, rounded, 4: the rate held for 10, then linearly to 0.
  cooled = critical_branches.branch_config(cfg, 4, 14, 1.25, cooldown=0.25)
  assert cooled['lr_policy'] == 'poly_decay' and cooled['lr_policy_params'] == {
      'learning_rate': 1.25, 'power': 1.0, 'decay_steps': 4, 'begin_decay_at': 10, 'min_lr': 0.0}
  from optimizers import lr_policies  # pylint: disable=import-outside-toplevel
  rates = [float(lr_policies.poly_decay(s, **cooled['lr_policy_params'])) for s in range(14)]
  assert rates == pytest.approx([1.25] * 11 + [0.9375, 0.625, 0.3125])

