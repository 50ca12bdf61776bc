"""Command-line tools over the framework: sweeps, reports, benchmarks, plots.

A package so that ``scripts.large_batch`` (the large-batch study) imports as
this repository's, whatever else is installed.
"""
