"""``print_samples_steps``: a few samples of the training batch, every N steps (OpenSeq2Seq's key).

The train loop calls :func:`print_samples` when a multiple of
``print_samples_steps`` is reached. It opens the training data at the run's
data position, takes the batch the next step trains on, and has the run's task
write what it makes of the first :data:`SAMPLES` examples under the model as it
is now (``Task.sample_lines``): for a sequence task the source, the reference
and the decoded output, for an image classifier the label and the top
classes. The chief prints them, one line each, above the progress bar; the
other workers print nothing. Opening the data again costs about what a data
layer's start takes, so a cadence of hundreds or thousands of steps suits it.
"""

from framework.engines import distributed

# Examples of the batch a print shows.
SAMPLES = 3


def print_samples(parts, step, count=SAMPLES):
  """Prints ``count`` samples of the training batch the run reads next, on the chief.

  Args:
    parts: the run's ``framework.run.train_loop.LoopParts`` (its task, model
      and ``open_batches``).
    step: the global step, named by the first line.
    count: how many examples of the batch.

  Returns:
    The lines printed (none on the other workers, or for a task that has no samples).
  """
  if not distributed.is_chief():
    return []
  batch = next(iter(parts.open_batches()))
  lines = parts.task.sample_lines(parts.model, batch, count)
  if lines:
    lines = [f'samples at step {step} (the next training batch, the model as it is now):'] + [
        f'  {line}' for line in lines]
  for line in lines:
    distributed.log(line)
  return lines
