"""Memory: a floor of what one training pass needs, held against the machine, and out of memory in one line.

**Before the first step** (:func:`check_fits`), a training run computes a
floor of the memory one forward and backward pass of one micro-batch needs,
from tensors that must exist at the same moment whatever TensorFlow fuses or
frees, and refuses to start when the floor is above the memory the machine
has available (``MemAvailable`` of ``/proc/meminfo``, or the cgroup's limit
less its use when that is lower). The floor is a lower bound, not a forecast:
a run it lets through can still run out of memory, but one it refuses could
not have taken a step. It counts

- the model's variables and their gradients (float32, all alive at the update);
- a Transformer (``model: transformer``): the attention scores of one layer
  and their softmax, float32 ``[rows, heads, length, length]`` each, for the
  pass that holds the training split's longest source (every row of that
  pass is padded to it: the batch's rows in ``words``, the last chunk's under
  ``train_chunk_size``, one row in ``tokens``) and for the one that holds its
  longest target (one row);
- a Keras functional model (an image classifier): the input and the output
  of its largest layer for the pass's examples, in the compute dtype.

On a GPU the activations live in the device's memory, which this does not
read: the check is made where the run computes on the CPU.

**Out of memory in a step** (TensorFlow's ``ResourceExhaustedError``) is one
line (:func:`out_of_memory_line`) naming the batch, the longest sequences or
the image size, the tensor TensorFlow could not allocate, and the checkpoint
kept. No checkpoint is written at the failed step: its update was not
applied, but its other writes (the data position) may have been, so the
checkpoints saved before it are what resumes exactly.
"""

import math
import os
import re
import traceback

FLOAT32 = 4
# "OOM when allocating tensor with shape[32,2,20000,20000] and type float on ..."
_OOM_SHAPE = re.compile(r'shape\s*\[([\d,\s]+)\]\s*and type (\w+)')
_TYPE_BYTES = {'float': 4, 'double': 8, 'half': 2, 'bfloat16': 2, 'int32': 4, 'int64': 8,
               'bool': 1, 'uint8': 1, 'int8': 1, 'int16': 2}


def gigabytes(count):
  """``count`` bytes as text in GB (10^9 bytes), one decimal; TB or PB when larger."""
  for unit, size in (('PB', 1e15), ('TB', 1e12)):
    if count >= 10 * size:
      return f'{count / size:.1f} {unit}'
  return f'{count / 1e9:.1f} GB'


def _meminfo_available(path='/proc/meminfo'):
  try:
    with open(path, encoding='ascii') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    return None
  return None


def _cgroup_room(root='/sys/fs/cgroup'):
  """What the process's cgroup lets it allocate more (v2, then v1), or None without a limit."""
  for limit_name, usage_name in (('memory.max', 'memory.current'),
                                 ('memory/memory.limit_in_bytes', 'memory/memory.usage_in_bytes')):
    try:
      with open(os.path.join(root, limit_name), encoding='ascii') as f:
        limit = f.read().strip()
      with open(os.path.join(root, usage_name), encoding='ascii') as f:
        usage = int(f.read().strip())
    except (OSError, ValueError):
      continue
    if limit == 'max' or not limit.isdigit() or int(limit) >= 1 << 60:
      return None
    return max(0, int(limit) - usage)
  return None


def available_bytes():
  """The memory the machine has available for this process now, in bytes; None when unknown."""
  values = [v for v in (_meminfo_available(), _cgroup_room()) if v is not None]
  return min(values) if values else None


def _on_gpu():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return bool(tf.config.list_logical_devices('GPU'))


def pass_rows(trainer):
  """Rows (examples) of one forward and backward pass: the micro-batch, halved for the noise scale."""
  return max(1, trainer.batch_size // max(1, getattr(trainer, 'noise_parts', 1)))


def _longest_sequences(layer):
  """(longest source, longest decoder input) in tokens of a sequence data layer's split."""
  source = max((len(layer.tokenize_source(s)) for s in layer.sources), default=0)
  # The decoder reads <s> and the target: one position more than the target's tokens.
  target = max((len(t) + 1 for refs in layer.references for t in refs), default=0)
  return source, target


def _sequence_floor(trainer):
  """The attention part of the floor of a Transformer's pass, and its words; None for another model."""
  cfg = trainer.config
  if cfg['model'] != 'transformer' or trainer.train_data is None:
    return None
  heads = int(cfg['model_params']['num_heads'])
  source, target = _longest_sequences(trainer.train_data)
  rows = pass_rows(trainer)
  chunk = cfg['model_params'].get('train_chunk_size')
  chunked = bool(chunk) and trainer.batch_size > chunk and cfg['dtype'] != 'float16'
  if cfg['data_layer_params'].get('batch_unit') == 'tokens':
    rows = 1  # a token budget may hold the longest example alone
  elif chunked:
    rows = (rows - 1) % chunk + 1  # the longest source is the batch's last row: its last chunk
  encoder = 2 * rows * heads * source * source * FLOAT32
  decoder = 2 * heads * target * target * FLOAT32
  if encoder >= decoder:
    return encoder, (f'the attention of the pass holding the longest source: scores and softmax '
                     f'of [{rows}, {heads}, {source}, {source}] in float32')
  return decoder, (f'the attention of the pass holding the longest target: scores and softmax '
                   f'of [1, {heads}, {target}, {target}] in float32')


def _layer_floor(trainer):
  """The largest layer's input and output for the pass's examples, and its words; None when unknown."""
  import keras  # pylint: disable=import-outside-toplevel
  model = trainer.model
  if not isinstance(model, keras.Model) or not getattr(model, '_is_graph_network', False):
    return None  # a subclassed model: its layers' shapes are not known before it runs
  bytes_per = 2 if trainer.config['dtype'] in ('float16', 'bfloat16', 'mixed_float16',
                                               'mixed_bfloat16') else FLOAT32
  largest, name = 0, None
  for layer in model.layers:
    try:
      tensors = keras.tree.flatten(layer.input) + keras.tree.flatten(layer.output)
    except (AttributeError, ValueError):
      continue
    size = 0
    for tensor in tensors:
      dims = list(getattr(tensor, 'shape', ()))[1:]
      if any(d is None for d in dims):
        size = 0
        break
      size += math.prod(dims)
    if size > largest:
      largest, name = size, layer.name
  if name is None:
    return None
  rows = pass_rows(trainer)
  return (rows * largest * bytes_per,
          f'the input and output of layer {name!r} for {rows} examples')


def pass_floor(trainer):
  """``(bytes, what they are)``: the floor of one training pass's memory; None when nothing is known."""
  parameters = sum(math.prod(v.shape) for v in trainer.model.trainable_variables)
  weights = 2 * parameters * FLOAT32  # the variables and their gradients
  part = _sequence_floor(trainer)
  if part is None:
    part = _layer_floor(trainer)
  if part is None:
    return weights, f'{parameters} parameters and their gradients'
  return weights + part[0], f'{part[1]}, plus {parameters} parameters and their gradients'


def advice(trainer):
  """What to change for a pass to need less, for the run's task."""
  cfg = trainer.config
  if trainer.task.NAME == 'sequence_to_sequence':
    params = cfg['data_layer_params']
    limit = ('data_layer_params.max_length' if 'max_length' in params
             else 'data_layer_params.max_source_length and max_target_length')
    ways = [f'leave the longest pairs out ({limit})', 'a smaller batch_size_per_gpu']
    if cfg['model_params'].get('train_chunk_size') is not None:
      ways.append('a smaller model_params.train_chunk_size')
    return ', '.join(ways[:-1]) + ' or ' + ways[-1]
  return ('a smaller batch_size_per_gpu (iter_size keeps the global batch), or a smaller '
          'data_layer_params.image_size')


def check_fits(trainer):
  """The line that refuses a training run whose pass cannot fit in memory, or None when it may.

  Only on the CPU, and only where the machine's available memory is known.
  """
  if _on_gpu():
    return None
  room = available_bytes()
  floor = pass_floor(trainer)
  if room is None or floor is None or floor[0] <= room:
    return None
  return (f'memory: one training step of this run needs at least {gigabytes(floor[0])} '
          f'({floor[1]}), more than the {gigabytes(room)} this machine has available; '
          f'{advice(trainer)}. Nothing was trained')


def sizes_text(trainer, mode):
  """The batch and the example size a pass of ``mode`` reads, in words.

  The longest sequences are the split's (training, evaluation); infer reads
  its own inputs, whose longest line the caller knows best.
  """
  cfg = trainer.config if trainer.train_data is not None else trainer.eval_config
  unit = trainer.task.example_unit
  text = f'batch_size_per_gpu {cfg["batch_size_per_gpu"]} {unit}'
  if cfg['iter_size'] > 1 and trainer.train_data is not None:
    text += f' (iter_size {cfg["iter_size"]})'
  layer = trainer.train_data if trainer.train_data is not None else trainer.eval_data
  if mode == 'infer' and trainer.task.NAME == 'sequence_to_sequence':
    return text + ', the longest line of the input'
  if trainer.task.NAME == 'sequence_to_sequence' and layer is not None:
    source, target = _longest_sequences(layer)
    text += f', sources up to {source} tokens and targets up to {target - 1}'
  elif layer is not None and getattr(layer, 'image_shape', None):
    text += f', images of {"x".join(str(d) for d in layer.image_shape)}'
  return text


def allocation_text(exc):
  """``a float tensor of shape [32, 2, 20000, 20000] (102.4 GB)``: what TensorFlow could not allocate."""
  found = _OOM_SHAPE.search(str(exc))
  if found is None:
    return 'a tensor'
  dims = [int(d) for d in found.group(1).replace(' ', '').split(',') if d]
  size = math.prod(dims) * _TYPE_BYTES.get(found.group(2), 4)
  return f'a {found.group(2)} tensor of shape [{", ".join(map(str, dims))}] ({gigabytes(size)})'


def out_of_memory_line(trainer, exc, mode, kept):
  """One line for TensorFlow's ResourceExhaustedError in a step of ``mode``.

  Args:
    trainer: the run's ``Trainer``.
    exc: the error.
    mode: run.py's mode.
    kept: the newest checkpoint of the run, or None.
  """
  where = 'a training step' if mode in ('train', 'train_eval', 'benchmark') else f'--mode={mode}'
  if mode == 'train_eval' and any('evaluat' in frame.name
                                  for frame in traceback.extract_tb(exc.__traceback__)):
    where = 'an evaluation during training'
  return (f'out of memory in {where}: {sizes_text(trainer, mode)}; TensorFlow could not allocate '
          f'{allocation_text(exc)}. Use {advice(trainer)}; kept: {kept or "no checkpoint"}')
