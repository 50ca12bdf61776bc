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

``tests/core/test_layers.py`` holds the order.
"""
