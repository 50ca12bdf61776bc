"""ImageNet (ILSVRC-2012) from TFRecord shards of JPEG-encoded examples.

The shards are the usual ones (``train-00000-of-01024``, ``validation-00000-of-00128``)
whose ``tf.train.Example`` records hold ``image/encoded`` (JPEG bytes) and
``image/class/label`` (int64, 1-based in the standard conversion).

The layer is the ``tfrecord`` layer (``data/tfrecord.py``) with its
``imagenet`` preset and the params of the ImageNet configs; it keeps
ImageNet's documented sizes rather than counting the files (``tfrecord`` with
``preset: imagenet`` counts them, for a part of ImageNet). With fewer files
than workers, records are dealt to the workers instead of files.

References:
  He, Zhang, Ren, Sun. "Deep Residual Learning for Image Recognition", 2016.
  Szegedy et al. "Going Deeper with Convolutions", 2015 (random-resized crop).
"""

import logging

from data import images, imagenet_facts, tfrecord_facts
# Importable from here too: the crop and the TFRecord framing and shuffle this layer reads with.
from data.encoded_images import window_shuffle  # pylint: disable=unused-import
from data.images import train_crop_window  # pylint: disable=unused-import
from data.tfrecord import (TFRecordDataLayer, count_records, crc32c,  # pylint: disable=unused-import
                           masked_crc32c, verified_record_counts)

log = logging.getLogger(__name__)


class ImageNetDataLayer(TFRecordDataLayer):
  """ImageNet from TFRecord shards, with the usual ResNet preprocessing.

  Train: files are dealt to workers (worker ``w`` reads files ``w, w + W, ...``
  of the sorted list), shuffled per epoch, read ``min(16, files)`` at a time,
  and consecutive windows of ``shuffle_buffer`` records are permuted with
  stateless keys (memory: about two windows of encoded images); each image
  gets a random-resized crop (8-100 % of the area, aspect 3/4-4/3), a random
  mirror and a resize to ``image_size``. Every worker reads exactly
  ``batches_per_epoch`` batches per epoch: a worker whose files hold fewer
  records than its share of ``num_examples`` wraps around them. Eval: one
  ordered pass over the worker's files (so workers get as many batches as
  their files hold), shorter side resized to ``image_size / 0.875``, centre
  crop. ``num_examples`` defaults to ImageNet's 1,281,167 (train) and 50,000
  (eval), whatever the files hold (a warning says when they disagree).

  Resuming: the record order of an epoch is a pure function of ``(seed, epoch,
  worker)`` (fixed cycle length, deterministic interleave, stateless shuffle) and
  each image's augmentation is keyed by ``(seed, epoch, position)``, so
  ``start_batch`` is exact. Skipped records are still read from disk (and go
  through the window shuffle) but are not decoded.

  Corrupt files: with ``verify_files`` (the default) the constructor walks the
  record framing of every file (one 12-byte read per record, header CRCs
  checked, files framed in parallel and cached per process) and raises a
  ``DataError`` naming a truncated or corrupt file. A record whose framing is
  intact but whose JPEG cannot be decoded stops the run with an error naming
  its file and record index; with ``skip_corrupt`` it is dropped, counted
  (``corrupt_count``) and reported on stderr, and the run fails once more than
  ``max_corrupt_fraction`` of the records read (at least an epoch's worth) were
  dropped. A run resumed in an epoch that dropped records before the stop sees
  that epoch's remaining batches shifted by the number dropped. A label
  outside ``[0, num_classes)`` after ``label_offset`` stops the run, naming the
  record.
  """

  # What it accepts and how big its splits are: data/imagenet_facts.py (no TensorFlow).
  PARAMS = imagenet_facts.PARAMS
  kind = 'imagenet'

  def _resolve(self):
    params = self.params
    pattern = params['file_pattern']
    # The preset's files, crops (eval resizes the shorter side to image_size / 0.875, 256 for
    # 224, before the centre crop) and statistics.
    preset = tfrecord_facts.PRESETS['imagenet']
    return {
        **preset,
        'data_dir': params['data_dir'],
        'train_files': pattern or preset['train_files'],
        'eval_files': pattern or preset['eval_files'],
        'split': 'train' if self.mode == 'train' else 'validation',
        'image_size': images.image_size_pair(params['image_size']),
        'channels': 3,
        'num_classes': params['num_classes'],
        'num_examples': params['num_examples'] or imagenet_facts.NUM_EXAMPLES[self.mode],
        'label_offset': params['label_offset'],
        'label_name': 'image/class/label',
        'label_hint': 'check data_layer_params.label_offset and num_classes',
        'image_word': 'JPEG image',
        'shuffle_buffer': params['shuffle_buffer'],
        'skip_corrupt': params['skip_corrupt'],
        'max_corrupt_fraction': params['max_corrupt_fraction'],
    }

  def _verify_at_construction(self):
    if not self.params['verify_files']:
      return
    total = sum(self.counts().values())
    if total != self.num_examples:
      log.warning('imagenet: %s holds %d records but num_examples is %d; give num_examples, or '
                  'use data_layer: tfrecord with preset: imagenet, which counts the records',
                  self.pattern, total, self.num_examples)

  def _save_counts(self, counted):
    # ImageNet's counts stay in the process, never in a file: its sizes are documented.
    del counted
