"""Tests of studies/large_batch/seq2seq_report.py and seq2seq_findings.py: the page comes from the runs.

A small fake archive checks the tables and the findings' numbers; the repository's page is
held to its own archive, its prose's numbers too.
"""

import math
import os

import numpy as np
import pytest

from studies.large_batch import seq2seq_findings as findings
from studies.large_batch import seq2seq_plan as s2s_plan
from studies.large_batch import seq2seq_report as page
from tests.studies.large_batch.test_seq2seq_study import ROOT
from tests.studies.large_batch.test_seq2seq_study import write_archive

LAMB, ADAMW, MUON = s2s_plan.ARMS
# The target dev WER of these tests' curves (the page's is page.TARGET_WER).
TARGET = 0.45


def curve(steps, wers):
  """An evaluation curve: the WERs at equal shares of ``steps`` updates, 10 s an update."""
  return [[steps * (i + 1) // len(wers), w, 10.0 * steps * (i + 1) / len(wers)]
          for i, w in enumerate(wers)]


@pytest.fixture(name='archive')
def fixture_archive(tmp_path):
  """A study half done: every arm at 256; LAMB and AdamW at 8192; AdamW at 1024; a budget check."""
  archive = tmp_path / 'archive'
  s256 = s2s_plan.updates(256)
  # At 256: AdamW best (30 % and 31 %: 30.5 ± 0.71), LAMB 31 %, Muon 32 %.
  write_archive(archive, 'adamw', 256, {(0.0005, 0): 0.33, (0.001, 0): 0.30, (0.002, 0): 0.32,
                                        (0.001, 1): 0.31}, steps=s256,
                curve=curve(s256, [0.8, 0.6, 0.44, 0.35, 0.31]))
  write_archive(archive, 'lamb', 256, {(0.0015, 0): 0.33, (0.003, 0): 0.31, (0.006, 0): 0.35},
                steps=s256, curve=curve(s256, [0.8, 0.5, 0.4, 0.33, 0.31]))
  write_archive(archive, 'muon', 256, {(0.0005, 0): 0.34, (0.001, 0): 0.32,
                                       (0.002, 0): 'error: the loss is NaN at step 12'},
                steps=s256)
  # At 8192: LAMB's best at the top edge, 31.2 % (within 1 point); AdamW 33 % (missed).
  s8k = s2s_plan.updates(8192)
  write_archive(archive, 'lamb', 8192, {(0.008485, 0): 0.36, (0.01697, 0): 0.33,
                                        (0.03394, 0): 0.312}, steps=s8k,
                curve=curve(s8k, [0.9, 0.7, 0.5, 0.40, 0.312]))
  write_archive(archive, 'adamw', 8192, {(0.002828, 0): 0.37, (0.005657, 0): 0.33,
                                         (0.01131, 0): 0.34}, steps=s8k,
                curve=curve(s8k, [0.9, 0.8, 0.6, 0.5, 0.46]))
  # AdamW at 1024, its rate inside the grid, reaching 45 % at the second eighth.
  s1k = s2s_plan.updates(1024)
  write_archive(archive, 'adamw', 1024, {(0.001, 0): 0.33, (0.002, 0): 0.31, (0.004, 0): 0.32},
                steps=s1k, curve=curve(s1k, [0.6, 0.45, 0.35, 0.31]))
  # The budget check: AdamW at its rate, half the epochs: 30.6 and 31.2 %.
  write_archive(archive, 'adamw_half', 256, {(0.001, 0): 0.306, (0.001, 1): 0.312},
                sets=('num_epochs=5',), steps=s256 // 2)
  return archive


def test_the_table_has_every_point_and_the_chosen_rates_numbers(archive):
  runs = page.read(str(archive), TARGET)
  lines = page.table(runs, TARGET)
  rows = {tuple(c.strip() for c in line.split('|')[1:4]): [c.strip() for c in line.split('|')[4:-1]]
          for line in lines if line.startswith('| ') and 'batch (words)' not in line}
  assert len(rows) == 3 * len(s2s_plan.BATCHES + s2s_plan.BEYOND)
  adamw = rows[('256', '4.1 K', 'AdamW')]
  # Rate, seeds, test WER mean ± std over the two seeds, PER (a quarter, as written), gap 0.
  assert adamw[:5] == ['0.001', '2/2', '30.50 ± 0.71', '7.62 ± 0.18', '+0.00']
  assert adamw[5] == str(s2s_plan.updates(256))
  lamb_8k = rows[('8192 (1024 × 8)', '130.3 K', 'LAMB')]
  assert lamb_8k[:5] == ['0.03394', '1/1', '31.20', '7.80', '+0.70']
  # 45 % dev WER first at the fourth of five evaluations: 4/5 of the updates, 10 s each.
  s8k = s2s_plan.updates(8192)
  assert lamb_8k[6:8] == [f'{s8k * 4 // 5:.0f}', f'{10.0 * s8k * 4 / 5:.0f}']
  assert rows[('8192 (1024 × 8)', '130.3 K', 'AdamW')][6] == 'not reached'
  # Muon at 256: its best rate of the two that finished; the failed one is listed below.
  assert rows[('256', '4.1 K', 'Muon')][:3] == ['0.001', '1/1', '32.00']
  assert rows[('16384 (1024 × 16)', '260.7 K', 'Muon')][0] == 'not yet run'
  assert any('best batch-256 result, AdamW at 30.50 %' in line for line in lines)


def test_the_one_run_past_32x_is_marked_not_tuned(archive):
  # LAMB at 16384: its rate at 8192 (0.03394) × sqrt(2) = 0.048, once.
  write_archive(archive, 'lamb', 16384, {(0.048, 0): 0.99}, steps=s2s_plan.updates(16384))
  runs = page.read(str(archive), TARGET)
  row = next(line for line in page.table(runs, TARGET) if line.startswith('| 16384')
             and '| LAMB |' in line)
  assert '| 0.048 (one rate, not tuned) | 1/1 | 99.00 |' in row
  assert '| 16384 | LAMB | **0.048: 99.00** (one rate, not tuned) |' in page.grids(runs)
  # Only a grid that holds its rate inside enters the rate rule: 16384 does not.
  assert 16384 not in findings.rates_inside(runs, LAMB)
  assert 16384 not in findings.rule_ratios(runs, LAMB)
  # With a grid there (the best arm at 8192 gets one), the mark goes.
  write_archive(archive, 'lamb', 16384, {(0.024, 0): 0.995, (0.096, 0): 0.999},
                steps=s2s_plan.updates(16384))
  runs = page.read(str(archive), TARGET)
  row = next(line for line in page.table(runs, TARGET) if line.startswith('| 16384')
             and '| LAMB |' in line)
  assert '| 0.048 | 1/1 | 99.00 |' in row
  assert '| 16384 | LAMB | 0.024: 99.50; **0.048: 99.00**; 0.096: 99.90 |' in page.grids(runs)
  # ... and its best rate enters the rule's ratios: 0.048 / (0.003·sqrt(64) = 0.024) = 2.00.
  assert findings.rule_ratios(runs, LAMB) == {8192: pytest.approx(2.0, abs=5e-3),
                                             16384: pytest.approx(2.0)}
  assert findings.rates_inside(runs, LAMB)[16384] == 0.048


def test_targets_budget_and_failures(archive):
  lines = page.target_lines(page.read(str(archive), TARGET))
  text = '\n'.join(lines)
  assert '- the best result at batch 256: AdamW, 30.50 % test WER over 2 seed(s)' in text
  assert ('- LAMB at 8192 within 1 WER point of it: 31.20 % over 1 seed(s) (lr 0.03394), '
          '+0.70 points: **met** (provisional: 1 of 2 seeds)') in text
  assert '- AdamW at 8192 within 1 WER point of it: 33.00 % over 1 seed(s) (lr 0.005657), ' \
         '+2.50 points: **missed**' in text
  assert '- Muon at 8192 within 1 WER point of it: not yet run' in text
  # (30.9 - 30.5) WER points from half the epochs to all of them: more than 0.3.
  assert ('- budget: AdamW at 256 (lr 0.001) gains 0.40 WER points from half the epochs '
          '(2 seed(s)) to all of them (2 seed(s)); under 0.3 is enough: the budget is '
          '**too small**') in text
  assert 'error: the loss is NaN at step 12' in text and 'Muon, `batch_size_per_gpu=256' in text


def test_the_findings_are_computed_from_the_runs(archive):
  runs = page.read(str(archive), TARGET)
  # AdamW's rate inside its grid at 256 (0.001), 1024 (0.002) and 8192 (0.005657): slope
  # of log(lr) on log(B) by least squares; LAMB's 8192 rate is at the grid's edge: left out.
  assert findings.rates_inside(runs, ADAMW) == {256: 0.001, 1024: 0.002, 8192: 0.005657}
  expected = findings.slope([(256, 0.001), (1024, 0.002), (8192, 0.005657)])
  assert 0.49 < expected < 0.51 and findings.rate_exponent(runs, ADAMW) == expected
  assert findings.rates_inside(runs, LAMB) == {256: 0.003}
  assert findings.rate_exponent(runs, LAMB) is None
  # At 8192 LAMB's tuned rate beats its tuned rate at 256 (0.003) by the square-root rule,
  # 0.01697, by 1.8 points.
  rule_rate, gain = findings.rate_tuning_gain(runs, LAMB)
  assert rule_rate == 0.01697 and gain == pytest.approx(0.018)
  assert findings.rate_tuning_gain(runs, MUON) is None  # Muon has no 8192 result
  assert findings.ranking(runs, 8192) is None
  # The best arm at 256: AdamW (30.5 %, mean of 30 and 31) ahead of LAMB (31 %) by 0.5.
  ranked = findings.ranking(runs, 256)
  assert [name for _, name in ranked] == ['AdamW', 'LAMB', 'Muon']
  assert ranked[1][0] - ranked[0][0] == pytest.approx(0.005)
  assert findings.ranking(runs, 1024) is None
  # Tuned rate over the rule: LAMB 0.03394 / (0.003·sqrt(32) = 0.01697) = 2.00; AdamW on
  # the rule at 1024 (0.002 = 0.001·2) and at 8192 (0.005657).
  assert findings.rule_ratios(runs, LAMB) == {8192: pytest.approx(2.0, abs=5e-3)}
  assert findings.rule_ratios(runs, ADAMW) == {1024: pytest.approx(1.0),
                                              8192: pytest.approx(1.0, abs=5e-3)}
  assert findings.rule_ratios(runs, MUON) == {}
  assert findings.warmup_wers(runs, 'lamb') == {0.1: pytest.approx(0.312), 0.05: None, 0.2: None}
  assert findings.warmup_gain(runs, 'lamb') is None
  # Steps to 45 %: AdamW 3/5 of 4740 at 256, 2/4 of 1180 at 1024 -> efficiency S256*256/(S*B).
  s256, s1k = s2s_plan.updates(256) * 3 // 5, s2s_plan.updates(1024) * 2 // 4
  assert findings.efficiency(runs, ADAMW) == {1024: pytest.approx(s256 * 256 / (s1k * 1024))}
  # LAMB: 3/5 of 4740 at 256, 4/5 of 148 at 8192: (2844·256) / (118·8192) = 0.75.
  assert findings.efficiency(runs, LAMB) == {8192: pytest.approx(0.75, abs=5e-3)}
  # The critical batch, S(B) = S_min (1 + B_crit/B) through LAMB's two batches: S_min =
  # (S1·B1 - S2·B2) / (B1 - B2), B_crit = (S1 - S_min)·B1 / S_min. AdamW's updates fall
  # faster than 1/B from 256 to 1024 (S_min would be negative): no fit. Muon: one batch.
  s8k = s2s_plan.updates(8192) * 4 // 5
  s_min = (s256 * 256 - s8k * 8192) / (256 - 8192)
  b_crit = (s256 - s_min) * 256 / s_min
  assert 23000 < b_crit < 25000
  assert findings.critical(runs, LAMB) == (pytest.approx(s_min), pytest.approx(b_crit), (256, 8192))
  assert findings.critical(runs, ADAMW) == (None, None, (256, 1024))
  assert findings.critical(runs, MUON) is None
  # Muon's wall per update over AdamW's where both ran (the fake runs take 2 s an update).
  assert findings.cost_ratios(runs) == {256: pytest.approx(1.0)}


def test_the_findings_tables_give_the_numbers_and_say_what_is_not_run(archive):
  runs = page.read(str(archive), TARGET)
  text = page.findings_block(runs, TARGET)
  # At 256: AdamW 30.50 %, LAMB 31.00 %, Muon 32.00 %; the fake runs take 2 s an update.
  assert '| 256 | AdamW | 0.50 | LAMB | 1.50 | 1.00 |' in text
  assert '| 1024 | not yet run | — | — | — | — |' in text
  assert '| AdamW | 1024 | 0.002 | 1.00 | ' in text
  s256, s8k = s2s_plan.updates(256) * 3 // 5, s2s_plan.updates(8192) * 4 // 5
  s_min = (s256 * 256 - s8k * 8192) / (256 - 8192)
  b_crit = (s256 - s_min) * 256 / s_min
  assert (f'| LAMB | — | {b_crit:.0f} | {b_crit * 15.91 / 1000:.1f} | {s_min:.0f} | 256, 8192 |'
          in text)
  assert '| AdamW | 0.50 | no fit | — | — | 256, 1024 |' in text
  assert '| Muon | — | not yet run | — | — | — |' in text
  # At 8192: LAMB's rule rate and what tuning gained; no warm-up run yet.
  assert '| LAMB | 0.01697 | 1.80 | not yet run | 31.20 | not yet run | — | not yet run | — |' in text


def test_the_page_and_figure_are_written_between_the_markers(archive, tmp_path, capsys):
  doc = tmp_path / 'page.md'
  doc.write_text(f'# Title\n\n{page.BEGIN}\nold\n{page.END}\n\nprose\n\n'
                 f'{page.FINDINGS_BEGIN}\nold\n{page.FINDINGS_END}\n\nafter\n')
  figure = tmp_path / 'images' / 'steps.png'
  arguments = ['--archive', str(archive), '--page', str(doc), '--figure', str(figure),
               '--target-wer', '0.45']
  # The page's blocks are not the archive's yet: --check says so and writes nothing.
  assert page.main(arguments + ['--check']) == 1
  assert '\nold\n' in doc.read_text() and not figure.exists()
  assert page.main(arguments) == 0
  text = doc.read_text()
  assert text.startswith('# Title\n\n' + page.BEGIN)
  assert text.endswith(page.FINDINGS_END + '\n\nafter\n') and f'{page.END}\n\nprose\n\n' in text
  assert '\nold\n' not in text and '| 256 | 4.1 K | AdamW | 0.001 | 2/2 |' in text
  assert '| 256 | AdamW | 0.50 | LAMB | 1.50 | 1.00 |' in text
  assert page.main(arguments + ['--check']) == 0
  assert '![updates to 45 % dev WER against the batch, log-log](images/steps.png)' in text
  # 21 archived runs (one failed), their wall times (2 s an update) in hours.
  hours = sum(2.0 * n for n in [s2s_plan.updates(256)] * 9 + [s2s_plan.updates(256) // 2] * 2
              + [s2s_plan.updates(8192)] * 6 + [s2s_plan.updates(1024)] * 3) / 3600
  assert f'Progress: 21 run(s) archived ({hours:.1f} hours of this machine), ' in text
  assert '![wall seconds to 45 % dev WER against the batch, log-log](images/steps_wall.png)' in text
  assert figure.stat().st_size > 1000 and (tmp_path / 'images' / 'steps_wall.png').stat().st_size > 1000
  # Idempotent: a second pass writes the same page.
  assert page.main(['--archive', str(archive), '--page', str(doc), '--figure', str(figure),
                    '--target-wer', '0.45']) == 0
  assert doc.read_text() == text
  capsys.readouterr()
  assert page.main(['--archive', str(tmp_path / 'nowhere'), '--page', str(doc)]) == 2
  assert capsys.readouterr().err.startswith('error: --archive ')
  # A page without the findings' markers is refused in one line, and left as it is.
  doc.write_text(f'{page.BEGIN}\n{page.END}\n')
  assert page.main(arguments) == 2
  assert capsys.readouterr().err.strip() == (
      f'error: {doc}: no {page.FINDINGS_BEGIN} ... {page.FINDINGS_END} block')
  assert doc.read_text() == f'{page.BEGIN}\n{page.END}\n'


def test_the_repositorys_page_is_its_archives():
  assert page.main(['--check']) == 0, f'{s2s_plan.PAGE} is out of date: run {page.COMMAND}'


def test_the_metric_direction_of_the_shared_study_helpers():
  # WER: lower is better, reached from above; accuracy the other way, as before.
  from studies.large_batch import study  # pylint: disable=import-outside-toplevel
  assert study.WER.reached(0.45, 0.45) and not study.WER.reached(0.46, 0.45)
  assert study.ACCURACY.reached(0.9, 0.9) and not study.ACCURACY.reached(0.89, 0.9)
  runs = [{'arm': 'a', 'status': 'ok', 'lr': lr, 'setting': (), 'wer': wer, 'accuracy': 1 - wer,
           'logdir': str(lr)} for lr, wer in ((0.1, 0.3), (0.2, 0.25), (0.4, 0.35))]
  assert study.chosen(runs, study.WER)[0]['lr'] == 0.2
  assert study.chosen(runs)[0]['lr'] == 0.2  # accuracy 0.75 is the best too
  assert math.isclose(study.metric_mean(runs, study.WER), 0.3)


def test_the_rate_tuned_at_256_is_the_one_the_plan_centres_on(tmp_path):
  # Seed 0: 0.003 wins (30 %) over 0.006 (31 %); seed 1 at 0.003 (34 %) puts its mean at 32 %.
  write_archive(tmp_path, 'lamb', 256, {(0.0015, 0): 0.40, (0.003, 0): 0.30, (0.006, 0): 0.31,
                                        (0.003, 1): 0.34})
  runs = page.read(str(tmp_path), TARGET)
  assert findings.members_at(runs, 'lamb', 256)[0]['lr'] == 0.006  # the table's: the best mean
  # The grids above 256 were centred on the seed-0 best, and the report measures against it.
  assert findings.tuned_rate(runs, 'lamb', 256) == 0.003
  centre = s2s_plan.centre(s2s_plan.ARMS[0], 8192, lambda name, batch: findings.tuned_rate(runs, name, batch))
  assert centre in [r.lr for r in s2s_plan.plan(s2s_plan.Results(str(tmp_path)))
                    if isinstance(r, s2s_plan.Run) and r.sweep == 'lamb' and r.batch == 8192]


def test_a_mean_reads_the_same_in_the_table_and_in_the_targets():
  # 31.12 % and 31.37 %: their mean, 31.245 %, lies on a rounding edge. The table and
  # the target lines both take the mean of the fractions (0.31245), then scale it.
  wers = [0.3112, 0.3137]
  assert findings.percent(wers) == '31.25 ± 0.18'  # stdev: 0.0025 / sqrt(2) = 0.00177
  assert findings.percent(wers).split(' ± ')[0] == f'{math.fsum(wers) / 2 * 100:.2f}'
  assert findings.percent([0.5]) == '50.00' and findings.percent([None]) == 'n/a'


def test_the_warm_up_is_held_against_seed_0_and_updates_that_grow_with_the_batch_fit_nothing(
    archive):
  # LAMB at 8192 gets a second seed at its rate: the table's mean is (31.2 + 29.0) / 2 = 30.1 %,
  # but the warm-ups ran with seed 0 alone, so the recipe's 10 % reads seed 0's 31.20 %.
  s8k = s2s_plan.updates(8192)
  write_archive(archive, 'lamb', 8192, {(0.03394, 1): 0.29}, steps=s8k)
  write_archive(archive, 'lamb_warmup0.05', 8192, {(0.03394, 0): 0.35}, steps=s8k,
                sets=('lr_policy_params.warmup_fraction=0.05',))
  # A warm-up the plan added past the longest (seq2seq_plan.warmup_fractions) is read too.
  write_archive(archive, 'lamb_warmup0.4', 8192, {(0.03394, 0): 0.30}, steps=s8k,
                sets=('lr_policy_params.warmup_fraction=0.4',))
  # Muon at 256 reaches 45 % at its first fifth (948 updates), at 1024 only at its last
  # (1180): 948·256 / (1180·1024) = 0.20.
  s256, s1k = s2s_plan.updates(256), s2s_plan.updates(1024)
  write_archive(archive, 'muon', 256, {(0.001, 0): 0.32}, steps=s256,
                curve=curve(s256, [0.44, 0.40, 0.36, 0.34, 0.32]))
  write_archive(archive, 'muon', 1024, {(0.001, 0): 0.40, (0.002, 0): 0.38, (0.004, 0): 0.39},
                steps=s1k, curve=curve(s1k, [0.7, 0.6, 0.5, 0.38]))
  runs = page.read(str(archive), TARGET)
  assert page.study.metric_mean(findings.members_at(runs, 'lamb', 8192), page.study.WER) == (
      pytest.approx(0.301))
  assert findings.warmup_wers(runs, 'lamb') == {
      0.1: pytest.approx(0.312), 0.05: pytest.approx(0.35), 0.2: None, 0.4: pytest.approx(0.30)}
  assert findings.seed_spread(runs, 'lamb') == pytest.approx(0.022)
  assert findings.warmup_wers(runs, 'adamw') == {0.1: pytest.approx(0.33), 0.05: None, 0.2: None}
  # Muon has no run at 8192: nothing to read.
  assert findings.warmup_wers(runs, 'muon') == {0.1: None, 0.05: None, 0.2: None}
  assert findings.seed_spread(runs, 'muon') is None
  assert findings.warmup_gain(runs, 'lamb') is None  # 20 % not yet run
  text = page.findings_block(runs, TARGET)
  # Tuning the rate gained 33.00 - 30.10 = 2.90 points over the rule's rate at 8192 (seed 0 there).
  assert ('| LAMB | 0.01697 | 2.90 | 35.00 | 31.20 | not yet run | 30.00 | 2.20 | not yet run | — |'
          in text)
  # With 20 % in, the best warm-up tried is 40 %: 31.20 - 30.00 = 1.20 points over the recipe.
  write_archive(archive, 'lamb_warmup0.2', 8192, {(0.03394, 0): 0.33}, steps=s8k,
                sets=('lr_policy_params.warmup_fraction=0.2',))
  runs = page.read(str(archive), TARGET)
  best, gain = findings.warmup_gain(runs, 'lamb')
  assert best == 0.4 and gain == pytest.approx(0.012)
  # 40 % is the longest the plan tries (seq2seq_plan.WARMUP_LIMITS): the table says so.
  assert s2s_plan.WARMUP_LIMITS[1] == 0.4
  assert ('| 35.00 | 31.20 | 33.00 | 30.00 | 2.20 | 40 % (the longest tried) | 1.20 |'
          in page.findings_block(runs, TARGET))
  # The target line gives the arm's best warm-up too, against the best at 256 (AdamW, 30.50 %):
  # 30.00 - 30.50 = -0.50. AdamW has no warm-up run: its line has none.
  targets = '\n'.join(page.target_lines(runs))
  assert ('(lr 0.03394), -0.40 points: **met**; with its best warm-up (40 %, seed 0) 30.00 %, '
          '-0.50 points\n') in targets
  assert '+2.50 points: **missed** (provisional: 1 of 2 seeds)\n' in targets
  assert findings.efficiency(runs, MUON) == {1024: pytest.approx(948 * 256 / (1180 * 1024))}
  assert f'| Muon | 1024 | 0.002 | 1.00 | {948 * 256 / (1180 * 1024):.2f} |' in page.findings_block(
      runs, TARGET)
  # Its updates grow with the batch: no fit.
  assert findings.critical(runs, MUON) == (None, None, (256, 1024))


def test_the_critical_batch_fit_recovers_the_model_and_is_least_squares_on_one_over_b():
  # Exact points of S = 100·(1 + 1000/B) give back S_min 100 and B_crit 1000.
  exact = {b: 100 * (1 + 1000 / b) for b in (256, 1024, 4096, 8192)}
  s_min, b_crit = findings.critical_fit(exact)
  assert s_min == pytest.approx(100) and b_crit == pytest.approx(1000)
  # Noisy points: the line of numpy's least squares of S on 1/B.
  noisy = {256: 592, 1024: 294, 4096: 108, 8192: 90}
  slope_, intercept = np.polyfit([1 / b for b in noisy], list(noisy.values()), 1)
  assert findings.critical_fit(noisy) == pytest.approx((intercept, slope_ / intercept))
  # One batch, or updates that do not level off: nothing.
  assert findings.critical_fit({256: 592}) is None
  assert findings.critical_fit({256: 500, 1024: 600}) is None


def test_the_recipes_prose_quotes_the_archived_findings():
  """Each number the page's hand-written recipe quotes is the one its archived runs give."""
  runs = page.read(os.path.join(ROOT, 'docs', 'results', 'large_batch_seq2seq'))
  with open(os.path.join(ROOT, s2s_plan.PAGE), encoding='utf-8') as f:
    doc = f.read()
  after = doc.index(page.FINDINGS_END)
  prose = ' '.join(doc[after:doc.index('\n## ', after)].split())

  def quoted(text):
    assert text in prose, text

  # The optimizer: Muon first at every tuned batch, its lead at 256 and 8192, the spread at 8192.
  assert all(findings.ranking(runs, batch)[0][1] == 'Muon' for batch in s2s_plan.BATCHES)
  lead = {b: findings.ranking(runs, b)[1][0] - findings.ranking(runs, b)[0][0] for b in (256, 8192)}
  quoted(f'from {page.points(lead[256])} WER points at 256 to {page.points(lead[8192])} at 8192')
  spread = findings.ranking(runs, 8192)[-1][0] - findings.ranking(runs, 8192)[0][0]
  quoted(f'the choice of optimizer is worth {page.points(spread)} points')
  # The rate: Muon's on the rule at every batch; LAMB's and AdamW's against it at 8192.
  assert {f'{r:.2f}' for r in findings.rule_ratios(runs, MUON).values()} == {'1.00'}
  quoted(f'(1.00, x = {findings.rate_exponent(runs, MUON):.2f})')
  quoted(f'tuning it at 8192 gains {page.points(findings.rate_tuning_gain(runs, MUON)[1])} points')
  quoted(f'(x = {findings.rate_exponent(runs, LAMB):.2f} and '
         f'{findings.rate_exponent(runs, ADAMW):.2f})')
  quoted(f'at 8192 they sit at {findings.rule_ratios(runs, LAMB)[8192]:.2f} and '
         f'{findings.rule_ratios(runs, ADAMW)[8192]:.2f} of the rule')
  quoted(f'costs them {page.points(findings.rate_tuning_gain(runs, LAMB)[1])} and '
         f'{page.points(findings.rate_tuning_gain(runs, ADAMW)[1])} points')
  # The warm-up: LAMB's and AdamW's best is the longest tried; Muon's gain within its seeds.
  (lamb_best, lamb_gain), (adamw_best, adamw_gain) = (findings.warmup_gain(runs, 'lamb'),
                                                      findings.warmup_gain(runs, 'adamw'))
  assert lamb_best == adamw_best == max(s2s_plan.WARMUP_LIMITS)
  quoted(f'a warm-up over {lamb_best * 100:g} % of the updates instead of '
         f'{s2s_plan.WARMUP_FRACTION * 100:g} % gains them {page.points(lamb_gain)} and '
         f'{page.points(adamw_gain)} points')
  quoted(f'yet they stay at {page.points(findings.warmup_wers(runs, "lamb")[lamb_best])} and '
         f'{page.points(findings.warmup_wers(runs, "adamw")[adamw_best])} % test WER')
  muon_best, muon_gain = findings.warmup_gain(runs, 'muon')
  assert muon_gain < findings.seed_spread(runs, 'muon')
  quoted(f"Muon's best warm-up, {muon_best * 100:g} %, gains {page.points(muon_gain)} points, "
         f'less than its two seeds differ ({page.points(findings.seed_spread(runs, "muon"))})')
  # Where scaling stops: twice the words at 1024, the critical batches, 60 % at 8192.
  assert {f'{findings.efficiency(runs, arm)[1024]:.2f}' for arm in s2s_plan.ARMS} == {'0.50'}
  quoted('twice the words of batch 256 (0.50)')
  quoted(f'{findings.critical(runs, LAMB)[1]:.0f} words for LAMB, '
         f'{findings.critical(runs, ADAMW)[1]:.0f} for AdamW and '
         f'{findings.critical(runs, MUON)[1]:.0f} for Muon')
  assert [arm.label for arm in s2s_plan.ARMS if 8192 in findings.efficiency(runs, arm)] == ['Muon']
  quoted('only Muon reaches 60 % dev WER at 8192')
  # The cost of an update, up to 8192.
  costs = [findings.cost_ratios(runs)[batch] for batch in s2s_plan.BATCHES]
  quoted(f'{min(costs):.2f} to {max(costs):.2f} of it from 256 to 8192')
