"""The report of an evaluation of any task, and the last line of a training run.

A task computes its evaluation (``framework.tasks``); this is the report of
one (:func:`report`): one console line on the chief and
the eval scalars the task names in ``<logdir>/eval``; and the last line of a
training run (:func:`final_line`). The best checkpoint by the task's metric
is ``checkpoints.BestCheckpoint``.

The lines name the split they were computed on (the data layer's ``split``)
unless it is the usual ``test`` split, whose lines read as they always did::

  eval at step 40: loss 0.3012, top-1 0.8921, top-5 0.9963 (10000 examples)
  eval at step 40: loss 0.3012, top-1 0.8921, ... (500 examples) on the validation split
  final test accuracy: 0.8921 (top-5 0.9963, loss 0.3012) at step 40
  final validation accuracy: 0.8921 (top-5 0.9963, loss 0.3012) at step 40
  final test wer: 0.2810 (per ...) at step 15 (best checkpoint by dev wer; the run ended at step 60)
"""

from framework.engines import distributed
from framework.run import summaries

# The split a final line names when its metrics give none (the data sets whose
# layers know one split only evaluate their test set).
USUAL_SPLIT = 'test'


def split_of(data_layer):
  """The name of the split a data layer reads (its ``split``), or None when it does not say."""
  return getattr(data_layer, 'split', None) if data_layer is not None else None


def on_split(split):
  """`` on the <split> split`` for a known split; '' when the data layer does not say (None)."""
  return '' if split is None else f' on the {split} split'


def report(step, metrics, writer, task, label='eval', split=None):
  """Prints the evaluation's line (chief) and writes its scalars at ``step`` through ``writer``.

  Args:
    step: the global step.
    metrics: the evaluation's metrics.
    writer: a ``summaries.LazyWriter``.
    task: the run's ``framework.tasks`` task: the line and the scalars it names.
    label: the line's first word (``eval at step N: ...``).
    split: the split evaluated (the data layer's ``split``), named at the end
      of the line; None: not named.
  """
  distributed.log(f'{label} at step {step}: {task.describe_eval(metrics)}{on_split(split)}')
  summaries.write_eval_metrics(writer, step, metrics, task.EVAL_METRICS)


def final_line(task, metrics, last_step):
  """The last metric line of a training run (see the module docstring).

  Args:
    task: the run's task (``describe_final``, ``BEST_METRIC``).
    metrics: the final evaluation's metrics as the train loop returns them,
      with ``step`` (the step of the weights they come from), ``split`` (the
      split evaluated, None: unknown, read as the usual one) and
      ``selected_on`` (the split that chose the best checkpoint, for an
      evaluation of it on a final split), each optional.
    last_step: the step training ended at.

  Returns:
    ``final <split> <task's text> at step N``, and, for numbers that are not
    the last step's, ``(best checkpoint by <split> <metric>; the run ended at
    step M)``.
  """
  split = metrics.get('split') or USUAL_SPLIT
  step = metrics.get('step', last_step)
  line = f'final {split} {task.describe_final(metrics)} at step {step}'
  selected_on = metrics.get('selected_on')
  if selected_on is not None or step != last_step:
    by = f'{selected_on} {task.BEST_METRIC}' if selected_on else task.BEST_METRIC
    ended = f'; the run ended at step {last_step}' if step != last_step else ''
    line += f' (best checkpoint by {by}{ended})'
  return line
