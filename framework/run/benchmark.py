"""``--mode=benchmark``: the train step timed after a warm-up, without checkpoints or summaries.

With a fixed batch: ``steps`` micro-steps, as images (or words) per second
over all workers and milliseconds per step. With a batch that grows
(``batch_policy``): ``steps`` updates at each global batch the policy may use
(``core.batch_policy.planned_batches``), as milliseconds per update, so the
cost of each of its batches is known before a run takes it.
"""

import time

import tensorflow as tf

from core import batch_policy
from framework.engines import distributed


def run(trainer, steps):
  """Times the run's train step and prints one line per batch (chief)."""
  trainer.begin()
  unit = trainer.task.example_unit
  if trainer.batch_control is None:
    result = timed(trainer, trainer.make_train_step(), trainer.train_iterator(), steps)
    if distributed.is_chief():
      micro = trainer.batch_size * trainer.num_workers
      # A step is one micro-batch: with iter_size > 1 an update takes iter_size of them.
      batch = (f'global batch {micro}' if trainer.iter_size == 1 else
               f'micro-batch {micro}; global batch {trainer.global_batch} = iter_size '
               f'{trainer.iter_size} steps, {result["ms_per_step"] * trainer.iter_size:.1f} '
               'ms/update')
      print(f'benchmark: {result["images_per_sec"]:.1f} {unit}/sec, '
            f'{result["ms_per_step"]:.1f} ms/step over {steps} steps '
            f'({batch}, {trainer.num_workers} worker(s))', flush=True)
    return
  for batch, iter_size, result in batches(trainer, steps):
    if distributed.is_chief():
      print(f'benchmark at global batch {batch} (iter_size {iter_size}): '
            f'{result["images_per_sec"]:.1f} {unit}/sec, {result["ms_per_update"]:.1f} '
            f'ms/update over {steps} updates ({trainer.num_workers} worker(s))', flush=True)


def batches(trainer, updates):
  """Times ``updates`` updates at each global batch the batch policy may use.

  Returns:
    ``[(global batch, iter_size, result)]``, smallest batch first; ``result``
    as :func:`timed`'s, with ``ms_per_update``.
  """
  control = trainer.batch_control
  step_fn, iterator, found = trainer.make_train_step(), trainer.train_iterator(), []
  name = control.policy_name if control.policy_name in ('steps', 'noise_scale', 'seesaw') else None
  for batch in batch_policy.planned_batches(name, control.params, control.start_batch):
    control.set(batch, 0)
    trainer.pipeline.micro_step.assign(0)
    iter_size = batch // control.unit
    result = timed(trainer, step_fn, iterator, updates * iter_size, warmup=iter_size)
    found.append((batch, iter_size, dict(result, ms_per_update=result['ms_per_step'] * iter_size)))
  return found


def timed(trainer, step_fn, iterator, steps, warmup=1):
  """``steps`` micro-steps timed after ``bench_warmup_steps`` (at least ``warmup``) untimed.

  Returns:
    dict with ``images_per_sec`` (all workers) and ``ms_per_step``.
  """
  with tf.summary.create_noop_writer().as_default():
    for _ in range(max(warmup, trainer.config['bench_warmup_steps'])):
      result = step_fn(iterator)
    result['loss'].numpy()
    start = time.perf_counter()
    for _ in range(steps):
      result = step_fn(iterator)
    result['loss'].numpy()
    elapsed = time.perf_counter() - start
  images = trainer.batch_size * trainer.num_workers * steps
  return {'images_per_sec': images / elapsed, 'ms_per_step': elapsed / steps * 1000.0}
