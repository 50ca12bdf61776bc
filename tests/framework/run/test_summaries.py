"""framework/run/summaries.py: the run's config and hyperparameters, written anew at each start."""

import glob
import os

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from framework.run import summaries


def hparams_shown(directory):
  """The hyperparameters TensorBoard's HParams tab reads from ``directory``."""
  events = event_accumulator.EventAccumulator(directory)
  events.Reload()
  content = events.PluginTagToContent('hparams')['_hparams_/session_start_info']
  start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
  return {name: value.number_value or value.string_value for name, value in start.hparams.items()}


def test_a_resumed_run_shows_its_new_hyperparameters(tmp_path):
  directory = str(tmp_path)
  summaries.write_run_config(directory, 'max_steps: 100\n', {'max_steps': 100, 'optimizer': 'LARS'})
  assert hparams_shown(directory) == {'max_steps': 100, 'optimizer': 'LARS'}
  # Resumed with more steps: TensorBoard keeps a tag's first metadata, so the first file goes.
  summaries.write_run_config(directory, 'max_steps: 300\n', {'max_steps': 300, 'optimizer': 'LARS'})
  assert hparams_shown(directory) == {'max_steps': 300, 'optimizer': 'LARS'}
  assert len(glob.glob(os.path.join(directory, f'*{summaries.RUN_CONFIG_SUFFIX}'))) == 1
