"""The numbers of ``--mode=critical_batch``: its branches, its rule, what it writes; no TensorFlow.

The mode (``framework.run.critical_batch``) trains short branches from one
checkpoint at 1x, 2x, 4x, ... the config's global batch, each on the same
number of examples, and compares their held-out losses. This module holds
what needs no model:

- the ladder of batches and the examples each branch reads
  (:func:`branch_batches`, :func:`choose_examples`);
- the rule: the critical batch is the largest batch whose held-out loss is
  within ``tolerance`` (relative) of the 1x branch's (:func:`critical_batch`),
  McCandlish et al.'s (2018) critical batch measured as Merrill et al. (2025)
  do, by branching;
- each branch's record (``branch_<batch>.json``, written whole, so a branch
  is finished or absent) and the settings a re-run must share with it
  (:func:`settings_change`);
- the summary: the table, ``critical_batch.json`` and ``critical_batch.png``.
"""

import json
import math
import os

from core.files import write_atomically
from core.files import write_text_atomically

# The directory of the mode's records inside the run directory.
RESULTS_DIR = 'critical_batch'
SUMMARY_NAME = 'critical_batch.json'
PLOT_NAME = 'critical_batch.png'
# Written before a warm-up this mode trains from scratch: the run's checkpoints
# below its step are that warm-up, to finish before branching.
WARMUP_NAME = 'warmup.json'
# The held-out metrics of the checkpoint the branches start from.
START_NAME = 'start.json'

# The fewest updates the largest branch may take: with fewer, a branch measures
# how far a handful of steps go rather than how well the batch uses its examples.
MIN_UPDATES = 8

# What a re-run must share with a finished branch for its result to stand.
SETTINGS = ('checkpoint', 'checkpoint_step', 'examples', 'batch_size_per_gpu', 'learning_rate',
            'cooldown_fraction')


class ResultsError(Exception):
  """A request the branches cannot meet, or records that do not fit it: one line."""


def branch_batches(base, max_batch):
  """The branches' global batches: ``base``, 2·base, 4·base, ... up to ``max_batch``.

  Raises:
    ResultsError: ``max_batch`` below ``base``.
  """
  if max_batch < base:
    raise ResultsError(f'--max_batch: {max_batch} is below the config\'s global batch {base}; '
                       f'allowed: {base} or more (the branches run at 1x, 2x, 4x, ... of it; '
                       f'the default is {16 * base}, 16x)')
  batches = [base]
  while batches[-1] * 2 <= max_batch:
    batches.append(batches[-1] * 2)
  return batches


def choose_examples(given, epoch, largest, unit):
  """The examples every branch reads: ``given``, or one epoch in whole updates of the largest batch.

  Args:
    given: ``--branch_examples``, or None for the default.
    epoch: the examples of one epoch of the training split (its full micro-batches).
    largest: the largest branch's global batch.
    unit: what the batch counts (``images``, ``words``), for messages.

  Raises:
    ResultsError: more examples than the training split holds, a number that is
      not a whole number of the largest branch's updates, or fewer than
      ``MIN_UPDATES`` updates of it.
  """
  most = epoch // largest * largest
  fewest = MIN_UPDATES * largest
  allowed = (f'allowed: {most}' if fewest == most
             else f'allowed: {fewest} to {most}, in steps of {largest}')
  if fewest > epoch:
    raise ResultsError(
        f'--max_batch: the largest branch ({largest} {unit}) needs at least {MIN_UPDATES} '
        f'updates, {fewest} {unit}, but the training split holds {epoch} {unit}; allowed: a '
        f'--max_batch of at most {epoch // MIN_UPDATES} {unit}')
  if given is None:
    return most
  if given > epoch:
    raise ResultsError(f'--branch_examples: {given} {unit} per branch is more than the training '
                       f'split holds ({epoch} {unit}); {allowed}')
  if given % largest or given < fewest:
    raise ResultsError(f'--branch_examples: {given} {unit} must be a whole number of updates of '
                       f'the largest branch ({largest} {unit}), at least {MIN_UPDATES} of them; '
                       f'{allowed}')
  return given


def gap(loss, reference):
  """The relative gap ``loss / reference - 1``; None when either is not a finite number."""
  if loss is None or reference is None or not (math.isfinite(loss) and math.isfinite(reference)):
    return None
  return loss / reference - 1.0


def critical_batch(branches, tolerance):
  """The largest batch whose held-out loss is within ``tolerance`` (relative) of the 1x branch's.

  Args:
    branches: dicts with ``batch`` and ``heldout_loss`` (None: diverged), the
      smallest batch (1x) first.
    tolerance: the relative tolerance, in (0, 1).

  Returns:
    ``(critical batch or None, [gap of each branch])``; None when the 1x
    branch has no finite loss to compare with.
  """
  reference = branches[0]['heldout_loss']
  gaps = [gap(b['heldout_loss'], reference) for b in branches]
  within = [b['batch'] for b, g in zip(branches, gaps) if g is not None and g <= tolerance]
  return (max(within) if within else None), gaps


def noise_scale(branches, base):
  """B_simple measured on the checkpoint: the 2x branch's estimate, else the smallest batch's.

  Args:
    branches: dicts with ``batch`` and ``noise_scale`` (``Trainer.noise_scale()``:
      None, or a dict with ``b_simple``).
    base: the 1x batch.

  Returns:
    ``(B_simple or None, the batch of the branch it comes from or None)``; a
    B_simple that is not finite (the gradient's estimate not positive) is None.
  """
  measured = [b for b in branches if b.get('noise_scale')]
  measured.sort(key=lambda b: (b['batch'] != 2 * base, b['batch']))
  for branch in measured:
    value = branch['noise_scale'].get('b_simple')
    if value is not None and math.isfinite(value):
      return value, branch['batch']
  return None, None


def branch_path(directory, batch):
  return os.path.join(directory, f'branch_{batch}.json')


def read_branch(directory, batch):
  """A finished branch's record, or None (none, or one left unreadable by a failed disk)."""
  try:
    with open(branch_path(directory, batch), encoding='utf-8') as f:
      record = json.load(f)
  except (OSError, ValueError):
    return None
  return record if isinstance(record, dict) and 'settings' in record else None


def settings_change(record, settings):
  """The first setting a finished branch's record has otherwise than ``settings``, or None."""
  saved = record.get('settings', {})
  for key in SETTINGS:
    old, new = saved.get(key), settings.get(key)
    same = (math.isclose(old, new, rel_tol=1e-9) if isinstance(old, float)
            and isinstance(new, float) else old == new)
    if not same:
      return f'{key} {old!r}, now {new!r}'
  return None


def write_json(path, value):
  """``value`` as indented JSON, written whole or not at all."""
  write_text_atomically(path, json.dumps(value, indent=2, allow_nan=False) + '\n')


def finite_or_none(value):
  return value if value is not None and math.isfinite(value) else None


def describe_batch(value):
  """A measured batch (B_simple) in few digits: ``1530``, ``12.4``, ``-3.1e-07``."""
  return f'{value:.0f}' if abs(value) >= 100 else f'{value:.3g}'


def table_lines(branches, gaps, critical, unit):
  """The table of the branches, one line each, under a header."""
  lines = [f'{"batch":>9} {"iter_size":>9} {"updates":>8} {"held-out loss":>14} '
           f'{"gap to 1x":>10} {"wall":>9}']
  for branch, branch_gap in zip(branches, gaps):
    loss = branch['heldout_loss']
    lines.append(
        f'{branch["batch"]:>9} {branch["iter_size"]:>9} {branch["updates"]:>8} '
        f'{"diverged" if loss is None else f"{loss:.4f}":>14} '
        f'{"" if branch_gap is None else f"{100 * branch_gap:+.2f}%":>10} '
        f'{branch["wall_s"]:>8.1f}s' + ('  <- critical batch' if branch['batch'] == critical
                                         else ''))
  return [line.rstrip() for line in lines] + [f'(batch in {unit}; gap relative to the 1x branch)']


def plot(path, branches, tolerance, critical, b_simple, unit, title):
  """``critical_batch.png``: held-out loss after the same examples against the batch.

  A log2 batch axis; the tolerance band above the 1x branch's loss; the
  critical batch and the noise scale B_simple marked. Written through a
  temporary file, so a failed write leaves no partial plot.
  """
  # pylint: disable=import-outside-toplevel
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  figure = Figure(figsize=(6.4, 4.4))
  FigureCanvasAgg(figure)
  axes = figure.add_subplot()
  points = [(b['batch'], b['heldout_loss']) for b in branches if b['heldout_loss'] is not None]
  axes.set_xscale('log', base=2)
  if points:
    axes.plot(*zip(*points), 'o-', color='tab:blue', label='held-out loss')
  reference = branches[0]['heldout_loss']
  if reference is not None:
    axes.axhspan(reference, reference * (1 + tolerance), color='tab:green', alpha=0.15,
                 label=f'within {100 * tolerance:g}% of 1x')
    axes.axhline(reference, color='tab:green', linewidth=0.8)
  diverged = [b['batch'] for b in branches if b['heldout_loss'] is None]
  if diverged:
    top = max((loss for _, loss in points), default=1.0)
    axes.plot(diverged, [top] * len(diverged), 'x', color='tab:red', markersize=9,
              label='diverged')
  if critical is not None:
    axes.axvline(critical, color='tab:green', linestyle='-', linewidth=1.5,
                 label=f'critical batch {critical}')
  if b_simple is not None and b_simple > 0:
    axes.axvline(b_simple, color='tab:orange', linestyle='--', linewidth=1.5,
                 label=f'noise scale B_simple {describe_batch(b_simple)}')
  batches = [b['batch'] for b in branches]
  axes.set_xticks(batches, [str(b) for b in batches])
  axes.minorticks_off()
  axes.set_xlabel(f'global batch ({unit}, log2 axis)')
  axes.set_ylabel('held-out loss after the same examples')
  axes.set_title(title, fontsize=9)
  axes.grid(True, which='major', alpha=0.3)
  axes.legend(fontsize=8)
  figure.tight_layout()
  write_atomically(path, lambda temp: figure.savefig(temp, dpi=110), suffix='.png')


def last_lines(critical, batches, b_simple, noise_batch, unit):
  """The measurement's last two lines: ``critical batch: N <unit>``, then the noise scale beside it."""
  if critical is None:
    first = 'critical batch: none measured (the 1x branch has no finite held-out loss)'
  elif critical == batches[-1]:
    first = (f'critical batch: {critical} {unit} (the largest branch: it may be larger; '
             'raise --max_batch to see)')
  else:
    first = f'critical batch: {critical} {unit}'
  if b_simple is None:
    second = ('noise scale (B_simple): not measured (no branch measured a finite estimate; '
              'noise_scale: auto measures it from iter_size 2)')
  else:
    sign = '' if b_simple > 0 else ', not positive: no gradient noise the branch could measure'
    second = (f'noise scale (B_simple): {describe_batch(b_simple)} {unit} '
              f'(measured in the branch at batch {noise_batch}{sign})')
  return [first, second]
