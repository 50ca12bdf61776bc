"""The train loop's bookkeeping: the divergence check, safe saves, the train scalars, and the
loop itself run from plain pieces (``LoopParts``) with no trainer: its cadence, its step, a stop."""

import contextlib
import dataclasses
import json
import signal

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from framework.run import summaries
from framework.run import train_loop
from framework.run.divergence import Divergence, TrainingError
from framework.run.run_outputs import RunOutputs
from framework.tasks.image_classification import ImageClassificationTask


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


def outputs_for(tmp_path, trains=True):
  model = Model(0.0)
  outputs = RunOutputs(tf.train.Checkpoint(v=model.variables[0]), model, str(tmp_path),
                       {'save_summaries_steps': 5, 'num_checkpoints': 3}, trains=trains)
  return outputs, model


def test_a_state_with_non_finite_variables_is_not_saved(tmp_path):
  outputs, model = outputs_for(tmp_path)
  assert outputs.writes
  assert outputs.save(2) == str(tmp_path / 'ckpt-2')
  model.variables[1].assign(np.array([1.0, np.inf, 2.0], np.float32))
  with pytest.raises(TrainingError) as error:
    outputs.save(4)
  assert str(error.value) == (
      'non-finite model variables at step 4 (1, e.g. moving_mean), not saved; last checkpoint '
      f'kept: {tmp_path / "ckpt-2"}. Lower the learning rate, enable clipping (max_grad_norm) '
      'or LARC.')
  assert outputs.latest() == str(tmp_path / 'ckpt-2')
  outputs.close()


@pytest.mark.parametrize('how', ['removed', 'replaced'])
def test_a_logdir_removed_or_replaced_mid_run_gets_its_checkpoint_and_ends_the_run(tmp_path, how):
  import shutil  # pylint: disable=import-outside-toplevel
  from framework.run import checkpoints  # pylint: disable=import-outside-toplevel
  logdir = tmp_path / 'run'
  logdir.mkdir()
  outputs, model = outputs_for(logdir)
  assert outputs.save(5).endswith('ckpt-5')
  shutil.rmtree(logdir)
  if how == 'replaced':
    logdir.mkdir()  # another directory at the same path
  model.variables[0].assign([3.0, 4.0, 5.0])
  with pytest.raises(checkpoints.LogdirRemoved) as raised:
    outputs.save(10)
  assert raised.value.step == 10
  assert f'the logdir {logdir} was removed or replaced while the run trained' in str(raised.value)
  # The state is not lost: the new directory holds the checkpoint of step 10, with its value.
  reader = tf.train.load_checkpoint(str(logdir / 'ckpt-10'))
  assert reader.get_tensor('v/.ATTRIBUTES/VARIABLE_VALUE').tolist() == [3.0, 4.0, 5.0]
  assert not (logdir / 'ckpt-5.index').exists()


def test_a_run_with_nothing_to_train_writes_no_summaries(tmp_path):
  outputs, _ = outputs_for(tmp_path, trains=False)
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


class FakeRun:
  """A run for the loop alone, from plain pieces: no trainer, no model to train.

  Its step advances the global step once every ``iter_size`` micro-steps and
  returns the metrics a train step returns; the evaluations give
  ``accuracies`` in turn. What the loop asked of the pieces is kept in
  ``calls``, in order.
  """

  def __init__(self, tmp_path, max_steps=6, start_step=0, iter_size=1, accuracies=(),
               save_checkpoint_steps=4):
    self.model = Model(0.0)
    self.checkpoint = tf.train.Checkpoint(v=self.model.variables[0])
    self.micro_steps = 0
    self.start_step = start_step
    self.iter_size = iter_size
    self.accuracies = list(accuracies)
    self.calls = []
    self.parts = train_loop.LoopParts(
        config={'save_checkpoint_steps': save_checkpoint_steps, 'save_summaries_steps': 0,
                'print_loss_steps': 1, 'precise_bn': None, 'dtype': 'float32',
                'loss_scaling': 1.0, 'num_checkpoints': 5, 'model': 'fake'},
        overrides=(), task=ImageClassificationTask({'label_smoothing': 0.0}),
        sizes=train_loop.Sizes(max_steps=max_steps, steps_per_epoch=2, batch_size=8,
                               num_workers=1, iter_size=iter_size),
        logdir=str(tmp_path), start_step=start_step, step=self.step,
        open_batches=lambda: iter(range(1000)), check_data=lambda: self.calls.append('data'),
        checkpoint=self.checkpoint, model=self.model, precise_bn=self.precise_bn,
        evaluate=self.evaluate, final_evaluate=self.final_evaluate)

  def step(self, iterator):
    next(iterator)
    self.micro_steps += 1
    global_step = self.start_step + self.micro_steps // self.iter_size
    self.calls.append(('step', global_step))
    return {name: tf.constant(value) for name, value in (
        ('global_step', np.int64(global_step)), ('loss', np.float32(1.0)),
        ('accuracy', np.float32(0.5)), ('skipped_updates', np.int64(0)),
        ('next_learning_rate', np.float32(0.1)), ('next_loss_scale', np.float32(1.0)),
        ('global_norm', np.float32(2.0)))}

  @contextlib.contextmanager
  def precise_bn(self, step, keep, when=True, stop=None):
    del stop
    self.calls.append(('precise_bn', step, keep, bool(when)))
    yield

  def evaluate(self):
    accuracy = self.accuracies.pop(0)
    self.calls.append(('evaluate', accuracy))
    return {'accuracy': accuracy, 'top5_accuracy': 1.0, 'loss': 1.0 - accuracy,
            'examples': 100}

  def final_evaluate(self):
    self.calls.append('final_evaluate')


class StopAfter:
  """A stop request that every worker agrees on once ``steps`` micro-steps were taken."""

  def __init__(self, run, steps, signum=signal.SIGTERM):
    self.run, self.steps, self.signum_sent = run, steps, signum
    self.signum = None
    self.name = signal.Signals(signum).name

  def agreed(self):
    if self.run.micro_steps >= self.steps:
      self.signum = self.signum_sent
    return self.signum or 0


def steps_and_checkpoints(run, tmp_path):
  steps = [call[1] for call in run.calls if call[0] == 'step']
  saved = sorted(int(path.name.split('-')[1].split('.')[0])
                 for path in tmp_path.glob('ckpt-*.index'))
  return steps, saved


def test_the_loop_saves_evaluates_and_keeps_the_best_on_its_cadence(tmp_path):
  run = FakeRun(tmp_path, max_steps=6, accuracies=(0.5, 0.8, 0.6))
  metrics = train_loop.train(run.parts, evaluate_every=2)
  steps, saved = steps_and_checkpoints(run, tmp_path)
  assert steps == [1, 2, 3, 4, 5, 6]
  assert saved == [4, 6]  # every 4 steps and at the end
  # Evaluations every 2 steps before the end (no precise_bn to recompute before
  # them), then precise_bn kept for the last checkpoint and its evaluation.
  assert [call for call in run.calls if call[0] != 'step' and call != 'data'] == [
      ('precise_bn', 2, False, False), ('evaluate', 0.5),
      ('precise_bn', 4, False, False), ('evaluate', 0.8),
      ('precise_bn', 6, True, True), ('evaluate', 0.6), 'final_evaluate']
  assert run.calls.count('data') == 6  # the corrupt-record check after every micro-step
  assert metrics['accuracy'] == 0.6
  with open(tmp_path / 'best' / 'best.json', encoding='utf-8') as f:
    best = json.load(f)
  assert (best['step'], best['accuracy']) == (4, 0.8)


def test_the_loop_says_which_split_and_step_its_final_numbers_come_from(tmp_path, capsys):
  run = FakeRun(tmp_path, max_steps=6, accuracies=(0.5, 0.8, 0.6))
  final = {'accuracy': 0.7, 'top5_accuracy': 1.0, 'loss': 0.3, 'examples': 50}
  run.parts = dataclasses.replace(run.parts, eval_split='validation',
                                  final_evaluate=lambda: (final, 4, 'eval'))
  metrics = train_loop.train(run.parts, evaluate_every=2)
  # The best checkpoint (step 4, by validation accuracy) on the final split.
  assert metrics == dict(final, step=4, split='eval', selected_on='validation')
  lines = [l for l in capsys.readouterr().out.splitlines() if ' at step ' in l]
  assert lines[-2].startswith('eval at step 6: loss 0.4000, top-1 0.6000, ')
  assert lines[-2].endswith('(100 examples) on the validation split')
  assert lines[-1] == ('eval split, best checkpoint by validation accuracy, at step 4: loss '
                       '0.3000, top-1 0.7000, top-5 1.0000 (50 examples)')
  # Without a final split: the last evaluation's, on its split.
  again = FakeRun(tmp_path / 'again', max_steps=2, accuracies=(0.5,))
  again.parts = dataclasses.replace(again.parts, eval_split='test')
  assert train_loop.train(again.parts, evaluate_every=2) == {
      'accuracy': 0.5, 'top5_accuracy': 1.0, 'loss': 0.5, 'examples': 100, 'step': 2,
      'split': 'test'}


def test_the_loop_reads_the_global_step_from_what_the_step_returns(tmp_path):
  # Two micro-steps per update, from a resumed step 2: the loop ends at step 5.
  run = FakeRun(tmp_path, max_steps=5, start_step=2, iter_size=2, save_checkpoint_steps=0)
  assert train_loop.train(run.parts) is None
  steps, saved = steps_and_checkpoints(run, tmp_path)
  assert steps == [2, 3, 3, 4, 4, 5]
  assert saved == [5]
  assert ('precise_bn', 5, True, True) in run.calls
  assert not [call for call in run.calls if call[0] == 'evaluate']


def test_a_run_resumed_off_the_cadence_saves_and_evaluates_where_a_straight_run_does(tmp_path):
  # Stopped at step 3 (a signal), resumed there: the evaluations every 2 steps fall
  # on 4 and 6 and the saves every 4 steps on 4, as in a run from step 0, not on 5 and 7.
  run = FakeRun(tmp_path, max_steps=8, start_step=3, accuracies=(0.5, 0.7, 0.6))
  train_loop.train(run.parts, evaluate_every=2)
  steps, saved = steps_and_checkpoints(run, tmp_path)
  assert steps == [4, 5, 6, 7, 8]
  assert saved == [4, 8]
  assert [call[1] for call in run.calls if call[0] == 'precise_bn'] == [4, 6, 8]


def test_a_stop_saves_the_step_it_came_after(tmp_path):
  run = FakeRun(tmp_path, max_steps=6, accuracies=(0.5,))
  stop = StopAfter(run, 3)
  with pytest.raises(train_loop.RunStopped) as stopped:
    train_loop.train(run.parts, evaluate_every=2, stop=stop)
  assert (stopped.value.signum, stopped.value.step) == (signal.SIGTERM, 3)
  assert stopped.value.checkpoint == str(tmp_path / 'ckpt-3')
  steps, saved = steps_and_checkpoints(run, tmp_path)
  assert steps == [1, 2, 3]
  assert saved == [3]
  assert not (tmp_path / train_loop.ENDING_MARK).exists()  # the end of training was not reached
