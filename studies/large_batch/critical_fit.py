"""The critical batch of a study's runs: S(B) = S_min·(1 + B_crit/B) fitted to updates to a target.

McCandlish et al. 2018 model the updates S a run needs to reach a result at
batch B as S(B) = S_min·(1 + B_crit/B), and the examples it reads as E(B) =
S(B)·B = E_min·(1 + B/B_crit), with B_crit = E_min/S_min: below B_crit a
larger batch saves updates almost one for one, above it the updates level off
at S_min and a larger batch only reads more examples. S is linear in 1/B, so
the fit (``core.critical_batch.critical_fit``, unweighted here) is least
squares of S on 1/B.

Both large-batch studies use it (docs/large_batch.md and
docs/large_batch_seq2seq.md; studies/large_batch/critical_table.py writes their
fits into docs/critical_batch.md). The updates at which a run first reached
its target come from the run's curve of evaluations (result.json's
``curve``: ``[step, value, seconds]`` rows): at the first evaluation that
reached it, or between that evaluation and the one before it, linearly
(:func:`crossing`). For a tuned arm S(B) is the fewest mean updates over its
settings at B, counting a setting only when every finished seed reached the
target, as Shallue et al. 2019 measure steps to a result.

Nothing here imports TensorFlow.
"""

import collections
import json
import os

# The fit itself is the framework's own (--mode=critical_batch fits its branches with it).
from core.critical_batch import critical_fit  # noqa: F401  pylint: disable=unused-import
from framework.sweep import results as sweep_results
from studies.large_batch import study

# The field of a run dict that holds its updates to the target, as this module counts them.
FIELD = 'updates_to_target'


class Fit(collections.namedtuple('Fit', ['s_min', 'b_crit', 'steps', 'missed', 'bounded'])):
  """A fitted arm.

  Attributes:
    s_min: the fewest updates the model allows (its large-batch limit), or None.
    b_crit: the critical batch, in the study's unit of batch, or None.
    steps: ``{batch: S(B)}``, the points fitted, in batch order.
    missed: ``{batch: updates}``: the batches whose runs (none of the arm's
      settings there) reached the target, with the updates a run there made.
    bounded: the batches of ``steps`` whose S(B) is only an upper bound: a run
      of the setting it comes from reached the target at its first evaluation.
  """

  @property
  def fitted(self):
    """Whether the fit gave a positive S_min and B_crit."""
    return self.b_crit is not None


def crossing(curve, target, metric=study.ACCURACY, interpolate=True):
  """The updates at which a curve of evaluations first reaches ``target``, or None.

  Args:
    curve: ``[step, value, ...]`` rows in step order (result.json's ``curve``).
    target: the metric's target value (a fraction).
    metric: a :class:`study.Metric`; its direction says what reaching is.
    interpolate: between the first evaluation that reached the target and
      the one before it, the step where the straight line between their
      values meets the target; otherwise the first reaching evaluation's
      step (an upper bound). The first evaluation of a run, with none before
      it, gives its own step either way.

  Returns:
    The updates as a float, or None when no evaluation reached the target.
  """
  previous = None
  for row in curve:
    step, value = float(row[0]), float(row[1])
    if metric.reached(value, target):
      if not interpolate or previous is None or previous[1] == value:
        return step
      before, was = previous
      return before + (step - before) * (target - was) / (value - was)
    previous = (step, value)
  return None


def run_curve(run):
  """The curve of evaluations of a run read by :func:`study.read_runs`, or [] without one.

  An archived point (``<point>.json`` beside where its directory would be)
  keeps its curve in that file; a run directory in its result.json, or, for
  a result without one, in the run's record.
  """
  logdir = run['logdir']
  for path in (logdir + '.json', os.path.join(logdir, sweep_results.RESULT_FILE)):
    if os.path.isfile(path):
      try:
        with open(path, encoding='utf-8') as f:
          curve = json.load(f).get('curve')
      except ValueError:
        continue
      if curve is not None:
        return curve
  if os.path.isdir(logdir):
    return sweep_results.timed_curve(logdir, 'accuracy')
  return []


def with_updates(runs, target, metric=study.ACCURACY, interpolate=True):
  """Copies of the finished ``runs`` with their updates to ``target`` under :data:`FIELD`.

  A copy also says under ``'first'`` whether the run reached the target at
  its first evaluation (its updates are then only an upper bound).
  """
  copies = []
  for run in runs:
    if run['status'] != 'ok':
      continue
    curve = run_curve(run)
    updates = crossing(curve, target, metric, interpolate)
    copies.append(dict(run, **{FIELD: updates,
                               'first': updates is not None and updates == float(curve[0][0])}))
  return copies


def fewest(members):
  """``(S, bounded)`` of one arm's runs at one batch (from :func:`with_updates`), or None.

  S is the fewest mean updates to the target over the settings whose every
  run reached it (study.by_setting tells the settings apart); ``bounded``,
  whether a run of that setting reached it at its first evaluation.
  """
  best = None
  for runs in study.by_setting(members).values():
    if runs and all(r[FIELD] is not None for r in runs):
      mean = sum(r[FIELD] for r in runs) / len(runs)
      if best is None or mean < best[0]:
        best = (mean, any(r['first'] for r in runs))
  return best


def updates_by_batch(runs, arm, key, target, metric=study.ACCURACY, interpolate=True):
  """``({batch: S(B)}, {batch: updates of a run}, (batch, ...))`` of the runs labelled ``arm``.

  The first is the fewest mean updates to ``target`` over the arm's settings
  at each batch where a setting's every finished seed reached it; the second,
  the most updates a run made at each batch where none did (its budget); the
  third, the batches of the first whose S(B) is only an upper bound
  (:func:`fewest`). An arm that spans several sweeps is told apart by its
  runs' ``setting`` (:func:`study.mark_settings`).
  """
  members = with_updates([r for r in runs if r['arm'] == arm], target, metric, interpolate)
  reached, missed, bounded = {}, {}, []
  for batch in study.ordered_values(members, key):
    at = study.at_value(members, arm, key, batch)
    found = fewest(at)
    batch = int(study.number(batch))
    if found is None:
      missed[batch] = max(r.get('steps') or 0 for r in at)
      continue
    reached[batch] = found[0]
    if found[1]:
      bounded.append(batch)
  return reached, missed, tuple(bounded)


def fit_arm(runs, arm, key, target, metric=study.ACCURACY, interpolate=True):
  """The :class:`Fit` of the runs labelled ``arm`` to ``target``."""
  steps, missed, bounded = updates_by_batch(runs, arm, key, target, metric, interpolate)
  fitted = critical_fit(steps)
  s_min, b_crit = fitted if fitted is not None else (None, None)
  return Fit(s_min, b_crit, steps, missed, bounded)
