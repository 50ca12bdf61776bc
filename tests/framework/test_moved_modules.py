"""The modules' paths before the framework's rooms give the moved modules themselves."""

import importlib
import os
import sys

import pytest

import framework
from core import moved_modules

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize('old, new', sorted(framework.MOVED_MODULES.items()))
def test_an_old_module_path_is_the_moved_module_itself(old, new):
  moved = importlib.import_module(old)
  assert moved is importlib.import_module(new)
  # The module keeps its own spec: reloading or -m finds the file where it lives.
  assert moved.__spec__.name == new


@pytest.mark.parametrize('old, new', sorted(framework.MOVED_MODULES.items()))
def test_an_old_path_names_no_file_and_the_new_one_does(old, new):
  # An old path that is still a file would shadow the finder and give a second module.
  assert not os.path.exists(os.path.join(ROOT, *old.split('.')) + '.py')
  assert os.path.isfile(os.path.join(ROOT, *new.split('.')) + '.py')


def test_old_names_are_the_same_objects():
  # pylint: disable=import-outside-toplevel
  from framework import checkpoints
  from framework.distributed import is_chief
  from framework.engines import distributed
  from framework.run import trainer
  from framework.run.checkpoints import BestCheckpoint
  from framework.trainer import Trainer
  assert Trainer is trainer.Trainer
  assert is_chief is distributed.is_chief
  assert checkpoints.BestCheckpoint is BestCheckpoint


def test_the_old_config_module_names_are_read_from_their_modules():
  # pylint: disable=import-outside-toplevel
  from framework import config
  from framework.config import config_file
  from framework.config import config_resolve
  from framework.config import schedule
  from framework.config import validation
  assert config.load_configs is validation.load_configs
  assert config.validate is validation.validate
  assert config.to_yaml is config_file.to_yaml
  assert config.resolve is config_resolve.resolve
  assert config.epochs_to_steps is schedule.epochs_to_steps
  with pytest.raises(AttributeError, match="'framework.config' has no attribute 'nothing'"):
    config.nothing  # pylint: disable=pointless-statement


def test_python_m_of_an_old_path_runs_the_moved_module():
  # runpy asks the loader of the old path's spec (the finder) for the code to run as __main__.
  finder, = [f for f in sys.meta_path
             if isinstance(f, moved_modules.MovedModuleFinder) and f.moved is framework.MOVED_MODULES]
  path = os.path.join(ROOT, 'framework', 'config', 'check_configs.py')
  assert finder.get_code('framework.check_configs').co_filename == path
  # runpy's sys.argv[0] is the spec's origin.
  assert finder.find_spec('framework.check_configs').origin == path
