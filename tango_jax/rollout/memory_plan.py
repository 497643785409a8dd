"""Per-device memory of the embedded JAX sampler's generate, planned by XLA from abstract arrays.

    plan = generate_memory(model_cfg, mesh, rows=16, prompt_len=2048, max_tokens=2048)
    plan.peak   # bytes on one device while it generates

The program is the sampler's own (`jax_sampler.generate_program`): prefill and the decode
loop, with the KV cache created inside it (most of its temporaries). On one device it runs
between the train steps, beside both models' resident state (python -m tango_jax.plan_memory
adds them up; `rl.memory_plan` plans the train steps and `rl.memory_plan.linear_fit`
extrapolates either kind of plan over depth). Like the train-step plan it is the backend's
own: on simulated CPU devices, the CPU compiler's.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tango_jax.models.config import ModelConfig
from tango_jax.models.transformer import KVCache, Transformer
from tango_jax.parallel.partition import abstract_sharded, shard_bytes
from tango_jax.rollout.jax_sampler import generate_program


@dataclasses.dataclass(frozen=True)
class GenerateMemory:
    """Bytes on one device while the JAX sampler generates: `params` (the state passed in) and
    `kv_cache` (the whole cache, over all devices) are exact; `arguments`, `outputs` and
    `temporaries` are XLA's memory analysis of the plain generate, whose temporaries hold the
    cache. `prefill_groups`: with share_prefix, the distinct prompts' caches that the shared
    prefill holds beside the rows' cache while it assembles it (rollout/shared_prefill.py),
    per device: their bytes over the devices that split the rows (data x fsdp), the kv heads
    counted whole, so an upper bound where the tensor axis splits them; 0 for the plain path."""

    layers: int
    params: float
    kv_cache: float
    arguments: float
    outputs: float
    temporaries: float
    prefill_groups: float = 0.0

    @property
    def peak(self) -> float:
        return self.arguments + self.outputs + self.temporaries + self.prefill_groups


def generate_memory(
    model_cfg: ModelConfig,
    mesh: Mesh,
    *,
    rows: int,
    prompt_len: int,
    max_tokens: int,
    cache_dtype=None,
    decode_block: int = 0,
    distinct_rows: int = 0,
    compiler_options: dict | None = None,
) -> GenerateMemory:
    """XLA's per-device plan of one `JaxSampler` generate call of `rows` prompts padded to
    `prompt_len` (the sampler's `max_rows` and `prompt_bucket` rounding are the caller's),
    sampling up to `max_tokens`, compiled from abstract arrays as the sampler jits it.
    distinct_rows: with share_prefix, the rows of the distinct prompts' prefill groups (at most
    the rows over the samples per prompt, rounded up to `row_bucket`); 0: the plain path."""
    cache_dtype = cache_dtype or model_cfg.dtype
    graphdef, state = abstract_sharded(lambda: Transformer(model_cfg, rngs=nnx.Rngs(0)), mesh)
    rows_sharding = NamedSharding(mesh, P(("data", "fsdp")))
    replicated = NamedSharding(mesh, P())
    args = (
        state,
        jax.ShapeDtypeStruct((rows, prompt_len), jnp.int32, sharding=rows_sharding),
        jax.ShapeDtypeStruct((rows, prompt_len), jnp.bool_, sharding=rows_sharding),
        jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=replicated),
        jax.ShapeDtypeStruct((), jnp.float32, sharding=replicated),
        jax.ShapeDtypeStruct((1,), jnp.int32, sharding=replicated),
    )
    fn = generate_program(
        graphdef, max_tokens=max_tokens, cache_dtype=cache_dtype, decode_block=decode_block
    )
    with jax.set_mesh(mesh):
        compiled = fn.lower(*args).compile(compiler_options)
    ma = compiled.memory_analysis()

    def cache_bytes(n: int) -> float:
        cache = jax.eval_shape(
            lambda: KVCache.init(model_cfg, n, prompt_len + max_tokens, cache_dtype)
        )
        return float(sum(x.size * jnp.dtype(x.dtype).itemsize for x in cache.k + cache.v))

    row_devices = mesh.shape["data"] * mesh.shape["fsdp"]
    return GenerateMemory(
        layers=model_cfg.num_layers,
        params=shard_bytes(state),
        kv_cache=cache_bytes(rows),
        prefill_groups=cache_bytes(distinct_rows) / row_devices if distinct_rows else 0.0,
        arguments=float(ma.argument_size_in_bytes),
        outputs=float(ma.output_size_in_bytes),
        temporaries=float(ma.temp_size_in_bytes),
    )
