"""Plot the train and eval curves of one or more runs from their TensorBoard event files.

  python scripts/plot_runs.py runs/fashion_mnist_sgd runs/fashion_mnist_lars --out curves.png
  python scripts/plot_runs.py runs/sweep_bs/* --tags loss,accuracy,learning_rate --out curves.png

  python scripts/plot_runs.py runs/sweep_bs/* --x epochs --out curves.png

Each LOGDIR is a run directory of run.py: train scalars (loss, accuracy,
learning_rate, global_gradient_norm, loss_scale, images_per_sec, epoch,
images) are in LOGDIR, eval scalars (loss, accuracy, top5_accuracy) in
LOGDIR/eval. Paths that are not run directories (a sweep's results.csv or
accuracy.png matched by a glob, a directory without events) are skipped with
a note. One subplot per tag, one colour per run (labelled with the logdir's
name), train curves solid and eval curves dashed with markers. Prints the last
value of each curve.

The x axis is the optimizer step, the epoch or the number of training images
seen (``--x steps|epochs|images``); runs with different batch sizes are only
comparable per epoch or per image. Epochs and images come from the ``epoch``
and ``images`` scalars the trainer writes with its other train scalars.
"""

import argparse
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SPLITS = ('train', 'eval')
# --x: the axis label and the train scalar that maps a step onto it (None: the step itself).
X_AXES = {'steps': ('step', None), 'epochs': ('epoch', 'epoch'),
          'images': ('training images seen', 'images')}


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('logdirs', nargs='+', metavar='LOGDIR', help='run directories of run.py')
  parser.add_argument('--out', default='curves.png', help='the PNG to write')
  parser.add_argument('--tags', default='loss,accuracy',
                      help='comma-separated scalar tags, one subplot each')
  parser.add_argument('--x', default='steps', choices=sorted(X_AXES),
                      help='the x axis: optimizer steps, epochs or training images seen')
  return parser.parse_args(argv)


def read_scalars(directory):
  """Reads the scalar summaries of the event files directly in ``directory``.

  ``tf.summary`` (v2) writes scalars as tensors; TF 1 ``scalars`` are read too.
  When a step was written twice (a run resumed from an earlier checkpoint),
  the later write wins.

  Returns:
    ``{tag: (steps list, values list)}`` sorted by step; ``{}`` when the
    directory holds no events.
  """
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=C0415
  from tensorboard.util import tensor_util  # pylint: disable=import-outside-toplevel
  if not os.path.isdir(directory):
    return {}
  accumulator = event_accumulator.EventAccumulator(
      directory, size_guidance={event_accumulator.TENSORS: 0, event_accumulator.SCALARS: 0})
  accumulator.Reload()
  tags = accumulator.Tags()
  series = {}
  for tag in tags.get(event_accumulator.TENSORS, []):
    points = []
    for event in accumulator.Tensors(tag):
      value = tensor_util.make_ndarray(event.tensor_proto)
      if value.size != 1 or value.dtype.kind not in 'fiub':
        break  # not a scalar summary (text, image, histogram)
      points.append((event.wall_time, event.step, float(value.reshape(()))))
    else:
      series[tag] = points
  for tag in tags.get(event_accumulator.SCALARS, []):
    series.setdefault(tag, [(e.wall_time, e.step, float(e.value))
                            for e in accumulator.Scalars(tag)])
  result = {}
  for tag, points in series.items():
    if not points:
      continue
    by_step = {}
    for _, step, value in sorted(points):
      by_step[step] = value
    steps = sorted(by_step)
    result[tag] = (steps, [by_step[s] for s in steps])
  return result


def read_run(logdir):
  """``{'train': scalars of logdir, 'eval': scalars of logdir/eval}``."""
  return {'train': read_scalars(logdir), 'eval': read_scalars(os.path.join(logdir, 'eval'))}


def step_mapping(run, x):
  """A function from steps to the ``x`` axis of ``run``, or None when the run lacks its scalar.

  The trainer logs the epoch and the images seen with every train summary;
  steps between (eval steps) are interpolated, steps past the last summary
  extrapolated at the last rate, and step 0 is 0 on every axis.
  """
  import numpy as np  # pylint: disable=import-outside-toplevel
  tag = X_AXES[x][1]
  if tag is None:
    return lambda steps: list(steps)
  if tag not in run['train']:
    return None
  steps, values = run['train'][tag]
  if steps[0] != 0:
    steps, values = [0] + steps, [0.0] + values
  rate = values[-1] / steps[-1] if steps[-1] else 0.0

  def convert(query):
    query = np.asarray(query, dtype=np.float64)
    inside = np.interp(query, steps, values)
    beyond = values[-1] + (query - steps[-1]) * rate
    return list(np.where(query > steps[-1], beyond, inside))
  return convert


def run_labels(logdirs):
  """The logdirs' base names; parent/name where two runs share a base name."""
  paths = [os.path.normpath(os.path.abspath(d)) for d in logdirs]
  names = [os.path.basename(p) for p in paths]
  return [os.path.join(os.path.basename(os.path.dirname(p)), n) if names.count(n) > 1 else n
          for p, n in zip(paths, names)]


def plot(runs, labels, tags, path, x='steps'):
  """Writes the figure of :func:`draw` to the PNG ``path``."""
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  figure = draw(runs, labels, tags, x)
  figure.savefig(path, dpi=100)
  plt.close(figure)


def draw(runs, labels, tags, x='steps'):
  """One subplot per tag; train solid, eval dashed with markers; one colour per run.

  Args:
    runs: ``read_run`` of each run.
    labels: the legend label of each run.
    tags: the scalar tags, one subplot each.
    x: 'steps', 'epochs' or 'images' (each run must have the scalar of the axis).

  Returns:
    The matplotlib figure.
  """
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  from matplotlib.ticker import MaxNLocator  # pylint: disable=import-outside-toplevel
  mappings = [step_mapping(run, x) for run in runs]
  columns = min(len(tags), 3)
  rows = (len(tags) + columns - 1) // columns
  figure, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 4 * rows), squeeze=False)
  colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
  for index, tag in enumerate(tags):
    ax = axes[index // columns][index % columns]
    for number, (run, label, to_x) in enumerate(zip(runs, labels, mappings)):
      color = colors[number % len(colors)]
      if tag in run['train']:
        steps, values = run['train'][tag]
        ax.plot(to_x(steps), values, color=color, linewidth=1.2, label=f'{label} (train)')
      if tag in run['eval']:
        steps, values = run['eval'][tag]
        ax.plot(to_x(steps), values, color=color, linestyle='--', marker='o', markersize=4,
                label=f'{label} (eval)')
    ax.set_title(tag)
    ax.set_xlabel(X_AXES[x][0])
    ax.set_ylabel(tag)
    if ax.lines:
      # Every axis counts from the start of training; a short run keeps whole-step ticks.
      ax.set_xlim(left=0)
    if x != 'epochs':
      # Steps and images are counts: no tick at 2.5 steps.
      ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    if ax.lines:
      ax.legend(fontsize='small')
  for index in range(len(tags), rows * columns):
    axes[index // columns][index % columns].set_visible(False)
  figure.tight_layout()
  return figure


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  tags = [t.strip() for t in args.tags.split(',') if t.strip()]
  if not tags:
    print('error: --tags: give at least one tag', file=sys.stderr)
    return 2
  # TensorBoard's reader loads TensorFlow when it is installed; keep its banner quiet.
  from framework.engines import tf_import  # pylint: disable=import-outside-toplevel
  tf_import.import_tensorflow()
  runs, logdirs = [], []
  for logdir in args.logdirs:
    if not os.path.isdir(logdir):
      what = 'a file' if os.path.exists(logdir) else 'no such directory'
      print(f'note: skipping {logdir}: {what}, not a run directory', file=sys.stderr)
      continue
    run = read_run(logdir)
    if not run['train'] and not run['eval']:
      print(f'note: skipping {logdir}: no TensorBoard scalars in it or in '
            f'{os.path.join(logdir, "eval")}', file=sys.stderr)
      continue
    if step_mapping(run, args.x) is None:
      print(f'error: --x {args.x}: {logdir} has no {X_AXES[args.x][1]!r} train scalar (written '
            'by run.py with the other train scalars); plot it with --x steps', file=sys.stderr)
      return 2
    runs.append(run)
    logdirs.append(logdir)
  if not runs:
    print('error: none of the paths is a run directory with TensorBoard scalars', file=sys.stderr)
    return 2
  labels = run_labels(logdirs)

  available = sorted({tag for run in runs for split in SPLITS for tag in run[split]})
  missing = [tag for tag in tags if tag not in available]
  if len(missing) == len(tags):
    print(f'error: --tags: none of {", ".join(tags)} was written; available: '
          f'{", ".join(available)}', file=sys.stderr)
    return 2
  for tag in missing:
    print(f'warning: no run wrote {tag!r}; available: {", ".join(available)}', file=sys.stderr)

  for run, label in zip(runs, labels):
    for split in SPLITS:
      for tag in tags:
        if tag in run[split]:
          steps, values = run[split][tag]
          print(f'{label} {split} {tag}: {values[-1]:.6g} at step {steps[-1]} '
                f'({len(steps)} points)')
  out_dir = os.path.dirname(os.path.abspath(args.out))
  os.makedirs(out_dir, exist_ok=True)
  plot(runs, labels, [t for t in tags if t not in missing], args.out, args.x)
  print(f'wrote {args.out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
