#!/usr/bin/env bash
# Set the checkout up (scripts/setup.sh) and run the tests (docs/testing.md).
#
#   bash scripts/test.sh                    the full suite, as CI runs it
#   bash scripts/test.sh --fast             the unit tests alone: not the slow
#                                           end-to-end ones, not the multi-process ones
#   bash scripts/test.sh tests/optimizers   the paths given (and the fast subset of them
#   bash scripts/test.sh --fast tests/data  with --fast)
#
# Other arguments go to pytest as they are, e.g. `bash scripts/test.sh -k lars -x`.
# With no path given, pytest runs its testpaths (pytest.ini: tests). The 15
# slowest tests are listed at the end.
#
# The tests run on LARGEBATCH_TEST_WORKERS pytest-xdist workers (2, the cores of
# the CI machine), each file on one worker (tests/conftest.py). 0 runs them in
# this process, one after another; `-n N` on the command line wins over both.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

args=()
for arg in "$@"; do
  if [[ "$arg" == --fast ]]; then
    args+=(-m 'not slow and not multiprocess')
  else
    args+=("$arg")
  fi
done

bash scripts/setup.sh

VENV="${LARGEBATCH_VENV:-$REPO/.venv}"
workers="${LARGEBATCH_TEST_WORKERS:-2}"
if ! [[ "$workers" =~ ^[0-9]+$ ]]; then
  echo "[test] ERROR: LARGEBATCH_TEST_WORKERS must be a whole number of workers (0: no workers), got '$workers'" >&2
  exit 2
fi
status=0
"$VENV/bin/python" -m pytest -q --durations=15 -n "$workers" --dist loadfile "${args[@]}" || status=$?
if [[ "$status" == 5 ]]; then
  echo "[test] ERROR: pytest ran no tests (none collected, or all deselected by -m or -k)" >&2
fi
exit "$status"
