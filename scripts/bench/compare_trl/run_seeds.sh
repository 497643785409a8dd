#!/usr/bin/env bash
# The seed runs of the GRPO comparison against TRL, one after the other (never side by side:
# the step times are compared, and a Tango run alone peaks at ~17 GB of memory), each run's
# record copied to docs/compare_trl/runs/ as it ends.
#
#   bash scripts/bench/compare_trl/run_seeds.sh 1 2 3    # tango_jax then TRL, seed by seed
#   TRAINERS=trl bash scripts/bench/compare_trl/run_seeds.sh 2    # one trainer only
#   TRAINERS=tango bash scripts/bench/compare_trl/run_seeds.sh 1  # Tango on the same task
#                         # (configs/smollm2_addition.py:tango); its rollouts recorded too
#   TRAINERS=tango_recipe bash scripts/bench/compare_trl/run_seeds.sh 1  # Tango with claim 1's
#                         # verifier recipe, paired with the GRPO runs (configs/smollm2_verifier.py:tango)
#
# A seed whose record already exists is skipped, so a stopped study resumes where it left off.
# A run stopped half-way starts again from nothing (its step times would not compare), unless
# RESUME=1: then it resumes from its last checkpoint (exact: docs/cluster.md), its log appended.
#
# Memory: with glibc's malloc a long SmolLM2 Tango run's resident set creeps up (~1.3 GB per
# verifier update of configs/smollm2_verifier.py:tango, past 24 GiB by its fifth); jemalloc keeps
# it flat at the same speed (docs/real_model.md). So every run preloads JEMALLOC, by default
# Debian's libjemalloc2 where it is installed (apt-get install libjemalloc2); JEMALLOC= keeps glibc.
# Then: python scripts/bench/compare_trl/compare_trl.py --seeds 1,2,3 \
#   --ours 'docs/compare_trl/runs/tango_jax_s{seed}' --trl 'docs/compare_trl/runs/trl_s{seed}'
set -uo pipefail
cd "$(dirname "$0")/../../.."
CONFIG="${CONFIG:-configs/smollm2_addition.py:grpo}"
RECORDS="${RECORDS:-docs/compare_trl/runs}"  # where the records go
mkdir -p "$RECORDS" runs
[ "$#" -gt 0 ] || { echo "usage: $0 SEED [SEED ...]" >&2; exit 2; }
for trainer in ${TRAINERS:-tango_jax trl}; do  # every name checked before anything runs
  case "$trainer" in tango_jax | trl | tango | tango_recipe) ;; *) echo "unknown trainer $trainer (tango_jax | trl | tango | tango_recipe)" >&2; exit 2 ;; esac
done
if [ -z "${JEMALLOC+set}" ]; then  # unset: Debian's, where installed
  JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
  [ -f "$JEMALLOC" ] || JEMALLOC=""
elif [ -n "$JEMALLOC" ] && [ ! -f "$JEMALLOC" ]; then
  echo "JEMALLOC=$JEMALLOC: no such file; apt-get install libjemalloc2, or JEMALLOC= for glibc's malloc" >&2
  exit 2
fi
if [ -n "$JEMALLOC" ]; then export LD_PRELOAD="$JEMALLOC${LD_PRELOAD:+:$LD_PRELOAD}"; fi

record() {  # record NAME RUN_DIR LOG: the metrics, the config and the log of a finished run
  local out="$RECORDS/$1"
  mkdir -p "$out.tmp"
  cp "$2/metrics.jsonl" "$2/config.json" "$out.tmp/"
  if [ -d "$2/rollouts" ]; then cp -r "$2/rollouts" "$out.tmp/"; fi
  grep -v "it/s\]" "$3" > "$out.tmp/train.log"
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "recorded $out"
}

fresh() {  # fresh RUN_DIR LOG: a stopped run starts again, or with RESUME=1 goes on from its checkpoint
  if [ "${RESUME:-0}" = 1 ] && [ -d "$1/checkpoints" ]; then
    echo "=== resumed $(date -u +%FT%T), allocator ${JEMALLOC:-glibc malloc} ===" >> "$2"
  else
    rm -rf "$1"
    echo "=== started $(date -u +%FT%T), allocator ${JEMALLOC:-glibc malloc} ===" > "$2"
  fi
}

for seed in "$@"; do
  for trainer in ${TRAINERS:-tango_jax trl}; do
    name="${trainer}_s${seed}"
    [ -f "$RECORDS/$name/metrics.jsonl" ] && { echo "$name: recorded already"; continue; }
    log="runs/$name.log"  # the record takes it when the run ends
    case "$trainer" in  # the run's directory, and the config of a tango_jax run
      tango_jax) run_dir="runs/smollm2_addition_grpo_s${seed}" config="$CONFIG" ;;
      tango) run_dir="runs/smollm2_addition_tango_s${seed}" config=configs/smollm2_addition.py:tango ;;
      tango_recipe) run_dir="runs/smollm2_verifier_tango_s${seed}" config=configs/smollm2_verifier.py:tango ;;
      trl) run_dir="runs/trl_smollm2_addition_grpo_s${seed}" ;;
    esac
    if [ "$trainer" = trl ]; then
      cmd=(.venv/bin/python scripts/bench/compare_trl/trl_grpo.py --config "$CONFIG" --seed "$seed" --run_dir "$run_dir")
    else
      cmd=(.venv/bin/python -m tango_jax.train --config "$config" --config.seed="$seed" --config.run_dir="$run_dir")
    fi
    fresh "$run_dir" "$log"
    "${cmd[@]}" >> "$log" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then echo "$name failed (exit $rc): see $log" >&2; exit "$rc"; fi
    record "$name" "$run_dir" "$log" && rm -f "$log"
  done
done
