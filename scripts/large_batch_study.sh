#!/usr/bin/env bash
# The large-batch study of docs/large_batch.md, in one command:
#
#   bash scripts/large_batch_study.sh [OUT]        (default OUT: runs/large_batch)
#
# Two sweeps over batch_size_per_gpu = 256, 1K, 4K, 8K, 16K on Fashion-MNIST
# with ResNet-8, 12 epochs each: momentum SGD with linear lr scaling
# (configs/large_batch/sgd.py + sgd_grid.yaml) and LARS with square-root lr
# scaling (configs/large_batch/lars.py + lars_grid.yaml). Every point runs
# with the seeds of SEEDS (default 0); the batch sizes of MORE_SEEDS_AT
# (default 256,8192) also run with the seeds of MORE_SEEDS (default 1). The
# defaults are the 14 runs of docs/large_batch.md; SEEDS=0,1 MORE_SEEDS= runs
# two seeds everywhere. Then scripts/study_report.py writes OUT/study.md,
# study.csv and study.png over both arms.
#
# Resumable: run it again with the same OUT and finished runs are skipped.
# 6-10 minutes per run on a 2-core CPU; the 16K point needs about 13 GB of
# memory.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
OUT="${1:-runs/large_batch}"
SEEDS="${SEEDS:-0}"
MORE_SEEDS="${MORE_SEEDS-1}"
MORE_SEEDS_AT="${MORE_SEEDS_AT:-256,8192}"

bash scripts/setup.sh
status=0
for arm in lars sgd; do
  sweep=(.venv/bin/python scripts/sweep.py --config "configs/large_batch/$arm.py"
         --grid-file "configs/large_batch/${arm}_grid.yaml" --out "$OUT/$arm")
  "${sweep[@]}" --seeds "$SEEDS" || status=$?
  if [[ -n "$MORE_SEEDS" ]]; then
    "${sweep[@]}" --grid "batch_size_per_gpu=$MORE_SEEDS_AT" --seeds "$MORE_SEEDS" || status=$?
  fi
done
.venv/bin/python scripts/study_report.py --key batch_size_per_gpu --out "$OUT" \
    --title 'Fashion-MNIST, ResNet-8, 12 epochs' \
    --arm 'SGD, linear lr scaling'="$OUT/sgd" --arm 'LARS, sqrt lr scaling'="$OUT/lars"
exit "$status"
