"""Tests of the micro-batch sweep of scripts/bench_seq2seq.py: its rows, their order, padding waste and ratios.

The measurements themselves (child processes training the CMUdict model)
are what the bench is for and are not run here.
"""

import numpy as np
import pytest

from tests.script_modules import load_script

bench = load_script('bench_seq2seq_batches')


def test_rows_have_one_pass_twins_only_above_the_chunk_size():
  rows = bench.measurements([256, 1024, 4096], ['float32'], 'all', 1024)
  assert [(r['batch'], r['chunked']) for r in rows] == [
      (256, False), (1024, False), (4096, True), (4096, False)]
  listed = bench.measurements([1024, 4096, 8192], ['a', 'b'], [4096], 1024)
  assert [(r['dtype'], r['batch'], r['chunked']) for r in listed] == [
      ('a', 1024, False), ('a', 4096, True), ('a', 4096, False), ('a', 8192, True),
      ('b', 1024, False), ('b', 4096, True), ('b', 4096, False), ('b', 8192, True)]
  # Without chunks every size is one pass.
  assert not any(r['chunked'] for r in bench.measurements([4096], ['a'], 'all', None))


def test_each_round_starts_one_row_later():
  rows = ['a', 'b', 'c']
  assert [bench.rotated(rows, i) for i in range(4)] == [
      ['a', 'b', 'c'], ['b', 'c', 'a'], ['c', 'a', 'b'], ['a', 'b', 'c']]


def test_padding_waste_of_whole_batches_and_of_chunks():
  # Rows sorted by length: 1, 1, 3, 3 source tokens; 2, 2, 4, 4 target tokens.
  source = np.array([[5, 0, 0], [6, 0, 0], [5, 6, 7], [7, 6, 5]])
  target = np.array([[1, 2, 0, 0], [1, 2, 0, 0], [1, 4, 5, 2], [1, 5, 4, 2]])
  batches = [{'source': source, 'target': target}]
  # One pass: 12 + 16 positions, 4 + 4 of them padding.
  assert bench.chunked_padding_waste(batches, None) == pytest.approx(8 / 28)
  # Chunks of two rows cut their padding columns: (2x1 + 2x2) + (2x3 + 2x4) positions, none padding.
  assert bench.chunked_padding_waste(batches, 2) == 0.0
  # Chunks of three: the first keeps 3 + 4 columns (4 + 4 pads), the second 3 + 4 (none).
  assert bench.chunked_padding_waste(batches, 3) == pytest.approx(8 / (9 + 12 + 3 + 4))


def test_rates_sum_words_over_seconds_and_ratios_are_to_1024_of_the_same_dtype():
  rows = [{'batch': b, 'dtype': 'f', 'chunked': b > 1024} for b in (256, 1024, 4096)]
  run = lambda words, seconds: {'words': words, 'seconds': seconds, 'cpu_seconds': 2 * seconds,  # noqa: E731
                                'steps': 1, 'peak_bytes': words}
  results = [[run(256, 1.0), run(256, 3.0)], [run(1024, 2.0), run(1024, 2.0)],
             [run(4096, 4.0), {'error': 'killed by signal 9 (out of memory?)'}]]
  table = bench.summarize(rows, results)
  assert table[0]['words_per_sec'] == pytest.approx(512 / 4.0)
  assert table[0]['spread'] == (pytest.approx(256 / 3.0), 256.0)
  assert table[0]['cpu_words_per_sec'] == pytest.approx(512 / 8.0)
  assert table[2]['error'].startswith('killed by signal 9')
  assert bench.ratio_to_reference(table, [256, 1024, 4096]) == 1024
  assert table[0]['ratio'] == pytest.approx(128 / 512)
  assert table[1]['ratio'] == 1.0 and 'ratio' not in table[2]
