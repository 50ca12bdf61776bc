"""Input-pipeline benchmark: the data layers alone against what training consumes.

  .venv/bin/python scripts/bench_input.py [--repeats 3] [--only PART,PART,...]

Parts (``--only``; all by default, about 5 minutes on 2 cores):

* ``fashion_mnist``: the data layer of configs/fashion_mnist_lars.py, with and
  without augmentation, against the ``optimize_loss`` LARS step of the
  ResNet-8 of that config, batch 256.
* ``folder``: the ``image_folder`` layer on a folder of 10 classes of grey
  28 px PNGs (``--png_files``, smooth random images written to a temporary
  directory), augment ``'none'`` and ``'crop_flip'``, against the same
  ResNet-8 step.
* ``imagenet``: the ImageNet data layer on TFRecords at 224 px: a few hundred
  JPEG records of 300-500 px (smooth random images, about the size of
  ImageNet photos) in four shards, random-resized crop, flip, resize to 224,
  against the ``optimize_loss`` LARS step of ResNet-50 in ``mixed_bfloat16``
  (the faster precision here), batch 32.
* ``tfrecord``: the ``tfrecord`` layer on the same JPEGs written as records
  with the TensorFlow Datasets keys (``image``, ``label``; ``preset: 'tfds'``),
  ``inception_crop``, against the same ResNet-50 step.
* ``folder_jpeg``: the ``image_folder`` layer on the same JPEGs written as
  files (10 class folders), 224 px, ``inception_crop``, against the same step.
* ``memory``: the ``image_folder`` layer must not hold the images: its peak
  RSS growth (above the RSS of the process before the layer is built) while
  it is built and iterated for ``--memory_batches`` batches is measured over a
  folder of 5,000 grey 28 px PNGs and over one of 50,000 (``--memory_files``),
  each in a fresh process; the larger folder may grow by no more than the
  allowance :func:`memory_allowance` gives.

Speed goal: pipeline >= 5x the training rate. A row is the median over
``--repeats`` alternating measurements of the pipeline and of training.
"""

import argparse
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
import tensorflow as tf  # noqa: E402

from data import DATA_LAYERS  # noqa: E402
from models import MODELS  # noqa: E402
from optimizers.compat import openseq2seq as opt_lib  # noqa: E402

MIN_RATIO = 5.0
LARS = {'momentum': 0.9, 'weight_decay': 5e-4, 'eeta': 0.001,
        'skip_list': ['batch_normalization', 'bias']}
PARTS = ('fashion_mnist', 'folder', 'imagenet', 'tfrecord', 'folder_jpeg', 'memory')
FOLDER_CLASSES = 10
MB = 2.0 ** 20
# The memory goal's allowance: what the layer may keep per file (below) on top
# of a fixed margin for the allocator's and tf.data's run-to-run noise.
MEMORY_MARGIN_MB = 8.0
# Per file, the layer keeps its path a few times: in the (path, label) list,
# in the list of training paths, and in the string tensor its pipeline
# gathers from, with a copy in the traced dataset graph (about 410 bytes per
# file measured in all, for 86-byte path strings). A layer that kept each
# image would add at least 784 bytes per file decoded, 878 encoded, and fail.
PATH_COPIES = 4


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--repeats', type=int, default=3, help='alternating measurements (median)')
  parser.add_argument('--only', default=','.join(PARTS),
                      help=f'comma-separated parts to run, of: {", ".join(PARTS)} (default: all)')
  parser.add_argument('--records', type=int, default=384,
                      help='224 px JPEGs to generate (records and files)')
  parser.add_argument('--png_files', type=int, default=6000,
                      help='28 px PNG files of the folder part')
  parser.add_argument('--memory_files', default='5000,50000',
                      help='the two folder sizes of the memory part, smaller first')
  parser.add_argument('--memory_batches', type=int, default=60,
                      help='batches of 256 iterated in the memory part')
  # Internal: one measurement of the memory part, in its own process.
  parser.add_argument('--memory_child', metavar='DIR', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  parts = [p.strip() for p in args.only.split(',') if p.strip()]
  unknown = [p for p in parts if p not in PARTS]
  if unknown or not parts:
    parser.error(f'--only: unknown part(s) {", ".join(unknown) or "(none given)"}; '
                 f'allowed: {", ".join(PARTS)}')
  args.parts = parts
  for flag in ('repeats', 'records', 'png_files', 'memory_batches'):
    if getattr(args, flag) < 1:
      parser.error(f'--{flag}: expected a positive integer, got {getattr(args, flag)}')
  try:
    sizes = [int(n) for n in args.memory_files.split(',')]
  except ValueError:
    sizes = []
  if len(sizes) != 2 or not 0 < sizes[0] < sizes[1]:
    parser.error(f'--memory_files: expected two increasing positive counts, e.g. 5000,50000; '
                 f'got {args.memory_files!r}')
  args.memory_sizes = sizes
  return args


# --- measurements ---------------------------------------------------------------------------


def pipeline_rate(dataset, batches, batch_size):
  """Images/sec of pulling ``batches`` batches after a warm-up of a few."""
  iterator = iter(dataset)
  for _ in range(3):
    next(iterator)
  start = time.perf_counter()
  for _ in range(batches):
    images, _ = next(iterator)
  images.numpy()
  return batches * batch_size / (time.perf_counter() - start)


def train_step(model_name, model_params, image_shape, num_classes, dtype):
  keras.mixed_precision.set_dtype_policy(dtype)
  try:
    keras.utils.set_random_seed(0)
    model = MODELS.resolve(model_name)(model_params, image_shape, num_classes)
  finally:
    keras.mixed_precision.set_dtype_policy('float32')

  def loss(images, labels):
    logits = tf.cast(model(images, training=True), tf.float32)
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits,
                                                                       from_logits=True))

  @tf.function
  def step(images, labels):
    return opt_lib.optimize_loss(lambda: loss(images, labels), 'LARS', dict(LARS),
                                 lambda _: tf.constant(0.1), model=model, dtype=dtype)

  return step


def train_rate(step, batch, steps):
  step(*batch).numpy()  # trace and compile
  step(*batch).numpy()
  start = time.perf_counter()
  for _ in range(steps):
    loss = step(*batch)
  loss.numpy()
  return steps * int(batch[0].shape[0]) / (time.perf_counter() - start)


def compare(name, make_dataset, batch_size, batches, step, train_steps, repeats):
  dataset = make_dataset()
  batch = next(iter(dataset))
  pipe, train = [], []
  for _ in range(repeats):
    pipe.append(pipeline_rate(dataset, batches, batch_size))
    train.append(train_rate(step, batch, train_steps))
  ratio = statistics.median(np.array(pipe) / np.array(train))
  print(f'{name:64s} {statistics.median(pipe):12.1f} {statistics.median(train):12.1f} '
        f'{ratio:8.1f}', flush=True)
  return ratio


def build_layer(name, params, run_dir=None):
  """A train-mode layer of one worker, given its run directory as the trainer does."""
  layer = DATA_LAYERS.resolve(name)(params, 'train', num_workers=1, worker_index=0)
  if run_dir is not None:
    layer.use_run_dir(run_dir)
  return layer


# --- generated data -------------------------------------------------------------------------


def smooth_image(rng, height, width):
  """A JPEG-friendly random image: a few smooth colour fields plus mild noise."""
  coarse = rng.uniform(0, 255, size=(height // 32 + 2, width // 32 + 2, 3)).astype(np.float32)
  image = tf.image.resize(coarse[np.newaxis], [height, width], method='bicubic')[0]
  image += rng.normal(0, 12, size=(height, width, 3)).astype(np.float32)
  return tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8)


def make_jpegs(count, seed=0):
  """``count`` photo-sized JPEGs (300-500 px a side, quality 90): ``[(bytes, label in [0, 1000))]``."""
  rng = np.random.default_rng(seed)
  jpegs = []
  for _ in range(count):
    height, width = (int(x) for x in rng.integers(300, 501, size=2))
    encoded = tf.io.encode_jpeg(smooth_image(rng, height, width), quality=90).numpy()
    jpegs.append((encoded, int(rng.integers(0, 1000))))
  return jpegs


def write_records(directory, jpegs, image_key, label_key, label_offset=0, shards=4):
  """The JPEGs as ``tf.train.Example`` records in ``shards`` files ``train-0000i-of-0000n``."""
  writers = [tf.io.TFRecordWriter(os.path.join(directory, f'train-{i:05d}-of-{shards:05d}'))
             for i in range(shards)]
  for n, (encoded, label) in enumerate(jpegs):
    example = tf.train.Example(features=tf.train.Features(feature={
        image_key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        label_key: tf.train.Feature(int64_list=tf.train.Int64List(value=[label + label_offset])),
    }))
    writers[n % shards].write(example.SerializeToString())
  for writer in writers:
    writer.close()


def write_jpeg_folder(directory, jpegs):
  """The JPEGs as files ``directory/c<label mod 10>/<n>.jpg``."""
  for c in range(FOLDER_CLASSES):
    os.makedirs(os.path.join(directory, f'c{c}'), exist_ok=True)
  for n, (encoded, label) in enumerate(jpegs):
    with open(os.path.join(directory, f'c{label % FOLDER_CLASSES}', f'{n:06d}.jpg'), 'wb') as f:
      f.write(encoded)


def smooth_grey_images(rng, count, size, cells=4):
  """``uint8 [count, size, size]``: bilinear blends of a ``cells + 1`` square grid, plus noise."""
  coarse = rng.uniform(0, 255, size=(count, cells + 1, cells + 1))
  position = np.linspace(0, cells, size)
  low = np.minimum(position.astype(int), cells - 1)
  weights = np.zeros((size, cells + 1))
  weights[np.arange(size), low] = 1 - (position - low)
  weights[np.arange(size), low + 1] = position - low
  images = np.einsum('hi,nij,wj->nhw', weights, coarse, weights)
  images += rng.normal(0, 8, size=images.shape)
  return np.clip(np.rint(images), 0, 255).astype(np.uint8)


def _png_chunk(kind, data):
  return (struct.pack('>I', len(data)) + kind + data
          + struct.pack('>I', zlib.crc32(kind + data) & 0xFFFFFFFF))


def png_bytes(pixels):
  """An 8-bit grey PNG of ``uint8 [height, width]`` pixels, made with zlib alone.

  Plain Python is several times faster here than a TensorFlow op call per
  file, which matters for the 55,000 files of the memory part.
  """
  height, width = pixels.shape
  # Each scanline starts with its filter type, 0 (none).
  scanlines = np.concatenate([np.zeros((height, 1), np.uint8), pixels], axis=1)
  header = struct.pack('>IIBBBBB', width, height, 8, 0, 0, 0, 0)
  return (b'\x89PNG\r\n\x1a\n' + _png_chunk(b'IHDR', header)
          + _png_chunk(b'IDAT', zlib.compress(scanlines.tobytes(), 6)) + _png_chunk(b'IEND', b''))


def write_png_folder(directory, count, size=28, seed=0, chunk=5000):
  """``count`` grey PNGs as ``directory/c<n mod 10>/<n>.png``; returns (mean bytes, seconds)."""
  start = time.perf_counter()
  rng = np.random.default_rng(seed)
  for c in range(FOLDER_CLASSES):
    os.makedirs(os.path.join(directory, f'c{c}'), exist_ok=True)
  total = 0
  for first in range(0, count, chunk):
    for n, pixels in enumerate(smooth_grey_images(rng, min(chunk, count - first), size), first):
      encoded = png_bytes(pixels)
      total += len(encoded)
      with open(os.path.join(directory, f'c{n % FOLDER_CLASSES}', f'{n:06d}.png'), 'wb') as f:
        f.write(encoded)
  return total / count, time.perf_counter() - start


# --- the memory part ------------------------------------------------------------------------


def peak_rss():
  """The peak resident set size of this process's memory since it began or was reset, in bytes.

  Read from ``VmHWM`` rather than ``getrusage``: on Linux, ``ru_maxrss``
  keeps the peak of the process image an ``execve`` replaced, so a child
  started by this (large) process would report the parent's size.
  """
  with open('/proc/self/status', encoding='ascii') as f:
    for line in f:
      if line.startswith('VmHWM:'):
        return int(line.split()[1]) * 1024
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def reset_peak_rss():
  """Starts the peak RSS afresh from the current RSS (Linux 4.0+); a no-op where not allowed."""
  try:
    with open('/proc/self/clear_refs', 'w', encoding='ascii') as f:
      f.write('5')
  except OSError:
    pass


def memory_child(args):
  """One memory measurement over the folder ``args.memory_child``; prints a JSON line."""
  process = psutil.Process()
  # The runtime's thread pools and kernels start before the baseline, so the
  # growth counts what the layer adds.
  warm = tf.data.Dataset.range(64).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
  for _ in warm.batch(8).prefetch(tf.data.AUTOTUNE):
    pass
  base = process.memory_info().rss
  reset_peak_rss()
  start = time.perf_counter()
  layer = build_layer('image_folder', {'train_dir': args.memory_child, 'channels': 1,
                                       'augment': 'crop_flip'})
  construct = time.perf_counter() - start
  with tempfile.TemporaryDirectory() as run_dir:
    start = time.perf_counter()
    layer.use_run_dir(run_dir)  # the normalization statistics, of a bounded sample
    stats = time.perf_counter() - start
  after_construct = process.memory_info().rss
  path_bytes = sum(sys.getsizeof(path) for path, _ in layer.files)
  start = time.perf_counter()
  for _ in layer.dataset(256, seed=0).take(args.memory_batches):
    pass
  iterate = time.perf_counter() - start
  after_iterate = process.memory_info().rss
  peak = max(peak_rss(), after_iterate)
  print('MEMORY ' + json.dumps({
      'files': layer.num_examples, 'construct_s': construct, 'statistics_s': stats,
      'iterate_s': iterate, 'base': base, 'after_construct': after_construct,
      'after_iterate': after_iterate, 'peak': peak, 'path_bytes': path_bytes}), flush=True)


def measure_memory(directory, batches):
  """Runs :func:`memory_child` in a fresh process (a clean peak RSS); returns its numbers."""
  done = subprocess.run([sys.executable, os.path.abspath(__file__), '--memory_child', directory,
                         '--memory_batches', str(batches)],
                        check=False, capture_output=True, text=True)
  lines = [x for x in done.stdout.splitlines() if x.startswith('MEMORY ')]
  if done.returncode or not lines:
    last = (done.stderr.strip().splitlines() or ['no output'])[-1]
    raise SystemExit(f'memory measurement over {directory} failed (exit {done.returncode}): {last}')
  return json.loads(lines[-1][len('MEMORY '):])


def memory_allowance(small, large):
  """Extra bytes the large folder may grow by over the small one (see ``PATH_COPIES``).

  ``PATH_COPIES`` times the extra files' path strings (as Python objects) plus
  ``MEMORY_MARGIN_MB``.
  """
  per_file = large['path_bytes'] / large['files']
  return PATH_COPIES * per_file * (large['files'] - small['files']) + MEMORY_MARGIN_MB * MB


def memory_part(args, directory):
  """Prints the memory rows; returns ``(ok, summary)``."""
  results = []
  for count in args.memory_sizes:
    folder = os.path.join(directory, f'm{count}')
    mean_bytes, seconds = write_png_folder(folder, count, seed=count)
    print(f'  wrote {count} grey 28 px PNGs ({mean_bytes:.0f} bytes each) in {seconds:.1f} s',
          flush=True)
    results.append(measure_memory(folder, args.memory_batches))
  print(f'{"folder files":>12s} {"build s":>8s} {"stats s":>8s} {"iterate s":>9s} '
        f'{"RSS base MB":>11s} {"built MB":>9s} {"iterated MB":>11s} {"peak MB":>8s} '
        f'{"growth MB":>9s} {"retained MB":>11s}')
  for r in results:
    print(f'{r["files"]:12d} {r["construct_s"]:8.2f} {r["statistics_s"]:8.2f} '
          f'{r["iterate_s"]:9.2f} {r["base"] / MB:11.1f} {r["after_construct"] / MB:9.1f} '
          f'{r["after_iterate"] / MB:11.1f} {r["peak"] / MB:8.1f} '
          f'{(r["peak"] - r["base"]) / MB:9.1f} {(r["after_iterate"] - r["base"]) / MB:11.1f}')
  small, large = results
  # Both the peak and what the layer still holds after iterating must stay within the allowance.
  extra_peak = (large['peak'] - large['base']) - (small['peak'] - small['base'])
  extra_kept = large['after_iterate'] - small['after_iterate'] - (large['base'] - small['base'])
  allowed = memory_allowance(small, large)
  per_file = large['path_bytes'] / large['files']
  summary = (f'image_folder memory flat with the folder\'s size: {large["files"]} files against '
             f'{small["files"]}: peak RSS growth {extra_peak / MB:+.1f} MB, retained '
             f'{extra_kept / MB:+.1f} MB (allowed {allowed / MB:.1f} MB: {PATH_COPIES} copies of '
             f'the extra files\' paths, {per_file:.0f} bytes each, + {MEMORY_MARGIN_MB:.0f} MB)')
  return max(extra_peak, extra_kept) <= allowed, summary


# --- the parts ------------------------------------------------------------------------------


def small_image_results(args, directory, resnet8):
  """``{name: ratio}`` of the 28 px parts asked for: Fashion-MNIST, and a folder of PNGs.

  ``resnet8()`` gives the training step they are held against (built once, on first use).
  """
  results = {}
  if 'fashion_mnist' in args.parts:
    for augment in (False, True):
      layer = build_layer('fashion_mnist', {'augment': augment})
      name = f'Fashion-MNIST, batch 256, augment={augment}'
      results[name] = compare(name, lambda layer=layer: layer.dataset(256, seed=0), 256, 100,
                              resnet8(), 4, args.repeats)
  if 'folder' in args.parts:
    folder = os.path.join(directory, 'png28')
    mean_bytes, seconds = write_png_folder(folder, args.png_files)
    print(f'  wrote {args.png_files} grey 28 px PNGs ({mean_bytes:.0f} bytes each) in '
          f'{seconds:.1f} s', flush=True)
    run_dir = os.path.join(directory, 'run_png28')
    for augment in ('none', 'crop_flip'):
      layer = build_layer('image_folder', {'train_dir': folder, 'channels': 1,
                                           'augment': augment}, run_dir)
      name = f'image_folder 28 px PNG files, batch 256, augment={augment}'
      results[name] = compare(name, lambda layer=layer: layer.dataset(256, seed=0), 256, 40,
                              resnet8(), 4, args.repeats)
  return results


def jpeg_results(args, directory, resnet50):
  """``{name: ratio}`` of the 224 px JPEG parts asked for: ImageNet and tfds TFRecords, a folder.

  The same made-up JPEGs fill each; ``resnet50()`` gives the training step they are
  held against (built once, on first use).
  """
  parts = set(args.parts)
  if not {'imagenet', 'tfrecord', 'folder_jpeg'} & parts:
    return {}
  start = time.perf_counter()
  jpegs = make_jpegs(args.records)
  kb = statistics.mean(len(encoded) for encoded, _ in jpegs) / 1e3
  print(f'  made {args.records} JPEGs of 300-500 px ({kb:.0f} kB each) in '
        f'{time.perf_counter() - start:.1f} s', flush=True)
  layers = {}
  if 'imagenet' in parts:
    records = os.path.join(directory, 'imagenet')
    os.makedirs(records)
    write_records(records, jpegs, 'image/encoded', 'image/class/label', label_offset=1)
    layers[f'ImageNet TFRecords 224 px, batch 32 ({kb:.0f} kB JPEGs)'] = build_layer(
        'imagenet', {'data_dir': records, 'num_examples': args.records, 'num_classes': 1000,
                     'shuffle_buffer': 256})
  if 'tfrecord' in parts:
    records = os.path.join(directory, 'tfds')
    os.makedirs(records)
    write_records(records, jpegs, 'image', 'label')
    layers['tfrecord (tfds keys) 224 px, batch 32, inception_crop'] = build_layer(
        'tfrecord', {'data_dir': records, 'train_files': 'train-*', 'preset': 'tfds',
                     'num_classes': 1000, 'image_size': 224, 'augment': 'inception_crop',
                     'shuffle_buffer': 256}, os.path.join(directory, 'run_tfds'))
  if 'folder_jpeg' in parts:
    folder = os.path.join(directory, 'jpeg')
    write_jpeg_folder(folder, jpegs)
    layers['image_folder 224 px JPEG files, batch 32, inception_crop'] = build_layer(
        'image_folder', {'train_dir': folder, 'image_size': 224, 'channels': 3,
                         'augment': 'inception_crop'}, os.path.join(directory, 'run_jpeg'))
  return {name: compare(name, lambda layer=layer: layer.dataset(32, seed=0), 32, 24, resnet50(),
                        2, args.repeats)
          for name, layer in layers.items()}


def main():
  args = parse_args()
  if args.memory_child:
    memory_child(args)
    return
  parts = args.parts
  print(f'TF {tf.__version__}; parts: {", ".join(parts)}; {args.repeats} alternating '
        'measurements, medians', flush=True)
  verdicts = []
  steps = {}

  def resnet8():
    if 'resnet8' not in steps:
      steps['resnet8'] = train_step('resnet_cifar', {'depth': 8, 'weight_decay': 0.0},
                                    (28, 28, 1), 10, 'float32')
    return steps['resnet8']

  def resnet50():
    if 'resnet50' not in steps:
      steps['resnet50'] = train_step('resnet50', {}, (224, 224, 3), 1000, 'mixed_bfloat16')
    return steps['resnet50']

  header = f'{"data set":64s} {"pipeline/s":>12s} {"training/s":>12s} {"ratio":>8s}'
  with tempfile.TemporaryDirectory() as directory:
    if [p for p in parts if p != 'memory']:
      print(header, flush=True)
    results = small_image_results(args, directory, resnet8)
    results.update(jpeg_results(args, directory, resnet50))
    for name, ratio in results.items():
      verdicts.append((ratio >= MIN_RATIO, f'input pipeline {name}: {ratio:.1f}x the training '
                       f'images/sec (goal >= {MIN_RATIO:.0f}x)'))

    if 'memory' in parts:
      print(f'memory: image_folder, grey 28 px PNGs, augment=crop_flip, {args.memory_batches} '
            'batches of 256, each folder in a fresh process', flush=True)
      verdicts.append(memory_part(args, directory))

  for ok, summary in verdicts:
    print(f'{"PASS" if ok else "FAIL"} {summary}')


if __name__ == '__main__':
  main()
