#!/usr/bin/env bash
# Runs the test suite in .venv (create it first: bash scripts/setup.sh).
# Extra arguments go to pytest (e.g. -k sampler, -x). Exit status 5 ("no tests collected")
# is treated as a failure with a clear message, never as a silent pass.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests (exit 5): check the test paths or -k expression" >&2
  exit 1
fi
exit "$rc"
