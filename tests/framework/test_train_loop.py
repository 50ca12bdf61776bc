"""The train loop's bookkeeping: the divergence check, safe saves, the train scalars."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from framework import summaries
from framework import train_loop
from framework.train_loop import Divergence, RunOutputs, TrainingError


def config(dtype='float32', loss_scaling=1.0):
  return {'dtype': dtype, 'loss_scaling': loss_scaling}


def no_checkpoint():
  return None


def test_float32_with_a_fixed_scale_stops_at_the_first_non_finite_loss():
  divergence = Divergence(config(), iter_size=1, step=7)
  divergence.check(8, np.float32(2.5), no_checkpoint)
  with pytest.raises(TrainingError) as error:
    divergence.check(9, np.float32('nan'), lambda: '/run/ckpt-5')
  assert str(error.value) == (
      'non-finite loss (loss nan) at step 10, 0 micro-step(s) without an applied update; '
      'last checkpoint kept: /run/ckpt-5. Lower the learning rate, enable clipping '
      '(max_grad_norm) or LARC.')


def test_float32_stops_when_one_update_is_skipped():
  # A finite loss whose update did not land: the gradients were not finite.
  divergence = Divergence(config(), iter_size=2, step=3)
  divergence.check(3, np.float32(1.0), no_checkpoint)  # the first micro-step of an update
  with pytest.raises(TrainingError, match=r'^non-finite gradients .* at step 4, 2 micro-step'):
    divergence.check(3, np.float32(1.0), no_checkpoint)


@pytest.mark.parametrize('dtype,loss_scaling', [('float16', 'Backoff'), ('float32', 'LogMax'),
                                                ('mixed_float16', 'Backoff')])
def test_an_adaptive_loss_scale_may_skip_fifty_updates(dtype, loss_scaling):
  iter_size = 2
  divergence = Divergence(config(dtype, loss_scaling), iter_size=iter_size, step=0)
  # A non-finite loss alone does not stop it: the scaler lowers the scale and skips.
  for _ in range(50 * iter_size - 1):
    divergence.check(0, np.float32('inf'), no_checkpoint)
  divergence.check(1, np.float32(0.5), no_checkpoint)  # an update landed: the count restarts
  for _ in range(50 * iter_size - 1):
    divergence.check(1, np.float32('inf'), no_checkpoint)
  with pytest.raises(TrainingError, match=f'at step 2, {50 * iter_size} micro-step'):
    divergence.check(1, np.float32('inf'), no_checkpoint)


class Model:
  """The part of a model RunOutputs.save reads: its variables."""

  def __init__(self, value):
    self.variables = [keras.Variable(np.ones(3, np.float32), name='kernel'),
                      keras.Variable(np.array([1.0, value, 2.0], np.float32), name='moving_mean')]


def outputs_for(tmp_path, chief_steps=(0, 10)):
  model = Model(0.0)
  trainer = types.SimpleNamespace(
      config={'save_summaries_steps': 5, 'num_checkpoints': 3}, logdir=str(tmp_path),
      checkpoint=tf.train.Checkpoint(v=model.variables[0]), global_step=chief_steps[0],
      max_steps=chief_steps[1])
  return RunOutputs(trainer), model


def test_a_state_with_non_finite_variables_is_not_saved(tmp_path):
  outputs, model = outputs_for(tmp_path)
  assert outputs.writes
  assert outputs.save(model, 2) == str(tmp_path / 'ckpt-2')
  with pytest.raises(TrainingError) as error:
    outputs.save(Model(float('inf')), 4)
  assert str(error.value) == (
      'non-finite model variables at step 4 (1, e.g. moving_mean), not saved; last checkpoint '
      f'kept: {tmp_path / "ckpt-2"}. Lower the learning rate, enable clipping (max_grad_norm) '
      'or LARC.')
  assert outputs.latest() == str(tmp_path / 'ckpt-2')
  outputs.close()


def test_a_run_with_nothing_to_train_writes_no_summaries(tmp_path):
  outputs, _ = outputs_for(tmp_path, chief_steps=(10, 10))
  assert not outputs.writes
  outputs.close()
  assert not [name for name in (tmp_path).iterdir() if 'events' in name.name]


def test_write_failures_are_told_from_other_errors(tmp_path):
  logdir = str(tmp_path / 'run')
  # As TensorFlow words it: the OS error comes out of the op's name and the file.
  full = tf.errors.ResourceExhaustedError(
      None, None, '{{function_node __wrapped__SaveV2_dtypes_68_device_/job:localhost/replica:0/'
      f'task:0/device:CPU:0}}}} {logdir}/ckpt-4_temp/part-00000-of-00001.data-00000-of-00001.'
      'tempstate123; No space left on device [Op:SaveV2]')
  error = train_loop._user_error(full, logdir)  # pylint: disable=protected-access
  assert isinstance(error, train_loop.CheckpointError)
  # (No free space is given: the logdir of this test does not exist.)
  assert str(error) == (
      f'writing to {logdir} failed: No space left on device (writing {logdir}/ckpt-4_temp/'
      'part-00000-of-00001.data-00000-of-00001.tempstate123); kept: no checkpoint')
  other = tf.errors.InvalidArgumentError(None, None, 'Incompatible shapes: [2] vs. [3]')
  assert train_loop._user_error(other, logdir) is None  # pylint: disable=protected-access


def test_the_train_scalars_and_the_axes_plot_runs_needs(tmp_path):
  values = {'skipped_updates': np.int64(3), 'loss': np.float32(0.75), 'accuracy': np.float32(0.5),
            'next_learning_rate': np.float32(0.2), 'global_norm': np.float32(1.5),
            'next_loss_scale': np.float32(1024.0)}
  writer = tf.summary.create_file_writer(str(tmp_path))
  with writer.as_default():
    summaries.write_train_scalars(30, values, 640.0, steps_per_epoch=12, global_batch=256)
  writer.close()
  events = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={'tensors': 0})
  events.Reload()
  written = {tag: [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]
             for tag in events.Tags()['tensors']}
  expected = {'skipped_updates': 3.0, 'loss': 0.75, 'accuracy': 0.5, 'learning_rate': 0.2,
              'global_gradient_norm': 1.5, 'loss_scale': 1024.0, 'images_per_sec': 640.0,
              'epoch': 30 / 12, 'images': 30 * 256}
  assert sorted(written) == sorted(expected)
  for tag, value in expected.items():
    assert written[tag] == [(30, pytest.approx(value, rel=1e-6))], tag
