#!/usr/bin/env bash
# Runs the test suite in .venv (create it first: bash scripts/setup.sh).
# Extra arguments go to pytest (e.g. -k sampler, -x). Exit status 5 ("no tests collected")
# is treated as a failure with a clear message, never as a silent pass.
# Without arguments, tests/e2e/test_loop.py (many whole Tango runs, vLLM servers, killed children)
# gets its own pytest process, with fd-level capture off (--capture=sys) so that a C++ fatal
# message (XLA's LOG(FATAL) before an abort) reaches the log instead of a lost capture file.
set -uo pipefail
cd "$(dirname "$0")/.."

run() {
  .venv/bin/python -m pytest -q "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests (exit 5): check the test paths or -k expression" >&2
    return 1
  fi
  return "$rc"
}

if [ "$#" -gt 0 ]; then
  run "$@"
  exit $?
fi
run --ignore=tests/e2e/test_loop.py
first=$?
run --capture=sys tests/e2e/test_loop.py
second=$?
[ "$first" -ne 0 ] && exit "$first"
exit "$second"
