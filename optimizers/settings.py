"""``UpdateSettings``: what one update does, checked once, the one object a pipeline is built from.

``optimize_loss`` (``compat/openseq2seq.py``) maps OpenSeq2Seq's names onto
it; the trainer fills it from a run's config; a user's own loop builds one.
"""

import dataclasses
import math
import numbers
from typing import Any, Callable, Optional

import tensorflow as tf

from core import noise_scale as noise_scale_formulas
from core import precision
from optimizers import validation


def normalize_dtype(dtype):
  """The Keras policy name of ``dtype``: a tf.DType or a name of ``precision.DTYPE_NAMES``."""
  if isinstance(dtype, tf.DType):
    dtype = dtype.name
  return precision.policy_name(dtype)



@dataclasses.dataclass(frozen=True)
class UpdateSettings:
  """What one update does, checked once: the one object a ``GradientPipeline`` is built from.

  OpenSeq2Seq's names (``on_horovod``, ``horovod_params``) are mapped to
  these by ``optimizers.compat.openseq2seq.optimize_loss``.

  Attributes:
    optimizer: a name in ``OPTIMIZER_CLS_NAMES``, a Keras optimizer class, or an instance.
    optimizer_params: keyword arguments of the optimizer class (``learning_rate``
      only without ``learning_rate_decay_fn``).
    learning_rate_decay_fn: ``f(global_step) -> lr``, or None for a fixed rate.
    dtype: a tf.DType or a Keras dtype policy name (``'mixed_float16'``, ...).
    clip_gradients: the largest global gradient norm, or None.
    summaries: names from ``OPTIMIZER_SUMMARIES`` written inside the update.
    larc_params: LARC's settings (``larc_eta``, ``larc_mode``, ...), or None.
    loss_scaling: a number (static), ``'Backoff'``, ``'LogMax'``, ``'dynamic'``, or a scaler.
    loss_scaling_params: the automatic loss scaler's parameters.
    multi_worker: average the gradients over the workers (Horovod or
      tf.distribute) once per applied update.
    iter_size: micro-batches per update: an int, or a scalar int64
      ``tf.Variable`` that the caller may raise between updates (a batch
      that grows, ``framework.run.batch_policy``).
    compression: ``'none'`` or ``'fp16'`` (float16 on the wire) for the all-reduce.
    log_global_norm: take the global gradient norm every update for logging
      (it is taken anyway when clipping or summarising it).
    noise_scale: measure the gradient noise scale (``noise_scale.NoiseScale``)
      from the update's small-batch gradients: its micro-batches, the
      workers' gradients before the all-reduce, and the parts of a micro-step
      (``GradientPipeline.__call__``); it needs two or more of them per update.
    noise_scale_params: ``micro_batch``, the examples (or words) of one
      small-batch gradient, so that B_simple is in examples (default 1: in
      small batches); ``parts``, the loss functions each micro-step is given
      as (default 1); ``decay``, of the estimates' moving averages (0.99).

  Raises:
    ValueError: for any value out of its range, naming it and what is allowed.
  """

  optimizer: Any
  optimizer_params: Optional[dict] = None
  learning_rate_decay_fn: Optional[Callable] = None
  dtype: Any = tf.float32
  clip_gradients: Optional[float] = None
  summaries: Any = None
  larc_params: Optional[dict] = None
  loss_scaling: Any = 1.0
  loss_scaling_params: Optional[dict] = None
  multi_worker: bool = False
  iter_size: Any = 1
  compression: str = 'none'
  log_global_norm: bool = False
  noise_scale: bool = False
  noise_scale_params: Optional[dict] = None

  def __post_init__(self):
    iter_size = self.iter_size
    if isinstance(iter_size, tf.Variable):
      if iter_size.dtype != tf.int64 or iter_size.shape.rank != 0:
        raise ValueError(f'iter_size as a variable must be a scalar int64, got {iter_size!r}')
    elif not isinstance(iter_size, int) or isinstance(iter_size, bool) or iter_size < 1:
      raise ValueError(f'iter_size must be an integer >= 1, got {iter_size!r}')
    clip = self.clip_gradients
    if clip is not None and not (isinstance(clip, (int, float)) and clip > 0):
      raise ValueError(f'clip_gradients must be a number > 0 or None, got {clip!r}')
    noise_params = dict(self.noise_scale_params or {}) if self.noise_scale else None
    unknown = sorted(set(noise_params or {}) - {'micro_batch', 'parts', 'decay'})
    if unknown:
      raise ValueError(f'noise_scale_params: unknown key(s) {unknown}; allowed: decay, '
                       'micro_batch, parts')
    _check_noise_scale_params(noise_params or {})
    checked = dict(
        optimizer_params=dict(self.optimizer_params or {}), dtype=normalize_dtype(self.dtype),
        summaries=validation.check_summaries(self.summaries),
        larc_params=(validation.check_larc_params(self.larc_params)
                     if self.larc_params is not None else None),
        multi_worker=bool(self.multi_worker),
        compression=validation.check_compression(self.compression),
        noise_scale=bool(self.noise_scale), noise_scale_params=noise_params)
    for name, value in checked.items():
      object.__setattr__(self, name, value)


def _is_number(value):
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_noise_scale_params(params):
  """Refuses, in one line, noise-scale settings that would give wrong numbers rather than none.

  B_simple is in the unit of ``micro_batch`` (0 divides by zero in the
  estimate, a negative one makes it negative), the moving averages need a
  decay below 1 (at 1 nothing enters them and their bias correction is 0/0),
  and ``parts`` is how many loss functions each micro-step is given as.
  """
  micro_batch = params.get('micro_batch', 1.0)
  if not _is_number(micro_batch) or not math.isfinite(micro_batch) or micro_batch <= 0:
    raise ValueError(f'noise_scale_params.micro_batch: {micro_batch!r}; allowed: a number > 0, '
                     'the examples (or words) of one small-batch gradient')
  decay = params.get('decay', noise_scale_formulas.DEFAULT_DECAY)
  if not _is_number(decay) or not 0.0 <= decay < 1.0:
    raise ValueError(f'noise_scale_params.decay: {decay!r}; allowed: a number in [0, 1), the '
                     "moving averages' decay")
  parts = params.get('parts', 1)
  if not isinstance(parts, numbers.Integral) or isinstance(parts, bool) or parts < 1:
    raise ValueError(f'noise_scale_params.parts: {parts!r}; allowed: an integer >= 1, the loss '
                     'functions each micro-step is given as')
