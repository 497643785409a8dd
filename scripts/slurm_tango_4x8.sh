#!/bin/bash
# The paper's 4 x 8-GPU layout under SLURM, with training and sampling kept apart:
#   node 0      the trainer: one process, both models FSDP over its 8 GPUs
#               (the per-device plan: python -m tango_jax.plan_memory --config "$CONFIG")
#   nodes 1, 2  generator vLLM servers: 4 replicas x tensor parallel 2 per node
#   node 3      verifier vLLM servers:  4 replicas x tensor parallel 2
# The trainer streams new weights to every replica after each update (NCCL).
#
#   sbatch --time=24:00:00 scripts/slurm_tango_4x8.sh \
#       [--config.<field>=<value> ...]          # extra overrides go to the trainer
#
# Preemption and time limits (docs/cluster.md): SLURM sends this script SIGUSR1 10 minutes
# before the time limit (--signal=B:USR1@600); the script passes it to the trainer, which ends
# the step in flight, saves a checkpoint and exits with 75; the script then requeues the job,
# and the requeued job (same job id, so the same RUN_DIR) resumes from that checkpoint. A
# preemption (SIGTERM to every step) is saved the same way and requeued by SLURM (--requeue).
#
# Environment: CONFIG (default configs/tango_qwen2_5_math_7b.py), GEN_MODEL, VER_MODEL (local
# HF checkpoints, on a file system every node sees), RUN_DIR (default runs/tango-$SLURM_JOB_ID),
# LOGS (default runs/slurm-$SLURM_JOB_ID). The vLLM servers' key is drawn afresh at every start
# (or taken from TANGO_VLLM_KEY) and reaches the trainer as the variable's name
# (api_key_env): it is never on a command line or in the run directory.
# Not run on a real cluster by the authors: every command in it is tested on its own
# (launch_vllm.py, the trainer and its signal handling), the orchestration only with `bash -n`.
#SBATCH --job-name=tango-4x8
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --signal=B:USR1@600
#SBATCH --requeue
#SBATCH --open-mode=append
set -euo pipefail

CONFIG=${CONFIG:-configs/tango_qwen2_5_math_7b.py}
GEN_MODEL=${GEN_MODEL:-models/Qwen2.5-Math-7B-SFT}
VER_MODEL=${VER_MODEL:-models/Qwen2.5-7B}
RUN_DIR=${RUN_DIR:-runs/tango-${SLURM_JOB_ID}}  # a requeued job keeps its id: it resumes
LOGS=${LOGS:-runs/slurm-${SLURM_JOB_ID}}
PORTS=(8100 8101 8102 8103)  # one per replica (4 x TP 2 on 8 GPUs)
# The servers listen on 0.0.0.0 and require this key on every route but /health.
TANGO_VLLM_KEY=${TANGO_VLLM_KEY:-$(openssl rand -hex 16)}
export TANGO_VLLM_KEY
echo "start $(date -u +%FT%TZ) job ${SLURM_JOB_ID} restart ${SLURM_RESTART_COUNT:-0}" >&2
mkdir -p "$LOGS"

mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
TRAINER=${NODES[0]}
GEN_NODES=("${NODES[1]}" "${NODES[2]}")
VER_NODES=("${NODES[3]}")

serve() {  # serve NODE MODEL: 4 replicas x TP 2 over the node's 8 GPUs, in the background
  srun --nodes=1 --ntasks=1 --gpus-per-node=8 -w "$1" \
    python -m tango_jax.launch_vllm --model "$2" --devices 0,1,2,3,4,5,6,7 \
    --tensor-parallel-size 2 --backend nccl --dtype bfloat16 --max-model-len 8192 \
    --host 0.0.0.0 --api-key-env TANGO_VLLM_KEY --base-port "${PORTS[0]}" \
    >"$LOGS/vllm-$1.jsonl" 2>"$LOGS/vllm-$1.log" &
}

urls() {  # urls NODE...: the python tuple of every replica's URL
  local out=""
  for node in "$@"; do for port in "${PORTS[@]}"; do out+="\"http://$node:$port\","; done; done
  echo "(${out%,})"
}

wait_healthy() {  # wait_healthy NODE...: until every replica answers /health (no key needed)
  for node in "$@"; do for port in "${PORTS[@]}"; do
    until curl -sf "http://$node:$port/health" >/dev/null; do sleep 10; done
  done; done
}

for node in "${GEN_NODES[@]}"; do serve "$node" "$GEN_MODEL"; done
for node in "${VER_NODES[@]}"; do serve "$node" "$VER_MODEL"; done
wait_healthy "${GEN_NODES[@]}" "${VER_NODES[@]}"

# The trainer: one process on node 0 (jax.distributed stays off; see docs/scaling.md for
# the multi-process trainer with the embedded JAX sampler). In the background, so that this
# shell can pass it the signals SLURM sends (a trapped signal interrupts `wait`).
requeue=0
srun --nodes=1 --ntasks=1 --gpus-per-node=8 -w "$TRAINER" \
  env XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 \
  python -m tango_jax.train --config "$CONFIG" --config.run_dir="$RUN_DIR" \
  --config.resume=True \
  --config.generator.model.path="$GEN_MODEL" --config.verifier.model.path="$VER_MODEL" \
  --config.generator.sampler.vllm.urls="$(urls "${GEN_NODES[@]}")" \
  --config.verifier.sampler.vllm.urls="$(urls "${VER_NODES[@]}")" \
  --config.generator.sampler.vllm.api_key_env=TANGO_VLLM_KEY \
  --config.verifier.sampler.vllm.api_key_env=TANGO_VLLM_KEY \
  --config.generator.sampler.vllm.sync.master_address="$TRAINER" \
  --config.verifier.sampler.vllm.sync.master_address="$TRAINER" \
  "$@" &
trainer=$!
# USR1: the time limit is near; srun passes the signal on to the trainer (python), which saves
# after the step in flight and exits with 75. TERM (preemption, scancel): the same, no requeue
# by this script (SLURM requeues a preempted job itself; a cancelled one stays cancelled).
trap 'requeue=1; kill -USR1 "$trainer" 2>/dev/null || true' USR1
trap 'kill -TERM "$trainer" 2>/dev/null || true' TERM
status=0
while true; do
  wait "$trainer" && status=0 || status=$?
  kill -0 "$trainer" 2>/dev/null || break  # it ended; else `wait` was cut by a signal
done
kill $(jobs -p) 2>/dev/null || true  # stop the servers' job steps
if [ "$status" -eq 75 ] && [ "$requeue" -eq 1 ]; then
  echo "stopped before the time limit with a checkpoint: requeueing job ${SLURM_JOB_ID}" >&2
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
fi
exit $status
