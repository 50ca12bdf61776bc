"""The run machinery, in rooms that import one way (each only the rooms below it):

- ``framework.sweep``: sweeps of run.py over a grid of config values;
- ``framework.run``: one run: launch, trainer, train loop, checkpoints, run
  directory, resume, stopping, summaries, the report of an evaluation;
- ``framework.config``: config files, the schema, resolution and validation,
  the run's schedule in steps; no TensorFlow;
- ``framework.tasks``: what depends on the workload (loss, metrics,
  evaluation, export, the task's own config keys), one module per task;
- ``framework.engines``: who the workers are and how they start (the
  multi-worker engine, the local and Horovod launchers, the hardware), and
  what each prints.

``tests/core/test_layers.py`` holds the order. The modules' paths before the
rooms (``framework.trainer``, ...) give the moved modules themselves.
"""

from core.moved_modules import redirect

# Old path -> new path: ``import framework.trainer`` is ``framework.run.trainer``,
# the very module object, so users' code and its monkeypatches keep working.
MOVED_MODULES = {
    **{f'framework.{name}': f'framework.config.{name}' for name in (
        'argument_checks', 'check_configs', 'config_file', 'config_names', 'config_resolve',
        'schedule', 'schema', 'weight_decay')},
    **{f'framework.{name}': f'framework.run.{name}' for name in (
        'checkpoints', 'divergence', 'evaluation', 'launch', 'resume',
        'run_outputs', 'rundir', 'stopping', 'summaries', 'train_loop', 'trainer', 'warm_start')},
    **{f'framework.{name}': f'framework.engines.{name}' for name in (
        'console', 'distributed', 'hardware', 'horovod_launcher', 'local_cluster',
        'start_watch', 'tf_import')},
    'framework.export': 'framework.tasks.export',
    'framework.precise_bn': 'framework.tasks.image_precise_bn',
}
redirect(MOVED_MODULES)
