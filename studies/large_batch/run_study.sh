#!/usr/bin/env bash
# The large-batch study of docs/large_batch.md, in one command:
#
#   bash studies/large_batch/run_study.sh [OUT]   (default OUT: runs/large_batch_e<epochs>)
#
# Fashion-MNIST, ResNet-8, the same epochs at every global batch size G = 256,
# 1K, 4K, 8K and 16K (16K as two micro-batches of 8K, iter_size 2), on the
# shared recipe of configs/large_batch/common.py. Three arms:
#   sgd   momentum SGD, lr tuned at each G on a grid 0.1*sqrt(G/256) x {0.5, 1, 2}
#         with seed 0, grown by x 2 past an edge while the best lr is on it (at
#         most six times); at 256 and 8K the best lr of the grid then runs with seed 1
#   lars  LARS, lr = 2.0*sqrt(G/256); seeds 0 and 1 at 256, 8K and 16K, seed 0
#         elsewhere; at 16K also tuned on SGD's grid (x 0.5, x 2; the best with seed 1).
#         At 16K, 8K and 256 its eeta (the change that moved the 8K point most)
#         is tuned too: twice the recipe's (0.004) with seeds 0 and 1, doubled
#         again while the largest eeta wins (at most twice; seed 0, the best then
#         with seed 1); each eeta its own sweep, OUT/lars_eeta<EETA>, and the
#         table's LARS row at each G the best of them all (as SGD's is its best lr).
#         At 1K and 4K it runs with the best eeta at 8K; at 8K, with that eeta,
#         its lr is then tuned on SGD's grid too (grown past an edge; the best
#         with seed 1).
#   lamb  LAMB, lr = 0.005*sqrt(G/256); seeds 0 and 1 at 8K, seed 0 elsewhere
# and a budget check: SGD (at its best lr) and LARS at batch 256 again with half
# the epochs, two seeds each (OUT/<arm>_half); LARS once more at its best eeta
# at 256 when that is not the recipe's (OUT/lars_half_eeta<EETA>), so that full
# and half budget are compared at one setting. Then what each feature of the
# recipe is worth: LARS at 8K (its best eeta and lr there), seed 0, with one of them
# taken out (plain batch norm, no precise statistics, no label smoothing;
# OUT/lars_no_*); and two steps past the recipe at that setting, each alone,
# seeds 0 and 1: a warm-up over 30 % of the updates instead of 15 %
# (OUT/lars_warmup0.3), and Nesterov momentum (OUT/lars_nesterov), each its own
# row with its own line under the 8K target.
#
# Points run in order of importance (LARS at 8K, 256 and 16K, the batch-256
# SGD grid, the budget check, the rest up to 16K, LARS's rate grid at 8K and
# the ablations, then 1K and 4K, last the two steps past the recipe), so a
# partial study already answers the main questions. It is resumable: run it
# again with the same OUT and finished runs are skipped (a run cut off
# half-way starts again).
#
# The results outlive the run directories: as soon as a point finishes (sweep.py
# --archive), and again after every sweep, its result.json (metrics, wall time and
# the curve of its evaluations) is copied to ARCHIVE/<arm>/<point>.json (default
# docs/results/large_batch_e<epochs>, kept under version control), so a study cut
# off inside a grid keeps the grid's finished points; before the points run, archived results
# missing from OUT are put back, so a fresh checkout skips every point already
# archived and the report covers them. ARCHIVE= (empty) turns this off.
#
# At 48 epochs a run takes 15-50 minutes on an idle 2-core CPU; the study is about
# 80 runs, 20-60 hours (docs/large_batch.md, "Reproduce"). 8K and 16K need about
# 7 GB of memory. At the end (and with REPORT_ONLY=1, at once) studies/large_batch/report.py writes
# OUT/study.md, study.csv, study.png and steps.png; with DOC=1 it also puts the
# table into docs/large_batch.md, the plots into docs/images, and the study at a
# glance (accuracy by arm and batch, and the targets) at its top.
# DRY_RUN=1 prints the run.py commands of the points instead of running them.
set -euo pipefail
# The study runs for hours. Bash reads a script as it goes, so an edit to this
# file would change a study already running; the braces make bash read it all first.
{
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
PY=.venv/bin/python
status=0
DRY_RUN="${DRY_RUN:-0}"
# Set up before anything asks the environment's Python (on a fresh machine it
# does not exist yet); a report or a dry run only needs the environment there.
if [[ "${REPORT_ONLY:-0}" != 1 && "$DRY_RUN" != 1 || ! -x "$PY" ]]; then
  bash scripts/setup.sh
fi
# The epoch budget names the default output, so runs of another budget never mix.
epochs="$("$PY" -c 'from configs.large_batch import common; print(common.num_epochs)')"
OUT="${1:-runs/large_batch_e$epochs}"
ARCHIVE="${ARCHIVE-docs/results/large_batch_e$epochs}"

# value EXPRESSION: a learning rate from an expression in G, to 4 significant digits.
value() { "$PY" -c "import math; G = $G; print(f'{($1):.4g}')"; }

# sweep ARM SEEDS LR[,LR...] [extra sweep.py arguments]: one sweep of an arm at
# the current global batch G.
sweep() {
  local arm=$1 seeds=$2 lrs=$3
  shift 3
  local batch=$G iter=1
  if ((G > 8192)); then
    batch=8192
    iter=$((G / 8192))
  fi
  # The arm's config is the name's first word: sgd_half runs sgd.py.
  "$PY" scripts/sweep.py --config "configs/large_batch/${arm%%_*}.py" --out "$OUT/$arm" \
      --grid "batch_size_per_gpu=$batch" --grid "iter_size=$iter" \
      --grid "lr_policy_params.learning_rate=$lrs" --seeds "$seeds" "$@" \
      $([[ -n "$ARCHIVE" ]] && echo --archive "$ARCHIVE/$arm") \
      $([[ "$DRY_RUN" == 1 ]] && echo --dry-run) || status=$?
  archive
}

# restore: archived results missing from OUT go back into their point directories.
restore() {
  [[ -n "$ARCHIVE" && -d "$ARCHIVE" ]] || return 0
  local saved arm point
  for saved in "$ARCHIVE"/*/*.json; do
    [[ -e "$saved" ]] || continue
    arm="$(basename "$(dirname "$saved")")"
    point="$(basename "$saved" .json)"
    if [[ ! -e "$OUT/$arm/$point/result.json" ]]; then
      # A half-finished run of the point is replaced by its archived result.
      rm -rf "${OUT:?}/$arm/$point"
      mkdir -p "$OUT/$arm/$point"
      cp "$saved" "$OUT/$arm/$point/result.json"
    fi
  done
}

# archive: every finished point of OUT into ARCHIVE (a new or changed result only).
archive() {
  [[ -n "$ARCHIVE" && "$DRY_RUN" != 1 ]] || return 0
  local result arm point
  for result in "$OUT"/*/*/result.json; do
    [[ -e "$result" ]] || continue
    point="$(basename "$(dirname "$result")")"
    arm="$(basename "$(dirname "$(dirname "$result")")")"
    mkdir -p "$ARCHIVE/$arm"
    cmp -s "$result" "$ARCHIVE/$arm/$point.json" || cp "$result" "$ARCHIVE/$arm/$point.json"
  done
}

# best_lr ARM: the learning rate of ARM's grid with the best mean accuracy at G.
best_lr() {
  [[ -d "$OUT/$1" ]] || return 3
  "$PY" studies/large_batch/report.py --arm "$1=$OUT/$1" --key global_batch --out "$OUT" \
      --best-lr "$G"
}

# lars SEEDS, lamb SEEDS: the arm at G with its square-root-scaled rate.
lars() { sweep lars "$1" "$(value '2.0 * math.sqrt(G / 256)')"; }
lamb() { sweep lamb "$1" "$(value '0.005 * math.sqrt(G / 256)')"; }
# The recipe's eeta (configs/large_batch/lars.py).
# eeta2: twice it, the first point of the eeta grid.
read -r eeta1 eeta2 < <("$PY" -c "from configs.large_batch import lars
eeta = lars.base_params['optimizer_params']['eeta']
print(f'{eeta:g} {2 * eeta:.4g}')")
# lars_eeta SEEDS EETA: LARS at G with eeta EETA in place of the recipe's
# (OUT/lars_eeta<EETA>).
lars_eeta() {
  sweep "lars_eeta$2" "$1" "$(value '2.0 * math.sqrt(G / 256)')" --set "optimizer_params.eeta=$2"
}
# best_eeta: the eeta of the LARS arm (the recipe's, lars, or another,
# lars_eeta<EETA>) with the best mean accuracy at G, each at its best rate.
best_eeta() {
  local dir best arms=()
  for dir in "$OUT/lars" "$OUT"/lars_eeta*; do
    [[ -d "$dir" ]] && arms+=(--arm "$(basename "$dir")=$dir")
  done
  ((${#arms[@]})) || return 3
  best="$("$PY" studies/large_batch/report.py "${arms[@]}" --key global_batch --out "$OUT" \
          --best-arm "$G")" || return 3
  if [[ "$best" == lars ]]; then echo "$eeta1"; else echo "${best#lars_eeta}"; fi
}
# eeta_grid: LARS at G with twice the recipe's eeta, seeds 0 and 1. While the
# largest eeta so far gives LARS its best mean accuracy at G, eeta doubles again
# (seed 0), at most twice (8 times the recipe's); a larger eeta that comes out
# best then runs with seed 1.
eeta_grid() {
  local eeta=$eeta2 best grown=0
  lars_eeta 0,1 "$eeta"
  while ((grown < 2)) && best="$(best_eeta)" && at_least "$best" "$eeta"; do
    eeta="$(value "2 * $eeta")"
    lars_eeta 0 "$eeta"
    grown=$((grown + 1))
  done
  if best="$(best_eeta)" && ! at_most "$best" "$eeta2"; then
    lars_eeta 1 "$best"
  fi
}
# at_least A B, at_most A B: compare two learning rates (or eetas) as numbers.
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
at_most() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
equal() { at_least "$1" "$2" && at_most "$1" "$2"; }
# grid ARM BASE [second|once [sweep.py arguments]]: ARM's three-point grid
# BASE x {0.5, 1, 2} at G with seed 0. A best rate at an edge of the grid is no
# optimum, so the grid grows by a factor of 2 past that edge (seed 0) until the
# best rate is inside it, at most six times (a factor of 256 from end to end).
# With "second", the best rate then runs with seed 1. Further arguments go to
# every sweep of the grid.
grid() {
  local arm=$1 base=$2 second=${3:-} lo hi best grown=0
  shift $(($# < 3 ? $# : 3))
  lo="$(value "0.5 * $base")"
  hi="$(value "2 * $base")"
  sweep "$arm" 0 "$lo,$base,$hi" "$@"
  while ((grown < 6)) && best="$(best_lr "$arm")"; do
    if at_least "$best" "$hi"; then
      hi="$(value "2 * $hi")"
      sweep "$arm" 0 "$hi" "$@"
    elif at_most "$best" "$lo"; then
      lo="$(value "0.5 * $lo")"
      sweep "$arm" 0 "$lo" "$@"
    else
      break
    fi
    grown=$((grown + 1))
  done
  if [[ "$second" == second ]] && best="$(best_lr "$arm")"; then
    sweep "$arm" 1 "$best" "$@"
  fi
}
# sgd [second]: momentum SGD's grid around 0.1*sqrt(G/256).
sgd() { grid sgd "$(value '0.1 * math.sqrt(G / 256)')" "$@"; }
# eeta_8k: the best eeta at 8K (the target batch; the recipe's before 8K has
# results), the one LARS runs with where its eeta is not tuned: at 1K and 4K,
# and in the ablations.
eeta_8k() { G=8192 best_eeta || echo "$eeta1"; }
# arm_of EETA: the sweep of LARS at EETA (lars for the recipe's eeta).
arm_of() { if equal "$1" "$eeta1"; then echo lars; else echo "lars_eeta$1"; fi; }
# lars_tuned SEEDS: LARS at G with eeta_8k, in its sweep.
lars_tuned() {
  local eeta
  eeta="$(eeta_8k)"
  if equal "$eeta" "$eeta1"; then lars "$1"; else lars_eeta "$1" "$eeta"; fi
}
# lars_rate_grid: LARS at 8K with eeta_8k, its rate tuned as SGD's is (the
# grid around the square-root rule, grown past an edge; the best rate with
# seed 1). The eeta grid moves the step of the adapted layers alone; the rate
# also moves that of the batch-norm and bias variables, which take it plainly.
lars_rate_grid() {
  G=8192
  local eeta arm
  eeta="$(eeta_8k)"
  arm="$(arm_of "$eeta")"
  grid "$arm" "$(value '2.0 * math.sqrt(G / 256)')" second \
      $([[ "$arm" != lars ]] && echo --set "optimizer_params.eeta=$eeta")
}
# at_best_8k ARM SEEDS SETTING...: LARS at 8K at its best setting (eeta_8k,
# and the best rate of that eeta) with each SETTING on top, in its own sweep ARM.
at_best_8k() {
  G=8192
  local arm=$1 seeds=$2 eeta lr setting sets=()
  shift 2
  eeta="$(eeta_8k)"
  lr="$(best_lr "$(arm_of "$eeta")")" || lr="$(value '2.0 * math.sqrt(G / 256)')"
  for setting in "optimizer_params.eeta=$eeta" "$@"; do sets+=(--set "$setting"); done
  sweep "$arm" "$seeds" "$lr" "${sets[@]}"
}
# ablation ARM SETTING: at_best_8k, seed 0, with one feature taken out.
ablation() { at_best_8k "$1" 0 "$2"; }
# half_epochs: the budget check's epochs, as recorded in its runs (24.0).
half_epochs() { "$PY" -c "print($epochs / 2)"; }
half() {
  G=256
  local best
  if best="$(best_lr sgd)"; then
    sweep sgd_half 0,1 "$best" --set "num_epochs=$(half_epochs)"
  fi
  sweep lars_half 0,1 "$(value '2.0 * math.sqrt(G / 256)')" --set "num_epochs=$(half_epochs)"
}
# half_eeta: the budget check of LARS at its best eeta at 256, when that is not
# the recipe's (OUT/lars_half_eeta<EETA>), so that the budget line compares
# like with like: the full and the half budget at one setting.
half_eeta() {
  local eeta
  G=256
  if eeta="$(best_eeta)" && ! equal "$eeta" "$eeta1"; then
    sweep "lars_half_eeta$eeta" 0,1 "$(value '2.0 * math.sqrt(G / 256)')" \
        --set "num_epochs=$(half_epochs)" --set "optimizer_params.eeta=$eeta"
  fi
}

if [[ "$DRY_RUN" == 1 ]]; then
  trap 'exit "$status"' EXIT
fi
restore
if [[ "${REPORT_ONLY:-0}" != 1 ]]; then
  G=8192; lars 0,1
  G=256; lars 0,1
  G=16384; lars 0,1
  G=256; sgd second
  half
  # LARS at 16K, its rate tuned on SGD's grid (the 2-point target is the hardest).
  G=16384; grid lars "$(value '2.0 * math.sqrt(G / 256)')" second
  # and its eeta, which scales the step of the adapted layers alone, tuned
  # there and at 8K.
  G=16384; eeta_grid
  G=8192; eeta_grid
  G=8192; sgd second
  G=256; lamb 0
  G=8192; lamb 0,1
  # LARS's eeta at batch 256 too, so that the best batch-256 result is that of
  # LARS tuned as at the large batches, not only of SGD.
  G=256; eeta_grid
  half_eeta
  G=16384; sgd; lamb 0
  # The 8K target once more: LARS's rate tuned there at its best eeta, then
  # what each feature of the recipe is worth at that setting.
  lars_rate_grid
  ablation lars_no_ghost_bn model_params.ghost_batch_size=null
  ablation lars_no_precise_bn precise_bn=null
  ablation lars_no_smoothing label_smoothing=0.0
  for G in 1024 4096; do lars_tuned 0; sgd; lamb 0; done
  # Two steps past the recipe at 8K, each alone, on the target's two seeds: a
  # warm-up twice as long, 30 % of the updates (MLPerf's large-batch LARS runs
  # warm up over 25-45 %), the decay over the rest;
  at_best_8k lars_warmup0.3 0,1 lr_policy_params.warmup_fraction=0.3 \
      lr_policy_params.decay_fraction=0.7
  # and Nesterov momentum in place of heavy-ball momentum.
  at_best_8k lars_nesterov 0,1 optimizer_params.use_nesterov=true
fi
if [[ "$DRY_RUN" == 1 ]]; then
  exit "$status"
fi
archive

# Each arm's directory under OUT and its label in the table, in table order.
# LARS's eeta sweeps (lars_eeta<EETA>) are part of the LARS arm: its row at each
# batch is its best eeta and rate, as SGD's is its best rate.
declare -A label=([sgd]='SGD (lr tuned)' [lars]='LARS (eeta tuned)' [lamb]=LAMB
                  [sgd_half]='SGD, half the epochs' [lars_half]='LARS, half the epochs'
                  [lamb_half]='LAMB, half the epochs' [lars_no_ghost_bn]='LARS, plain batch norm'
                  [lars_no_precise_bn]='LARS, no precise BN statistics'
                  [lars_no_smoothing]='LARS, no label smoothing'
                  [lars_warmup0.3]='LARS, 30 % warm-up' [lars_nesterov]='LARS, Nesterov momentum')
# SGD, LARS and LAMB are listed before they have run, so that every target
# has its line ("not measured yet") from the start.
arms=()
for name in sgd lars lamb sgd_half lars_half lamb_half lars_no_ghost_bn \
            lars_no_precise_bn lars_no_smoothing lars_warmup0.3 lars_nesterov; do
  case "$name" in
    sgd|lars|lamb) mkdir -p "$OUT/$name" ;;
    *) [[ -d "$OUT/$name" ]] || continue ;;
  esac
  arms+=(--arm "${label[$name]}=$OUT/$name")
  if [[ "$name" == lars || "$name" == lars_half ]]; then
    for dir in "$OUT/${name}_eeta"*; do
      [[ -d "$dir" ]] && arms+=(--arm "${label[$name]}=$dir")
    done
  fi
  # Gaps are to the best result at batch 256 of the three arms (LARS with any
  # eeta among them), not to the half-budget check, an ablation or a step past
  # the recipe.
  case "$name" in sgd|lars|lamb) arms+=(--reference-arm "${label[$name]}") ;; esac
  # The targets, each a line under the table: LARS within 1 point of the best
  # batch-256 result at 8K and within 2 at 16K; whether tuned SGD, LAMB and
  # each step past the recipe do as well at 8K; and whether the budget is
  # large enough (the best batch-256 arm gains under 0.3 points from half the
  # epochs to all of them).
  case "$name" in
    lars) arms+=(--claim "${label[$name]}@8192<=1.0" --claim "${label[$name]}@16384<=2.0") ;;
    sgd|lamb|lars_warmup0.3|lars_nesterov) arms+=(--claim "${label[$name]}@8192<=1.0") ;;
    *_half) [[ -d "$OUT/${name%%_*}" ]] && arms+=(--budget "${label[${name%%_*}]}=${label[$name]}") ;;
  esac
done
report=("$PY" studies/large_batch/report.py "${arms[@]}" --key global_batch --baseline 256 --out "$OUT"
        --title "Fashion-MNIST, ResNet-8, $epochs epochs")
if [[ "${DOC:-0}" == 1 ]]; then
  report+=(--doc docs/large_batch.md --doc-images docs/images/large_batch --summary docs/large_batch.md)
fi
"${report[@]}" || status=$?
exit "$status"
}
