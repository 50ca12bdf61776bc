"""--print_config says the update chain a config asks for (framework/run/update_chain.py)."""

import pytest

FORMS = '; each form is chosen when the first step builds it'


def chain_line(run_main, *sets):
  args = ['--config', 'configs/fashion_mnist_sgd.py', '--print_config']
  for value in sets:
    args += ['--set', value]
  result = run_main(*args)
  assert result.returncode == 0, result.stderr
  lines = [l for l in result.stderr.splitlines() if l.startswith('update chain: ')]
  assert len(lines) == 1, result.stderr
  # The YAML on stdout stays a config: the line goes to stderr.
  assert 'update chain' not in result.stdout
  return lines[0][len('update chain: '):]


@pytest.mark.parametrize('sets, stages', [
    ((), 'allreduce (with two or more workers) → finite check → noise_scale (with two or more '
         'small batches per update) → kerasmomentum'),
    (('iter_size=2', 'loss_scaling=Backoff', 'max_grad_norm=1', 'noise_scale=false',
      'larc_params={larc_eta: 0.002, larc_mode: scale}'),
     'accumulate(2) → allreduce (with two or more workers) → backoff → clip(1) → larc(scale) '
     '→ kerasmomentum'),
    (('loss_scaling=128', 'noise_scale=true', 'iter_size=2', 'optimizer=LARS',
      'optimizer_params={momentum: 0.9}'),
     'accumulate(2) → allreduce (with two or more workers) → static(128) → noise_scale → lars'),
    # The policy grows the batch by the noise scale: auto measures it on one worker too.
    (('batch_policy=noise_scale', 'noise_scale=auto'),
     'accumulate(iter_size, grows) → allreduce (with two or more workers) → finite check → '
     'noise_scale → kerasmomentum'),
    # However it is spelled.
    (('noise_scale=AUTO',),
     'allreduce (with two or more workers) → finite check → noise_scale (with two or more '
     'small batches per update) → kerasmomentum'),
    (('noise_scale=FALSE',), 'allreduce (with two or more workers) → finite check → '
                             'kerasmomentum'),
])
def test_print_config_says_the_stages_of_the_update(run_main, sets, stages):
  assert chain_line(run_main, *sets) == stages + FORMS
