"""framework/run/warm_start.py: what differs between a checkpoint and this config, by layer name."""

import tensorflow as tf

from framework.run import warm_start
from models import MODELS


def model(depth=8, classes=10):
  return MODELS['resnet_cifar']({'depth': depth}, (28, 28, 1), classes)


def test_a_misfit_names_the_layers_not_their_positions(tmp_path):
  saved = model()
  path = tf.train.Checkpoint(model=saved).write(str(tmp_path / 'ckpt'))
  other = model(classes=5)
  problem = warm_start.describe_misfit(path, {'model': other})
  differing = [(v, w) for v, w in zip(other.variables, saved.variables) if v.shape != w.shape]
  assert len(differing) == 2  # the logits' kernel and bias
  assert problem.startswith('other shape: ') and '_operations' not in problem, problem
  for ours, theirs in differing:
    assert (f'model/{ours.path} (checkpoint {list(theirs.shape)}, '
            f'this config {list(ours.shape)})') in problem, problem
  assert warm_start.describe_misfit(path, {'model': model()}) == ''


def test_layers_only_the_checkpoint_has_are_named_by_their_place(tmp_path):
  path = tf.train.Checkpoint(model=model(depth=14)).write(str(tmp_path / 'ckpt'))
  problem = warm_start.describe_misfit(path, {'model': model()})
  assert 'not in this config: model/(layer ' in problem and '_operations' not in problem, problem
  assert ' of the checkpoint)/kernel' in problem
