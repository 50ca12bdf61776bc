"""Configuration: config files, the schema, resolution, validation; no TensorFlow.

- ``config_file``: reading Python and YAML configs, the run modes, writing
  the run's config;
- ``config_resolve``: a mode's params over the base params, the ``--set``
  overrides, and every name of the config resolved once, before the checks
  that read what the names declare;
- ``schema``: the generic top-level keys (a task's own keys are its task's);
- ``validation``: a config checked and filled in (``load_configs``,
  ``validate``), the jit check, the learning-rate scaling;
- ``openseq2seq``: OpenSeq2Seq's keys, and TensorFlow 1's names as a
  Python config reads them;
- ``extension_points``: the shape of a user's own model, data layer,
  optimizer and lr policy, checked before they are called;
- ``argument_checks``, ``schedule``: the arguments against what takes
  them, the run's length and durations in steps (the one source of weight
  decay is ``validation``'s).

A sweep's check of its points, in one process, is ``framework.sweep.check_configs``.
"""
