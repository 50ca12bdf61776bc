#!/usr/bin/env bash
# Prepare this checkout for running and testing: system packages, the Python
# virtualenv with the pinned requirements, and Horovod. Safe to re-run; every step
# is skipped when its work is already done, so a re-run takes a few seconds.
#
# Environment:
#   LARGEBATCH_VENV     virtualenv path (default: <repo>/.venv)
#   LARGEBATCH_CACHE    cache for built wheels and logs (default: $HOME/.cache/largebatch)
#   LARGEBATCH_PYTHON   interpreter that creates the venv (default: python3.11)
#   LARGEBATCH_SKIP_HOROVOD=1  leave Horovod out (and the Debian packages only its build
#                              needs); scripts/main_job.sh sets it: a run on one machine, or
#                              several workers under tf.distribute, needs no Horovod
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LARGEBATCH_VENV="${LARGEBATCH_VENV:-$REPO/.venv}"
export LARGEBATCH_CACHE="${LARGEBATCH_CACHE:-${HOME:-/root}/.cache/largebatch}"
VENV="$LARGEBATCH_VENV"
PYTHON="${LARGEBATCH_PYTHON:-python3.11}"
REQUIREMENTS="$REPO/requirements.txt"
STAMP="$VENV/.requirements.sha256"

export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

t0=$SECONDS

# --- 1. Debian packages -------------------------------------------------------
# dataset-fashion-mnist: the data set the tests and configs use.
# g++: the optimizers' native kernels (step 4).
# libtcmalloc-minimal4: the allocator run.py restarts under (core/allocator.py).
APT_PACKAGES=(dataset-fashion-mnist g++ libtcmalloc-minimal4)
if [[ "${LARGEBATCH_SKIP_HOROVOD:-0}" != 1 ]]; then
  # libhighwayhash-dev, libfarmhash-dev: headers TF 2.21 includes but does not ship
  # (needed to compile Horovod's TF ops); cmake, make: the Horovod build.
  APT_PACKAGES+=(libhighwayhash-dev libfarmhash-dev cmake make)
fi

python_path="$(command -v "$PYTHON" || true)"
# Debian's own python3.11 needs python3.11-venv for `-m venv` and the headers for builds.
if [[ "$python_path" == /usr/bin/* && ! -x "$VENV/bin/python" ]]; then
  APT_PACKAGES+=(python3.11-venv python3.11-dev)
fi

if command -v dpkg-query >/dev/null 2>&1; then
  missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$pkg")
    fi
  done
  if ((${#missing[@]})); then
    if [[ "$(id -u)" == 0 ]]; then
      SUDO=()
    elif command -v sudo >/dev/null 2>&1; then
      SUDO=(sudo)
    else
      die "need root or sudo to install Debian packages: ${missing[*]}"
    fi
    say "installing Debian packages: ${missing[*]}"
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
else
  say "warning: dpkg-query not found (not a Debian system?); make sure these are installed: ${APT_PACKAGES[*]}"
fi

# --- 2. Virtualenv and pinned requirements ------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
  [[ -n "$python_path" ]] || die "$PYTHON not found on PATH; install Python 3.11 (or set LARGEBATCH_PYTHON)"
  "$python_path" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die "$python_path is Python $("$python_path" -c 'import platform; print(platform.python_version())'), 3.11 is required"
  say "creating virtualenv $VENV with $python_path"
  "$python_path" -m venv "$VENV"
fi
"$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || die "$VENV is not a Python 3.11 virtualenv; move it aside and re-run"

want_hash="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
have_hash="$(cat "$STAMP" 2>/dev/null || true)"
if [[ "$want_hash" != "$have_hash" ]]; then
  say "installing requirements.txt into $VENV"
  "$VENV/bin/python" -m pip install -q -r "$REQUIREMENTS"
  printf '%s\n' "$want_hash" >"$STAMP"
fi

# --- 3. Horovod ---------------------------------------------------------------
if [[ "${LARGEBATCH_SKIP_HOROVOD:-0}" != 1 ]]; then
  bash "$REPO/scripts/build_horovod.sh"
  # The environment's horovodrun runs scripts/horovodrun.py: Horovod's launcher after a
  # quiet import of TensorFlow, so a launch does not begin with its start-up lines.
  # (Written again each time: reinstalling Horovod puts its own entry point back.)
  launcher="$VENV/bin/horovodrun"
  printf '#!/bin/sh\n# Written by scripts/setup.sh: Horovod'"'"'s launcher without TensorFlow'"'"'s start-up lines.\nexec "%s" "%s" "$@"\n' \
    "$VENV/bin/python" "$REPO/scripts/horovodrun.py" >"$launcher.tmp"
  chmod +x "$launcher.tmp" && mv -f "$launcher.tmp" "$launcher"
fi

# --- 4. The optimizers' native CPU kernels (optimizers/native.py) --------------
# Built once per source, TensorFlow version and compiler flags; a no-op after.
# TensorFlow is imported with its start-up lines held back (framework/engines/tf_import.py).
(cd "$REPO" && "$VENV/bin/python" -c 'from framework.engines import tf_import; tf_import.import_tensorflow()
from optimizers import native; print("[setup] native kernels:", native.build())') \
  || die "building optimizers/kernels/largebatch_ops.cc failed (see above); g++ is required"

# --- 5. Summary ---------------------------------------------------------------
"$VENV/bin/python" - "$VENV" <<'EOF'
import importlib.metadata as md, platform, sys
def v(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "-"
tf = v("tensorflow-cpu")
if tf == "-":
    tf = v("tensorflow")
print(f"[setup] ready: venv {sys.argv[1]} | Python {platform.python_version()} | "
      f"TensorFlow {tf} | Keras {v('keras')} | NumPy {v('numpy')} | Horovod {v('horovod')}")
EOF
say "done in $((SECONDS - t0)) s"
