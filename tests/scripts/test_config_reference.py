"""Tests of scripts/config_reference.py: docs/config.md's reference is the declarations' own."""

import re

import pytest

from core.params import REQUIRED
from core.params import DictParam
from core.params import Param
from scripts import config_reference


def block_of(text):
  return text[text.index(config_reference.BEGIN):text.index(config_reference.END)
              + len(config_reference.END) + 1]


def row(block, section, name):
  """The cells of ``name``'s row in ``section`` (a heading's text) of the generated block."""
  part = block.split(f'\n{section}\n', 1)[1].split('\n#', 1)[0]
  line, = [line for line in part.splitlines() if line.startswith(f'| `{name}` |')]
  return [c.strip() for c in line.strip('|').split(' | ')]


@pytest.fixture(scope='module')
def block():
  return config_reference.reference()


def test_the_page_is_up_to_date(block):
  with open(config_reference.PAGE, encoding='utf-8') as f:
    page = f.read()
  assert block_of(page) == block, (
      f'docs/config.md is out of date: run {config_reference.COMMAND}')


def test_the_defaults_are_those_of_the_numerical_contract(block):
  # The defaults docs/math.md states for LARS, the lr policies and the loss
  # scalers, read back from the generated page.
  assert row(block, '### `LARS` (`LARSOptimizer`)', 'eeta') == ['`eeta`', '`0.001`']
  assert row(block, '### `LARS` (`LARSOptimizer`)', 'momentum') == ['`momentum`', '`0.9`']
  # LARS sets its own weight decay (tf.contrib's 1e-4); Keras' base has none.
  assert row(block, '### `LARS` (`LARSOptimizer`)', 'weight_decay') == ['`weight_decay`',
                                                                       '`0.0001`']
  assert row(block, '### Keras base arguments', 'weight_decay') == ['`weight_decay`', '`None`']
  assert row(block, '### `poly_decay`', 'power') == ['`power`', '`1.0`', '']
  assert row(block, '### `poly_decay`', 'decay_steps') == [
      '`decay_steps`', 'required', '`decay_epochs`, `decay_fraction`']
  assert row(block, '### `inv_poly_decay`', 'min_lr')[1] == 'required'
  assert row(block, '### `Backoff`', 'scale_max') == ['`scale_max`', f'`{float(2 ** 14)}`']
  assert row(block, '### `LogMax`', 'overflow_std_dev') == ['`overflow_std_dev`', '`3.09`']
  assert row(block, '### `dynamic`', 'initial_scale') == ['`initial_scale`', f'`{float(2 ** 15)}`']


def test_the_keys_and_their_nesting_are_the_schema(block):
  top = block.split('\n## Top-level keys\n', 1)[1].split('\n## ', 1)[0]
  keys = re.findall(r'^\| `([\w.]+)` \|', top, re.M)
  assert keys[:3] == ['model', 'model_params', 'data_layer']
  assert keys[keys.index('larc_params') + 1] == 'larc_params.larc_eta'
  assert row(block, '## Top-level keys', 'larc_params.larc_mode')[1:4] == [
      'a string', "`'clip'`", '`clip`, `scale`']
  assert row(block, '## Top-level keys', 'batch_size_per_gpu')[2] == 'required'
  # Arguments the framework supplies itself are not offered.
  assert '| `learning_rate` |' not in block.split('## `optimizer_params`')[1].split('## `lr_')[0]
  assert '| `global_step` |' not in block


def test_a_declaration_changes_the_rows():
  schema = {'outer': DictParam({'inner': Param(int, 3, choices=(3, 4), doc='a | b')}, None,
                               doc='nested'),
            'needed': Param(str, REQUIRED)}
  assert config_reference.param_rows(schema) == [
      '| `outer` | a mapping | `None` |  | nested |',
      '| `outer.inner` | an integer | `3` | `3`, `4` | a \\| b |',
      '| `needed` | a string | required |  |  |']


def test_defaults_are_found_up_a_class_hierarchy():
  class Base:
    def __init__(self, rate, nesterov=False, **kwargs):
      del rate, nesterov, kwargs

  class Child(Base):
    def __init__(self, momentum=0.9, **kwargs):
      super().__init__(0.1, **kwargs)
      del momentum

  assert config_reference.signature_default(Child, 'momentum') == 0.9
  assert config_reference.signature_default(Child, 'nesterov') is False
  assert config_reference.default_cell(Child, 'rate') == 'none declared'
  assert config_reference.default_cell(Child, 'rate', required=('rate',)) == 'required'


def test_check_says_whether_the_page_is_up_to_date(tmp_path, capsys):
  page = tmp_path / 'config.md'
  page.write_text(f'# Configs\n\n{config_reference.BEGIN}\nold\n{config_reference.END}\n\nEnd.\n')
  assert config_reference.main(['--check', '--page', str(page)]) == 1
  assert 'is out of date: run .venv/bin/python scripts/config_reference.py' in (
      capsys.readouterr().err)
  assert config_reference.main(['--page', str(page)]) == 0
  text = page.read_text()
  assert text.startswith('# Configs\n\n<!-- config_reference: begin -->\n')
  assert text.endswith('<!-- config_reference: end -->\n\nEnd.\n') and '\nold\n' not in text
  assert config_reference.main(['--check', '--page', str(page)]) == 0


def test_a_page_without_the_markers_is_one_line(tmp_path, capsys):
  page = tmp_path / 'config.md'
  page.write_text('# Configs\n')
  assert config_reference.main(['--page', str(page)]) == 2
  assert capsys.readouterr().err == (
      f'error: {page}: no {config_reference.BEGIN} ... {config_reference.END} block\n')
  assert page.read_text() == '# Configs\n'
