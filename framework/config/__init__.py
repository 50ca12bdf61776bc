"""Configuration: config files, the schema, resolution, validation; no TensorFlow.

- ``config_file``: reading Python and YAML configs, the run modes, writing
  the run's config;
- ``config_resolve``: a mode's params over the base params, the ``--set``
  overrides;
- ``schema``: the generic top-level keys (a task's own keys are its task's);
- ``validation``: a config checked and filled in (``load_configs``,
  ``validate``), the jit check, the learning-rate scaling;
- ``weight_decay``, ``config_names``, ``argument_checks``, ``schedule``:
  the one source of weight decay, what a config's names stand for, the
  arguments against what takes them, the run's length and durations in steps;
- ``check_configs``: a sweep's check of its points, in one process.

``framework.config`` was one module before it was this room: its names are
still read here (``framework.config.load_configs``), each the object of the
module that defines it, loaded on first use.
"""

from core.lazy import lazy_exports

_EXPORTS = {
    **{name: f'framework.config.validation:{name}' for name in (
        'SUMMARY_NAMES', 'TRAINER_SUMMARIES', 'check_jit_compile', 'check_with_owners',
        'default_registries', 'load_configs', 'scale_learning_rates', 'scaled_learning_rate',
        'validate')},
    **{name: f'framework.config.config_file:{name}' for name in (
        'MODES', 'format_error', 'load_config_file', 'run_config', 'run_config_yaml', 'to_yaml',
        'write_config', 'write_run_config')},
    **{name: f'framework.config.config_resolve:{name}' for name in (
        'durations_given', 'resolve', 'resolve_modes')},
    'epochs_to_steps': 'framework.config.schedule:epochs_to_steps',
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
