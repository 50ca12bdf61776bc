"""framework/sweep/check_configs.py, a sweep's check of its points: what a run refuses first."""

import os

from framework.sweep import check_configs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LARS_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')


def test_the_points_meet_the_checks_a_run_makes_at_its_start():
  errors = check_configs.check(LARS_CONFIG, 'train_eval', [
      ['max_steps=3'],  # a short run: its warm-up is shortened, nothing to refuse
      ['lr_policy_params.warmup_epochs=9'],  # 2106 steps of warm-up in a run of 1872
      ['batch_size_per_gpu=65536', 'lr_scaling=null', 'lr_policy_params.learning_rate=1.0'],
      ['lr_policy_params.decay_fraction=0.0'],  # the policy itself refuses decay_steps 0
  ])
  assert errors[0] is None
  assert errors[1] == ('error: lr_policy_params.warmup_epochs: the warm-up (2106 steps) is longer '
                       'than training (1872 steps); shorten it or train longer')
  assert errors[2] == ('error: batch_size_per_gpu: 65536 per worker x 1 worker(s) is larger than '
                       'the 60000 examples of the train split')
  assert errors[3] == 'error: lr_policy_params: decay_steps: must be > 0, got 0.0'
