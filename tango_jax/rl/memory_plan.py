"""Per-device memory of a role's train step, planned by XLA from abstract arrays (no weights).

    plan = step_memory(model_cfg, trainer_cfg, mesh, rows=1280, prompt_len=2048,
                       response_len=2048, with_ref=True)
    plan.peak   # bytes on one device while the step runs (XLA's buffer assignment)

The step is `rl.train_step.train_step`, jitted exactly as `rl.trainer.Trainer` jits it (the same
in/out shardings, donated parameters and optimizer state), lowered with `jax.ShapeDtypeStruct`
arguments that carry their shardings, and compiled; nothing the size of the model is ever
allocated. `compiled.memory_analysis()` is per device (the compiled SPMD program is one
device's), and splits into arguments (parameters, optimizer state, reference parameters,
batch), outputs, the part of the outputs aliased to donated arguments, and temporaries
(activations, gradients, optimizer temporaries). The peak while the step runs is
`arguments + outputs - aliased + temporaries`.

The plan is the backend's own: on simulated CPU devices it is the CPU compiler's, whose
fusion and buffer assignment differ from the GPU compiler's (and CPU may widen bf16 math to
f32), so it approximates a GPU's; `python -m tango_jax.plan_memory` prints it beside GPU sizes.

`linear_fit` extrapolates a plan measured at two depths to the model's full depth: the step is
an unrolled Python loop over layers, each layer adding the same parameters, optimizer state
and saved activations, so every part is affine in the number of layers.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tango_jax.models.config import ModelConfig
from tango_jax.models.transformer import Transformer, cudnn_fits
from tango_jax.parallel.mesh import data_parallel_size
from tango_jax.parallel.partition import abstract_sharded, shard_bytes, with_shardings
from tango_jax.rl.train_step import TrainerConfig, train_step
from tango_jax.rl.trainer import optimizer_shardings

# The CPU backend's default scheduler optimises for concurrency and starts every rematerialised
# forward early, keeping all layers' recomputed activations alive at once; the
# memory-minimising one orders the program as a GPU's memory-aware scheduler would.
# tango_jax/plan_memory.py sets it process-wide through XLA_FLAGS, tests per compile.
PLAN_SCHEDULER = {"xla_cpu_enable_concurrency_optimized_scheduler": False}

GB = 1e9  # decimal gigabytes, as GPU memory sizes are quoted (80 GB A100/H100, 141 GB H200)


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """Bytes on one device. `params`, `opt_state`, `ref_params` and `batch` are exact (shard
    shapes); the rest are XLA's memory analysis of the compiled step."""

    layers: int
    params: float
    opt_state: float
    ref_params: float
    batch: float
    arguments: float
    outputs: float
    aliased: float
    temporaries: float

    @property
    def peak(self) -> float:
        """While the step runs: its inputs, its non-donated outputs and its temporaries."""
        return self.arguments + self.outputs - self.aliased + self.temporaries

    @property
    def resident(self) -> float:
        """What stays on the device between steps: parameters, optimizer state, reference."""
        return self.params + self.opt_state + self.ref_params


def gpu_attention_proxy(config: ModelConfig) -> str:
    """The CPU-compilable attention kernel whose plan stands for the one a GPU would run.

    "auto" and "cudnn" run cuDNN's flash attention on a GPU wherever it fits (bf16/fp16, head
    size a multiple of 8 up to 128), which keeps no [T, T] scores; a CPU cannot compile it, and
    "xla_blocked" (float32 scores of 64 queries at a time) is the nearest kernel it can, still
    above cuDNN's memory. Elsewhere a GPU runs the einsums ("xla"), planned as they are.
    """
    if config.attention in ("xla", "xla_blocked"):
        return config.attention
    return "xla_blocked" if cudnn_fits(config, config.dtype) else "xla"


def abstract_params(model_cfg: ModelConfig, mesh: Mesh):
    """(graphdef, parameters as ShapeDtypeStructs on their shardings of `mesh`)."""
    return abstract_sharded(lambda: Transformer(model_cfg, rngs=nnx.Rngs(0)), mesh)


def abstract_opt_state(tx, params, mesh: Mesh):
    """The optimizer state of `params`, abstract, on the shardings the Trainer gives it."""
    shardings = optimizer_shardings(tx, params, jax.tree.map(lambda x: x.sharding, params), mesh)
    return with_shardings(jax.eval_shape(tx.init, params), shardings)


def abstract_batch(rows: int, prompt_len: int, response_len: int, mesh: Mesh) -> dict:
    """The train step's batch (`TrainBatch.arrays()`), abstract, sharded over data x fsdp."""
    sharding = NamedSharding(mesh, P(("data", "fsdp")))
    length = prompt_len + response_len
    spec = {
        "input_ids": ((rows, length), jnp.int32),
        "attention_mask": ((rows, length), jnp.bool_),
        "response_mask": ((rows, response_len), jnp.float32),
        "advantages": ((rows, response_len), jnp.float32),
        "sample_weights": ((rows,), jnp.float32),
        "sampler_logprobs": ((rows, response_len), jnp.float32),
        "truncated": ((rows,), jnp.float32),
    }
    return {k: jax.ShapeDtypeStruct(s, d, sharding=sharding) for k, (s, d) in spec.items()}


def compile_step(
    model_cfg: ModelConfig,
    trainer_cfg: TrainerConfig,
    mesh: Mesh,
    *,
    rows: int,
    prompt_len: int,
    response_len: int,
    with_ref: bool,
    compiler_options: dict | None = None,
):
    """(compiled step, abstract params (all, trained and frozen), opt state, ref params,
    batch): `Trainer`'s jit of
    `train_step` (same shardings, same donation), compiled from abstract arrays.
    `compiler_options`: XLA debug options for this compile only (e.g. `PLAN_SCHEDULER`)."""
    dp = data_parallel_size(mesh)
    if rows % trainer_cfg.micro_batch_size or trainer_cfg.micro_batch_size % dp:
        raise ValueError(
            f"micro_batch_size ({trainer_cfg.micro_batch_size}) must divide the batch ({rows} "
            f"rows) and be a multiple of the data-parallel size ({dp})."
        )
    graphdef, state = abstract_params(model_cfg, mesh)
    lora = model_cfg.lora.enabled  # the Trainer's split: adapters trained, the base frozen
    params, frozen = nnx.filter_state(state, nnx.LoRAParam if lora else nnx.Param, ...)
    tx = trainer_cfg.optimizer.make()
    opt_state = abstract_opt_state(tx, params, mesh)
    ref = None
    if with_ref:  # with LoRA: zero adapters over the frozen base
        ref = params if lora else abstract_params(model_cfg, mesh)[1]
    batch = abstract_batch(rows, prompt_len, response_len, mesh)
    replicated = NamedSharding(mesh, P())
    rows_sharding = NamedSharding(mesh, P(("data", "fsdp")))  # the log-probs [B, R]
    shardings = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
    step = functools.partial(train_step, graphdef=graphdef, tx=tx, cfg=trainer_cfg, dp=dp)
    jitted = jax.jit(
        step,
        donate_argnums=(0, 1),
        in_shardings=(
            shardings(params),
            shardings(opt_state),
            shardings(ref),
            shardings(batch),
            shardings(frozen),
        ),
        out_shardings=(shardings(params), shardings(opt_state), replicated, rows_sharding),
    )
    with jax.set_mesh(mesh):
        compiled = jitted.lower(params, opt_state, ref, batch, frozen).compile(compiler_options)
    return compiled, state, opt_state, ref, batch


def memory_of(compiled, params, opt_state, ref, batch, layers: int) -> StepMemory:
    ma = compiled.memory_analysis()
    if ma is None:
        raise RuntimeError(
            f"the {jax.default_backend()} backend gives no memory analysis for compiled programs."
        )
    return StepMemory(
        layers=layers,
        params=shard_bytes(params),
        opt_state=shard_bytes(opt_state),
        ref_params=shard_bytes(ref) if ref is not None else 0.0,
        batch=shard_bytes(batch),
        arguments=float(ma.argument_size_in_bytes),
        outputs=float(ma.output_size_in_bytes),
        aliased=float(ma.alias_size_in_bytes),
        temporaries=float(ma.temp_size_in_bytes),
    )


def step_memory(model_cfg: ModelConfig, trainer_cfg: TrainerConfig, mesh: Mesh, **shape):
    """XLA's per-device memory plan of one train step (keyword arguments: `compile_step`'s)."""
    out = compile_step(model_cfg, trainer_cfg, mesh, **shape)
    return memory_of(*out, layers=model_cfg.num_layers)


def linear_fit(a, b, layers: int):
    """Every field of two plans (`StepMemory`, `rollout.memory_plan.GenerateMemory`) at two
    depths extrapolated affinely in the number of layers."""
    if a.layers == b.layers:
        raise ValueError(f"linear_fit needs two different depths (got {a.layers} twice).")
    t = (layers - a.layers) / (b.layers - a.layers)
    fields = [f.name for f in dataclasses.fields(a) if f.name != "layers"]
    values = {f: getattr(a, f) + t * (getattr(b, f) - getattr(a, f)) for f in fields}
    return type(a)(layers=layers, **values)
