"""The runs of a study: several sweeps (arms), grouped by a swept key, and their time to accuracy.

Every finished point (``result.json``) and failed point (``error.txt``) of a
sweep directory counts, whichever sweep invocation ran it. An arm may span
several sweep directories, each run with its own fixed ``--set`` overrides
(LARS with one eeta per directory): the overrides that differ between an
arm's runs make up, with the learning rate, the run's *setting*
(:func:`mark_settings`). Where an arm ran several settings at one key value
(a tuning grid), :func:`chosen` keeps the setting with the best mean accuracy. The updates to a target
accuracy come from the curve of evaluations that ``result.json`` keeps (the
first evaluation with top-1 ``>= target``), or, for a result without one, from
the run's record (``metrics.jsonl``: each evaluation and its time, counted
from the run's first start).

The metric is the image study's top-1 accuracy (higher is better) unless a
caller names another :class:`Metric`: a sequence study's word error rate
(:data:`WER`, lower is better) picks its settings and reaches its target from
above. A directory may also be an archive of results, ``<point>.json`` (a
copy of the point's result.json) and ``<point>.error`` (the error of a failed
point), read as its run directories would be.
"""

import collections
import glob
import json
import os
import statistics

from framework.sweep.grid import parse_value
from framework.sweep.results import read_error
from framework.sweep.results import read_result
from framework.sweep.results import timed_curve

LR_KEY = 'lr_policy_params.learning_rate'
SEED_KEY = 'random_seed'
DEFAULT_TARGET = 0.90
# Not a config key: batch_size_per_gpu x iter_size (one worker), so that 16K
# run as two micro-batches of 8K is told apart from 8K.
GLOBAL_BATCH = 'global_batch'
# Where an archive keeps the error of a failed point: <point>.error beside <point>.json.
ARCHIVED_ERROR = '.error'


class Metric(collections.namedtuple('Metric', ['name', 'higher_is_better'])):
  """The metric a study is judged by: its name in result.json's metrics, and its direction."""

  def reached(self, value, target):
    """Whether ``value`` is at the ``target`` or past it, in the metric's direction."""
    return value >= target if self.higher_is_better else value <= target

  def order(self, value):
    """A sort key under which the best value is the largest."""
    return value if self.higher_is_better else -value


ACCURACY = Metric('accuracy', True)
WER = Metric('wer', False)


def number(text):
  """``text`` as a float, or None when it is not a number."""
  try:
    return float(text)
  except (TypeError, ValueError):
    return None


def to_target(logdir, target, result=None, metric=ACCURACY):
  """(updates, seconds) to the first evaluation that reaches the target; None where not reached.

  The curve is the one ``result`` (the run's result.json) holds, or, for a
  result written without one, read from the run directory.
  """
  curve = (result or {}).get('curve')
  if curve is None:
    curve = timed_curve(logdir, metric.name)
  reached = [(step, seconds) for step, value, seconds in curve if metric.reached(value, target)]
  return reached[0] if reached else (None, None)


def _points(directory):
  """``(logdir, result or None, error or None)`` of each point of a sweep or archive directory.

  A run directory answers from its files; an archived point ``<point>.json``
  or ``<point>.error`` as the directory ``<point>`` would (a run directory of
  the same point wins).
  """
  found = {}
  for logdir in sorted(glob.glob(os.path.join(directory, '*', ''))):
    logdir = logdir.rstrip(os.sep)
    found[logdir] = (read_result(logdir), read_error(logdir))
  for path in sorted(glob.glob(os.path.join(directory, '*.json'))
                     + glob.glob(os.path.join(directory, '*' + ARCHIVED_ERROR))):
    logdir, extension = os.path.splitext(path)
    if logdir in found and found[logdir] != (None, None):
      continue
    with open(path, encoding='utf-8') as f:
      text = f.read()
    if extension == '.json':
      try:
        found[logdir] = (json.loads(text), None)
      except ValueError:
        continue
    elif found.get(logdir, (None, None))[0] is None:
      found[logdir] = (None, text.strip())
  return sorted(found.items())


def read_runs(label, directory, key, target=DEFAULT_TARGET, metric=ACCURACY):
  """One dict per point of a sweep or archive directory (finished or failed), by key value and seed.

  A finished run has the ``metric``'s value under its name, every other metric
  of its result under its own (``per`` for a sequence model), and the updates
  and seconds to the first evaluation that reached ``target``.
  """
  runs = []
  for logdir, (result, error) in _points(directory):
    if result is None:
      if error is None:
        continue  # running or never started
      runs.append({'arm': label, 'status': 'failed', 'error': error, 'logdir': logdir,
                   key: _value_from_name(logdir, key), 'seed': _value_from_name(logdir, 'seed'),
                   'lr': _value_from_name(logdir, LR_KEY), 'fixed': {}, 'setting': ()})
      continue
    values = dict(result.get('point') or {})
    values.update(result.get('derived') or {})
    fixed = {}  # the sweep's --set overrides: the same for every point of its directory
    for override in result.get('overrides') or []:
      name, _, text = override.partition('=')
      if name not in values and name != SEED_KEY:
        fixed[name] = parse_value(text)
      values.setdefault(name, parse_value(text))
    metrics = result.get('metrics') or {}
    steps_to, seconds_to = to_target(logdir, target, result, metric)
    run = {'arm': label, 'status': 'ok', 'error': '', 'logdir': logdir,
           key: _key_value(values, key), 'seed': result.get('seed'),
           'lr': values.get(LR_KEY), 'fixed': fixed, 'setting': (),
           'accuracy': metrics.get('accuracy'), 'top5': metrics.get('top5'),
           'loss': metrics.get('loss'), 'steps': metrics.get('steps'),
           'steps_to_target': steps_to, 'seconds_to_target': seconds_to,
           'wall_s': result.get('wall_s'), 'machine': result.get('machine')}
    run.update({name: value for name, value in metrics.items() if name not in run})
    runs.append(run)
  runs.sort(key=lambda r: (number(r[key]) or 0.0, r['seed'] if r['seed'] is not None else -1))
  return runs


def mark_settings(runs):
  """Sets each run's ``setting``: its fixed overrides that differ between the runs of its arm.

  ``((name, value), ...)`` in name order, value None where the run left the
  config's value; ``()`` in an arm whose runs all share their overrides (a
  half-budget arm's ``num_epochs``, say). A failed run, whose overrides are not
  recorded, keeps ``()``. Returns ``runs``.
  """
  for arm in {run['arm'] for run in runs}:
    members = [r for r in runs if r['arm'] == arm and r['status'] == 'ok']
    names = sorted({name for r in members for name in r['fixed']})
    varying = [name for name in names if len({repr(r['fixed'].get(name)) for r in members}) > 1]
    for run in members:
      run['setting'] = tuple((name, run['fixed'].get(name)) for name in varying)
  return runs


def overrides_text(setting):
  """The overrides of a run's ``setting`` as the table shows them: ``eeta=0.004`` ('' for none).

  An override the run did not set (value None) is left out: it ran with its
  config's value.
  """
  parts = []
  for name, value in setting:
    if value is not None:
      numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
      parts.append(f'{name.rsplit(".", 1)[-1]}={value:{"g" if numeric else ""}}')
  return ', '.join(parts)


def setting_text(lr, setting=()):
  """A learning rate and a setting's overrides: ``11.31, eeta=0.004`` (``n/a`` for no lr)."""
  return ', '.join(filter(None, ['n/a' if lr is None else f'{lr:g}', overrides_text(setting)]))


def _key_value(values, key):
  if key != GLOBAL_BATCH:
    return values.get(key)
  batch = values.get('batch_size_per_gpu')
  return None if batch is None else int(batch) * int(values.get('iter_size') or 1)


def _value_from_name(logdir, name):
  """A value from a point directory name such as ``batch_size_per_gpu=256__seed=0``."""
  if name == GLOBAL_BATCH:
    return _key_value({k: _value_from_name(logdir, k) for k in ('batch_size_per_gpu', 'iter_size')},
                      name)
  for part in os.path.basename(logdir).split('__'):
    key, _, text = part.partition('=')
    if key == name:
      return parse_value(text)
  return None


def timing_machine(runs):
  """The machine most finished runs recorded (the first of a tie in run order), or None.

  Wall times are compared between runs of this machine only: a study that
  spans sessions may run on CPUs several times apart in speed.
  """
  counts = {}
  for run in runs:
    if run['status'] == 'ok' and run.get('machine'):
      counts[run['machine']] = counts.get(run['machine'], 0) + 1
  return max(counts, key=counts.get) if counts else None


def groups(runs, key):
  """``{(arm, key value): [runs]}`` in arm order, then key order."""
  result = {}
  for run in runs:
    result.setdefault((run['arm'], run[key]), []).append(run)
  return result


def rate_key(lr):
  """A learning rate as settings are keyed and compared: 6 decimals (None stays None)."""
  return None if lr is None else round(lr, 6)


def by_setting(members):
  """``{(setting, lr): [runs]}`` of one arm at one key value; failed runs under the lr their name gives.

  A failed run whose name gives no learning rate is under ``((), None)``.
  """
  result = {}
  for run in members:
    lr = run.get('lr')
    result.setdefault((run.get('setting') or (), rate_key(lr)),
                      []).append(run)
  return result


def tuned(members):
  """The settings of one arm at one key value that have a learning rate (more than one: a grid)."""
  return [setting for setting in by_setting(members) if setting[1] is not None]


def metric_mean(runs, metric=ACCURACY):
  """The mean of the metric over the finished runs, or None."""
  values = [r[metric.name] for r in runs
            if r['status'] == 'ok' and r.get(metric.name) is not None]
  return statistics.fmean(values) if values else None


def accuracy_mean(runs):
  """The mean test accuracy of the finished runs, or None."""
  return metric_mean(runs, ACCURACY)


def chosen(members, metric=ACCURACY):
  """The runs of the setting with the best mean of the metric (more seeds break ties).

  Failed runs with no learning rate in their name go with the chosen setting.
  """
  grid = by_setting(members)
  scored = [(metric.order(mean), len(runs), index)
            for index, (setting, runs) in enumerate(grid.items())
            if (mean := metric_mean(runs, metric)) is not None]
  if not scored:
    return members
  best = list(grid)[max(scored, key=lambda t: (t[0], t[1], -t[2]))[2]]
  unknown = ((), None)
  return grid[best] + (grid.get(unknown, []) if best != unknown else [])


def ordered_values(runs, key):
  """The runs' distinct values of ``key``, in numeric order."""
  return sorted({run[key] for run in runs}, key=lambda v: number(v) or 0.0)


def best_at_smallest(runs, key, arms, baseline=None, metric=ACCURACY):
  """The best mean of the metric over the arms at the key value ``baseline``, or None.

  ``baseline`` defaults to the smallest key value of the runs; a study that
  names it (batch 256) gets None, so no gaps, until a run there has finished.
  """
  best = best_arm(runs, key, arms, baseline, metric)
  return None if best is None else best[1]


def best_arm(runs, key, arms, baseline=None, metric=ACCURACY):
  """``(arm, mean of the metric, chosen runs)`` of the best of ``arms`` at ``baseline``, or None.

  ``baseline`` defaults to the smallest key value of the runs.
  """
  baseline = baseline_value(runs, key, baseline)
  best = None
  for arm in arms:
    members = chosen(at_value(runs, arm, key, baseline), metric)
    mean = metric_mean(members, metric)
    if mean is not None and (best is None or metric.order(mean) > metric.order(best[1])):
      best = (arm, mean, members)
  return best


def baseline_value(runs, key, baseline=None):
  """``baseline``, or where it is None the smallest key value of the runs (None without runs)."""
  if baseline is not None:
    return baseline
  values = ordered_values(runs, key)
  return values[0] if values else None


def at_value(runs, arm, key, value):
  """The runs of ``arm`` whose key equals ``value`` (as numbers where both are; 256 == '256.0')."""
  def same(other):
    a, b = number(other), number(value)
    return a == b if a is not None and b is not None else str(other) == str(value)
  return [r for r in runs if r['arm'] == arm and same(r[key])]


def finished(members, metric=ACCURACY):
  """How many of the runs finished with a value of the metric."""
  return sum(1 for r in members if r['status'] == 'ok' and r.get(metric.name) is not None)


def steps_to_target(members, field='steps_to_target'):
  """Fewest mean updates to the target over an arm's settings at one key value, or None.

  A setting counts only when every finished seed reached the target.
  ``field='seconds_to_target'`` gives the least mean wall time to it instead.
  """
  best = None
  for lr_runs in by_setting(members).values():
    ok = [r for r in lr_runs if r['status'] == 'ok']
    steps = [r[field] for r in ok if r.get(field) is not None]
    if ok and len(steps) == len(ok):
      mean = statistics.fmean(steps)
      best = mean if best is None else min(best, mean)
  return best


def best_lr(runs, key, value, metric=ACCURACY):
  """The learning rate with the best mean of the metric at the key's ``value``, or None."""
  members = [r for r in runs if str(r[key]) == value]
  best = [r['lr'] for r in chosen(members, metric)
          if r['status'] == 'ok' and r.get('lr') is not None]
  return best[0] if best else None
