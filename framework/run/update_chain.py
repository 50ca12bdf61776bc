"""The update chain a config asks for, said before anything is built (``--print_config``).

The run log says the chain as the first step built it (``update chain:
accumulate(2) → backoff → clip(1) → larc(clip) → lars(native)``,
``optimizers.pipeline.GradientPipeline.describe_chain``); this says, without
TensorFlow, which stages the config gives it, in the same words.
"""

from core import batch_policy


def planned_chain(cfg):
  """The update chain a train config asks for, in the words of the run log's ``update chain:`` line.

  Said by ``--print_config`` before anything is built: which stages the
  update has is the config's, the form of each (the optimizer's step on its
  native kernel, XLA or Keras' own ``apply``) is chosen when the first step
  builds the chain, and the all-reduce is there when two or more workers train.
  """
  stages = []
  if cfg['iter_size'] > 1 or cfg.get('batch_policy', 'fixed') != 'fixed':
    grows = cfg.get('batch_policy', 'fixed') != 'fixed'
    stages.append('accumulate(iter_size, grows)' if grows else f'accumulate({cfg["iter_size"]})')
  if cfg['agn_params'] is None:
    stages.append('allreduce (with two or more workers)')
  scaling = cfg['loss_scaling']
  if isinstance(scaling, str):
    stages.append(scaling.lower())
  else:
    stages.append('finite check' if scaling == 1 else f'static({scaling:g})')
  noise = batch_policy.noise_scale_setting(cfg)
  if noise is not False:
    stages.append('noise_scale' + (' (with two or more small batches per update)'
                                   if noise == 'auto' else ''))
  if cfg['max_grad_norm'] is not None:
    stages.append(f'clip({cfg["max_grad_norm"]:g})')
  if cfg['larc_params'] is not None:
    stages.append(f"larc({cfg['larc_params'].get('larc_mode', 'clip')})")
  optimizer = cfg['optimizer'] if isinstance(cfg['optimizer'], str) else 'optimizer'
  stages.append(optimizer.lower().removesuffix('optimizer') or 'optimizer')
  return ' → '.join(stages) + '; each form is chosen when the first step builds it'
