#!/bin/bash
# The paper's 4 x 8-GPU layout under SLURM, with training and sampling kept apart:
#   node 0      the trainer: one process, both models FSDP over its 8 GPUs
#               (the per-device plan: python scripts/bench/check_memory.py --config "$CONFIG")
#   nodes 1, 2  generator vLLM servers: 4 replicas x tensor parallel 2 per node
#   node 3      verifier vLLM servers:  4 replicas x tensor parallel 2
# The trainer streams new weights to every replica after each update (NCCL).
#
#   TANGO_VLLM_KEY=$(openssl rand -hex 16) sbatch scripts/slurm_tango_4x8.sh \
#       [--config.<field>=<value> ...]          # extra overrides go to the trainer
#
# Environment: CONFIG (default configs/tango_qwen2_5_math_7b.py), GEN_MODEL, VER_MODEL (local
# HF checkpoints, on a file system every node sees), LOGS (default runs/slurm-$SLURM_JOB_ID).
# Not run on a real cluster by the authors: every command in it is tested on its own
# (launch_vllm.py, the trainer), the orchestration only with `bash -n`.
#SBATCH --job-name=tango-4x8
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
set -euo pipefail

CONFIG=${CONFIG:-configs/tango_qwen2_5_math_7b.py}
GEN_MODEL=${GEN_MODEL:-models/Qwen2.5-Math-7B-SFT}
VER_MODEL=${VER_MODEL:-models/Qwen2.5-7B}
LOGS=${LOGS:-runs/slurm-${SLURM_JOB_ID}}
PORTS=(8100 8101 8102 8103)  # one per replica (4 x TP 2 on 8 GPUs)
: "${TANGO_VLLM_KEY:?set TANGO_VLLM_KEY: the servers listen on 0.0.0.0 and require it}"
export TANGO_VLLM_KEY
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

# The trainer: one process on node 0 (jax.distributed stays off; see README "Scaling out" for
# the multi-process trainer with the embedded JAX sampler).
status=0
srun --nodes=1 --ntasks=1 --gpus-per-node=8 -w "$TRAINER" \
  env XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 \
  python -m tango_jax.train --config "$CONFIG" \
  --config.generator.model.path="$GEN_MODEL" --config.verifier.model.path="$VER_MODEL" \
  --config.generator.sampler.vllm.urls="$(urls "${GEN_NODES[@]}")" \
  --config.verifier.sampler.vllm.urls="$(urls "${VER_NODES[@]}")" \
  --config.generator.sampler.vllm.api_key="$TANGO_VLLM_KEY" \
  --config.verifier.sampler.vllm.api_key="$TANGO_VLLM_KEY" \
  --config.generator.sampler.vllm.sync.master_address="$TRAINER" \
  --config.verifier.sampler.vllm.sync.master_address="$TRAINER" \
  "$@" || status=$?
kill $(jobs -p) 2>/dev/null || true  # stop the servers' job steps
exit $status
