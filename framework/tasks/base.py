"""The task interface: what the trainer asks of a workload family (OpenSeq2Seq's model split).

The trainer owns the run (the gradient pipeline, checkpoints, the loop, the
workers); a :class:`Task` owns what depends on the kind of data and model:

* ``build_model(data_layer)``: the model, from the facts the data layer gives
  (image shape and classes, vocabulary sizes), through :meth:`Task.call_builder`;
* ``loss(model, batch)``: the training loss of one micro-batch and its train
  metrics, named in ``TRAIN_METRICS`` (the trainer adds the model's own losses
  and the L2 regularizer, the same for every task);
* ``evaluate(model, data_layer, batch_size)``: the metrics of one pass over
  the eval split, summed over all workers, named in ``EVAL_METRICS`` (plus
  ``examples``), and ``describe_eval`` / ``describe_final``, their lines;
* ``BEST_METRIC`` and ``HIGHER_IS_BETTER``: which eval metric picks the best
  checkpoint, and in which direction;
* ``serving_function(model, data_layer)`` and ``describe_export``: the
  SavedModel's serving signature, and ``export_info`` / ``export_assets``:
  what the export writes beside it (an image classifier's class names);
* ``infer_inputs(source)`` and ``infer(model, data_layer, inputs,
  batch_size)``: ``--mode=infer``, its inputs read from ``--infer_input``
  (lines of text here; image files for an image classifier) and one output
  line each;
* ``sample_lines(model, batch, count)``: what ``print_samples_steps`` prints
  of a training batch (OpenSeq2Seq's ``maybe_print_logs``), read with the data
  layer the model was built for (``samples_data``).

Model Garden's ``base_task.Task`` and OpenSeq2Seq's ``Model.evaluate`` /
``finalize_evaluation`` / ``infer`` play these parts there.
"""

import copy
import math
import sys

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
    # The data layer build_model was given: it names the classes or tokens of a sample.
    self.samples_data = None

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
    evaluation. A layer whose registration declares ``EVAL_SPLITS`` (a
    function of its params) resolves its own defaults of the two.
    """
    if eval_config is None:
      return None
    from data import DATA_LAYERS  # pylint: disable=import-outside-toplevel
    params = eval_config['data_layer_params']
    name = eval_config.get('data_layer')
    resolve = (DATA_LAYERS.facts(name).get('EVAL_SPLITS')
               if isinstance(name, str) and name in DATA_LAYERS else None)
    if resolve is not None:
      current, final = resolve(params)
    else:
      current, final = params.get('eval_split'), params.get('final_eval_split')
    if final is None or final == current:
      return None
    final_config = copy.deepcopy(eval_config)
    final_config['data_layer_params']['eval_split'] = final
    return final_config

  def call_builder(self, *facts):
    """The config's model builder called with ``model_params`` and the data layer's ``facts``.

    When the config gives ``initializer``, the builder is given it as
    ``kernel_initializer`` (``models.initializers.KernelInitializers``);
    without it the builder is called as before the key existed.
    """
    from models import MODELS  # pylint: disable=import-outside-toplevel
    from models import initializers  # pylint: disable=import-outside-toplevel
    cfg = self.config
    extra = {}
    if cfg.get('initializer') is not None:
      extra['kernel_initializer'] = initializers.KernelInitializers(cfg['initializer'],
                                                                    cfg['initializer_params'])
    return MODELS.resolve(cfg['model'])(cfg['model_params'], *facts, **extra)

  # --- what each task defines --------------------------------------------------------------

  def build_model(self, data_layer):
    raise NotImplementedError

  def loss(self, model, batch):
    raise NotImplementedError

  def evaluate(self, model, data_layer, batch_size):
    raise NotImplementedError

  def heldout_loss(self, model, data_layer, batch_size, batches):
    """``(the task's loss, examples)`` over the eval split's first ``batches`` batches, all workers."""
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

  def export_info(self, data_layer):
    """What ``export.json`` records besides the checkpoint, step and task (none here)."""
    del data_layer
    return {}

  def export_assets(self, data_layer):
    """``{file name: text}`` for the SavedModel's ``assets/`` (none here)."""
    del data_layer
    return {}

  def infer_inputs(self, source):
    """The inputs of ``--mode=infer`` from ``--infer_input``: here the lines of a file or stdin.

    Args:
      source: a file path, or ``-`` for stdin.

    Raises:
      DataError: the source cannot be read or is not UTF-8 text, naming it.
    """
    return read_lines(source)

  def sample_lines(self, model, batch, count):
    """The lines ``print_samples_steps`` prints of ``count`` examples of a training batch (none here)."""
    del model, batch, count
    return []

  def infer(self, model, data_layer, inputs, batch_size):
    """``--mode=infer``: one output line per input (of :meth:`infer_inputs`).

    Raises:
      ConfigError: the task has no infer mode (the base class).
    """
    del model, data_layer, inputs, batch_size
    raise ConfigError(f'--mode=infer: the {self.NAME} task has no infer mode; export the model '
                      '(--mode=export) and serve it')


def read_lines(source, what='input'):
  """The lines of the UTF-8 text file ``source``, or of stdin for ``-``.

  Args:
    source: ``--infer_input``: a file path or ``-``.
    what: what a line holds, for the error (``input``, ``image path``).

  Raises:
    DataError: the file cannot be read, or the bytes are not UTF-8 (one line
      naming the source and the first bad byte, never a traceback).
  """
  from data.base import DataError  # pylint: disable=import-outside-toplevel
  try:
    if source == '-':
      # The bytes, decoded here: a locale that is not UTF-8 must not change what is read.
      stream = getattr(sys.stdin, 'buffer', sys.stdin)
      data = stream.read()
    else:
      with open(source, 'rb') as f:
        data = f.read()
    # A byte-order mark (some editors write one) is no part of the first line.
    text = data.decode('utf-8-sig') if isinstance(data, bytes) else data.lstrip('\ufeff')
  except OSError as exc:
    raise DataError(f'--infer_input {source}: cannot be read ({exc.strerror or exc})') from None
  except UnicodeDecodeError as exc:
    name = 'stdin' if source == '-' else source
    raise DataError(f'--infer_input {source}: {name} is not UTF-8 text (byte '
                    f'0x{exc.object[exc.start]:02x} at offset {exc.start}); give one {what} a '
                    'line, in UTF-8') from None
  return text.splitlines()
