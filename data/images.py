"""Preprocessing shared by the image data layers that read encoded files.

The preprocessing functions work on one image (a scalar string tensor of
JPEG, PNG, BMP or GIF bytes, decoded by content) and return float32 pixels in
``[0, 255]`` units; :func:`normalize` then scales them per channel. The train
path draws its randomness from a stateless key only, so a layer that keys each
example by ``(seed, epoch, example)`` gets the same augmentation on a resumed
run as on an uninterrupted one; :func:`batch_augment_draws` gives the draws of
``'flip'`` and ``'crop_flip'`` for a layer that applies them to whole batches.
:func:`decoded_or_marked` and :func:`decoded_group_or_marked` guard a decode,
so that an input that fails can be named or skipped instead of ending the
pipeline.

References:
  Szegedy et al. "Going Deeper with Convolutions", 2015 (random-resized crop).
  He, Zhang, Ren, Sun. "Deep Residual Learning for Image Recognition", 2016
  (CIFAR's pad, crop and mirror).
"""

import math

import numpy as np
import tensorflow as tf

from core.params import ConfigError
from data import shared_params

# What a train image goes through; see :func:`train_image`.
AUGMENTS = shared_params.AUGMENTS
# Random-resized-crop ranges (Szegedy et al. 2015): fraction of the image area
# and width/height ratio of the crop.
AREA_RANGE = (0.08, 1.0)
ASPECT_RANGE = (3.0 / 4.0, 4.0 / 3.0)
CROP_ATTEMPTS = 10
CHANNELS = (1, 3)


def image_size_pair(value):
  """``(height, width)`` from an int (a square) or a ``[height, width]`` list.

  Raises:
    ConfigError: unless ``value`` is a positive int or two of them.
  """
  def positive_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0

  if positive_int(value):
    return int(value), int(value)
  if isinstance(value, (list, tuple)) and len(value) == 2 and all(positive_int(v) for v in value):
    return int(value[0]), int(value[1])
  raise ConfigError(f'image_size: expected a positive integer or [height, width], got {value!r}')


def _check_channels(channels):
  if channels not in CHANNELS:
    raise ConfigError(f'channels: expected 1 or 3, got {channels!r}')


def _to_gray(image):
  """uint8 ``[h, w, c]`` of any channel count -> ``[h, w, 1]``: grey kept, RGB(A) weighted."""
  native = tf.shape(image)[-1]
  gray = tf.cond(native < 3, lambda: image[..., :1],
                 lambda: tf.image.rgb_to_grayscale(image[..., :3]))
  gray.set_shape([None, None, 1])
  return gray


def decode(encoded, channels):
  """Decodes JPEG, PNG, BMP or GIF bytes (told apart by content) to ``uint8 [h, w, channels]``.

  A GIF gives its first frame. For 3 channels grey images are repeated into
  RGB and an alpha channel is dropped; for 1 channel RGB is weighted into grey
  (``tf.image.rgb_to_grayscale``), whatever the format.

  Args:
    encoded: scalar string tensor.
    channels: 1 or 3.
  """
  _check_channels(channels)
  if channels == 3:
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image
  # BMP and GIF decode to 1 channel only natively, so convert here for every format alike.
  return _to_gray(tf.io.decode_image(encoded, channels=0, expand_animations=False))


def _resize(image, size):
  return tf.image.resize(image, size, method='bilinear')


def train_crop_window(image_shape, seed):
  """Samples a random-resized-crop window ``[y, x, height, width]`` for one image.

  Args:
    image_shape: ``[height, width, channels]`` of the (encoded) image.
    seed: stateless key ``[2] int64``.
  """
  whole_image = tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4])
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      image_shape, bounding_boxes=whole_image, seed=seed,
      # 0 lets the area range alone bound the crop (the box is the whole image).
      min_object_covered=0.0, aspect_ratio_range=ASPECT_RANGE, area_range=AREA_RANGE,
      max_attempts=CROP_ATTEMPTS, use_image_if_no_bounding_boxes=True)
  return tf.stack([begin[0], begin[1], size[0], size[1]])


def _inception_crop(encoded, crop_seed, channels):
  """The random-resized crop of the image, uint8; a JPEG decodes only the crop."""
  def jpeg():
    window = train_crop_window(tf.image.extract_jpeg_shape(encoded), crop_seed)
    if channels == 3:
      return tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
    # Grey as decode() makes it, so train and eval pixels agree.
    return tf.image.rgb_to_grayscale(tf.image.decode_and_crop_jpeg(encoded, window, channels=3))

  def other():
    image = decode(encoded, channels)
    window = train_crop_window(tf.shape(image), crop_seed)
    return image[window[0]:window[0] + window[2], window[1]:window[1] + window[3]]

  image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
  image.set_shape([None, None, channels])
  return image


def train_image(encoded, key, size, channels, augment):
  """One augmented train image, float32 ``[height, width, channels]`` in ``[0, 255]`` units.

  Args:
    encoded: scalar string tensor of JPEG, PNG, BMP or GIF bytes.
    key: stateless key ``[2] int64``; the only source of randomness (split
      into a crop key and a mirror key).
    size: ``(height, width)`` of the output.
    channels: 1 or 3.
    augment: one of ``AUGMENTS``: ``'none'`` resizes to ``size``; ``'flip'``
      resizes and mirrors left-right with probability 1/2; ``'crop_flip'``
      resizes, zero-pads by ``max(1, round(side / 8))`` pixels on each side,
      crops ``size`` at a random place and mirrors (the CIFAR recipe);
      ``'inception_crop'`` takes a random-resized crop (8-100 % of the area,
      aspect ratio 3/4-4/3, 10 attempts, else the whole image), resizes it to
      ``size`` (bilinear) and mirrors. A JPEG's crop is decoded alone.

  Raises:
    ConfigError: for an unknown ``augment`` or ``channels``.
  """
  if augment not in AUGMENTS:
    raise ConfigError(f'augment: {augment!r} is not allowed; allowed: '
                      f'{", ".join(map(repr, AUGMENTS))}')
  _check_channels(channels)
  height, width = image_size_pair(size)
  crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(key, 2))
  if augment == 'inception_crop':
    image = _resize(_inception_crop(encoded, crop_seed, channels), [height, width])
    return tf.image.stateless_random_flip_left_right(image, flip_seed)
  image = _resize(decode(encoded, channels), [height, width])
  if augment == 'none':
    return image
  if augment == 'crop_flip':
    pad_y, pad_x = crop_flip_pad((height, width))
    padded = tf.pad(image, [[pad_y, pad_y], [pad_x, pad_x], [0, 0]])
    image = tf.image.stateless_random_crop(padded, [height, width, channels], seed=crop_seed)
  return tf.image.stateless_random_flip_left_right(image, flip_seed)


def crop_flip_pad(size):
  """The zero padding ``(rows, columns)`` of ``'crop_flip'``: ``max(1, round(side / 8))`` each."""
  height, width = image_size_pair(size)
  return max(1, round(height / 8)), max(1, round(width / 8))


def batch_augment_pad(size, augment):
  """The padding ``(rows, columns)`` of ``augment`` done on whole batches (``'flip'``: none).

  With :func:`batch_augment_draws`, ``data.base.pad_crop_flip`` then gives,
  image by image, the pixels of :func:`train_image` for the same crop corner
  and mirror.
  """
  return crop_flip_pad(size) if augment == 'crop_flip' else (0, 0)


def batch_augment_draws(key, count, size, augment):
  """Per-example draws of ``'flip'`` or ``'crop_flip'`` done on batches, for ``count`` examples.

  Example ``i``'s draws are row ``i`` of arrays drawn whole from ``key``, so
  they depend on ``(key, i)`` alone: gathered by example index, a batch gets
  the same augmentation whatever its size or the number of workers.

  Args:
    key: stateless key ``[2] int64`` (of the seed and epoch).
    count: number of examples (int or scalar tensor).
    size: ``(height, width)`` of the images.
    augment: ``'flip'`` or ``'crop_flip'``.

  Returns:
    ``(offsets, flips)``: ``int32 [count, 2]`` crop corners in the padded
    image (zero for ``'flip'``) and ``bool [count]`` mirrors.
  """
  pad_y, pad_x = batch_augment_pad(size, augment)
  keys = tf.random.experimental.stateless_split(key, 3)
  rows = tf.random.stateless_uniform([count], seed=keys[0], maxval=2 * pad_y + 1, dtype=tf.int32)
  cols = tf.random.stateless_uniform([count], seed=keys[1], maxval=2 * pad_x + 1, dtype=tf.int32)
  flips = tf.random.stateless_uniform([count], seed=keys[2]) < 0.5
  return tf.stack([rows, cols], axis=1), flips


def decoded_or_marked(decode, placeholder):
  """Wraps ``decode(encoded, *extra) -> image`` so an input that fails is marked, not fatal.

  Returns ``f(encoded, *extra) -> Dataset`` of one ``(image, ok)`` element:
  the decoded image and True, or ``placeholder`` and False. Used with
  ``interleave`` or ``flat_map``: TensorFlow has no try/except inside a graph,
  but a one-element dataset that ignores its errors ends empty, and the
  placeholder that follows it takes its place.
  """
  def one(encoded, *extra):
    good = tf.data.Dataset.from_tensors((encoded,) + extra).map(
        lambda e, *x: (decode(e, *x), tf.constant(True))).ignore_errors()
    bad = tf.data.Dataset.from_tensors((placeholder, tf.constant(False)))
    return good.concatenate(bad).take(1)

  return one


def decoded_group_or_marked(decode, placeholder):
  """:func:`decoded_or_marked` for a group of inputs at once, cheap when they all decode.

  Guarding each input in a dataset of its own costs more than decoding a
  small image; a group pays it once. The group is decoded in one function
  (``tf.map_fn``); only when that fails is it decoded again input by input,
  so that the failing ones are marked and the others kept.

  Args:
    decode: ``f(encoded, *extra) -> image`` for one input, an image of
      ``placeholder``'s shape and dtype.
    placeholder: the image of an input that fails.

  Returns:
    ``f(encoded, *extra) -> Dataset`` of one ``(images, ok)`` element, for
    ``encoded`` and ``extra`` of a common leading size ``g``: ``images``
    ``[g, *placeholder.shape]`` and ``ok`` ``bool [g]``.
  """
  spec = tf.TensorSpec(placeholder.shape, placeholder.dtype)
  one = decoded_or_marked(decode, placeholder)

  def group(encoded, *extra):
    size = tf.size(encoded, out_type=tf.int64)

    def all_at_once(e, *x):
      decoded = tf.map_fn(lambda args: decode(*args), (e,) + x, fn_output_signature=spec)
      return decoded, tf.ones_like(e, tf.bool)

    whole = tf.data.Dataset.from_tensors((encoded,) + extra).map(all_at_once).ignore_errors()
    # Built lazily: concatenate starts it only when the whole group failed.
    one_by_one = tf.data.Dataset.from_tensor_slices((encoded,) + extra).flat_map(one).batch(size)
    return whole.concatenate(one_by_one).take(1)

  return group


def eval_image(encoded, size, channels, crop_fraction=None):
  """One eval image, float32 ``[height, width, channels]`` in ``[0, 255]`` units.

  Args:
    encoded: scalar string tensor of JPEG, PNG, BMP or GIF bytes.
    size: ``(height, width)`` of the output (or an int for a square).
    channels: 1 or 3.
    crop_fraction: None: the whole image resized to ``size`` (bilinear, as
      Keras' ``image_dataset_from_directory``). A number in (0, 1] (ImageNet:
      0.875): the image is scaled, keeping its aspect ratio, until it covers
      ``round(size / crop_fraction)`` (the shorter side for a square size) and
      the central ``size`` is cut out.
  """
  height, width = image_size_pair(size)
  image = decode(encoded, channels)
  if crop_fraction is None:
    return _resize(image, [height, width])
  shape = tf.cast(tf.shape(image)[:2], tf.float32)
  target_y, target_x = round(height / crop_fraction), round(width / crop_fraction)
  target = tf.constant([target_y, target_x], tf.float32)
  # The side whose scale is the larger decides; written as shape * target / side,
  # the order of the single-size formula, so square sizes give the same pixels.
  by_height = target_y * shape[1] >= target_x * shape[0]
  scale_target = tf.where(by_height, float(target_y), float(target_x))
  scale_side = tf.where(by_height, shape[0], shape[1])
  new_shape = tf.cast(tf.maximum(tf.round(shape * scale_target / scale_side), target), tf.int32)
  image = _resize(image, new_shape)
  top = (new_shape[0] - height) // 2
  left = (new_shape[1] - width) // 2
  image = image[top:top + height, left:left + width]
  image.set_shape([height, width, channels])
  return image


def normalize(images, mean, std):
  """``(x - 255 mean) / (255 std)`` per channel, float32; ``mean`` and ``std`` in [0, 1] units."""
  shift = tf.constant([255.0 * m for m in mean], tf.float32)
  scale = tf.constant([255.0 * s for s in std], tf.float32)
  return (tf.cast(images, tf.float32) - shift) / scale


def image_statistics(images_dataset):
  """Per-channel mean and standard deviation of the pixels of a dataset, in [0, 1] units.

  Sums are float64, batches are merged with Chan et al.'s pairwise update, so
  a large sample loses no precision.

  Args:
    images_dataset: a ``tf.data.Dataset`` (or any iterable) of uint8 or float
      pixel images in ``[0, 255]`` units, ``[h, w, c]`` or batches ``[b, h, w, c]``.

  Returns:
    ``(mean, std)``: tuples of ``c`` Python floats (population std).

  Raises:
    ValueError: when the dataset holds no pixel.
  """
  count, mean, m2 = 0, None, None
  for images in images_dataset:
    pixels = np.asarray(images, np.float64)
    pixels = pixels.reshape(-1, pixels.shape[-1]) / 255.0
    n = pixels.shape[0]
    if not n:
      continue
    batch_mean = pixels.mean(axis=0)
    batch_m2 = ((pixels - batch_mean) ** 2).sum(axis=0)
    if mean is None:
      count, mean, m2 = n, batch_mean, batch_m2
      continue
    total = count + n
    delta = batch_mean - mean
    mean = mean + delta * n / total
    m2 = m2 + batch_m2 + delta ** 2 * count * n / total
    count = total
  if not count:
    raise ValueError('image_statistics: the dataset holds no pixel')
  return (tuple(float(m) for m in mean),
          tuple(float(math.sqrt(v)) for v in m2 / count))
