#!/usr/bin/env bash
# The main job: set up this machine (idempotent), then train and evaluate the
# Fashion-MNIST LARS config end to end. Extra arguments go to run.py, e.g.
#   bash scripts/main_job.sh --set num_epochs=4
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The main job trains on one machine: no Horovod build (run.py --num_workers uses
# tf.distribute); scripts/test.sh, which tests both engines, builds it.
LARGEBATCH_SKIP_HOROVOD="${LARGEBATCH_SKIP_HOROVOD:-1}" bash scripts/setup.sh
logdir="runs/fashion_mnist_lars-$(date +%Y%m%d-%H%M%S)"
exec .venv/bin/python run.py --config=configs/fashion_mnist_lars.py --mode=train_eval \
    --logdir="$logdir" "$@"
