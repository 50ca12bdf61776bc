"""Frictions of issue 51 through run.py and sweep.py, as a user meets them.

``--set`` with a punctuation value, ``sweep.py --best`` over a garbled
``result.json``, the restart under tcmalloc where the interpreter cannot be
executed again, and ``--auto_resume`` over a damaged newest checkpoint.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, 'run.py')

PAIRS = '''
base_params:
  model: transformer
  model_params: {encoder_layers: 1, decoder_layers: 1, d_model: 16, num_heads: 2, ff_size: 16}
  data_layer: text_pairs
  data_layer_params: {train_file: TRAIN, eval_file: TRAIN}
  batch_size_per_gpu: 2
  max_steps: 2
  optimizer: Adam
  lr_policy: fixed_lr
  lr_policy_params: {learning_rate: 0.001}
'''


@pytest.mark.parametrize('value, recorded', [(',', "','"), (';', ";"), ('|', "'|'"),
                                              (' ', "' '"), ('#', "'#'")])
def test_a_punctuation_value_of_set_is_that_string(tmp_path, run_main, value, recorded):
  # YAML reads ',' as an error, '|' as a block scalar, '#' as a comment: a delimiter is meant.
  (tmp_path / 'pairs.csv').write_text('ab,ba\n')
  (tmp_path / 'pairs.yaml').write_text(PAIRS.replace('TRAIN', str(tmp_path / 'pairs.csv')))
  result = run_main('--config', tmp_path / 'pairs.yaml', '--print_config',
                    '--set', f'data_layer_params.delimiter={value}')
  assert result.returncode == 0, result.stderr
  assert f'  delimiter: {recorded}\n' in result.stdout
  # YAML's own punctuation keeps its meaning: an empty mapping, and null.
  result = run_main('--config', tmp_path / 'pairs.yaml', '--print_config',
                    '--set', 'optimizer_params={}', '--set', 'data_layer_params.delimiter=~')
  assert result.returncode == 0, result.stderr
  assert 'optimizer_params: {}\n' in result.stdout


def test_best_names_a_garbled_result_json(tmp_path):
  out = tmp_path / 'sweep'
  for name, text in (('lr=0.1', json.dumps({'point': {'lr': 0.1}, 'curve_metric': 'accuracy',
                                             'metrics': {'accuracy': 0.5}})),
                     ('lr=0.2', '{"point": {"lr": 0.2}, "metrics": {"accur')):
    (out / name).mkdir(parents=True)
    (out / name / 'result.json').write_text(text)
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--best',
                           str(out)], capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 1 and result.stdout == ''
  garbled = out / 'lr=0.2' / 'result.json'
  cut = garbled.read_text().index('"accur')  # where the unterminated string starts
  assert result.stderr == (
      f'error: --best {out}: {garbled} is not a result the sweep wrote (not JSON: Unterminated '
      f'string starting at: line 1 column {cut + 1} (char {cut})); its point may be the best: '
      'restore the file, or run the sweep again, which records a finished point again from its '
      'run.log\n')


def loader():
  """The dynamic loader, which runs an interpreter file that has no execute permission."""
  found = [p for p in ('/lib64/ld-linux-x86-64.so.2', '/lib/ld-linux-aarch64.so.1')
           if os.path.exists(p)]
  assert found, 'no dynamic loader at the usual places of x86-64 and arm64 Linux'
  return found[0]


def test_run_py_goes_on_without_tcmalloc_where_it_cannot_restart(tmp_path):
  from core import allocator  # pylint: disable=import-outside-toplevel
  assert allocator.library({}) is not None, 'libtcmalloc-minimal4 is not installed'
  # A copy of this virtualenv's interpreter without the execute bit, as on a noexec mount:
  # the loader starts it, and its os.execve of itself is refused (EACCES, root included).
  venv = tmp_path / 'venv'
  (venv / 'bin').mkdir(parents=True)
  python = venv / 'bin' / 'python'
  shutil.copyfile(os.path.realpath(sys.executable), python)
  os.chmod(python, 0o644)
  shutil.copyfile(os.path.join(sys.prefix, 'pyvenv.cfg'), venv / 'pyvenv.cfg')
  os.symlink(os.path.join(sys.prefix, 'lib'), venv / 'lib')
  environ = {k: v for k, v in os.environ.items() if k not in ('LD_PRELOAD', allocator.SWITCH)}
  result = subprocess.run(
      [loader(), str(python), RUN, '--config', os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py'),
       '--print_config'], env=environ, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stderr
  assert result.stderr == (
      f'note: not restarted under tcmalloc (Permission denied: {python}); going on with the '
      'system allocator, slower at large batches (LARGEBATCH_ALLOCATOR=system skips the '
      'restart)\nupdate chain: allreduce (with two or more workers) → finite check → noise_scale '
      '(with two or more small batches per update) → lars; each form is chosen when the first '
      'step builds it\n')
  assert 'optimizer: LARS' in result.stdout


@pytest.mark.slow
def test_auto_resume_says_the_fallback_when_its_newest_checkpoint_is_damaged(tmp_path, run_main):
  from test_run import SGD_CONFIG, SHORT, run  # pylint: disable=import-outside-toplevel
  logdir = str(tmp_path / 'run')
  command = ['--config', SGD_CONFIG, '--mode', 'train', *SHORT, '--set', 'batch_size_per_gpu=32',
             '--set', 'save_checkpoint_steps=2', '--logdir', logdir, '--auto_resume']
  run(*command, '--set', 'max_steps=4')
  data = glob.glob(os.path.join(logdir, 'ckpt-4.data-*'))[0]
  with open(data, 'r+b') as f:
    f.truncate(os.path.getsize(data) // 2)
  # The same command for a run of 2 steps: it resumes ckpt-2 and has nothing to train, so it
  # answers in this process.
  result = run_main(*command, '--set', 'max_steps=2')
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  said = [l for l in lines if l.startswith('auto_resume: ')]
  assert said == [f'auto_resume: {logdir} holds ckpt-4, which is damaged; resuming from ckpt-2, '
                  'the newest intact checkpoint'], result.stdout
  # Said before the restore's own lines, and nothing says ckpt-4 is resumed.
  first = lines.index(said[0])
  assert any(l.startswith('warning: damaged checkpoint(s)') for l in lines[first:])
  assert f'restored {logdir}/ckpt-2 (step 2)' in result.stdout
  assert 'nothing to do: the checkpoint is at step 2' in result.stdout
  assert 'holds ckpt-4; resuming' not in result.stdout
