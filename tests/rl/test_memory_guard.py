"""Guard on the train step's memory plan: a speed change must not move memory unseen.

A small bf16 model's policy-gradient step (remat, reference model, a chunked log-prob head,
two micro-batches, FSDP over the 8 simulated CPU devices) is compiled exactly as
`python -m tango_jax.plan_memory` compiles the 7B steps (`rl.memory_plan.compile_step` with the
memory-minimising scheduler), and XLA's planned temporaries are compared with the figure
recorded below. (The script also leaves out the CPU's all-reduce combiner, process-wide; this
2-layer step plans the same with or without it: 28,872,696 B against 28,873,656 B.) Compiled
plan bytes are deterministic for one jaxlib, so this is no timing.

When it fails: if the change meant to trade memory for speed, re-run
`python -m tango_jax.plan_memory --config configs/tango_qwen2_5_math_7b.py`, put the 7B
table in docs/scaling.md and re-record the figure here with the reason in the commit; if not,
the change keeps a buffer alive that it should not (a float32 copy, a reshape that defeats
buffer reuse, a cotangent kept across the head's chunks).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jaxlib

from tango_jax.models import presets
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rl.memory_plan import PLAN_SCHEDULER, compile_step, gpu_attention_proxy
from tango_jax.rl.train_step import LossConfig, TrainerConfig

# jaxlib version -> planned temporaries in bytes (per device) of `small_step_plan()`.
RECORDED = {"0.10.2": 28_873_656}
GROWTH = 0.03  # allowed: a few percent (buffer alignment, an extra scalar)
SHRINK = 0.10  # a larger drop is good news, but the figure must then be re-recorded


def small_step_plan() -> int:
    cfg = presets.get(
        "qwen2.5-0.5b", dtype=jnp.bfloat16, param_dtype=jnp.float32, remat=True, attention="xla"
    ).replace(
        num_layers=2,
        embed_dim=128,
        mlp_dim=512,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        vocab_size=8192,  # a head as large as the layers: its buffers show
        tie_word_embeddings=False,
    )
    trainer = TrainerConfig(micro_batch_size=16, loss=LossConfig(logprob_chunk=32))  # 4 chunks
    compiled, *_ = compile_step(
        cfg,
        trainer,
        make_mesh(MeshConfig()),
        rows=32,
        prompt_len=64,
        response_len=128,
        with_ref=True,
        compiler_options=PLAN_SCHEDULER,
    )
    return compiled.memory_analysis().temp_size_in_bytes


def test_planned_temporaries_stay_at_the_recorded_figure():
    assert jax.device_count() == 8
    version = jaxlib.__version__
    assert version in RECORDED, (
        f"no recorded plan for jaxlib {version} (have {sorted(RECORDED)}): add "
        f"RECORDED[{version!r}] = {small_step_plan()} after checking the 7B plan "
        "(python -m tango_jax.plan_memory)."
    )
    got, want = small_step_plan(), RECORDED[version]
    assert got <= want * (1 + GROWTH), (
        f"planned temporaries {got:,} B exceed the recorded {want:,} B by "
        f"{got / want - 1:.1%} (> {GROWTH:.0%}): see this module's docstring."
    )
    assert got >= want * (1 - SHRINK), (
        f"planned temporaries {got:,} B are {1 - got / want:.1%} below the recorded {want:,} B: "
        "re-record the figure so that the guard stays tight."
    )


def test_the_plan_stands_for_the_attention_kernel_a_gpu_would_run():
    bf16 = presets.get("qwen2.5-7b", dtype=jnp.bfloat16)
    assert gpu_attention_proxy(bf16) == "xla_blocked"  # cuDNN on a GPU: no [T, T] scores
    assert gpu_attention_proxy(bf16.replace(attention="cudnn")) == "xla_blocked"
    assert gpu_attention_proxy(bf16.replace(attention="xla")) == "xla"  # forced: as is
    assert gpu_attention_proxy(bf16.replace(head_dim=256)) == "xla"  # cuDNN does not fit
    assert gpu_attention_proxy(presets.get("qwen2.5-7b", dtype=jnp.float32)) == "xla"
