"""Sweeps of run.py over a grid of config values, the library under ``scripts/sweep.py``.

- :mod:`framework.sweep.grid`: the points (grid values, derived values, seeds);
- :mod:`framework.sweep.runner`: running them as run.py processes, resuming,
  reading their results back;
- :mod:`framework.sweep.report`: results.csv, results.md and accuracy.png;
- :mod:`framework.sweep.study`: the runs of several sweeps (a study's arms,
  each tuned over its learning rates and the overrides that tell its sweeps
  apart), grouped by a key, with their updates and time to an accuracy;
- :mod:`framework.sweep.targets`: whether a study's targets are met, from its runs.

Nothing here imports TensorFlow itself: each point is its own run.py process,
and the configs are checked in one ``python -m framework.check_configs``.
"""
