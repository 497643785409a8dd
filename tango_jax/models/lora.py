"""LoRA adapters (Hu et al. 2021) on the transformer's projections, as Flax NNX `nnx.LoRA` layers.

A targeted projection W computes x·W + (alpha / rank)·(x·A)·B, with A [in, r] and B [r, out]
`nnx.LoRAParam`s (B starts at zero, so an untrained adapter changes nothing); the base W stays
as it is. `in` and `out` are the projection's flattened input and output widths, in the order
of the Hugging Face layout (q: D -> N·H, o: N·H -> D, gate/up: D -> F, down: F -> D), so A and
B are PEFT's `lora_A.weight` and `lora_B.weight` transposed (models/peft.py).

Why nnx.LoRA and not qwix (Tunix's LoRA library): qwix finds the weights of an NNX model by
intercepting the `__call__` of the model's class, so `hidden_states` (the train step) and
`forward_with_cache` (the sampler) ran without the adapters, and it recognised a weight only
by its shape after `models.matmul.dense` reshapes it, which found none of q/k/v/o (2026-11-28,
qwix 0.1.8). Here the adapters are ordinary submodules, seen by every forward.

Shape letters as in transformer.py; r the adapter rank.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from tango_jax.schema import Rule, above, at_least, check_fields, within

# PEFT's target_modules names of the projections -> (submodule, parameter) in a DecoderLayer.
PROJECTIONS = {
    "q_proj": ("attention", "q"),
    "k_proj": ("attention", "k"),
    "v_proj": ("attention", "v"),
    "o_proj": ("attention", "o"),
    "gate_proj": ("mlp", "gate"),
    "up_proj": ("mlp", "up"),
    "down_proj": ("mlp", "down"),
}
# The HF module path of each submodule (model.layers.{i}.<this>.<name>).
HF_SUBMODULE = {"attention": "self_attn", "mlp": "mlp"}


def _names_projections(targets) -> bool:
    return bool(targets) and all(t in PROJECTIONS for t in targets)


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """LoRA on a role's model: off (rank 0, full fine-tuning) by default.

    With rank > 0 only the adapters train: the base weights are frozen (and may be stored in
    bfloat16 with `param_dtype`), the optimizer holds state for the adapters alone, and every
    forward (train step, embedded sampler, merged weights for vLLM and export) sees them.
    """

    rank: int = 0  # adapter rank r; 0: no adapters (full fine-tuning)
    alpha: float = 16.0  # the adapter's output is scaled by alpha / rank (PEFT's lora_alpha)
    # Projections with an adapter, by PEFT's target_modules names (each decoder layer's)
    targets: tuple[str, ...] = tuple(PROJECTIONS)
    dropout: float = 0.0  # on the adapter's input (PEFT's lora_dropout); only 0 for now
    init_seed: int = 0  # the A matrices' random initialisation (B starts at zero)
    # A PEFT adapter directory to start from instead (adapter_config.json with this rank,
    # alpha and targets, adapter_model.safetensors); "": fresh adapters
    init_from: str = ""

    def __post_init__(self):
        check_fields(
            self,
            {
                "rank": at_least(0, " (0: LoRA off)"),
                "alpha": above(0),
                "targets": Rule(
                    _names_projections,
                    f"must name projections of the model: some of {list(PROJECTIONS)} "
                    "(PEFT's target_modules names).",
                ),
                "dropout": within(0.0, 0.0, why=": LoRA dropout is not implemented yet"),
            },
        )

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def targets_param(self, submodule: str, name: str) -> bool:
        """Whether the parameter `name` of a layer's `submodule` gets an adapter."""
        return self.enabled and any(PROJECTIONS[t] == (submodule, name) for t in self.targets)


def make_adapter(
    lora: LoraConfig,
    in_logical: str,
    in_features: int,
    out_logical: str,
    out_features: int,
    *,
    dtype,
    rngs: nnx.Rngs,
) -> nnx.LoRA:
    """An `nnx.LoRA` [in, r] x [r, out] with float32 parameters (trained even over a bfloat16
    base) computing in `dtype`; its axes carry the projection's logical names."""
    return nnx.LoRA(
        in_features,
        lora.rank,
        out_features,
        dtype=dtype,
        param_dtype=jnp.float32,
        rngs=rngs,
        a_metadata={"out_sharding": (in_logical, None)},
        b_metadata={"out_sharding": (None, out_logical)},
    )


def adapter_delta(adapter: nnx.LoRA, scale: float, x: jax.Array, in_axes: int, out_shape):
    """(alpha / r)·(x·A)·B of x [*tokens, *in] (the `in_axes` trailing axes flattened), as
    [*tokens, *out_shape] in x's dtype."""
    tokens = x.shape[: x.ndim - in_axes]
    flat = x.reshape(*tokens, math.prod(x.shape[x.ndim - in_axes :]))
    return (adapter(flat) * scale).astype(x.dtype).reshape(*tokens, *out_shape)


@functools.partial(jax.jit, static_argnums=3)
def merged_weight(w: jax.Array, a_Ixr: jax.Array, b_rxO: jax.Array, scale: float) -> jax.Array:
    """W + (alpha / r)·A·B in W's NNX layout, in float32 (not rounded to a bfloat16 base's
    dtype: the caller casts once, to what it sends or stores). One jitted program per shape: on
    sharded arrays each eager op would be its own program with its own collectives (see
    rl/trainer.py's `_global_norm`)."""
    delta = (a_Ixr.astype(jnp.float32) @ b_rxO.astype(jnp.float32)) * scale  # [in, out]
    return w.astype(jnp.float32) + delta.reshape(w.shape)


def adapter_paths(num_layers: int, lora: LoraConfig):
    """(PEFT target name, layer, path of W, path of the adapter module) for every adapter, in
    state-path form (the keys of `nnx.to_flat_state`); none when LoRA is off."""
    if not lora.enabled:
        return
    for i in range(num_layers):
        for target in lora.targets:
            submodule, name = PROJECTIONS[target]
            layer = ("layers", i, submodule)
            yield target, i, (*layer, name), (*layer, "adapters", name)
