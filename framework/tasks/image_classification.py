"""Image classification: softmax cross-entropy, top-1/top-5 accuracy, images in, classes out.

The task of the image data layers: the model is
``build(model_params, image_shape, num_classes)``; the loss of a batch
``(images, labels)`` is the mean cross-entropy of the logits (with the
config's ``label_smoothing``); the train metric is top-1 ``accuracy``; an
evaluation gives ``loss``, ``accuracy`` and ``top5_accuracy`` over the whole
eval split (``framework.tasks.image_evaluation``); the best checkpoint has the highest
``accuracy``; the SavedModel takes images as the data set stores them
and returns the class names too (``framework.tasks.image_export``).

``--mode=infer`` reads image files (:meth:`ImageClassificationTask.infer_inputs`:
one file, a folder of them, or a list of paths in a text file or on stdin),
preprocesses them as the evaluation does (the data layer's
``encoded_image_input``) and writes one line per image::

  path<TAB>class name<TAB>probability<TAB>second:probability<TAB>third:probability

the top class, then the next ``INFER_TOP_K - 1`` classes by probability as
``name:probability`` (fewer when the model has fewer classes). A file that
cannot be read or decoded gets the line ``path<TAB>error: <why>`` in its
place, and the others are still classified.
"""

import os
import re
import sys

import keras
import tensorflow as tf

from core.params import ConfigError
from data.base import DataError
from data.base import data_error_in
from framework.tasks import base
from framework.tasks import export
from framework.tasks import image_evaluation
from framework.tasks import image_export
from models import contract


class ImageClassificationTask(base.Task):
  """Classifies images; see the module docstring."""

  NAME = 'image_classification'
  TRAIN_METRICS = ('accuracy',)
  EVAL_METRICS = ('accuracy', 'top5_accuracy', 'loss')
  BEST_METRIC = 'accuracy'
  HIGHER_IS_BETTER = True

  def __init__(self, config, eval_config=None):
    super().__init__(config, eval_config)
    self.label_smoothing = config['label_smoothing']
    self._eval_step = None  # compiled by the first evaluate()
    self._heldout_step = None  # compiled by the first heldout_loss()

  @property
  def example_unit(self):
    return 'images'

  def build_model(self, data_layer):
    """The config's model for the data layer's images and classes, checked to give logits.

    Raises:
      ConfigError: the builder returned no ``keras.Model``, or one whose output
        is not ``[batch, num_classes]`` logits (a softmax, another shape).
    """
    cfg = self.config
    self.samples_data = data_layer
    model = self.call_builder(data_layer.image_shape, data_layer.num_classes)
    contract.check_image_classifier(model, contract.builder_name(cfg['model']),
                                    data_layer.image_shape, data_layer.num_classes)
    return model

  def loss(self, model, batch):
    """Mean cross-entropy of a batch ``(images, labels)`` and its top-1 ``accuracy``."""
    images, labels = batch
    logits = model(images, training=True)
    accuracy = tf.reduce_mean(tf.cast(tf.math.in_top_k(
        labels, tf.cast(logits, tf.float32), 1), tf.float32))
    one_hot = tf.one_hot(labels, tf.shape(logits)[-1])
    loss = tf.reduce_mean(keras.losses.categorical_crossentropy(
        one_hot, tf.cast(logits, tf.float32), from_logits=True,
        label_smoothing=self.label_smoothing))
    return loss, {'accuracy': accuracy}

  def sample_lines(self, model, batch, count):
    """The label and the model's top classes of the first ``count`` images of a batch, a line each.

    ``sample 1: label Sneaker; top Sneaker 0.91, Sandal 0.05, Bag 0.02``: the
    classes by probability under the model as it is now (inference mode), named
    by the data layer the model was built for.
    """
    images, labels = batch
    images, labels = images[:count], labels[:count].numpy()
    names = image_export.class_names(self.samples_data)
    probabilities = tf.nn.softmax(tf.cast(model(images, training=False), tf.float32)).numpy()
    lines = []
    for index, (label, row) in enumerate(zip(labels, probabilities), start=1):
      top = row.argsort()[::-1][:SAMPLE_TOP_K]
      ranked = ', '.join(f'{names[k]} {row[k]:.2f}' for k in top)
      lines.append(f'sample {index}: label {names[label]}; top {ranked}')
    return lines

  def evaluate(self, model, data_layer, batch_size):
    """``loss``, ``accuracy``, ``top5_accuracy`` and ``examples`` over the split, all workers."""
    if self._eval_step is None:
      self._eval_step = image_evaluation.make_eval_step(model)
    return image_evaluation.evaluate(self._eval_step, data_layer.dataset(batch_size))

  def heldout_loss(self, model, data_layer, batch_size, batches):
    """``(mean loss, examples)`` over the split's first ``batches`` batches on every worker."""
    # Batch normalization by each batch's own statistics, as the update sees it: its moving
    # averages lag the weights by hundreds of updates at a high rate, and the loss read
    # through them swings by more than a window's progress. What the call moves is put back.
    if self._heldout_step is None:
      self._heldout_step = image_evaluation.make_eval_step(
          model, batch_statistics=image_evaluation.has_batch_normalization(model))
    with image_evaluation.keeping_state(model):
      metrics = image_evaluation.evaluate(self._heldout_step,
                                          data_layer.dataset(batch_size).take(batches))
    return metrics['loss'], metrics['examples']

  def describe_eval(self, metrics):
    return (f'loss {metrics["loss"]:.4f}, top-1 {metrics["accuracy"]:.4f}, top-5 '
            f'{metrics["top5_accuracy"]:.4f} ({metrics["examples"]} examples)')

  def describe_final(self, metrics):
    return (f'accuracy: {metrics["accuracy"]:.4f} (top-5 {metrics["top5_accuracy"]:.4f}, '
            f'loss {metrics["loss"]:.4f})')

  def serving_function(self, model, data_layer):
    return image_export.serving_function(model, data_layer)

  def describe_export(self, data_layer):
    spec, _ = data_layer.serving_input()
    return (f'takes {spec.dtype.name} images {list(spec.shape)}, returns probabilities, '
            f'classes and class_names (the {data_layer.num_classes} names also in '
            f'assets/{image_export.CLASS_NAMES_FILE} and {export.INFO_FILE})')

  def export_info(self, data_layer):
    return {'class_names': image_export.class_names(data_layer)}

  def export_assets(self, data_layer):
    return image_export.class_names_assets(image_export.class_names(data_layer))

  # --- infer -------------------------------------------------------------------------------

  def infer_inputs(self, source):
    """The image files ``--infer_input`` names, in the order of the output lines.

    Args:
      source: an image file (known by its extension or its first bytes); a
        folder, whose JPEG, PNG, BMP and GIF files (by extension, any case)
        are taken recursively, sorted by path; a UTF-8 text file of paths,
        one a line; or ``-``: such paths on stdin. Blank lines are skipped
        and a line's surrounding white space dropped; a relative path is
        relative to the working directory.

    Raises:
      DataError: a source that does not exist, cannot be read, is not UTF-8
        text, or names no image.
    """
    if source != '-' and os.path.isdir(source):
      paths = sorted(os.path.join(folder, name) for folder, _, names in os.walk(source)
                     for name in names if name.lower().endswith(IMAGE_EXTENSIONS))
      if not paths:
        raise DataError(f'--infer_input {source}: the folder holds no image file (looked for '
                        f'{", ".join(IMAGE_EXTENSIONS)}, in any case, in it and below)')
      return paths
    if source != '-' and not os.path.exists(source):
      raise DataError(f'--infer_input {source}: no such file or folder')
    if source != '-' and is_image_file(source):
      return [source]
    paths = [line.strip() for line in base.read_lines(source, 'image path') if line.strip()]
    if not paths:
      raise DataError(f'--infer_input {source}: {"stdin" if source == "-" else "the file"} '
                      'names no image; give an image file, a folder of them, or their paths '
                      'one a line')
    return paths

  def infer(self, model, data_layer, inputs, batch_size):
    """The top classes of each image file of ``inputs``, one line each (see the module docstring).

    Args:
      model: the classifier.
      data_layer: the eval data layer, whose ``encoded_image_input`` makes
        the model's inputs from the files' bytes.
      inputs: the image paths (:meth:`infer_inputs`).
      batch_size: images classified at once (the eval batch).

    Returns:
      One line per path, in order. A file that cannot be read or decoded has
      ``path<TAB>error: <why>``; their number goes to stderr.

    Raises:
      ConfigError: a data layer that cannot read image files.
    """
    names = image_export.class_names(data_layer)
    predict = self._predictor(model, data_layer, min(INFER_TOP_K, len(names)))
    batch_size = batch_size or INFER_BATCH
    lines, failed = [], 0
    for start in range(0, len(inputs), batch_size):
      batch_lines, batch_failed = _infer_batch(predict, inputs[start:start + batch_size], names)
      lines += batch_lines
      failed += batch_failed
    if failed:
      print(f'warning: {failed} of {len(inputs)} image(s) could not be read or decoded; their '
            'lines say why (path<TAB>error: ...)', file=sys.stderr, flush=True)
    return lines

  def _predictor(self, model, data_layer, k):
    """``encoded image files [B] -> top_k(probabilities, k)``, compiled once for any B."""
    try:
      to_inputs = data_layer.encoded_image_input()
    except (AttributeError, NotImplementedError):
      raise ConfigError(f'--mode=infer: the data layer {type(data_layer).__name__} cannot read '
                        'image files (it has no encoded_image_input); export the model '
                        '(--mode=export) and serve it') from None

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def predict(encoded):
      logits = tf.cast(model(to_inputs(encoded), training=False), tf.float32)
      return tf.math.top_k(tf.nn.softmax(logits), k)

    return predict


# print_samples_steps: the classes named for each sample, by probability.
SAMPLE_TOP_K = 3
# --mode=infer: the files a folder gives (by extension) and the first bytes of each kind.
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.gif')
_JPEG, _PNG, _GIF = b'\xff\xd8\xff', b'\x89PNG\r\n\x1a\n', (b'GIF87a', b'GIF89a')
# Classes on each output line: the top one and the runners-up.
INFER_TOP_K = 3
# Images classified at once when the eval view gives no batch.
INFER_BATCH = 64
_ERROR_MARK = '\terror: '


def looks_like_image(head):
  """Whether the first bytes of a file (at least 10) are those of a JPEG, PNG, BMP or GIF."""
  # A BMP starts "BM", its size, then four reserved zero bytes: the zeros keep a
  # list of paths starting "BM" from passing for one.
  return (head.startswith((_JPEG, _PNG) + _GIF)
          or (head.startswith(b'BM') and head[6:10] == b'\0\0\0\0'))


def is_image_file(path):
  """Whether ``path`` is an image file by its extension or, failing that, its first bytes."""
  if path.lower().endswith(IMAGE_EXTENSIONS):
    return True
  try:
    with open(path, 'rb') as f:
      return looks_like_image(f.read(10))
  except OSError:
    return False


def _one_line(exc):
  """The reason of a TensorFlow error in one short line."""
  reason = data_error_in(exc)
  if reason is None:
    text = getattr(exc, 'message', str(exc))
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith('[[')]
    reason = lines[-1] if lines else type(exc).__name__
    reason = re.sub(r'^\{\{[^}]*\}\}\s*|\s*\[Op:[^\]]*\]$', '', reason)
  return reason[:200]


def _infer_batch(predict, paths, names):
  """The output lines of one batch of image files (see ``ImageClassificationTask.infer``).

  Returns:
    ``(lines, the number of them that are errors)``.
  """
  lines = [None] * len(paths)
  encoded = {}
  for i, path in enumerate(paths):
    try:
      with open(path, 'rb') as f:
        data = f.read()
    except OSError as exc:
      lines[i] = f'{path}{_ERROR_MARK}cannot be read ({exc.strerror or exc})'
      continue
    if not looks_like_image(data[:10]):
      lines[i] = f'{path}{_ERROR_MARK}not a JPEG, PNG, BMP or GIF image'
      continue
    encoded[i] = data
  results = {}
  if encoded:
    try:
      values, indices = predict(tf.constant(list(encoded.values())))
      results = dict(zip(encoded, zip(values.numpy(), indices.numpy())))
    except tf.errors.OpError:
      # One file of the batch does not decode: each on its own, to name it.
      for i, data in encoded.items():
        try:
          tf.io.decode_image(data, expand_animations=False)  # eager: a clean reason
        except tf.errors.OpError as exc:
          lines[i] = f'{paths[i]}{_ERROR_MARK}cannot be decoded ({_one_line(exc)})'
          continue
        try:
          values, indices = predict(tf.constant([data]))
          results[i] = (values.numpy()[0], indices.numpy()[0])
        except tf.errors.OpError as exc:  # the data layer's own check refused it
          lines[i] = f'{paths[i]}{_ERROR_MARK}cannot be made the model\'s input ({_one_line(exc)})'
  failed = len(paths) - len(results)
  for i, (values, indices) in results.items():
    lines[i] = (f'{paths[i]}\t{names[indices[0]]}\t{values[0]:.4f}'
                + ''.join(f'\t{names[c]}:{p:.4f}' for c, p in zip(indices[1:], values[1:])))
  return lines, failed
