"""Measures the vLLM sampling service: server start, generation throughput, weight sync.

CPU, the tiny model (written to a temp dir when --model is not given), gloo transfer:
    python scripts/bench/bench_vllm.py --dtype float32 --enforce-eager
GPUs:
    python scripts/bench/bench_vllm.py --model /ckpt/Qwen2.5-7B --dtype bfloat16 --backend nccl \
        --devices 7 --prompts 256 --n 5 --max-tokens 1024

A Qwen2.5-0.5B-shaped model with random weights (written once to --preset-dir, tiny tokenizer):
    python scripts/bench/bench_vllm.py --preset qwen2.5-0.5b --dtype float32 --enforce-eager \
        --cpu-kv-cache-gib 1 --prompts 4 --n 1 --max-tokens 16

Prints one JSON object: start_s, generated_tokens, generate_s, tokens_per_s, and the
metrics of the last of --syncs weight syncs (weight_sync/...: bytes, per-phase seconds, GB/s,
verification gap). Random prompts of --prompt-len token ids; sampling at temperature 1.
For scale it adds memcpy_gbps, this machine's copy bandwidth (the median of 5 `np.copyto` of a
buffer as large as the sync, capped at 2 GiB; bytes copied, not read + written), and
sync_over_memcpy = weight_sync/gbps / memcpy_gbps.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from flax import nnx

from tango_jax.models import from_pretrained
from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.rollout.base import Prompt, SamplingParams
from tango_jax.rollout.vllm.config import VLLMSamplerConfig
from tango_jax.rollout.vllm.sampler import VLLMSampler
from tango_jax.rollout.vllm.server import VLLMServerConfig
from tango_jax.rollout.vllm.sync import WeightSyncConfig


def memcpy_gbps(nbytes: int, repeats: int = 5) -> float:
    """GB/s of `np.copyto` between two `nbytes` buffers (the median of `repeats`)."""
    src = np.ones(max(nbytes, 1), np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch the pages
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return src.nbytes / sorted(times)[repeats // 2] / 1e9


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="HF checkpoint dir (default: a fresh tiny-qwen2)")
    p.add_argument("--preset", help="a random-weight checkpoint of this preset instead")
    p.add_argument("--preset-dir", default="/tmp/tango_bench_ckpt", help="where --preset goes")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--devices", help="CUDA_VISIBLE_DEVICES of the server")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--cpu-kv-cache-gib", type=float, help="CPU builds: KV cache size")
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--syncs", type=int, default=3)
    p.add_argument("--bucket-mib", type=int, default=256)
    args = p.parse_args(argv)

    if args.preset:
        model_path = str(Path(args.preset_dir) / args.preset)
        if not (Path(model_path) / "config.json").exists():
            write_tiny_checkpoint(model_path, args.preset, seed=0)
    else:
        model_path = args.model or str(
            write_tiny_checkpoint(tempfile.mkdtemp() + "/tiny", "tiny-qwen2", seed=0)
        )
    server = VLLMServerConfig(
        model=model_path,
        dtype=args.dtype,
        devices=args.devices,
        weight_transfer_backend=args.backend,
        max_model_len=args.max_model_len,
        cpu_kv_cache_gib=args.cpu_kv_cache_gib,
        enforce_eager=args.enforce_eager,
    )
    sync = WeightSyncConfig(
        backend=args.backend, dtype=args.dtype, bucket_bytes=args.bucket_mib * 2**20
    )
    with VLLMSampler(VLLMSamplerConfig(servers=(server,), sync=sync)) as sampler:
        out: dict[str, float] = {"start_s": sampler.replicas[0].server.last_start_s}
        rng = np.random.default_rng(0)
        vocab = sampler.model_config.vocab_size
        prompts = [
            Prompt(tuple(int(t) for t in rng.integers(2, vocab // 2, size=args.prompt_len)))
            for _ in range(args.prompts)
        ]
        sampler.generate(prompts[:2], SamplingParams(max_tokens=8))  # warm-up
        sampler.generate(prompts, SamplingParams(n=args.n, max_tokens=args.max_tokens, seed=0))
        stats = sampler.metrics()
        for key in ("generated_tokens", "generate_s", "tokens_per_s"):
            out[key] = stats[f"rollout/{key}"]
        state = nnx.state(from_pretrained(model_path))
        for version in range(1, args.syncs + 1):
            metrics = sampler.update_weights(state, version)
        out.update(metrics)
    out["memcpy_gbps"] = memcpy_gbps(min(int(out["weight_sync/bytes"]), 2**31))
    out["sync_over_memcpy"] = out["weight_sync/gbps"] / out["memcpy_gbps"]
    print(json.dumps({k: round(v, 6) for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
