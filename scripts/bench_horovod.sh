#!/usr/bin/env bash
# Horovod scaling benchmark (issue 5): two single-threaded workers against one.
#
#   bash scripts/bench_horovod.sh [--rounds 12] [--steps 6]
#
# Runs scripts/bench_horovod.py under
#   .venv/bin/horovodrun -np 2 --gloo -H localhost:2
# with TensorFlow's intra- and inter-op thread pools and OpenMP limited to one
# thread per worker. In the same two processes it times, round by round, one
# worker training alone, the two-worker Horovod job, and two independent
# one-worker jobs (see that script's docstring); the summary line is the median
# speed-up over rounds. Goal: >= 1.8x.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

# One thread per worker for TensorFlow's op pools and for oneDNN's OpenMP.
export TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1
export TF_CPP_MIN_LOG_LEVEL=3
# HOROVOD_CYCLE_TIME is left to framework/distributed.py (a long idle cycle
# for the Horovod of build_horovod.sh, which wakes on enqueue); set it to
# compare (docs/performance.md).

# Rank 0 prints the table; the prefix horovodrun puts on its lines is dropped.
# On a failure the end of the whole log (both ranks, stderr too) is shown.
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! "$REPO/.venv/bin/horovodrun" -np 2 --gloo -H localhost:2 \
    "$REPO/.venv/bin/python" scripts/bench_horovod.py "$@" > "$log" 2>&1; then
  sed -n 's/^\[0\]<stdout>://p' "$log"
  echo "FAIL bench_horovod.py exited with an error; the end of its log:"
  tail -n 20 "$log"
  exit 1
fi
sed -n 's/^\[0\]<stdout>://p' "$log"
