#!/usr/bin/env bash
# Set the checkout up (scripts/setup.sh) and run the test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k lars -x`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

bash scripts/setup.sh

VENV="${LARGEBATCH_VENV:-$REPO/.venv}"
status=0
"$VENV/bin/python" -m pytest tests -q --durations=15 "$@" || status=$?
if [[ "$status" == 5 ]]; then
  echo "[test] ERROR: pytest collected no tests" >&2
fi
exit "$status"
