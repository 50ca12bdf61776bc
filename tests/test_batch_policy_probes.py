"""Round five's probes of ``batch_policy`` in run.py runs: each answers rightly or in one line.

The tiny linear classifier of tests/test_batch_policy_run.py (micro-batches of
8, 32 run steps an epoch) where a policy only has to grow; Fashion-MNIST where
the noise scale must be measured.
"""

import glob
import re
import textwrap

import pytest

from framework.config import validation
from tests.test_batch_policy_run import CHANGE
from tests.test_batch_policy_run import CONFIG
from tests.test_batch_policy_run import NOISE_COMMON
from tests.test_critical_batch import MODEL
from tests.test_critical_batch import run

pytestmark = pytest.mark.slow

NOISE_POLICY = ['--set', 'noise_scale_params.decay=0.5',
                '--set', 'batch_policy_params={max_batch: 256, interval: 3, factor: 0.01}']


@pytest.fixture(scope='module')
def config(tmp_path_factory):
  directory = tmp_path_factory.mktemp('probes')
  (directory / 'tiny_linear.py').write_text(MODEL)
  path = directory / 'tiny.yaml'
  path.write_text(CONFIG)
  return str(path)


def refusal(result):
  """The last line of a run refused with status 2 and no traceback."""
  assert result.returncode == 2, result
  assert 'Traceback' not in result.stderr, result.stderr
  return result.stderr.strip().splitlines()[-1]


# --- 1. a built-in policy by import path or as the function is the built-in one ---------------

def test_the_noise_scale_policy_by_its_import_path_measures_and_grows(tmp_path):
  out = run(*NOISE_COMMON, *NOISE_POLICY, '--set', 'batch_policy=core.batch_policy:noise_scale',
            '--logdir', str(tmp_path / 'run')).stdout
  changes = [CHANGE.match(l).groups()[:3] for l in out.splitlines() if CHANGE.match(l)]
  assert changes == [('64', '256', '3')], out
  assert 'batch policy noise_scale from global batch 64' in out


def test_a_python_config_naming_the_function_is_the_built_in_policy(tmp_path):
  path = tmp_path / 'grows.py'
  path.write_text(textwrap.dedent('''\
      from core.batch_policy import noise_scale

      base_params = {
          'model': 'resnet_cifar', 'model_params': {'depth': 8},
          'data_layer': 'fashion_mnist', 'batch_size_per_gpu': 64, 'max_steps': 12,
          'optimizer': 'Momentum', 'optimizer_params': {'momentum': 0.9},
          'lr_policy_params': {'learning_rate': 0.05},
          'batch_policy': noise_scale, 'batch_policy_params': {'interval': 3},
      }
      '''))
  cfg = validation.load_configs(str(path), 'train', construct=False)['train']
  assert cfg['batch_policy'] == 'noise_scale'
  from framework.run import noise_scale as noise_lib  # pylint: disable=import-outside-toplevel
  # One worker at iter_size 1: measured (in halves) because the policy grows by it.
  assert noise_lib.pipeline_arguments(cfg, 1)[0] is True
  with pytest.raises(validation.ConfigError, match=r"^batch_policy_params: unknown key\(s\) "
                     r"\['every'\] for batch_policy 'noise_scale'"):
    validation.load_configs(str(path), 'train', ['batch_policy_params={every: 3}'],
                            construct=False)


@pytest.mark.parametrize('policy', ['core.batch_policy:noise_scale', 'noise_scale'])
def test_the_noise_scale_policy_in_any_form_refuses_noise_scale_false(config, tmp_path, run_main,
                                                                      policy):
  result = run_main('--config', config, '--mode', 'train', '--logdir', tmp_path / 'refused',
                    '--set', f'batch_policy={policy}', '--set', 'noise_scale=false')
  assert refusal(result).endswith("batch_policy: 'noise_scale' grows the batch by the measured "
                                  'noise scale, but noise_scale is false; set noise_scale: auto '
                                  '(or true)'), result.stderr
  assert not glob.glob(str(tmp_path / 'refused' / 'ckpt-*'))
