"""A study's targets, checked from its runs: an arm within some points of the best baseline, and the budget.

``--claim LABEL@VALUE<=POINTS`` (studies/large_batch/report.py) asks whether the arm
LABEL at the key's VALUE is within POINTS percentage points of the best mean
accuracy of the reference arms at the baseline (docs/large_batch.md: LARS at
8K within 1.0 of the best at batch 256); ``--budget FULL=HALF`` how much the
best arm at the baseline gains from half the epochs (HALF) to all of them
(FULL), like for like: HALF's runs at FULL's chosen setting. A target measured
on fewer seeds than wanted is provisional.
"""

from studies.large_batch import study


def parse_claim(text):
  """``(label, value, points)`` of a ``--claim LABEL@VALUE<=POINTS``; ValueError if malformed."""
  head, sep, points = text.rpartition('<=')
  label, at, value = head.rpartition('@')
  if not sep or not at or not label or study.number(value) is None or study.number(points) is None:
    raise ValueError(f'--claim {text!r}: expected LABEL@VALUE<=POINTS, e.g. LARS@8192<=1.0')
  return label, value, float(points)


def parse_budget(text):
  """``(full label, half label)`` of a ``--budget FULL=HALF``; ValueError if malformed."""
  full, sep, half = text.partition('=')
  if not sep or not full or not half:
    raise ValueError(f'--budget {text!r}: expected FULL=HALF, two --arm labels')
  return full, half


def report_lines(runs, key, claims, budgets, baseline, reference_arms, seeds_wanted=2,
                 budget_points=0.3):
  """The lines under the table that say whether each target is met, from the runs.

  ``claims``: ``(label, value, points)``; ``budgets``: ``(full label, half label)``.
  A target measured on fewer than ``seeds_wanted`` seeds on either side is
  provisional; one without a result on either side is not measured yet.
  """
  if not claims and not budgets:
    return []
  baseline = study.baseline_value(runs, key, baseline)  # as for the gaps
  best = study.best_arm(runs, key, reference_arms, baseline)
  where = f'{key} {baseline:g}' if study.number(baseline) is not None else f'{key} {baseline}'
  if best is None:
    reference_text = f'the best result at {where}: none yet'
  else:
    reference_text = (f'the best result at {where} is {best[0]}, '
                      f'{_percent(best[1])} over {_seeds(study.finished(best[2]))}'
                      f'{_setting(best[2])}')
  lines = ['', f'Targets, checked from the runs above; {reference_text}:', '']
  for label, value, points in claims:
    result = claim(runs, key, label, value, points, best)
    line = f'- {label} at {value} within {points:g} point{"" if points == 1 else "s"} of it: '
    if result['gap'] is None:
      line += 'not measured yet' if result['mean'] is None else (
          f'{_percent(result["mean"])} over {_seeds(result["seeds"])}{result["setting"]}, '
          'no reference yet')
    else:
      line += (f'{_percent(result["mean"])} over {_seeds(result["seeds"])}{result["setting"]}, '
               f'{result["gap"]:+.2f} points: **{"met" if result["met"] else "missed"}**')
      line += _provisional(min(result['seeds'], study.finished(best[2])), seeds_wanted)
    lines.append(line)
  for full, half in budgets:
    gain, full_seeds, half_seeds, setting = budget_gain(runs, key, full, half, baseline)
    line = f'- budget: {full} at {where} against {half}'
    if gain is None:
      lines.append(line + (f': not measured at its chosen setting ({setting}) yet'
                           if full_seeds and setting else ': not measured yet'))
      continue
    line += (f' ({setting}): ' if setting else ': ')
    line += (f'{gain:+.2f} points from half the epochs ({_seeds(half_seeds)}) to all of them '
             f'({_seeds(full_seeds)})')
    if best is not None and best[0] == full:
      verdict = 'large enough' if gain < budget_points else 'too small'
      line += (f'; the best arm gains {"less" if gain < budget_points else "no less"} than '
               f'{budget_points:g}: the budget is **{verdict}**')
      line += _provisional(min(full_seeds, half_seeds), seeds_wanted)
    lines.append(line)
  return lines


def _percent(fraction):
  return f'{fraction * 100:.2f} %'


def _seeds(count):
  return f'{count} seed' + ('' if count == 1 else 's')


def _setting(members):
  """`` (lr 11.31, eeta=0.004)``: the setting of an arm's chosen runs ('' without a learning rate)."""
  text = _setting_text(members)
  return f' ({text})' if text else ''


def _setting_text(members):
  """``lr 11.31, eeta=0.004``: the setting of an arm's chosen runs ('' without a learning rate)."""
  lr = next((r['lr'] for r in members if r['status'] == 'ok' and r.get('lr') is not None), None)
  if lr is None:
    return ''
  setting = next(r.get('setting') or () for r in members if r['status'] == 'ok')
  return f'lr {study.setting_text(lr, setting)}'


def _provisional(seeds, wanted):
  return f' (provisional: {seeds} of {wanted} seeds)' if seeds < wanted else ''


def claim(runs, key, arm, value, points, reference, metric=study.ACCURACY):
  """Whether ``arm`` at the key's ``value`` is within ``points`` (percentage points) of ``reference``.

  ``reference`` is :func:`study.best_arm`'s answer at the baseline (or None). Returns
  a dict: ``mean`` and ``seeds`` of the arm's chosen setting at ``value``
  (None and 0 where nothing finished), ``setting`` (its text, `` (lr 11.31,
  eeta=0.004)``, or ''), ``gap`` in points (negative: worse than the reference,
  lower accuracy or higher WER, as ``metric`` goes; None without both means)
  and ``met`` (None without a gap).
  """
  members = study.chosen(study.at_value(runs, arm, key, value), metric)
  mean = study.metric_mean(members, metric)
  gap = (None if mean is None or reference is None
         else (metric.order(mean) - metric.order(reference[1])) * 100.0)
  return {'mean': mean, 'seeds': study.finished(members, metric), 'setting': _setting(members),
          'gap': gap, 'met': None if gap is None else gap >= -points}


# The override that makes a half-budget run: compared across the budget, not matched.
BUDGET_KEY = 'num_epochs'


def budget_gain(runs, key, full_arm, half_arm, baseline, metric=study.ACCURACY):
  """``(gain, full seeds, half seeds, setting text)`` of ``half_arm`` against ``full_arm`` at baseline.

  Like for like: the full arm's chosen setting against the half arm's runs of
  that same setting (the same learning rate and overrides but the epochs,
  ``BUDGET_KEY``). ``gain`` in points from half to full (positive: the full
  budget is better, in ``metric``'s direction), None if either side has no
  result; ``setting text`` is the chosen setting, ``lr 2, eeta=0.004``.
  """
  full = study.chosen(study.at_value(runs, full_arm, key, baseline), metric)
  chosen = [r for r in full if r['status'] == 'ok']
  if not chosen:
    return None, 0, 0, ''
  def same_setting(run):
    names = (set(run['fixed']) | set(chosen[0]['fixed'])) - {BUDGET_KEY}
    return study.rate_key(run['lr']) == study.rate_key(chosen[0]['lr']) and all(
        repr(run['fixed'].get(n)) == repr(chosen[0]['fixed'].get(n)) for n in names)
  half = [r for r in study.at_value(runs, half_arm, key, baseline)
          if r['status'] == 'ok' and same_setting(r)]
  full_mean, half_mean = study.metric_mean(full, metric), study.metric_mean(half, metric)
  gain = (None if full_mean is None or half_mean is None
          else (metric.order(full_mean) - metric.order(half_mean)) * 100.0)
  return gain, study.finished(full, metric), study.finished(half, metric), _setting_text(full)
