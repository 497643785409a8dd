"""What one decode step of the JAX sampler costs against its rows and the KV-cache slots it
attends over: the model's `forward_with_cache` for one token per row, jitted as the sampler's
decode loop runs it (cache donated), median of --repeats timed calls after a warm-up.

    python scripts/bench/bench_decode_step.py                        # SmolLM2-135M, float32
    python scripts/bench/bench_decode_step.py --rows 64 --slots 64,336 --span 200
    python scripts/bench/bench_decode_step.py --rows 64 --slots 336 --decode-attention dot,sum

The step's weights are read once for all rows, the K and V of every layer once per row and slot
(30 layers x 2 x 3 KV heads x 64 x 4 bytes = 46 KB per row and slot for SmolLM2-135M). On a CPU
the "dot" kernel's step grows with the slots (XLA:CPU runs its products as tiny separate dots);
the "sum" kernel's ("auto" there) barely does (docs/benchmarks.md). --span N also times the
step reading only the first N slots (what the segmented decode does before the cache fills).
--decode-attention times each of the given kernels (ModelConfig.decode_attention) in turn, in
one process, on the same weights. Prints one line per (rows, slots[, span], kernel).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import jax
import jax.numpy as jnp
from flax import nnx

from tango_jax.models import from_pretrained
from tango_jax.models.transformer import KVCache


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct")
    p.add_argument("--rows", default="64,32,16", help="comma-separated row counts")
    p.add_argument("--slots", default="64,192,336,512", help="comma-separated cache sizes")
    p.add_argument("--span", type=int, help="also time reading only the first SPAN slots")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument(
        "--decode-attention",
        default="auto",
        help="comma-separated ModelConfig.decode_attention kernels, timed in turn: auto, dot, sum",
    )
    args = p.parse_args()

    steps = {}
    for kernel in dict.fromkeys(args.decode_attention.split(",")):
        model = from_pretrained(args.model, decode_attention=kernel)
        graphdef, state = nnx.split(model)

        @functools.partial(jax.jit, static_argnames=("span",), donate_argnames=("cache",))
        def step(state, tokens_Bx1, cache, span=None, graphdef=graphdef):
            return nnx.merge(graphdef, state).forward_with_cache(tokens_Bx1, cache, span=span)

        steps[kernel] = functools.partial(step, state)
    turns = [(k, steps[k]) for k in args.decode_attention.split(",")]  # a kernel again: a round
    cfg = model.config

    def time_step(rows: int, slots: int, span: int | None, step) -> float:
        # every slot valid; the new token goes to the last slot read
        cache = KVCache.init(cfg, rows, slots)._replace(
            valid=jnp.ones((rows, slots), bool), index=jnp.asarray((span or slots) - 1, jnp.int32)
        )
        tokens = jnp.ones((rows, 1), jnp.int32)
        _, cache = jax.block_until_ready(step(tokens, cache, span=span))
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            _, cache = jax.block_until_ready(step(tokens, cache, span=span))
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    for rows in map(int, args.rows.split(",")):
        for slots in map(int, args.slots.split(",")):
            for span in [None] + ([args.span] if args.span and args.span < slots else []):
                for kernel, step in turns:
                    s = time_step(rows, slots, span, step)
                    read = f"span {span:4d}" if span else "all slots"
                    print(
                        f"rows {rows:3d} slots {slots:4d} {read} {kernel:>4}: "
                        f"{s * 1e3:7.1f} ms/step, {s * 1e3 / rows:5.2f} ms per row-step",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
