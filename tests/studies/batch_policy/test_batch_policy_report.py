"""studies/batch_policy/report.py: a run's log read into its archive, and the page's block."""

import pytest

from studies.batch_policy import report

LOG = """learning rate (lr_scaling): 2 x sqrt (256/256) = 2, the sqrt rule at global batch 256 = 256 x 1 worker(s) x iter_size 1
training resnet_cifar for 1872 steps (234 steps/epoch), global batch 256 = 256 per worker x 1 worker(s) x iter_size 1; starting at step 0; batch policy noise_scale from global batch 256 (it grows by iter_size; a step counts the examples of one starting batch)
step 20 epoch 0.09 loss 2.2 lr 0.5 grad_norm 0.4 batch 256 images/sec 899.4
eval at step 234: loss 1.0030, top-1 0.6539, top-5 0.9730 (10000 examples) on the test split
batch 256 -> 512 at step 1000 (noise scale 531 images): iter_size 2, lr 0.98729 (lr_scaling sqrt) after update 1000
eval at step 1872: loss 0.2555, top-1 0.9067, top-5 0.9983 (10000 examples) on the test split
final test accuracy: 0.9067 (top-5 0.9983, loss 0.2555) at step 1872
batch policy noise_scale: 1436 updates to step 1872 (a fixed batch of 256 takes 1872), global batch 256 -> 512
"""


def test_a_log_gives_the_run_s_batches_evaluations_and_updates():
  run = report.parse_log(LOG)
  assert run['policy'] == 'noise_scale' and run['start_batch'] == 256 and run['steps'] == 1872
  assert run['batches'] == [[0, 256], [1000, 512]]
  assert run['eval'] == [[234, 0.6539], [1872, 0.9067]]
  assert (run['metric'], run['final'], run['updates']) == ('accuracy', 0.9067, 1436)
  fixed = report.parse_log(LOG.replace('; batch policy noise_scale from', '; from').replace(
      'wer', 'x').splitlines()[1] + '\nfinal test accuracy: 0.9070 (top-5 0.99) at step 1872\n')
  assert fixed['policy'] == 'fixed' and fixed['updates'] == 1872
  with pytest.raises(ValueError, match='not a finished run.py training log'):
    report.parse_log(LOG.splitlines()[1])


def test_the_table_holds_each_run_against_its_workload_s_fixed_run():
  grown = dict(report.parse_log(LOG), name='mnist.noise_scale', note='', wall_s=600.0)
  fixed = dict(grown, name='mnist.fixed', policy='fixed', final=0.9069, updates=1872,
               wall_s=None)
  lines = report.block({'mnist': [fixed, grown]}).splitlines()
  assert lines[2] == ('| `mnist.fixed` | fixed | test accuracy 90.69 % |  | 1872 |  | '
                      'not recorded |')
  # 1 - 1436/1872 = 23.3 % fewer updates, 0.02 points below.
  assert lines[3] == ('| `mnist.noise_scale` | noise_scale | test accuracy 90.67 % | -0.02 points '
                      '| 1436 | 23 % | 10.0 min |')


def test_the_page_is_up_to_date_with_the_archive():
  assert report.main(['--check']) == 0
