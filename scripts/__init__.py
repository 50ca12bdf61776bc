"""Command-line tools over the framework: sweeps, benchmarks, plots, the config reference.

A package so that one tool can import another's helpers (``scripts.bench_train``
in ``scripts/bench_seq2seq.py``) as this repository's, whatever else is installed.
"""
