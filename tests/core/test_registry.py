"""Registries: eager and lazy entries, facts, and TensorFlow-free package imports."""

import json
import os
import subprocess
import sys
import types

import pytest

from core.registry import Registry
from core.registry import UnknownNameError
from core.registry import load_attribute

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def fake_module(monkeypatch):
  """A module ``fake_entries`` counting its imports through the import system."""
  module = types.ModuleType('fake_entries')
  module.build = lambda: 'built'
  module.Outer = types.SimpleNamespace(inner='nested')
  loads = []

  class Finder:
    def find_spec(self, name, path=None, target=None):  # pylint: disable=unused-argument
      if name != 'fake_entries':
        return None
      import importlib.machinery  # pylint: disable=import-outside-toplevel

      class Loader:
        def create_module(self, spec):  # pylint: disable=unused-argument
          loads.append(name)
          return module

        def exec_module(self, mod):  # pylint: disable=unused-argument
          pass

      return importlib.machinery.ModuleSpec(name, Loader())

  monkeypatch.setattr(sys, 'meta_path', [Finder()] + sys.meta_path)
  monkeypatch.delitem(sys.modules, 'fake_entries', raising=False)
  return loads


def test_a_lazy_entry_is_imported_on_its_first_lookup_only(fake_module):
  registry = Registry('model')
  registry.register_lazy('fake', 'fake_entries:build', PARAMS={'a': 1})
  registry.register('eager', len)
  assert sorted(registry) == ['eager', 'fake'] and len(registry) == 2
  assert 'fake' in registry and 'Fake' not in registry
  assert registry.facts('fake') == {'PARAMS': {'a': 1}} and registry.facts('eager') == {}
  assert not registry.is_loaded('fake') and registry.is_loaded('eager')
  with pytest.raises(UnknownNameError, match=r"unknown model 'fak' \(did you mean 'fake'\?\); "
                                             r'known: eager, fake'):
    registry['fak']
  with pytest.raises(UnknownNameError):
    registry.facts('fak')
  assert fake_module == []
  assert registry['fake']() == 'built'
  assert registry.get('fake')() == 'built' and registry.resolve('fake')() == 'built'
  assert fake_module == ['fake_entries'] and registry.is_loaded('fake')
  assert registry.get('nothing', 7) == 7


def test_lazy_names_are_case_insensitive_when_the_registry_is(fake_module):
  registry = Registry('optimizer', case_insensitive=True)
  registry.register_lazy('Fake', 'fake_entries:Outer.inner')
  assert 'FAKE' in registry and list(registry) == ['Fake']
  assert registry['fake'] == 'nested'
  with pytest.raises(ValueError, match="optimizer 'fake' is registered twice"):
    registry.register('fake', len)
  with pytest.raises(ValueError, match="optimizer 'FAKE' is registered twice"):
    registry.register_lazy('FAKE', 'fake_entries:build')


def test_a_lazy_target_must_name_module_and_attribute():
  with pytest.raises(ValueError, match='expected "module:attribute"'):
    Registry('model').register_lazy('x', 'fake_entries.build')
  with pytest.raises(ValueError, match='expected "module:attribute"'):
    load_attribute('os.path')
  assert load_attribute('os.path:join') is os.path.join


def run_python(code):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  result = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr
  return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_packages_name_their_entries_without_tensorflow():
  answer = run_python(
      'import json, sys\n'
      'import data, models, optimizers\n'
      'from optimizers.registry import LR_POLICIES\n'
      'from framework.config import validation as config\n'
      'names = [sorted(r) for r in config.default_registries().values()]\n'
      'facts = [sorted(models.MODELS.facts(n)["PARAMS"]) for n in models.MODELS]\n'
      'print(json.dumps({"names": names, "facts": facts,\n'
      '                  "agn": optimizers.OPTIMIZER_CLS_NAMES.facts("agn"),\n'
      '                  "all": optimizers.__all__, "dir": "LARSOptimizer" in dir(optimizers),\n'
      '                  "loaded": sorted(m for m in ("tensorflow", "keras", "horovod")\n'
      '                                   if m in sys.modules)}))\n')
  assert answer['loaded'] == []
  assert answer['names'] == [
      ['keras_application', 'resnet50', 'resnet_cifar', 'transformer'],
      ['cifar10', 'cmudict', 'fashion_mnist', 'image_folder', 'imagenet', 'synthetic',
       'text_pairs', 'tfds', 'tfrecord'],
      ['AGN', 'Adagrad', 'Adam', 'AdamW', 'Ftrl', 'KerasMomentum', 'LAMB', 'LARS', 'Lion',
       'Momentum', 'Muon', 'RMSProp', 'SGD'],
      ['cosine_decay', 'exp_decay', 'fixed_lr', 'inv_poly_decay', 'piecewise_constant',
       'poly_decay', 'transformer_policy']]
  assert answer['facts'][0] == ['bn_epsilon', 'bn_momentum', 'ghost_batch_size', 'weight_decay',
                                'zero_init_residual']
  assert answer['agn'] == {'WRAPS_OPTIMIZER': True}
  assert answer['dir'] and 'optimize_loss' in answer['all'] and 'LARSOptimizer' in answer['all']


def test_every_lazy_entry_and_export_loads_the_object_its_module_defines():
  answer = run_python(
      'import json\n'
      'import data, models, optimizers\n'
      'from framework.config import validation as config\n'
      'from optimizers import LARSOptimizer\n'
      'wrong = []\n'
      'for kind, registry in config.default_registries().items():\n'
      '  for name in registry:\n'
      '    obj = registry[name]\n'
      '    declared = registry.facts(name).get("PARAMS")\n'
      '    if declared is not None and obj.PARAMS is not declared:\n'
      '      wrong.append(f"{kind} {name}: PARAMS")\n'
      '    if registry.facts(name).get("WRAPS_OPTIMIZER", False) != getattr(obj, "WRAPS_OPTIMIZER", False):\n'
      '      wrong.append(f"{kind} {name}: WRAPS_OPTIMIZER")\n'
      'for name in optimizers.__all__:\n'
      '  obj = getattr(optimizers, name)\n'
      '  if getattr(obj, "__name__", name) != name and name not in ("OPTIMIZER_CLS_NAMES", "OPTIMIZER_SUMMARIES"):\n'
      '    wrong.append(f"optimizers.{name}")\n'
      'import optimizers.lars\n'
      'print(json.dumps({"wrong": wrong, "same": LARSOptimizer is optimizers.lars.LARSOptimizer,\n'
      '                  "policy": config.default_registries()["lr_policy"]["poly_decay"].__module__}))\n')
  assert answer == {'wrong': [], 'same': True, 'policy': 'optimizers.lr_policies'}


def test_with_keras_loaded_the_saveable_classes_register_on_import():
  answer = run_python(
      'import json\n'
      'import keras\n'
      'import optimizers, models\n'
      'names = ["largebatch>LARSOptimizer", "largebatch>LAMB", "largebatch>MomentumOptimizer",\n'
      '         "largebatch>LossScaleOptimizer", "models>ZeroPadShortcut"]\n'
      'print(json.dumps([keras.saving.get_registered_object(n) is not None for n in names]))\n')
  assert answer == [True] * 5


# ---------------------------------------------------------------------------
# Import paths: the user's own code by "package.module:name"

@pytest.fixture
def user_module(tmp_path, monkeypatch):
  """A module ``user_layers`` in a directory of its own, put on the path."""
  (tmp_path / 'user_layers.py').write_text(
      'class Folder:\n'
      '  TASK = "image_classification"\n'
      '  PARAMS = {"root": 1}\n'
      'def build(params):\n'
      '  return params\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, 'user_layers', raising=False)
  return tmp_path


def test_an_import_path_is_looked_up_by_importing_it(user_module):
  registry = Registry('data layer')
  registry.register('eager', len)
  assert 'user_layers:Folder' in registry
  folder = registry['user_layers:Folder']
  assert folder.__name__ == 'Folder' and folder.__module__ == 'user_layers'
  assert registry.resolve('user_layers:build')({'a': 2}) == {'a': 2}
  # Its facts are the object's own attributes, read once it is imported.
  assert registry.facts('user_layers:Folder') == {}
  assert registry.is_loaded('user_layers:Folder')
  # The registered names are unchanged.
  assert sorted(registry) == ['eager']


def test_an_import_path_that_does_not_import_is_one_line(user_module):
  registry = Registry('data layer')
  assert 'no_such_module:Folder' not in registry
  assert registry.unknown_message('no_such_module:Folder') == (
      "data layer 'no_such_module:Folder': cannot import module 'no_such_module' "
      "(ModuleNotFoundError: No module named 'no_such_module'); put its directory on the path: "
      "the config file's own directory is, and so are the directories of the import_paths key")
  assert 'user_layers:Nothing' not in registry
  with pytest.raises(UnknownNameError, match=r"^data layer 'user_layers:Nothing': module "
                     r"'user_layers' \(.*user_layers.py\) has no attribute 'Nothing'$"):
    registry['user_layers:Nothing']  # pylint: disable=pointless-statement


def test_an_error_inside_the_users_module_is_named(tmp_path, monkeypatch):
  # Found on the path and failed as it ran: its own error and line, not advice on the path.
  (tmp_path / 'broken_layers.py').write_text('import json\nx = 1 / 0\n')
  (tmp_path / 'importing_broken.py').write_text('import broken_layers\n')
  (tmp_path / 'needs_a_package.py').write_text('\nimport no_such_package_here\n')
  (tmp_path / 'bad_syntax.py').write_text('def f(:\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  registry = Registry('model')
  assert registry.unknown_message('broken_layers:build') == (
      "model 'broken_layers:build': module 'broken_layers' raised ZeroDivisionError on import "
      f"({tmp_path}/broken_layers.py line 2): division by zero")
  # The deepest line of the user's code, through a module that imports the broken one.
  assert registry.unknown_message('importing_broken:build') == (
      "model 'importing_broken:build': module 'importing_broken' raised ZeroDivisionError on "
      f"import ({tmp_path}/broken_layers.py line 2): division by zero")
  assert registry.unknown_message('needs_a_package:build') == (
      "model 'needs_a_package:build': module 'needs_a_package' raised ModuleNotFoundError on "
      f"import ({tmp_path}/needs_a_package.py line 2): No module named 'no_such_package_here'")
  assert registry.unknown_message('bad_syntax:build') == (
      "model 'bad_syntax:build': module 'bad_syntax' raised SyntaxError on import "
      f"({tmp_path}/bad_syntax.py line 1): invalid syntax")


def test_a_module_named_like_a_framework_package_is_told_to_be_renamed(tmp_path, monkeypatch):
  (tmp_path / 'models.py').write_text('def mine(): pass\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.syspath_prepend(ROOT)  # the framework first, as run.py puts it
  assert Registry('model').unknown_message('models:mine').endswith(
      "has no attribute 'mine'; 'models' is also a package of the framework, which comes first "
      'on the path: rename your module')


def test_a_registered_name_with_a_colon_is_a_name():
  registry = Registry('lr policy')
  registry.register('a:b', len)
  assert registry['a:b'] is len and registry.facts('a:b') == {}
