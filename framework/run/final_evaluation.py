"""The evaluation after training on a split of its own: the best checkpoint on the test split.

A view may name another split for the end than the one evaluated during
training (a test split after model selection on a dev one, ``final_eval_split``)
and its own decoding (a wider beam). Then, after training, the best checkpoint
by the task's metric is restored and evaluated there once; without such a
split the run's last evaluation is its result.
"""

import os

import numpy as np
import tensorflow as tf

from framework import tasks
from framework.engines import distributed
from framework.run import checkpoints
from framework.run import evaluation


class FinalEvaluation:
  """The split, data layer and task of the evaluation after training.

  Args:
    config: the run's train config.
    eval_config: its eval view, or None.
    task: the run's task.
    data_layer: ``f(config, mode) -> data layer`` (the trainer's).

  Attributes:
    config: the final split's eval view, or None when the run has no final split.
    data: its data layer, or None.
    task: the task that decodes it (the run's own without a final split).
  """

  def __init__(self, config, eval_config, task, data_layer):
    self.config = task.final_eval_config(eval_config) if config else None
    self.data, self.task = None, task
    if self.config is not None:
      self.data = data_layer(self.config, 'eval')
      self.task = tasks.make_task(config, self.config)

  def __call__(self, model, logdir, step):
    """The best checkpoint evaluated on the final split; the model keeps its weights.

    Every worker takes part (the sums are over all of them).

    Args:
      model: the run's model.
      logdir: the run directory, whose best checkpoint is evaluated.
      step: the run's step, named when there is no best checkpoint.

    Returns:
      ``(metrics, step of the checkpoint evaluated, split)``, or None when
      the run has no final split.
    """
    if self.data is None:
      return None
    # The chief has just offered the last checkpoint to the best one: wait for its write.
    distributed.sum_array(np.zeros(1))
    path, _ = checkpoints.newest_intact(os.path.join(logdir, checkpoints.BEST_DIR),
                                        checkpoints.BEST_NAME)
    if path is not None:
      tf.train.Checkpoint(model=model).restore(path).expect_partial()
      step = int(path.rsplit('-', 1)[1])
    metrics = self.task.evaluate(model, self.data, self.config['batch_size_per_gpu'])
    split = (evaluation.split_of(self.data)
             or self.config['data_layer_params']['eval_split'])
    return metrics, step, split
