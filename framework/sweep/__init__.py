"""Sweeps of run.py over a grid of config values, the library under ``scripts/sweep.py``.

- :mod:`framework.sweep.grid`: the points (grid values, derived values, seeds);
- :mod:`framework.sweep.runner`: running them as run.py processes, resuming;
- :mod:`framework.sweep.results`: reading a point's record, result.json and
  error.txt back;
- :mod:`framework.sweep.report`: results.csv, results.md and accuracy.png, and the best
  point (``scripts/sweep.py --best``);
- :mod:`framework.sweep.check_configs`: every point's config resolved and validated
  before any runs, in one process.

The large-batch study (``studies/large_batch/``) stands on these.

Nothing here imports TensorFlow itself: each point is its own run.py process,
and the configs are checked in one ``python -m framework.sweep.check_configs``.
"""
