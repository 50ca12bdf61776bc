"""Tests of the shared image preprocessing (data/images.py) and the base layer's encoded input."""

import struct

import numpy as np
import pytest
import tensorflow as tf

from core.params import ConfigError
from data import DATA_LAYERS, images
from data.base import InMemoryDataLayer, pad_crop_flip

KEY = tf.constant([7, 11], tf.int64)


def png(array):
  return tf.io.encode_png(tf.constant(array, tf.uint8)).numpy()


def bmp(array):
  """A 24-bit uncompressed BMP of an ``[h, w, 3]`` uint8 RGB array, written by hand."""
  height, width, _ = array.shape
  row_bytes = (3 * width + 3) // 4 * 4
  rows = b''
  for row in array[::-1]:  # bottom-up
    data = row[:, ::-1].astype(np.uint8).tobytes()  # BGR
    rows += data + b'\0' * (row_bytes - len(data))
  info = struct.pack('<IiiHHIIiiII', 40, width, height, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
  header = b'BM' + struct.pack('<IHHI', 14 + len(info) + len(rows), 0, 0, 14 + len(info))
  return header + info + rows


def _lzw_codes(indices):
  """LZW codes of 8-bit indices, with a clear code often enough that codes stay 9 bits wide."""
  clear, end = 256, 257
  codes = []
  for start in range(0, len(indices), 200):
    codes.append(clear)
    codes.extend(int(i) for i in indices[start:start + 200])
  codes.append(end)
  bits, count, out = 0, 0, bytearray()
  for code in codes:
    bits |= code << count
    count += 9
    while count >= 8:
      out.append(bits & 0xFF)
      bits >>= 8
      count -= 8
  if count:
    out.append(bits & 0xFF)
  return bytes(out)


def gif(frames, palette):
  """A GIF of ``[h, w]`` palette-index frames and a ``[256, 3]`` palette, written by hand."""
  height, width = frames[0].shape
  out = b'GIF89a' + struct.pack('<HHBBB', width, height, 0xF7, 0, 0)
  out += np.asarray(palette, np.uint8).tobytes()
  for frame in frames:
    out += b'\x2c' + struct.pack('<HHHHB', 0, 0, width, height, 0) + b'\x08'
    data = _lzw_codes(np.asarray(frame).ravel())
    for start in range(0, len(data), 255):
      chunk = data[start:start + 255]
      out += bytes([len(chunk)]) + chunk
    out += b'\x00'
  return out + b'\x3b'


def rgb(seed, shape=(6, 10, 3)):
  return np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)


def test_image_size_pair():
  assert images.image_size_pair(32) == (32, 32)
  assert images.image_size_pair([24, 40]) == (24, 40)
  assert images.image_size_pair((5, 6)) == (5, 6)
  for bad in (0, [3], [3, 0], 'x', True):
    with pytest.raises(ConfigError, match='image_size: expected a positive integer'):
      images.image_size_pair(bad)


def test_decode_reads_every_format_by_content():
  pixels = rgb(0)
  assert np.array_equal(images.decode(png(pixels), 3).numpy(), pixels)
  assert np.array_equal(images.decode(bmp(pixels), 3).numpy(), pixels)
  jpeg = tf.io.encode_jpeg(pixels, quality=95)
  assert np.array_equal(images.decode(jpeg, 3).numpy(), tf.io.decode_jpeg(jpeg, channels=3).numpy())
  # A GIF gives its first frame, looked up in the palette.
  palette = np.random.default_rng(1).integers(0, 256, (256, 3))
  first = np.random.default_rng(2).integers(0, 256, (5, 7))
  second = np.random.default_rng(3).integers(0, 256, (5, 7))
  decoded = images.decode(gif([first, second], palette), 3).numpy()
  assert np.array_equal(decoded, palette[first])


def test_decode_converts_channels():
  grey = np.random.default_rng(4).integers(0, 256, (5, 6, 1)).astype(np.uint8)
  assert np.array_equal(images.decode(png(grey), 3).numpy(), np.repeat(grey, 3, axis=2))
  rgba = np.random.default_rng(5).integers(0, 256, (5, 6, 4)).astype(np.uint8)
  assert np.array_equal(images.decode(png(rgba), 3).numpy(), rgba[..., :3])
  assert np.array_equal(images.decode(png(grey), 1).numpy(), grey)
  # RGB to grey: the ITU-R 601 weights, within rounding.
  pixels = rgb(6)
  expected = pixels.astype(np.float64) @ [0.2989, 0.5870, 0.1140]
  for encoded in (png(pixels), bmp(pixels), png(np.concatenate([pixels, rgb(3)[..., :1]], axis=2))):
    out = images.decode(encoded, 1).numpy()
    assert out.shape == (6, 10, 1)
    assert np.abs(out[..., 0] - expected).max() <= 1.0


@pytest.mark.parametrize('augment', images.AUGMENTS)
def test_train_image_shapes_and_keys(augment):
  encoded = png(rgb(7, (20, 30, 3)))
  out = images.train_image(encoded, KEY, (12, 16), 3, augment)
  assert out.dtype == tf.float32 and out.shape == (12, 16, 3)
  again = images.train_image(encoded, KEY, (12, 16), 3, augment)
  assert np.array_equal(out.numpy(), again.numpy())  # a function of the key alone
  grey = images.train_image(encoded, KEY, 9, 1, augment)
  assert grey.shape == (9, 9, 1)
  if augment != 'none':
    outs = [images.train_image(encoded, tf.constant([k, 1], tf.int64), (12, 16), 3, augment)
            for k in range(8)]
    assert len({o.numpy().tobytes() for o in outs}) > 1


def test_train_image_none_and_flip_are_a_resize_and_its_mirror():
  pixels = rgb(8, (20, 30, 3))
  resized = tf.image.resize(pixels, [12, 16]).numpy()
  assert np.array_equal(images.train_image(png(pixels), KEY, (12, 16), 3, 'none').numpy(), resized)
  seen = set()
  for k in range(8):
    key = tf.constant([k, 3], tf.int64)
    out = images.train_image(png(pixels), key, (12, 16), 3, 'flip').numpy()
    if np.array_equal(out, resized):
      seen.add('same')
    else:
      assert np.array_equal(out, resized[:, ::-1])
      seen.add('mirrored')
  assert seen == {'same', 'mirrored'}


def test_crop_flip_is_a_window_of_the_zero_padded_resize():
  pixels = rgb(9, (16, 16, 3)) // 2 + 100  # no zero pixel, so the padding shows
  resized = pixels.astype(np.float32)
  padded = np.pad(resized, [(2, 2), (2, 2), (0, 0)])  # max(1, round(16 / 8)) = 2
  offsets = set()
  for k in range(12):
    out = images.train_image(png(pixels), tf.constant([k, 5], tf.int64), 16, 3, 'crop_flip').numpy()
    matches = [(y, x, flip) for y in range(5) for x in range(5) for flip in (False, True)
               if np.array_equal(out, padded[y:y + 16, x:x + 16][:, ::-1] if flip
                                 else padded[y:y + 16, x:x + 16])]
    assert matches
    offsets.update(matches)
  assert len(offsets) > 3


def test_batch_crop_flip_pads_each_axis_as_train_image_and_draws_per_example():
  # 16 x 24: padding 2 rows and 3 columns, as train_image's crop_flip pads them.
  assert images.crop_flip_pad((16, 24)) == (2, 3) and images.crop_flip_pad(4) == (1, 1)
  assert images.batch_augment_pad((16, 24), 'flip') == (0, 0)
  offsets, flips = images.batch_augment_draws(KEY, 400, (16, 24), 'crop_flip')
  offsets, flips = offsets.numpy(), flips.numpy()
  assert offsets.shape == (400, 2) and flips.shape == (400,)
  # Every corner of the padded image occurs, none outside it; about half mirrored.
  assert set(offsets[:, 0]) == set(range(5)) and set(offsets[:, 1]) == set(range(7))
  assert 150 < flips.sum() < 250
  again = images.batch_augment_draws(KEY, 400, (16, 24), 'crop_flip')
  assert np.array_equal(again[0], offsets) and np.array_equal(again[1], flips)
  other = images.batch_augment_draws(KEY + 1, 400, (16, 24), 'crop_flip')
  assert not np.array_equal(other[0], offsets)
  flip_offsets, _ = images.batch_augment_draws(KEY, 400, (16, 24), 'flip')
  assert not flip_offsets.numpy().any()
  # The batched crop and mirror are, image by image, a window of the zero-padded image.
  batch = rgb(3, (4, 16, 24, 3)).astype(np.float32) + 1
  out = pad_crop_flip(tf.constant(batch), tf.constant(offsets[:4]), tf.constant(flips[:4]),
                      images.batch_augment_pad((16, 24), 'crop_flip')).numpy()
  for i in range(4):
    y, x = offsets[i]
    window = np.pad(batch[i], [(2, 2), (3, 3), (0, 0)])[y:y + 16, x:x + 24]
    np.testing.assert_array_equal(out[i], window[:, ::-1] if flips[i] else window)


def test_group_decode_marks_exactly_the_inputs_that_fail():
  placeholder = tf.zeros([4, 4, 1], tf.float32)
  decode = lambda encoded: images.eval_image(encoded, 4, 1)  # noqa: E731
  group = images.decoded_group_or_marked(decode, placeholder)
  files = [png(np.full((4, 4, 1), 10 * i + 10, np.uint8)) for i in range(5)]
  files[1] = files[1][:30]  # truncated
  files[3] = b'not an image'
  (pixels, ok), = list(group(tf.constant(files)))
  assert list(ok.numpy()) == [True, False, True, False, True]
  assert [float(p.mean()) for p in pixels.numpy()] == [10.0, 0.0, 30.0, 0.0, 50.0]
  # A group that decodes whole comes out in one piece, all marked good.
  (pixels, ok), = list(group(tf.constant([files[0], files[2]])))
  assert ok.numpy().all() and pixels.shape == (2, 4, 4, 1)
  # The single-input guard, as the record layers use it.
  (image, good), = list(images.decoded_or_marked(decode, placeholder)(tf.constant(files[3])))
  assert not good.numpy() and not image.numpy().any()


def test_inception_crop_of_a_flat_image_is_flat_and_reads_png_and_jpeg():
  flat = np.full((40, 60, 3), [200, 100, 50], np.uint8)
  for encoded in (png(flat), bmp(flat)):
    out = images.train_image(encoded, KEY, (8, 8), 3, 'inception_crop').numpy()
    assert np.array_equal(out, np.broadcast_to(np.float32([200, 100, 50]), (8, 8, 3)))
  jpeg = tf.io.encode_jpeg(flat, quality=100)
  out = images.train_image(jpeg, KEY, (8, 8), 3, 'inception_crop').numpy()
  assert np.abs(out - [200, 100, 50]).max() <= 2


def test_inception_crop_of_a_png_is_a_window_of_the_image():
  # Row r holds value 4 r: the crop's rows are a contiguous run whatever the window.
  ramp = np.repeat((4 * np.arange(50))[:, None], 30, axis=1).astype(np.uint8)
  ramp = np.repeat(ramp[..., None], 3, axis=2)
  heights = set()
  for k in range(6):
    out = images.train_image(png(ramp), tf.constant([k, 9], tf.int64), (50, 30), 3,
                             'inception_crop').numpy()
    column = out[:, 0, 0]
    assert np.all(np.diff(column) >= -1e-4) and column[0] >= 0 and column[-1] <= 196
    heights.add(round(float(column[-1] - column[0])))
  assert len(heights) > 1  # different keys, different windows


def test_inception_crop_takes_the_same_window_from_a_jpeg_and_a_png():
  # A smooth image survives JPEG at quality 100 almost exactly, so equal windows give
  # nearly equal crops, and a different window would not.
  y, x = np.mgrid[0:48, 0:64]
  smooth = np.stack([3 * y + x, 2 * x + 20, 200 - 2 * y], axis=2).astype(np.uint8)
  jpeg = tf.io.encode_jpeg(smooth, quality=100, chroma_downsampling=False)
  for k in range(5):
    key = tf.constant([k, 13], tf.int64)
    from_jpeg = images.train_image(jpeg, key, (16, 16), 3, 'inception_crop').numpy()
    from_png = images.train_image(png(smooth), key, (16, 16), 3, 'inception_crop').numpy()
    assert np.abs(from_jpeg - from_png).max() < 6  # another window: 29 or more


def test_eval_image_resizes_or_centre_crops():
  pixels = rgb(10, (64, 128, 3))
  whole = images.eval_image(png(pixels), (16, 24), 3).numpy()
  assert np.array_equal(whole, tf.image.resize(pixels, [16, 24]).numpy())
  # 0.875: the shorter side to round(32 / 0.875) = 37, so 37 x 74, then the central 32 x 32.
  cropped = images.eval_image(png(pixels), 32, 3, crop_fraction=0.875).numpy()
  expected = tf.image.resize(pixels, [37, 74]).numpy()[2:34, 21:53]
  assert np.array_equal(cropped, expected)
  tall = images.eval_image(png(rgb(11, (90, 45, 3))), 32, 3, crop_fraction=0.875).numpy()
  assert np.array_equal(tall, tf.image.resize(rgb(11, (90, 45, 3)), [74, 37]).numpy()[21:53, 2:34])


def test_normalize_per_channel():
  x = tf.constant(rgb(12, (2, 3, 4, 3)))
  mean, std = (0.1, 0.5, 0.9), (0.2, 0.25, 0.5)
  out = images.normalize(x, mean, std).numpy()
  expected = (x.numpy().astype(np.float64) - 255 * np.array(mean)) / (255 * np.array(std))
  assert out.dtype == np.float32
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('dtype', [tf.uint8, tf.float32])
def test_image_statistics_are_numpys(dtype):
  pixels = [rgb(20 + i, (5 + i, 7, 3)) for i in range(5)]
  ds = tf.data.Dataset.from_generator(lambda: iter(pixels),
                                      output_signature=tf.TensorSpec([None, 7, 3], tf.uint8))
  ds = ds.map(lambda x: tf.cast(x, dtype))
  mean, std = images.image_statistics(ds)
  flat = np.concatenate([p.reshape(-1, 3) for p in pixels]).astype(np.float64) / 255
  np.testing.assert_allclose(mean, flat.mean(axis=0), rtol=1e-12)
  np.testing.assert_allclose(std, flat.std(axis=0), rtol=1e-12)
  batched = tf.data.Dataset.from_tensor_slices(np.stack([rgb(30 + i, (4, 4, 3)) for i in range(9)]))
  flat = np.stack([rgb(30 + i, (4, 4, 3)) for i in range(9)]).reshape(-1, 3) / 255
  mean, std = images.image_statistics(batched.batch(4))
  np.testing.assert_allclose(mean, flat.mean(axis=0), rtol=1e-12)
  np.testing.assert_allclose(std, flat.std(axis=0), rtol=1e-12)


def test_bad_arguments_are_refused():
  with pytest.raises(ConfigError, match="augment: 'mirror' is not allowed"):
    images.train_image(png(rgb(0)), KEY, 8, 3, 'mirror')
  with pytest.raises(ConfigError, match='channels: expected 1 or 3'):
    images.decode(png(rgb(0)), 2)


class _Pixels(InMemoryDataLayer):
  """A layer serving uint8 pixels, as Fashion-MNIST and CIFAR-10 do."""
  PARAMS = {}
  MEAN, STD = (0.5, 0.25, 0.125), (0.5, 0.5, 0.25)

  def __init__(self):
    super().__init__({}, 'eval')
    self.image_shape = (6, 10, 3)


def test_encoded_image_input_decodes_resizes_and_preprocesses_as_served():
  layer = _Pixels()
  to_inputs = layer.encoded_image_input()
  same, other = rgb(40), rgb(41, (12, 20, 3))
  out = to_inputs(tf.constant([png(same), bmp(other)])).numpy()
  assert out.shape == (2, 6, 10, 3) and out.dtype == np.float32
  np.testing.assert_allclose(out[0], layer.normalize(same).numpy(), rtol=1e-6)
  resized = np.clip(np.round(tf.image.resize(other, [6, 10]).numpy()), 0, 255).astype(np.uint8)
  np.testing.assert_allclose(out[1], layer.normalize(resized).numpy(), rtol=1e-6)
  # A float-served layer (synthetic) takes the pixels as floats.
  synthetic = DATA_LAYERS['synthetic']({'image_shape': [6, 10, 1], 'num_examples': 4}, 'eval')
  grey = rgb(42, (6, 10, 1))
  out = synthetic.encoded_image_input()(tf.constant([png(grey)])).numpy()
  assert np.array_equal(out[0], grey.astype(np.float32))


def test_layers_name_their_split_and_classes():
  synthetic = DATA_LAYERS['synthetic']({'image_shape': [4, 4, 1], 'num_examples': 4}, 'eval')
  assert synthetic.split == 'validation' and synthetic.class_names is None
  assert synthetic.run_dir is None
  synthetic.use_run_dir('/some/run')
  assert synthetic.run_dir == '/some/run'
  fashion = DATA_LAYERS['fashion_mnist']({}, 'eval')
  assert fashion.split == 'test' and len(fashion.class_names) == 10
  assert fashion.class_names[0] == 'T-shirt/top' and fashion.class_names[9] == 'Ankle boot'
  assert DATA_LAYERS['fashion_mnist']({}, 'train').split == 'train'
