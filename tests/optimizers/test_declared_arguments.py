"""The registries' declared arguments (optimizers/registry.py) are those of the real signatures.

The config layer checks ``optimizer_params`` and ``lr_policy_params`` names
against these declarations before TensorFlow is loaded; this test imports the
classes and functions and reads their signatures, so a declaration that
drifts from its code fails here.
"""

import importlib.metadata
import inspect
import os

import pytest

from framework.config.argument_checks import _keyword_arguments
from optimizers import registry


def declared_entries():
  for reg in (registry.OPTIMIZER_CLS_NAMES, registry.LR_POLICIES):
    for name in reg:
      arguments = reg.facts(name).get('ARGUMENTS')
      if arguments is not None:
        yield pytest.param(reg, name, arguments, id=f'{reg.kind}:{name}')


def test_the_pinned_keras_is_the_one_the_declarations_are_for():
  # requirements.txt pins Keras; the optimizers' declarations hold for that version only.
  assert importlib.metadata.version('keras') == registry.KERAS_VERSION
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  with open(os.path.join(root, 'requirements.txt'), encoding='utf-8') as f:
    assert f'keras=={registry.KERAS_VERSION}\n' in f.read()


def test_the_generated_arguments_are_what_the_classes_declare():
  # The file is written from the classes under the pinned Keras: a changed signature
  # or another Keras shows here as a stale file (scripts/optimizer_arguments.py rewrites it).
  from scripts import optimizer_arguments  # pylint: disable=import-outside-toplevel
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  with open(os.path.join(root, optimizer_arguments.PATH), encoding='utf-8') as f:
    assert f.read() == optimizer_arguments.render()
  assert optimizer_arguments.main(['--check']) == 0


def test_every_entry_but_the_wrapper_declares_its_arguments():
  undeclared = [name for reg in (registry.OPTIMIZER_CLS_NAMES, registry.LR_POLICIES) for name in reg
                if 'ARGUMENTS' not in reg.facts(name)]
  assert undeclared == ['AGN']  # its optimizer_params are the wrapped optimizer's


@pytest.mark.parametrize('reg, name, arguments', list(declared_entries()))
def test_declared_arguments_match_the_signature(reg, name, arguments):
  target = reg[name]
  names, required, accepts_any = _keyword_arguments(target)
  assert not accepts_any
  assert sorted(arguments.names) == sorted(names)
  assert len(set(arguments.names)) == len(arguments.names)
  assert sorted(arguments.required) == sorted(required)
  assert arguments.who == target.__name__


def test_own_weight_decay_is_the_signature_default():
  own = {name: registry.OPTIMIZER_CLS_NAMES.facts(name)['OWN_WEIGHT_DECAY']
         for name in registry.OPTIMIZER_CLS_NAMES
         if 'OWN_WEIGHT_DECAY' in registry.OPTIMIZER_CLS_NAMES.facts(name)}
  assert sorted(own) == ['AdamW', 'LAMB', 'LARS', 'Muon']
  for name, value in own.items():
    # Every argument that holds the optimizer's own decay (Muon has two) defaults to it.
    arguments = registry.OPTIMIZER_CLS_NAMES.facts(name)['OWN_DECAY_ARGUMENTS']
    assert 'weight_decay' in arguments
    parameters = inspect.signature(registry.OPTIMIZER_CLS_NAMES[name]).parameters
    for argument in arguments:
      default = parameters[argument].default
      if default is inspect.Parameter.empty:
        # Required (TF 1's AdamWOptimizer): the config gives it, and the fact says 0.
        assert value == 0.0, (name, argument)
        continue
      assert (default or 0.0) == value, (name, argument)
