"""scripts/bench_microbatch.py: its sizes checked, and its rows' medians and ratios."""

import pytest

from scripts import bench_microbatch


def test_sizes_must_divide_the_global_batch_and_include_the_reference(capsys):
  assert bench_microbatch.parse_args(['--micro_batches', '512,256,256']).micro_batches == [256, 512]
  for given, says in (('256,384', '[384] do not divide --global_batch 2048'),
                      ('128,512', 'include 256, the reference')):
    with pytest.raises(SystemExit):
      bench_microbatch.parse_args(['--micro_batches', given])
    assert says in capsys.readouterr().err


def test_rows_are_medians_of_images_per_second_and_of_each_round_s_ratio():
  times = {256: [2.0, 1.0, 4.0], 1024: [1.0, 1.0, 1.0]}
  # images/sec of 2048 images: 256 -> median(1024, 2048, 512) = 1024; 1024 -> 2048.
  # Ratios by round: 2, 1, 4 -> median 2 (not 2048/1024 of the medians' quotient by chance).
  assert bench_microbatch.rows(times, 2048) == [(256, 1024.0, 1.0), (1024, 2048.0, 2.0)]
