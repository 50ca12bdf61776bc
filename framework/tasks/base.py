"""The task interface: what the trainer asks of a workload family (OpenSeq2Seq's model split).

The trainer owns the run (the gradient pipeline, checkpoints, the loop, the
workers); a :class:`Task` owns what depends on the kind of data and model:

* ``build_model(data_layer)``: the model, from the facts the data layer gives
  (image shape and classes, vocabulary sizes);
* ``loss(model, batch)``: the training loss of one micro-batch and its train
  metrics, named in ``TRAIN_METRICS`` (the trainer adds the model's own losses
  and the L2 regularizer, the same for every task);
* ``evaluate(model, data_layer, batch_size)``: the metrics of one pass over
  the eval split, summed over all workers, named in ``EVAL_METRICS`` (plus
  ``examples``), and ``describe_eval`` / ``describe_final``, their lines;
* ``BEST_METRIC`` and ``HIGHER_IS_BETTER``: which eval metric picks the best
  checkpoint, and in which direction;
* ``serving_function(model, data_layer)`` and ``describe_export``: the
  SavedModel's serving signature;
* ``infer(model, data_layer, lines, batch_size)``: ``--mode=infer``.

Model Garden's ``base_task.Task`` and OpenSeq2Seq's ``Model.evaluate`` /
``finalize_evaluation`` / ``infer`` play these parts there.
"""

import copy
import math

from core.params import ConfigError


class Task:
  """Base class of the tasks; see the module docstring.

  Args:
    config: the run's main config (train view, else eval view).
    eval_config: the eval view, or None.

  Attributes:
    config, eval_config: as given.
  """

  NAME = ''
  # Metrics of a train step besides the loss, as the task's loss returns them.
  TRAIN_METRICS = ()
  # Train metrics also shown on the console's progress line.
  CONSOLE_METRICS = ()
  # The eval scalars, in the order TensorBoard's HParams tab lists them.
  EVAL_METRICS = ('loss',)
  BEST_METRIC = 'loss'
  HIGHER_IS_BETTER = False

  def __init__(self, config, eval_config=None):
    self.config = config
    self.eval_config = eval_config

  @property
  def example_unit(self):
    """What ``batch_size_per_gpu`` counts (``images``, ``words``, ``tokens``), for rates."""
    return 'examples'

  def better(self, value, best):
    """Whether the eval metric ``value`` beats ``best`` (None: nothing yet) in the task's direction."""
    if best is None:
      return not math.isnan(value)
    return value > best if self.HIGHER_IS_BETTER else value < best

  def final_eval_config(self, eval_config):
    """The eval view of the evaluation after training (the best checkpoint), or None for none.

    A data layer whose params name a ``final_eval_split`` other than its
    ``eval_split`` is evaluated on it at the end of training (a test split
    after model selection on a dev split); other runs end with their last
    evaluation.
    """
    if eval_config is None:
      return None
    params = eval_config['data_layer_params']
    final = params.get('final_eval_split')
    if final is None or final == params.get('eval_split'):
      return None
    final_config = copy.deepcopy(eval_config)
    final_config['data_layer_params']['eval_split'] = final
    return final_config

  # --- what each task defines --------------------------------------------------------------

  def build_model(self, data_layer):
    raise NotImplementedError

  def loss(self, model, batch):
    raise NotImplementedError

  def evaluate(self, model, data_layer, batch_size):
    raise NotImplementedError

  def describe_eval(self, metrics):
    """The evaluation's line after ``eval at step N: ``."""
    raise NotImplementedError

  def describe_final(self, metrics):
    """The last line of a training run, after ``final test ``: ``<metric>: <value> (...)``."""
    raise NotImplementedError

  def serving_function(self, model, data_layer):
    raise NotImplementedError

  def describe_export(self, data_layer):
    """What the serving signature takes and returns, for the line export prints."""
    raise NotImplementedError

  def infer(self, model, data_layer, lines, batch_size):
    """``--mode=infer``: one output line per input line.

    Raises:
      ConfigError: the task has no infer mode (the base class).
    """
    del model, data_layer, lines, batch_size
    raise ConfigError(f'--mode=infer: the {self.NAME} task has no infer mode; export the model '
                      '(--mode=export) and serve it')
