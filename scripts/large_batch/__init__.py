"""The large-batch study of docs/large_batch.md: its driver, report and targets.

- ``run_study.sh``: every run of the study, through ``scripts/sweep.py``;
- :mod:`scripts.large_batch.report`: the table, plots and targets of its arms;
- :mod:`scripts.large_batch.study`: the runs of several sweeps (a study's arms,
  each tuned over its learning rates and the overrides that tell its sweeps
  apart), grouped by a key, with their updates and time to an accuracy;
- :mod:`scripts.large_batch.targets`: whether the study's targets are met.

It stands on the generic sweep tools of :mod:`framework.sweep`.
"""
