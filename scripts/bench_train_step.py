"""Throughput and MFU of the jitted train step (policy-gradient loss, AdamW, remat optional).

    python scripts/bench_train_step.py --preset tiny-qwen2 --batch 64 --prompt-len 96 \
        --response-len 96                                                   # CPU
    python scripts/bench_train_step.py --preset qwen2.5-0.5b --dtype bfloat16 --remat \
        --batch 64 --micro-batch 16 --prompt-len 512 --response-len 1024 \
        --peak-tflops 989                                                   # one H100 (bf16)

Random weights and tokens (the step's cost does not depend on them). Prints one JSON object:
compile_s, step_s (median of --steps timed steps after one warm-up), tokens_per_s, the model
FLOPs per step (6 · params · tokens for matmuls + 12 · L · D · T² · B / 2 for causal
attention, plus one extra forward for the reference model's KL term), achieved TFLOP/s and,
with --peak-tflops, MFU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
import numpy as np
from flax import nnx

from tango_jax.models import Transformer, presets
from tango_jax.models.config import dtype_from_name
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import init_sharded
from tango_jax.rl.batch import TrainBatch
from tango_jax.rl.train_step import LossConfig, TrainerConfig
from tango_jax.rl.trainer import Trainer


def step_flops(cfg, batch: int, length: int, with_ref: bool) -> float:
    """Forward + backward FLOPs of one step (the reference model adds one forward)."""
    params = cfg.num_params() - cfg.vocab_size * cfg.embed_dim * (
        0 if cfg.tie_word_embeddings else 1
    )
    tokens = batch * length
    matmul = 2 * params * tokens  # forward
    attention = 2 * 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * length * length * batch / 2
    forward = matmul + attention
    return 3 * forward + (forward if with_ref else 0)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--preset", default="tiny-qwen2")
    p.add_argument("--dtype", default="float32", help="compute dtype (params stay float32)")
    p.add_argument("--remat", action="store_true")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=0, help="0: the whole batch at once")
    p.add_argument("--prompt-len", type=int, default=96)
    p.add_argument("--response-len", type=int, default=96)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--no-kl", action="store_true", help="no reference model / KL term")
    p.add_argument("--peak-tflops", type=float, help="device peak, for MFU (H100 bf16: 989)")
    args = p.parse_args(argv)

    cfg = presets.get(args.preset, dtype=dtype_from_name(args.dtype), remat=args.remat)
    mesh = make_mesh(MeshConfig())
    model = init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    ref = None if args.no_kl else init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(1)), mesh)
    loss = LossConfig(kl_coef=0.0 if args.no_kl else 0.001)
    trainer = Trainer(
        model,
        TrainerConfig(loss=loss, micro_batch_size=args.micro_batch or args.batch),
        mesh=mesh,
        ref_model=ref,
    )
    rng = np.random.default_rng(0)
    b, pl, rl = args.batch, args.prompt_len, args.response_len
    batch = TrainBatch(
        input_ids=rng.integers(2, cfg.vocab_size, size=(b, pl + rl)).astype(np.int32),
        attention_mask=np.ones((b, pl + rl), bool),
        response_mask=np.ones((b, rl), np.float32),
        advantages=rng.normal(size=(b, rl)).astype(np.float32),
        sample_weights=np.ones((b,), np.float32),
        sampler_logprobs=np.zeros((b, rl), np.float32),
    )
    t0 = time.perf_counter()
    trainer.step(batch)  # compile + first step
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        trainer.step(batch)  # returns host metrics: the step has finished
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    flops = step_flops(cfg, b, pl + rl, with_ref=not args.no_kl)
    out = {
        "preset": args.preset,
        "device": str(jax.devices()[0].device_kind),
        "devices": jax.device_count(),
        "dtype": args.dtype,
        "batch": b,
        "length": pl + rl,
        "compile_s": round(compile_s, 2),
        "step_s": round(step_s, 4),
        "tokens_per_s": round(b * (pl + rl) / step_s, 1),
        "tflops_per_step": round(flops / 1e12, 4),
        "achieved_tflops": round(flops / step_s / 1e12, 4),
    }
    if args.peak_tflops:
        out["mfu"] = round(flops / step_s / 1e12 / (args.peak_tflops * jax.device_count()), 4)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
