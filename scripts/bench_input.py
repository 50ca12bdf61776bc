"""Input-pipeline benchmark: the data layers alone against what training consumes (issue 5).

  .venv/bin/python scripts/bench_input.py [--repeats 3]

For each data set, the train-mode ``tf.data`` pipeline of its data layer is
iterated on its own (batches pulled and discarded) and its images/sec compared
with the images/sec of the framework's train step on that input, both
measured in the same run:

* Fashion-MNIST (the data layer of configs/fashion_mnist_lars.py, with and
  without augmentation) against the ``optimize_loss`` LARS step of the
  ResNet-8 of that config, batch 256.
* ImageNet TFRecords at 224 px: a few hundred JPEG records of 300-500 px
  (smooth random images, about the size of ImageNet photos) are written to a
  temporary directory as four shards; the ImageNet data layer (random-resized
  crop, flip, resize to 224) is compared with the ``optimize_loss`` LARS step
  of ResNet-50 in ``mixed_bfloat16`` (the faster precision here), batch 32.

Goal: pipeline >= 5x the training rate. A row is the median over
``--repeats`` alternating measurements of the pipeline and of training.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from data import DATA_LAYERS  # noqa: E402
from models import MODELS  # noqa: E402
from optimizers import openseq2seq as opt_lib  # noqa: E402

MIN_RATIO = 5.0
LARS = {'momentum': 0.9, 'weight_decay': 5e-4, 'eeta': 0.001,
        'skip_list': ['batch_normalization', 'bias']}


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--repeats', type=int, default=3, help='alternating measurements (median)')
  parser.add_argument('--records', type=int, default=384, help='JPEG records to generate')
  return parser.parse_args()


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


def smooth_image(rng, height, width):
  """A JPEG-friendly random image: a few smooth colour fields plus mild noise."""
  coarse = rng.uniform(0, 255, size=(height // 32 + 2, width // 32 + 2, 3)).astype(np.float32)
  image = tf.image.resize(coarse[np.newaxis], [height, width], method='bicubic')[0]
  image += rng.normal(0, 12, size=(height, width, 3)).astype(np.float32)
  return tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8)


def write_imagenet_records(directory, count, shards=4, seed=0):
  """``count`` ImageNet-format records (``image/encoded``, ``image/class/label``) in shards."""
  rng = np.random.default_rng(seed)
  sizes = []
  writers = [tf.io.TFRecordWriter(os.path.join(directory, f'train-{i:05d}-of-{shards:05d}'))
             for i in range(shards)]
  for n in range(count):
    height, width = (int(x) for x in rng.integers(300, 501, size=2))
    encoded = tf.io.encode_jpeg(smooth_image(rng, height, width), quality=90).numpy()
    sizes.append(len(encoded))
    example = tf.train.Example(features=tf.train.Features(feature={
        'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        'image/class/label': tf.train.Feature(int64_list=tf.train.Int64List(
            value=[int(rng.integers(1, 1001))])),
    }))
    writers[n % shards].write(example.SerializeToString())
  for writer in writers:
    writer.close()
  return statistics.mean(sizes)


def compare(name, make_dataset, batch_size, batches, step, train_steps, repeats):
  dataset = make_dataset()
  batch = next(iter(dataset))
  pipe, train = [], []
  for _ in range(repeats):
    pipe.append(pipeline_rate(dataset, batches, batch_size))
    train.append(train_rate(step, batch, train_steps))
  ratio = statistics.median(np.array(pipe) / np.array(train))
  print(f'{name:52s} {statistics.median(pipe):12.1f} {statistics.median(train):12.1f} {ratio:8.1f}')
  return ratio


def main():
  args = parse_args()
  print(f'TF {tf.__version__}; {args.repeats} alternating measurements, medians')
  print(f'{"data set":52s} {"pipeline/s":>12s} {"training/s":>12s} {"ratio":>8s}')
  results = {}

  fm_step = train_step('resnet_cifar', {'depth': 8, 'weight_decay': 0.0}, (28, 28, 1), 10,
                       'float32')
  for augment in (False, True):
    layer = DATA_LAYERS.resolve('fashion_mnist')({'augment': augment}, 'train')
    name = f'Fashion-MNIST, batch 256, augment={augment}'
    results[name] = compare(name, lambda layer=layer: layer.dataset(256, seed=0), 256, 100,
                            fm_step, 4, args.repeats)

  with tempfile.TemporaryDirectory() as directory:
    mean_bytes = write_imagenet_records(directory, args.records)
    layer = DATA_LAYERS.resolve('imagenet')(
        {'data_dir': directory, 'num_examples': args.records, 'num_classes': 1000,
         'shuffle_buffer': 256}, 'train')
    step = train_step('resnet50', {}, (224, 224, 3), 1000, 'mixed_bfloat16')
    name = f'ImageNet TFRecords 224 px, batch 32 ({mean_bytes / 1e3:.0f} kB JPEGs)'
    results[name] = compare(name, lambda: layer.dataset(32, seed=0), 32, 24, step, 2,
                            args.repeats)

  for name, ratio in results.items():
    print(f'{"PASS" if ratio >= MIN_RATIO else "FAIL"} input pipeline {name}: {ratio:.1f}x '
          f'the training images/sec (goal >= {MIN_RATIO:.0f}x)')


if __name__ == '__main__':
  main()
