"""Model configuration: one frozen dataclass for the Qwen2/2.5, Qwen3 and Llama 3/3.1 families.

Built either from a Hugging Face `config.json` (`ModelConfig.from_hf_dict`) or from a named
preset (`presets.get`). Written back as a `config.json` that `transformers` and vLLM read
(`to_hf_dict`).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import jax.numpy as jnp

from tango_jax.models.lora import LoraConfig


class Family(enum.Enum):
    QWEN2 = "qwen2"  # Qwen2, Qwen2.5, Qwen2.5-Math: q/k/v bias, usually tied embeddings when small
    QWEN3 = "qwen3"  # Qwen3 dense: no biases, RMSNorm on every q/k head, head_dim != D / N
    LLAMA = "llama"  # Llama 3 / 3.1: no biases, optional `llama3` rope scaling


_ARCHITECTURES = {
    Family.QWEN2: "Qwen2ForCausalLM",
    Family.QWEN3: "Qwen3ForCausalLM",
    Family.LLAMA: "LlamaForCausalLM",
}
# What each family is, for the one-line error on an unsupported model_type.
SUPPORTED = "qwen2 (Qwen2/Qwen2.5/Qwen2.5-Math), qwen3 (Qwen3 dense) and llama (Llama 3/3.1)"


@dataclasses.dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1's frequency-dependent rope scaling (HF `rope_type: llama3`)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def dtype_from_name(name: str | Any) -> Any:
    if not isinstance(name, str):
        return jnp.dtype(name)
    if name not in _DTYPES:
        raise ValueError(f"dtype '{name}' is not supported; use one of {sorted(_DTYPES)}.")
    return _DTYPES[name]


ATTENTION_KERNELS = ("auto", "xla", "xla_blocked", "cudnn")
DECODE_ATTENTION = ("auto", "dot", "sum")


def _default_head_dim(family: Family, embed_dim: int, num_heads: int) -> int:
    """transformers' head_dim when config.json has none: Qwen3Config's default is 128 whatever
    the width; the others split the width evenly over the heads."""
    return 128 if family is Family.QWEN3 else embed_dim // num_heads


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture plus numerics of a decoder-only transformer.

    Shape letters used across tango_jax/models: D embed_dim, F mlp_dim, N num_heads,
    K num_kv_heads, H head_dim, V vocab_size, L num_layers.

    dtype: computation dtype of activations (bf16 on accelerators); param_dtype: storage dtype
    of parameters (f32 master weights with bf16 compute is the usual training setting).
    remat: rematerialise each decoder layer in the backward pass (saves activation memory).
    attention: the kernel of full-sequence attention (the train step's forward; prefill and
    decode with a KV cache use "xla", decode as `decode_attention` says). "xla": einsums and a
    softmax over materialised float32 [B, K, G, T, S] scores. "xla_blocked": the same einsums,
    causal, 64 queries at a time against the keys up to the block's end (skips the upper
    triangle, keeps the scores cache-sized; 11-13% faster train steps on a CPU). "cudnn":
    cuDNN's fused flash attention (`jax.nn.dot_product_attention(implementation="cudnn")`;
    NVIDIA GPUs, bf16/fp16, head_dim a multiple of 8 up to 128). "auto": cudnn where those hold
    (the materialised scores of "xla" are what made a long-sequence GPU step slow:
    docs/benchmarks.md, "On one GPU"), xla_blocked on CPUs, else xla. All give the same numbers
    for every query that sees at least one key.

    Fused variants (off by default until a GPU measurement says they help; each gives the
    same numbers up to float rounding, tests/models/test_fused_layers.py; A/B on a GPU with
    scripts/bench/gpu_check.py): fused_norm: RMSNorm with a hand-written backward that keeps
    only the input and the per-token inverse RMS and computes in float32 (the weight gradient
    too, where autodiff sums it in the compute dtype). fused_mlp: SwiGLU's
    gate and up projections as one matmul against the two weights stacked (the parameters and
    the Hugging Face tensors stay as they are). fused_rope: rope's cos/sin computed once per
    forward for all layers (not per layer, for q and k, and again under remat), applied to the
    two halves in one expression.
    lora: LoRA adapters on the projections named by `lora.targets` (models/lora.py); not part
    of config.json (`to_hf_dict`), which describes the base model.
    decode_attention: how a one-token step over the KV cache (the sampler's decode) attends.
    "dot": the einsums of "xla" (batched [G, H] x [H, S] matrix products per row and KV head).
    "sum": the same scores and weighted values as elementwise products summed over the head
    and slot axes, in float32, which XLA fuses into one loop over the cache, where XLA:CPU
    runs "dot" as B x K separate small matrix products: the faster on a CPU
    (docs/benchmarks.md, "The decode step's attention"; scripts/bench/bench_decode_step.py).
    "auto": "sum" on CPUs, "dot" elsewhere (on a GPU the two are A/B'd by
    scripts/bench/gpu_check.py, not yet measured). The same numbers up to float rounding.
    padding_as_lengths: the plain forward moves each row's real tokens to the front (a stable
    compaction of the token ids and positions, undone once on the final hidden states), so
    that padding is only ever on the right and full-sequence attention can take it as per-row
    lengths: cuDNN then runs its causal + padding kernel with no [B, 1, T, T] bias (the
    padding mask as a bias is read in the forward and the backward, and JAX's cuDNN wrapper
    also computes its gradient). The einsum kernels see the same causal-and-length mask.
    """

    family: Family
    vocab_size: int
    num_layers: int
    embed_dim: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10_000.0
    rope_scaling: Llama3RopeScaling | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on each query and key head, before rope
    max_position_embeddings: int = 32768
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    remat: bool = False
    attention: str = "auto"
    decode_attention: str = "auto"
    fused_norm: bool = False
    fused_mlp: bool = False
    fused_rope: bool = False
    padding_as_lengths: bool = False
    lora: LoraConfig = LoraConfig()  # adapters on the projections (models/lora.py); rank 0: none

    def __post_init__(self):
        if self.decode_attention not in DECODE_ATTENTION:
            raise ValueError(
                f"ModelConfig.decode_attention ({self.decode_attention!r}) must be one of "
                f"{DECODE_ATTENTION}."
            )
        if self.attention not in ATTENTION_KERNELS:
            raise ValueError(
                f"ModelConfig.attention ({self.attention!r}) must be one of {ATTENTION_KERNELS}."
            )
        for name in (
            "vocab_size",
            "num_layers",
            "embed_dim",
            "mlp_dim",
            "num_heads",
            "num_kv_heads",
            "head_dim",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} ({value!r}) must be a positive integer.")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}) for grouped-query attention."
            )
        # The HF name table (hf.py) is chosen by family, the modules by these flags: they agree.
        for flag, family in (("qkv_bias", Family.QWEN2), ("qk_norm", Family.QWEN3)):
            if getattr(self, flag) != (self.family is family):
                raise ValueError(
                    f"ModelConfig.{flag} ({getattr(self, flag)}) must be "
                    f"{self.family is family} for family {self.family.value} (only "
                    f"{family.value} checkpoints have {flag}); leave it at the family's value."
                )
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim ({self.head_dim}) must be even for rope.")

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, int):
            return (self.eos_token_id,)
        return tuple(self.eos_token_id)

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Parameter count, as Hugging Face counts it (tied embeddings counted once)."""
        d, f, n, k, h = (
            self.embed_dim,
            self.mlp_dim,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
        )
        attn = d * n * h + 2 * d * k * h + n * h * d
        if self.qkv_bias:
            attn += n * h + 2 * k * h
        if self.qk_norm:
            attn += 2 * h
        layer = attn + 3 * d * f + 2 * d
        embed = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + embed + d

    # --- Hugging Face config.json ------------------------------------------------------------

    @classmethod
    def from_hf_dict(
        cls, hf: dict[str, Any], *, source: str = "config.json", **overrides
    ) -> ModelConfig:
        """Reads a transformers `config.json` dict (old `rope_theta/rope_scaling` or v5
        `rope_parameters` style). `overrides` set numerics such as dtype, param_dtype, remat."""
        model_type = hf.get("model_type")
        try:
            family = Family(model_type)
        except ValueError:
            raise ValueError(
                f"{source}: model_type '{model_type}' (architectures {hf.get('architectures')}) "
                f"is not supported; tango_jax supports {SUPPORTED}: convert the checkpoint to "
                "one of them or add the family to tango_jax/models."
            ) from None
        if hf.get("hidden_act", "silu") != "silu":
            raise ValueError(
                f"{source}: hidden_act '{hf['hidden_act']}' is not supported (silu only)."
            )
        if hf.get("use_sliding_window", False):
            raise ValueError(
                f"{source}: use_sliding_window=true is not supported; the Qwen2.5 models used by "
                "Tango have it off. Set it to false if the window exceeds your sequence lengths."
            )
        if family is not Family.QWEN2 and (hf.get("attention_bias") or hf.get("mlp_bias")):
            raise ValueError(
                f"{source}: attention_bias/mlp_bias=true is not supported for {family.value} "
                "(its published checkpoints have none); set them to false only if the weights "
                "carry no bias tensors."
            )

        rope = dict(hf.get("rope_parameters") or {})
        legacy_scaling = hf.get("rope_scaling")
        if legacy_scaling:
            rope.update(legacy_scaling)
        rope_theta = float(rope.get("rope_theta", hf.get("rope_theta", 10_000.0)))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type == "default":
            scaling = None
        elif rope_type == "llama3":
            scaling = Llama3RopeScaling(
                factor=float(rope["factor"]),
                low_freq_factor=float(rope["low_freq_factor"]),
                high_freq_factor=float(rope["high_freq_factor"]),
                original_max_position_embeddings=int(rope["original_max_position_embeddings"]),
            )
        else:
            raise ValueError(
                f"{source}: rope type '{rope_type}' is not supported (default and llama3 are)."
            )
        num_heads = int(hf["num_attention_heads"])
        embed_dim = int(hf["hidden_size"])
        eos = hf.get("eos_token_id")
        if isinstance(eos, list):
            eos = tuple(eos)
        return cls(
            family=family,
            vocab_size=int(hf["vocab_size"]),
            num_layers=int(hf["num_hidden_layers"]),
            embed_dim=embed_dim,
            mlp_dim=int(hf["intermediate_size"]),
            num_heads=num_heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
            head_dim=int(hf.get("head_dim") or _default_head_dim(family, embed_dim, num_heads)),
            rope_theta=rope_theta,
            rope_scaling=scaling,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=family is Family.QWEN2,
            qk_norm=family is Family.QWEN3,
            max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=eos,
            pad_token_id=hf.get("pad_token_id"),
            **overrides,
        )

    def to_hf_dict(self, *, torch_dtype: str = "float32") -> dict[str, Any]:
        """A `config.json` dict that transformers 5.x and vLLM load."""
        rope: dict[str, Any] = {"rope_theta": self.rope_theta, "rope_type": "default"}
        if self.rope_scaling is not None:
            rope.update(dataclasses.asdict(self.rope_scaling), rope_type="llama3")
        eos = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        hf: dict[str, Any] = {
            "architectures": [_ARCHITECTURES[self.family]],
            "model_type": self.family.value,
            "vocab_size": self.vocab_size,
            "hidden_size": self.embed_dim,
            "intermediate_size": self.mlp_dim,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_parameters": rope,
            # Also in the pre-v5 spelling, for readers (older vLLM/transformers) that want it.
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": torch_dtype,
            "use_cache": True,
        }
        if self.rope_scaling is not None:
            hf["rope_scaling"] = dict(rope)
        if self.family in (Family.QWEN2, Family.QWEN3):
            hf.update(
                use_sliding_window=False, sliding_window=None, max_window_layers=self.num_layers
            )
        if self.family in (Family.QWEN3, Family.LLAMA):
            hf.update(attention_bias=False)
        if self.family is Family.LLAMA:
            hf.update(mlp_bias=False)
        return hf
