"""The ahead-of-time memory plan (tango_jax/rl/memory_plan.py, tango_jax/plan_memory.py)
against the real Trainer's compiled step, on 8 simulated CPU devices."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from tango_jax.models import Transformer, presets
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import init_sharded, shard_bytes
from tango_jax.rl.batch import make_batch
from tango_jax.rl.memory_plan import StepMemory, linear_fit, step_memory
from tango_jax.rl.train_step import TrainerConfig
from tango_jax.rl.trainer import Trainer


def test_plan_equals_the_trainers_compiled_step():
    mesh = make_mesh(MeshConfig())
    cfg = presets.get("tiny-qwen2", remat=True)
    tcfg = TrainerConfig(micro_batch_size=8)
    model = init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    ref = init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(1)), mesh)
    trainer = Trainer(model, tcfg, mesh=mesh, ref_model=ref)
    rng = np.random.default_rng(0)
    batch = make_batch(
        [rng.integers(3, 300, size=9).tolist() for _ in range(16)],
        [rng.integers(3, 300, size=11).tolist() for _ in range(16)],
        advantages=rng.normal(size=16).tolist(),
    )
    assert (batch.prompt_len, batch.response_mask.shape[1]) == (16, 16)
    with jax.set_mesh(mesh):
        real = (
            trainer._jitted.lower(
                trainer.params,
                trainer.opt_state,
                trainer.ref_params,
                trainer._device_batch(batch),
                trainer.frozen,
            )
            .compile()
            .memory_analysis()
        )
    plan = step_memory(cfg, tcfg, mesh, rows=16, prompt_len=16, response_len=16, with_ref=True)
    assert plan.arguments == real.argument_size_in_bytes
    assert plan.outputs == real.output_size_in_bytes
    assert plan.aliased == real.alias_size_in_bytes
    assert plan.temporaries == real.temp_size_in_bytes
    assert plan.params == shard_bytes(trainer.params)
    assert plan.opt_state == shard_bytes(trainer.opt_state)
    assert plan.ref_params == shard_bytes(trainer.ref_params)
    # Parameters, optimizer state, reference and batch are the step's arguments (XLA's count
    # differs by alignment bytes only).
    parts = plan.params + plan.opt_state + plan.ref_params + plan.batch
    assert parts == pytest.approx(plan.arguments, rel=1e-3)
    # FSDP over 8: AdamW's mu and nu are sharded like the parameters (not a full copy per
    # device), so the state per device is about 2x the parameters per device.
    whole = sum(x.nbytes for x in jax.tree.leaves(trainer.opt_state))
    assert plan.opt_state < whole / 4
    assert plan.opt_state == pytest.approx(2 * plan.params, rel=0.05)


def test_linear_fit_extrapolates_every_field():
    fields = dict(
        params=1.0,
        opt_state=2.0,
        ref_params=1.0,
        batch=0.5,
        arguments=4.5,
        outputs=3.0,
        aliased=3.0,
        temporaries=7.0,
    )
    a = StepMemory(layers=2, **{k: 10 + 2 * v for k, v in fields.items()})
    b = StepMemory(layers=4, **{k: 10 + 4 * v for k, v in fields.items()})
    got = linear_fit(a, b, 28)
    assert got.layers == 28
    for k, v in fields.items():
        assert getattr(got, k) == pytest.approx(10 + 28 * v)
    with pytest.raises(ValueError, match="two different depths"):
        linear_fit(a, a, 28)


def test_sampler_plan_equals_the_samplers_compiled_generate_and_holds_its_kv_cache():
    from tango_jax.parallel.distributed import put
    from tango_jax.rollout.jax_sampler import generate_program
    from tango_jax.rollout.memory_plan import generate_memory

    mesh = make_mesh(MeshConfig())
    cfg = presets.get("tiny-qwen2")
    model = init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    rows, prompt_len, max_tokens = 16, 24, 40
    rows_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(("data", "fsdp")))
    fn = generate_program(nnx.graphdef(model), max_tokens=max_tokens, cache_dtype=cfg.dtype)
    with jax.set_mesh(mesh):  # real arrays, as JaxSampler passes them
        real = (
            fn.lower(
                nnx.state(model),
                put(np.ones((rows, prompt_len), np.int32), rows_sharding),
                put(np.ones((rows, prompt_len), bool), rows_sharding),
                jax.random.key(0),
                jax.numpy.float32(1.0),
                jax.numpy.asarray([2], jax.numpy.int32),
            )
            .compile()
            .memory_analysis()
        )
    plan = generate_memory(cfg, mesh, rows=rows, prompt_len=prompt_len, max_tokens=max_tokens)
    assert plan.arguments == real.argument_size_in_bytes
    assert plan.temporaries == real.temp_size_in_bytes
    assert plan.params == shard_bytes(nnx.state(model))
    # K and V of every layer for every slot: 2 x L x rows x (P + N) x KV heads x head size
    slots = rows * (prompt_len + max_tokens)
    assert plan.kv_cache == 2 * cfg.num_layers * slots * cfg.num_kv_heads * cfg.head_dim * 4
    assert plan.kv_cache / 8 <= plan.temporaries  # the cache (rows over 8 devices) is inside
    assert plan.peak == plan.arguments + plan.outputs + plan.temporaries
    # share_prefix: the distinct prompts' prefill groups (8 rows here), held beside the rows'
    # cache while it is assembled, split over the devices that split the rows
    shared = generate_memory(
        cfg, mesh, rows=rows, prompt_len=prompt_len, max_tokens=max_tokens, distinct_rows=8
    )
    row_devices = mesh.shape["data"] * mesh.shape["fsdp"]
    assert shared.prefill_groups == plan.kv_cache / 2 / row_devices
    assert shared.peak == plan.peak + shared.prefill_groups


def test_a_long_prefill_attends_in_query_blocks_and_does_not_hold_all_their_scores(monkeypatch):
    """A prefill whose scores pass `PREFILL_SCORES_BYTES` (256 MiB; lowered here) attends 64
    queries at a time, one block after another: at 512 prompt tokens its plan holds at least
    one float32 copy of the all-queries-by-all-slots scores less than in one block."""
    from tango_jax.models import transformer
    from tango_jax.rl.memory_plan import PLAN_SCHEDULER
    from tango_jax.rollout.memory_plan import generate_memory

    cfg = presets.get("tiny-qwen2")
    mesh = make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
    shape = dict(rows=8, prompt_len=512, max_tokens=8, compiler_options=PLAN_SCHEDULER)
    monkeypatch.setattr(transformer, "PREFILL_SCORES_BYTES", 2**20)  # these scores: 17 MB
    blocked = generate_memory(cfg, mesh, **shape)
    monkeypatch.setattr(transformer, "query_block", lambda length: 0)
    whole = generate_memory(cfg, mesh, **shape)
    scores = 8 * cfg.num_heads * 512 * (512 + 8) * 4
    assert blocked.temporaries < whole.temporaries - scores
