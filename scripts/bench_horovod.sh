#!/usr/bin/env bash
# Horovod scaling benchmark (issue 5): two single-threaded workers against one.
#
#   bash scripts/bench_horovod.sh [repeats] [bench_steps]
#
# Runs run.py's benchmark mode on configs/fashion_mnist_lars.py (ResNet-8,
# batch 256 per worker, LARS, the Fashion-MNIST data layer) with TensorFlow's
# intra- and inter-op thread pools and OpenMP limited to one thread:
#   1 worker:  .venv/bin/python run.py ...
#   2 workers: .venv/bin/horovodrun -np 2 --gloo -H localhost:2 .venv/bin/python run.py ...
# Each repeat runs the two back to back; the speed-up of a repeat is
# (images/sec of 2 workers) / (images/sec of 1 worker), and the summary uses
# the median over repeats. Goal: >= 1.8x.
# For reference each repeat also runs two independent single-threaded
# processes at once (no Horovod, no communication): their summed images/sec
# over one process is what sharing this machine's cores, caches and memory
# allows before any cost of Horovod.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
REPEATS="${1:-3}"
STEPS="${2:-20}"
GOAL=1.8
PY="$REPO/.venv/bin/python"
HOROVODRUN="$REPO/.venv/bin/horovodrun"
CONFIG=configs/fashion_mnist_lars.py

# One thread per worker for TensorFlow's op pools and for oneDNN's OpenMP.
export TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1
export TF_CPP_MIN_LOG_LEVEL=3
# Horovod's background thread runs a negotiation round every cycle, which on
# two busy cores takes time from the workers; with one grouped allreduce per
# step a 5 ms cycle measured best here (2-40 ms tried, docs/performance.md).
export HOROVOD_CYCLE_TIME="${HOROVOD_CYCLE_TIME:-5}"

images_per_sec() {
  # The "benchmark: X images/sec, ..." line of run.py (rank 0 under horovodrun).
  sed -n 's/.*benchmark: \([0-9.]*\) images\/sec.*/\1/p' | head -n 1
}

echo "horovod benchmark: $CONFIG, $STEPS timed steps per run, $REPEATS repeats," \
     "TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1" \
     "HOROVOD_CYCLE_TIME=$HOROVOD_CYCLE_TIME"
printf '%-8s %15s %16s %9s %18s %9s\n' repeat '1 worker img/s' '2 workers img/s' speedup \
       '2 independent img/s' speedup
ratios=()
independent_ratios=()
for ((i = 1; i <= REPEATS; i++)); do
  one=$("$PY" run.py --config="$CONFIG" --mode=benchmark --bench_steps="$STEPS" 2>&1 | images_per_sec)
  two=$("$HOROVODRUN" -np 2 --gloo -H localhost:2 "$PY" run.py --config="$CONFIG" \
        --mode=benchmark --bench_steps="$STEPS" 2>&1 | images_per_sec)
  if [[ -z "$one" || -z "$two" ]]; then
    echo "FAIL a benchmark run printed no result (1 worker: '${one}', 2 workers: '${two}')"
    exit 1
  fi
  ratio=$("$PY" -c "print(f'{$two / $one:.3f}')")
  ratios+=("$ratio")
  both=$( ("$PY" run.py --config="$CONFIG" --mode=benchmark --bench_steps="$STEPS" 2>&1 | images_per_sec &
           "$PY" run.py --config="$CONFIG" --mode=benchmark --bench_steps="$STEPS" 2>&1 | images_per_sec
           wait) )
  if [[ $(wc -w <<< "$both") != 2 ]]; then
    echo "FAIL an independent benchmark run printed no result ('${both}')"
    exit 1
  fi
  # shellcheck disable=SC2086  # the two numbers become two arguments
  pair=$("$PY" -c "import sys; print(f'{sum(map(float, sys.argv[1:])):.1f}')" $both)
  independent=$("$PY" -c "print(f'{$pair / $one:.3f}')")
  independent_ratios+=("$independent")
  printf '%-8s %15s %16s %9s %18s %9s\n' "$i" "$one" "$two" "$ratio" "$pair" "$independent"
done
"$PY" - "$GOAL" "${#ratios[@]}" "${ratios[@]}" "${independent_ratios[@]}" <<'EOF'
import statistics
import sys

goal, count = float(sys.argv[1]), int(sys.argv[2])
ratio = statistics.median(float(r) for r in sys.argv[3:3 + count])
independent = statistics.median(float(r) for r in sys.argv[3 + count:])
print(f'two independent single-threaded processes (no Horovod): {independent:.3f}x (median)')
verdict = 'PASS' if ratio >= goal else 'FAIL'
print(f'{verdict} horovod: 2 single-threaded workers give {ratio:.3f}x the images/sec of one '
      f'(median of {count} repeats; goal >= {goal}x)')
EOF
