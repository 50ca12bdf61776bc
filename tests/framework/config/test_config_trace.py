"""A config's loading goes one way: scripts/trace_config.py, held to its limits.

Loading the main job's config (``load_configs(..., construct=False)``, as
run.py does before TensorFlow) once went back 23 times into files it had
left, the validation asking the registries at each check; with every name resolved once before the checks, the load reads the
file, resolves the mode, checks the keys, resolves the names and validates,
each step handing its result to the next.
"""

import pytest

from scripts import trace_config


def test_the_main_jobs_config_loads_in_one_direction():
  files, returns = trace_config.measure(trace_config.MAIN_CONFIG)
  assert len(returns) <= trace_config.MAX_RETURNS, returns
  assert len(files) <= trace_config.MAX_FILES, files
  # The steps in their order: read, resolve the mode, check the keys (and then the names).
  steps = ['framework/config/config_file.py', 'framework/config/config_resolve.py',
           'framework/config/schema.py']
  assert [f for f in files if f in steps] == steps
  # The validation goes to config_resolve twice, for the mode's durations and for the names;
  # neither it nor the weight decay goes back to the registries once the names are resolved.
  back = sorted(r[0] for r in returns if r[1] == 'framework/config/config_resolve.py')
  assert [b.split(':')[0] for b in back] == ['framework/config/validation.py'] * 2, returns
  assert not [r for r in returns if r[1] == 'core/registry.py'], returns


@pytest.mark.parametrize('path', ['configs/resnet50_lars.py', 'configs/resnet50_lars.yaml'])
def test_a_python_and_a_yaml_config_load_the_same_way(path):
  files, returns = trace_config.measure(path)
  assert len(returns) <= trace_config.MAX_RETURNS, returns
  assert 'framework/config/config_resolve.py' in files


def test_the_script_checks_the_limits(capsys):
  assert trace_config.main(['--check', trace_config.MAIN_CONFIG]) == 0
  assert 'returns to files already left' in capsys.readouterr().out
