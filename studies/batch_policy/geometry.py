"""B_simple in the Euclidean norm and in LARS's geometry, at each checkpoint of a finished run.

  .venv/bin/python studies/batch_policy/geometry.py --config=configs/fashion_mnist_lars.py \
      --logdir=RUNDIR [--micro_batches 16] [--micro_batch 256]

The run's B_simple, tr(Σ)/|G|² (McCandlish et al. 2018), treats every
coordinate alike; a LARS update moves variable l by the rate times its trust
ratio τ_l (1 for a skipped one), so the noise that matters to it is that of
P·g with P = diag(τ_l). Under the model's assumption that the optimizer's
preconditioner undoes the curvature (PH ≈ cI), the noise scale of that update
is tr(PΣ)/GᵀPG: each variable's estimates weighted by τ_l (``tau``); with the
curvature isotropic instead (H ≈ hI) it is tr(P²Σ)/GᵀP²G (``tau2``). Both are
measured here from ``--micro_batches`` gradients of ``--micro_batch`` examples
each, drawn from the training split after the checkpoint's data position, with
McCandlish's unbiased estimates per variable (core.noise_scale), and τ_l from
the micro-batches' mean gradient and the config's eeta and weight decay
(optimizers.lars.trust_ratio). The gradients are the loss's, without the
weight decay LARS folds in: that term is no noise.

With ``--curvature`` it also measures McCandlish's B_noise = tr(HΣ)/GᵀHG in
the same geometry: the curvature along each micro-batch's update direction
u = P·g, uᵀHu, by the loss's second difference (L(w+εu) + L(w−εu) − 2L(w))/ε²
on a training batch of ``--curvature_batch`` examples drawn apart from the
gradients' (so that its Hessian is independent of u), with ε the config's
learning rate at the checkpoint's step times ``--step_scale`` (1: the step an
update takes; 1/(1 − momentum): the step momentum carries it to). The mean of
uᵀHu over the micro-batches is GᵀPHPG + tr(PHPΣ)/b and that of the mean
direction's is GᵀPHPG + tr(PHPΣ)/B, the same unbiased pair as B_simple's
norms. The model's batch-norm statistics are put back after each loss.

One line per checkpoint; the figures of docs/critical_batch.md ("B_simple in
LARS's geometry") are its output on the main job.
"""

import argparse
import glob
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def per_variable(gradients, micro_batch):
  """``[(|G_l|² estimate, tr(Σ_l) estimate)]`` from each micro-batch's gradients (numpy arrays)."""
  from core.noise_scale import unbiased_estimates  # pylint: disable=import-outside-toplevel
  count = len(gradients)
  estimates = []
  for parts in zip(*gradients):
    small_sq = sum(float((g * g).sum()) for g in parts) / count
    mean = sum(parts) / count
    estimates.append(unbiased_estimates(small_sq, float((mean * mean).sum()), micro_batch,
                                        micro_batch * count))
  return estimates


def weighted_noise_scale(estimates, weights):
  """Σ w_l tr(Σ_l) / Σ w_l |G_l|²: B_simple of the update P·g, P = diag(w_l)."""
  from core.noise_scale import b_simple  # pylint: disable=import-outside-toplevel
  return b_simple(sum(w * t for w, (_, t) in zip(weights, estimates)),
                  sum(w * g for w, (g, _) in zip(weights, estimates)))


def noise_scale_of(small_sq, big_sq, micro_batch, big_batch):
  """tr/|G|² from the unbiased pair of a quadratic form's means (norms, or uᵀHu)."""
  from core import noise_scale  # pylint: disable=import-outside-toplevel
  gradient_sq, trace = noise_scale.unbiased_estimates(small_sq, big_sq, micro_batch, big_batch)
  return noise_scale.b_simple(trace, gradient_sq)


class SecondDifference:
  """uᵀHu on one batch: (L(w+εu) + L(w−εu) − 2L(w))/ε², the weights and statistics put back."""

  def __init__(self, trainer, variables, epsilon):
    self.trainer, self.variables, self.epsilon = trainer, variables, epsilon
    self.weights = [v.numpy() for v in variables]
    self.statistics = [v.numpy() for v in trainer.model.non_trainable_variables]

  def _loss_at(self, batch, direction, sign):
    import numpy as np  # pylint: disable=import-outside-toplevel
    for v, w, d in zip(self.variables, self.weights, direction):
      v.assign((w + sign * self.epsilon * d).astype(np.float32))
    loss, _ = self.trainer._loss(batch)  # pylint: disable=protected-access
    for v, x in zip(self.trainer.model.non_trainable_variables, self.statistics):
      v.assign(x)
    return float(loss)

  def __call__(self, batch, direction):
    up, down = self._loss_at(batch, direction, 1), self._loss_at(batch, direction, -1)
    middle = self._loss_at(batch, direction, 0)
    return (up + down - 2 * middle) / self.epsilon ** 2


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', required=True)
  parser.add_argument('--logdir', required=True, help='a run directory with its checkpoints')
  parser.add_argument('--micro_batches', type=int, default=16)
  parser.add_argument('--micro_batch', type=int, default=256)
  parser.add_argument('--curvature', action='store_true', help='also B_noise, by second differences')
  parser.add_argument('--curvature_batch', type=int, default=1024)
  parser.add_argument('--step_scale', type=float, default=1.0)
  args = parser.parse_args(argv)
  # pylint: disable=import-outside-toplevel
  import numpy as np
  import tensorflow as tf
  from framework.config.validation import load_configs
  from framework.run import checkpoints
  from framework.run.trainer import Trainer
  from optimizers import exclusions
  from optimizers.lars import trust_ratio
  configs = load_configs(args.config, 'train')
  cfg = configs['train']
  params = cfg['optimizer_params']
  trainer = Trainer(cfg, configs['eval'], args.logdir)
  variables = trainer.model.trainable_variables
  adapted = exclusions.mask(variables, params.get('skip_list'),
                            params.get('exclude_from_layer_adaptation'))
  paths = sorted(glob.glob(glob.escape(args.logdir) + '/ckpt-*.index'),
                 key=lambda p: checkpoints.checkpoint_step(p[:-len('.index')]))
  for index in paths:
    path = index[:-len('.index')]
    trainer.restore(path)
    batches = iter(trainer.train_data.dataset(args.micro_batch, seed=cfg['random_seed'] + 1,
                                              start_batch=int(trainer.data_position.numpy())))
    gradients = []
    for _ in range(args.micro_batches):
      batch = next(batches)
      with tf.GradientTape() as tape:
        loss, _ = trainer._loss(batch)  # pylint: disable=protected-access
      gradients.append([g.numpy().astype(np.float64)
                        for g in tape.gradient(loss, variables)])
    estimates = per_variable(gradients, args.micro_batch)
    means = [sum(parts) / len(parts) for parts in zip(*gradients)]
    tau = [float(trust_ratio(tf.norm(v), tf.constant(float(np.linalg.norm(m)), tf.float32),
                             params['eeta'], params.get('weight_decay', 0.0),
                             params.get('epsilon', 0.0))) if adapt else 1.0
           for v, m, adapt in zip(variables, means, adapted)]
    euclid = weighted_noise_scale(estimates, [1.0] * len(tau))
    by_tau = weighted_noise_scale(estimates, tau)
    by_tau2 = weighted_noise_scale(estimates, [t * t for t in tau])
    step = checkpoints.checkpoint_step(path)
    curvature = ''
    if args.curvature:
      epsilon = args.step_scale * float(trainer.pipeline.learning_rate_decay_fn(
          tf.constant(step, tf.int64)))
      batches = iter(trainer.train_data.dataset(args.curvature_batch,
                                                seed=cfg['random_seed'] + 2, start_batch=0))
      second = SecondDifference(trainer, variables, epsilon)
      small = [second(next(batches), [t * g for t, g in zip(tau, parts)]) for parts in gradients]
      big = [second(next(batches), [t * m for t, m in zip(tau, means)]) for _ in range(4)]
      b_noise = noise_scale_of(sum(small) / len(small), sum(big) / len(big), args.micro_batch,
                               args.micro_batch * args.micro_batches)
      curvature = f'; B_noise (tau, step {epsilon:.3g}) {b_noise:.0f}'
    if not math.isfinite(euclid):
      print(f'step {step}: |G|² not measurable from {args.micro_batches} x {args.micro_batch} '
            '(its estimate is not positive): no noise scale', flush=True)
      continue
    print(f'step {step}: B_simple {euclid:.0f}, tau {by_tau:.0f} ({by_tau / euclid:.2f}x), '
          f'tau2 {by_tau2:.0f} ({by_tau2 / euclid:.2f}x) {trainer.task.example_unit}, from '
          f'{args.micro_batches} x {args.micro_batch}{curvature}', flush=True)


if __name__ == '__main__':
  main()
