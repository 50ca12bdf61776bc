"""The large-batch study of docs/large_batch.md: its driver, report and targets.

- ``run_study.sh``: every run of the study, through ``scripts/sweep.py``;
- :mod:`scripts.large_batch.report`: the table and targets of its arms;
- :mod:`scripts.large_batch.figures`: a study's plots (accuracy, updates and seconds to a target);
- :mod:`scripts.large_batch.study`: the runs of several sweeps (a study's arms,
  each tuned over its learning rates and the overrides that tell its sweeps
  apart), grouped by a key, with their updates and time to an accuracy;
- :mod:`scripts.large_batch.targets`: whether the study's targets are met;
- :mod:`scripts.large_batch.seq2seq_plan`, :mod:`scripts.large_batch.seq2seq_study`,
  :mod:`scripts.large_batch.seq2seq_report` and :mod:`scripts.large_batch.seq2seq_findings`:
  the sequence-to-sequence study of docs/large_batch_seq2seq.md (LAMB, AdamW and Muon
  on a CMUdict Transformer): its runs planned from its archive, the driver that runs
  them, its page and the page's recipe.

It stands on the generic sweep tools of :mod:`framework.sweep`.
"""
