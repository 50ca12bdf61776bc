"""Studies made with the framework: their drivers, plans, reports and the numbers behind their pages.

A study runs ``run.py`` through the sweep tools (``scripts/sweep.py``,
:mod:`framework.sweep`), archives each run's results under ``docs/results/``
and writes its page in ``docs/`` from that archive alone. It stands above the
framework as ``scripts/`` does and is imported by nothing but its own tests.

- :mod:`studies.large_batch`: how far the batch grows, on Fashion-MNIST
  (docs/large_batch.md) and on a CMUdict Transformer (docs/large_batch_seq2seq.md),
  and the critical batch of both (docs/critical_batch.md).
"""
