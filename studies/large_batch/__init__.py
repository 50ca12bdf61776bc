"""The large-batch studies: how far the batch grows, on images and on a Transformer, and the critical batch.

- ``run_study.sh``: every run of the image study of docs/large_batch.md, through
  ``scripts/sweep.py``;
- :mod:`studies.large_batch.report`: the table and targets of its arms;
- :mod:`studies.large_batch.figures`: a study's plots (accuracy, updates and seconds to a target);
- :mod:`studies.large_batch.study`: the runs of several sweeps (a study's arms,
  each tuned over its learning rates and the overrides that tell its sweeps
  apart), grouped by a key, with their updates and time to an accuracy;
- :mod:`studies.large_batch.targets`: whether the study's targets are met;
- :mod:`studies.large_batch.seq2seq_plan`, :mod:`studies.large_batch.seq2seq_study`,
  :mod:`studies.large_batch.seq2seq_report` and :mod:`studies.large_batch.seq2seq_findings`:
  the sequence-to-sequence study of docs/large_batch_seq2seq.md (LAMB, AdamW and Muon
  on a CMUdict Transformer): its runs planned from its archive, the driver that runs
  them, its page and the numbers of the page's findings;
- :mod:`studies.large_batch.critical_fit` and :mod:`studies.large_batch.critical_table`:
  the critical batch fitted to both studies' runs, and docs/critical_batch.md's tables.

They stand on the generic sweep tools of :mod:`framework.sweep`.
"""
