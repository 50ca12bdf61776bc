#!/usr/bin/env bash
# Build and install Horovod (TensorFlow + Gloo, optionally NCCL) into a virtualenv.
#
# Horovod 0.28.1 is published only as a source package. Against TensorFlow 2.21
# it needs the headers of libhighwayhash-dev and libfarmhash-dev (installed by
# setup.sh or the Dockerfile), one behaviour patch (the background thread wakes
# when a tensor is enqueued instead of sleeping out its cycle; see below) and
# these source fixes, each applied only when the installed TF's headers call for it:
#   * the XLA include `tensorflow/compiler/xla/client/xla_builder.h` moved to
#     `tensorflow/compiler/xla/hlo/builder/xla_builder.h` (all builds);
#   * GPU builds only: `stream_executor::gpu::AsGpuStreamValue` is no longer
#     exported by TF (the import would fail with an undefined symbol), and
#     `xla::StatusOr` is now `absl::StatusOr`.
#
# Steps, each skipped when it is not needed:
#   1. horovod.tensorflow already imports at the wanted version -> done;
#   2. a wheel built earlier for the same Horovod / TF / Python / variant lies in
#      the cache -> install it;
#   3. otherwise download the sdist, patch it, build a wheel (log to a file),
#      store it in the cache and install it.
# Then `horovodrun --check-build` must list TensorFlow and Gloo (and NCCL for a
# GPU build), or the script fails.
#
# Environment:
#   LARGEBATCH_VENV          virtualenv to use (default: <repo>/.venv)
#   LARGEBATCH_CACHE         cache root (default: $HOME/.cache/largebatch);
#                            wheels go to $LARGEBATCH_CACHE/wheels, logs to .../logs
#   HOROVOD_GPU_OPERATIONS   set to NCCL for the GPU build (Dockerfile)
#   HOROVOD_BUILD_JOBS       parallel compile jobs (default: number of cores)
#   LARGEBATCH_HOROVOD_FORCE=1  rebuild even when installed or cached (same as --force)
set -euo pipefail

HOROVOD_VERSION=0.28.1

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LARGEBATCH_VENV:-$REPO/.venv}"
CACHE="${LARGEBATCH_CACHE:-${HOME:-/root}/.cache/largebatch}"
PY="$VENV/bin/python"
FORCE="${LARGEBATCH_HOROVOD_FORCE:-0}"

for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_horovod.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

say() { printf '[horovod] %s\n' "$*"; }
die() { printf '[horovod] ERROR: %s\n' "$*" >&2; exit 1; }

[[ -x "$PY" ]] || die "no virtualenv at $VENV (run scripts/setup.sh first, or set LARGEBATCH_VENV)"

export PIP_DISABLE_PIP_VERSION_CHECK=1
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

if [[ "${HOROVOD_GPU_OPERATIONS:-}" == "NCCL" ]]; then
  VARIANT=nccl
else
  VARIANT=cpu
fi

# Prints "ok <hvd version> gloo=<0|1> nccl=<0|1>" when horovod.tensorflow imports
# at the wanted version; exits non-zero otherwise (reason on stdout).
check_installed() {
  "$PY" - "$HOROVOD_VERSION" <<'EOF'
import sys
import importlib.metadata as md
want = sys.argv[1]
try:
    have = md.version("horovod")
except md.PackageNotFoundError:
    print("horovod is not installed")
    sys.exit(1)
if have != want:
    print(f"horovod {have} is installed, {want} is wanted")
    sys.exit(1)
try:
    import horovod.tensorflow as hvd
except Exception as exc:  # a wheel built against another TF fails here
    print(f"horovod {have} is installed but horovod.tensorflow does not import: {exc!r}")
    sys.exit(1)
from horovod.tensorflow.mpi_ops import _basics
wake = int(hasattr(_basics.MPI_LIB_CTYPES, "horovod_wakes_on_enqueue"))
print(f"ok {have} gloo={int(bool(hvd.gloo_built()))} nccl={int(bool(hvd.nccl_built()))} wake={wake}")
EOF
}

# Checks that horovodrun reports the wanted frameworks/controllers.
verify_build() {
  local out
  out="$("$VENV/bin/horovodrun" --check-build 2>&1)" || { printf '%s\n' "$out" >&2; die "horovodrun --check-build failed"; }
  local need=("TensorFlow" "Gloo")
  [[ "$VARIANT" == nccl ]] && need+=("NCCL")
  local item
  for item in "${need[@]}"; do
    if ! grep -Eq "^[[:space:]]*\[X\][[:space:]]+$item\b" <<<"$out"; then
      printf '%s\n' "$out" >&2
      die "horovodrun --check-build does not show $item enabled"
    fi
  done
  say "check-build: ${need[*]} enabled"
}

mkdir -p "$CACHE/wheels" "$CACHE/logs" "$CACHE/sdist" "$CACHE/locks"

# One build/install at a time per virtualenv.
LOCK="$CACHE/locks/horovod-$(printf '%s' "$VENV" | sha256sum | cut -c1-16).lock"
exec 9>"$LOCK"
if ! flock -n 9; then
  say "waiting for another Horovod install into $VENV to finish ($LOCK)"
  flock 9
fi

# Step 1: already installed?
if [[ "$FORCE" != 1 ]]; then
  if status="$(check_installed 2>/dev/null | tail -n1; exit "${PIPESTATUS[0]}")"; then
    read -r _ver gloo nccl wake <<<"${status#ok }"
    if [[ "$gloo" == "gloo=1" && "$wake" == "wake=1" && ( "$VARIANT" != nccl || "$nccl" == "nccl=1" ) ]]; then
      say "horovod $HOROVOD_VERSION already installed in $VENV ($gloo $nccl $wake)"
      exit 0
    fi
    say "installed horovod lacks a wanted feature ($gloo $nccl $wake); reinstalling"
  else
    say "$status"
  fi
fi

# Cache key: Horovod version, TF distribution + version, Python version, machine, variant.
read -r TF_DIST TF_VERSION PY_TAG ARCH < <("$PY" - <<'EOF'
import importlib.metadata as md, platform, sys
for dist in ("tensorflow-cpu", "tensorflow", "tf-nightly", "tensorflow-intel"):
    try:
        print(dist, md.version(dist), end=" ")
        break
    except md.PackageNotFoundError:
        pass
else:
    print("none none", end=" ")
print(f"py{sys.version_info.major}.{sys.version_info.minor}", platform.machine())
EOF
)
[[ -n "${TF_VERSION:-}" && "$TF_VERSION" != none ]] || die "TensorFlow is not installed in $VENV (pip install -r requirements.txt first)"
# PATCHES names the behaviour patches below (not the include fixes): a wheel
# built before them is not reused.
PATCHES=wake3
KEY="horovod-${HOROVOD_VERSION}_tf-${TF_VERSION}_${PY_TAG}_${ARCH}_${VARIANT}_${PATCHES}"
WHEEL_DIR="$CACHE/wheels/$KEY"

install_wheel() {
  local wheel="$1"
  say "installing $(basename "$wheel")"
  # Replace whatever horovod is there (even the same version built against
  # another TF), then let pip add horovod's own small dependencies if missing.
  "$PY" -m pip install -q --no-deps --force-reinstall "$wheel"
  "$PY" -m pip install -q "$wheel"
}

cached=""
if [[ "$FORCE" != 1 ]]; then
  cached="$(ls -1 "$WHEEL_DIR"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
fi

if [[ -n "$cached" ]]; then
  say "using cached wheel $cached"
  install_wheel "$cached"
else
  # Step 3: build.
  TIMESTAMP="$(date +%Y%m%d-%H%M%S)"
  LOG="$CACHE/logs/$KEY-$TIMESTAMP.log"
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")"
  JOBS="${HOROVOD_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
  say "building $KEY with $JOBS jobs (log: $LOG)"
  start=$SECONDS

  fail() {
    echo "----- last 60 lines of $LOG -----" >&2
    tail -n 60 "$LOG" >&2 || true
    echo "-----" >&2
    die "$1 (full log: $LOG; build tree kept at $WORK)"
  }

  {
    echo "== $(date -Is) building $KEY"
    echo "== python: $PY ($("$PY" --version 2>&1))"
    echo "== TensorFlow: $TF_DIST $TF_VERSION"
  } >"$LOG"

  # Horovod's setup.py asks for these at build time (setup_requires); have them
  # in the venv so that setuptools does not try to fetch them on its own.
  if ! "$PY" -c 'import cloudpickle, psutil, yaml, packaging, wheel, setuptools' >>"$LOG" 2>&1; then
    "$PY" -m pip install cloudpickle psutil pyyaml packaging wheel setuptools >>"$LOG" 2>&1 \
      || fail "could not install Horovod's build requirements"
  fi

  SDIST="$CACHE/sdist/horovod-$HOROVOD_VERSION.tar.gz"
  if [[ ! -s "$SDIST" ]]; then
    "$PY" -m pip download --no-deps --no-binary :all: --no-build-isolation \
      -d "$WORK/download" "horovod==$HOROVOD_VERSION" >>"$LOG" 2>&1 \
      || fail "pip download of the horovod $HOROVOD_VERSION sdist failed"
    cp "$WORK/download/horovod-$HOROVOD_VERSION.tar.gz" "$SDIST.tmp.$$"
    mv -f "$SDIST.tmp.$$" "$SDIST"
  fi
  tar -xzf "$SDIST" -C "$WORK"
  SRC="$WORK/horovod-$HOROVOD_VERSION"

  # The include fix, applied only where TF has moved the header.
  TF_INCLUDE="$("$PY" -c 'import tensorflow as tf; print(tf.sysconfig.get_include())' 2>>"$LOG")" \
    || fail "cannot import tensorflow from $VENV"
  OLD_H="tensorflow/compiler/xla/client/xla_builder.h"
  NEW_H="tensorflow/compiler/xla/hlo/builder/xla_builder.h"
  XLA_SRC="$SRC/horovod/tensorflow/xla_mpi_ops.cc"
  if [[ ! -e "$TF_INCLUDE/$OLD_H" && -e "$TF_INCLUDE/$NEW_H" ]]; then
    grep -q "#include \"$OLD_H\"" "$XLA_SRC" || fail "expected include of $OLD_H not found in $XLA_SRC"
    sed -i "s|#include \"$OLD_H\"|#include \"$NEW_H\"|" "$XLA_SRC"
    echo "== patched $XLA_SRC: $OLD_H -> $NEW_H" >>"$LOG"
  fi

  # TF 2.18+ no longer exports stream_executor::gpu::AsGpuStreamValue, which
  # Horovod's GPU code (mpi_ops.cc, under HAVE_GPU) calls; the import of a GPU
  # build would fail with an undefined symbol. Take the CUDA stream from the
  # Stream's platform handle instead. (CPU builds do not compile this code.)
  MPI_SRC="$SRC/horovod/tensorflow/mpi_ops.cc"
  if grep -q "platform_specific_handle" "$TF_INCLUDE/xla/stream_executor/stream.h" 2>/dev/null \
     && grep -q "stream_executor::gpu::AsGpuStreamValue(" "$MPI_SRC"; then
    sed -i 's|stream_executor::gpu::AsGpuStreamValue(|HorovodGpuStreamHandle(|g' "$MPI_SRC"
    # Define the helper right after the include of stream.h (inside #if HAVE_GPU).
    sed -i '0,/^#endif \/\/ TENSORFLOW_VERSION >= 2011000000$/s||&\
static inline GpuStreamHandle HorovodGpuStreamHandle(stream_executor::Stream* stream) {\
  return static_cast<GpuStreamHandle>(stream->platform_specific_handle().stream);\
}|' "$MPI_SRC"
    grep -q "^static inline GpuStreamHandle HorovodGpuStreamHandle" "$MPI_SRC" \
      || fail "could not patch the GPU stream access in $MPI_SRC"
    echo "== patched $MPI_SRC: AsGpuStreamValue -> Stream::platform_specific_handle()" >>"$LOG"
  fi

  # xla::StatusOr (xla/statusor.h) is gone from recent TF; XLA now uses
  # absl::StatusOr directly. Only the GPU part of xla_mpi_ops.cc uses it.
  if [[ ! -e "$TF_INCLUDE/xla/statusor.h" ]] && grep -q "::xla::StatusOr<" "$XLA_SRC"; then
    sed -i 's|::xla::StatusOr<|::absl::StatusOr<|g' "$XLA_SRC"
    echo "== patched $XLA_SRC: ::xla::StatusOr -> ::absl::StatusOr" >>"$LOG"
  fi

  # Wake-up on enqueue (all builds). Horovod's background thread sleeps a whole
  # HOROVOD_CYCLE_TIME between negotiation rounds, and every round is a
  # collective between all workers, even with nothing to do: a short cycle
  # taxes cores that are busy training (measured here: two workers with no
  # communication at all lose 6 % with the 1 ms default), a long one adds up
  # to a cycle of latency to every allreduce. With this patch the thread also
  # wakes as soon as a tensor is enqueued, and waits at most 1 ms (the default
  # cycle) while its tensors wait for other workers, so the cycle only paces
  # idle rounds (framework/engines/distributed.py sets a longer default for this
  # build). The exported marker symbol horovod_wakes_on_enqueue tells an
  # installed build has it (the library exports only names matching *horovod*).
  "$PY" - "$SRC/horovod/common" >>"$LOG" 2>&1 <<'EOF' || fail "could not apply the wake-up patch"
import pathlib, sys
common = pathlib.Path(sys.argv[1])

def patch(name, old, new):
    path = common / name
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"wake-up patch: expected exactly one match in {path}: {old!r}")
    path.write_text(text.replace(old, new))
    print(f"== patched {path}")

patch("tensor_queue.h", "class TensorQueue {",
      "// Wakes the background loop when work is enqueued (largebatch patch).\n"
      "void SignalTensorEnqueued();\n"
      "// Waits until work is enqueued or the timeout passes; clears the signal.\n"
      "void WaitForTensorEnqueued(std::chrono::steady_clock::duration timeout);\n\n"
      "class TensorQueue {")
patch("tensor_queue.h", "#include <mutex>", "#include <algorithm>\n#include <chrono>\n#include <mutex>")
patch("tensor_queue.h", "  void FinalizeTensorQueue(const Status& status);",
      "  void FinalizeTensorQueue(const Status& status);\n\n"
      "  // Whether tensors were enqueued and are not done yet (largebatch patch).\n"
      "  bool HasPendingTensors() const;")
patch("tensor_queue.cc", "namespace horovod {\nnamespace common {\n",
      "namespace horovod {\nnamespace common {\n\n"
      "namespace {\n"
      "std::mutex wake_mutex;\n"
      "std::condition_variable wake_cv;\n"
      "bool wake_pending = false;\n"
      "} // namespace\n\n"
      "extern \"C\" int horovod_wakes_on_enqueue() { return 1; }\n\n"
      "void SignalTensorEnqueued() {\n"
      "  {\n"
      "    std::lock_guard<std::mutex> guard(wake_mutex);\n"
      "    wake_pending = true;\n"
      "  }\n"
      "  wake_cv.notify_one();\n"
      "}\n\n"
      "void WaitForTensorEnqueued(std::chrono::steady_clock::duration timeout) {\n"
      "  std::unique_lock<std::mutex> lock(wake_mutex);\n"
      "  if (timeout > std::chrono::steady_clock::duration::zero()) {\n"
      "    wake_cv.wait_for(lock, timeout, [] { return wake_pending; });\n"
      "  }\n"
      "  wake_pending = false;\n"
      "}\n")
patch("tensor_queue.cc", "// Execute callback for each tensor and clear tensor queue",
      "bool TensorQueue::HasPendingTensors() const {\n"
      "  std::lock_guard<std::mutex> guard(mutex_);\n"
      "  return !tensor_table_.empty();\n"
      "}\n\n"
      "// Execute callback for each tensor and clear tensor queue")
patch("tensor_queue.cc", '#include "logging.h"', '#include "logging.h"\n\n#include <condition_variable>')
patch("tensor_queue.cc",
      "  message_queue_.push(std::move(message));\n  return Status::OK();",
      "  message_queue_.push(std::move(message));\n  SignalTensorEnqueued();\n  return Status::OK();")
patch("tensor_queue.cc",
      "    message_queue_.push(std::move(messages[i]));\n  }\n  return Status::OK();",
      "    message_queue_.push(std::move(messages[i]));\n  }\n  SignalTensorEnqueued();\n"
      "  return Status::OK();")
patch("operations.cc",
      "  if (sleep_duration > std::chrono::steady_clock::duration::zero()) {\n"
      "    std::this_thread::sleep_for(sleep_duration);\n  }\n",
      "  // largebatch patch: the cycle paces idle rounds only. While tensors of\n"
      "  // this worker wait for the others, rounds follow at most 1 ms apart (the\n"
      "  // default cycle), so a round that found another worker not yet ready does\n"
      "  // not put this one to sleep for a whole cycle.\n"
      "  bool pending = false;\n"
      "  for (auto id : state.process_set_table.Ids()) {\n"
      "    pending = pending || state.process_set_table.Get(id).tensor_queue.HasPendingTensors();\n"
      "  }\n"
      "  if (pending) {\n"
      "    sleep_duration = std::min<std::chrono::steady_clock::duration>(\n"
      "        sleep_duration,\n"
      "        state.last_cycle_start + std::chrono::milliseconds(1) - start_time);\n"
      "  }\n"
      "  WaitForTensorEnqueued(sleep_duration);\n")
EOF

  (
    cd "$SRC"
    export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
    export HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
    export MAKEFLAGS="-j$JOBS"
    env | grep -E '^(HOROVOD_|MAKEFLAGS=)' | sort | sed 's/^/== env /'
    "$PY" -m pip wheel -v --no-cache-dir --no-deps --no-build-isolation -w "$WORK/dist" .
  ) >>"$LOG" 2>&1 || fail "horovod build failed after $((SECONDS - start)) s"

  built="$(ls -1 "$WORK"/dist/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  [[ -n "$built" ]] || fail "the build produced no wheel"
  mkdir -p "$WHEEL_DIR"
  rm -f "$WHEEL_DIR"/horovod-*.whl
  cp "$built" "$WHEEL_DIR/.$(basename "$built").tmp.$$"
  mv -f "$WHEEL_DIR/.$(basename "$built").tmp.$$" "$WHEEL_DIR/$(basename "$built")"
  say "built $(basename "$built") in $((SECONDS - start)) s, cached in $WHEEL_DIR"
  install_wheel "$WHEEL_DIR/$(basename "$built")" >>"$LOG" 2>&1 || fail "installing the built wheel failed"
  rm -rf "$WORK"
fi

status="$(check_installed 2>&1)" || { printf '%s\n' "$status" >&2; die "horovod.tensorflow does not import after install"; }
verify_build
say "horovod $HOROVOD_VERSION ready in $VENV"
