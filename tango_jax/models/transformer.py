"""Decoder-only transformer (Qwen2 / Qwen2.5, Qwen3, Llama 3 / 3.1) in Flax NNX, with a KV cache.

Shape legend: B batch, T query length, S key length (cache slots), D embed_dim, F mlp_dim,
N query heads, K key/value heads, G = N // K query heads per KV head, H head_dim, V vocab,
L layers.

Numerics follow `transformers` (the reference the tests compare against): RMSNorm in float32
then cast back before the weight; rotate-half rope with cos/sin computed in float32; softmax
in float32. Parameters are stored in `param_dtype` and cast to `dtype` for compute.

Attention masks. Every call works on "slots": in the plain forward the T tokens occupy slots
0..T-1; with a cache they are written at slots `index .. index+T-1` of a buffer of S slots.
Query slot q may attend key slot s iff `s <= q` and slot s holds a real token (`valid`).
Padding (left or right) is just invalid slots, and positions are counted over valid tokens
only, so left- and right-padded prompts give the same logits for their real tokens.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tango_jax.models.config import ModelConfig
from tango_jax.models.lora import adapter_delta, make_adapter
from tango_jax.models.matmul import dense
from tango_jax.parallel.mesh import constrain

_INIT = nnx.initializers.normal(stddev=0.02)


def _param(rngs: nnx.Rngs, shape, logical, dtype, init=_INIT) -> nnx.Param:
    """A parameter annotated with logical axis names (resolved by tango_jax.parallel.mesh)."""
    return nnx.Param(init(rngs.params(), shape, dtype), out_sharding=logical)


# --- rope --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """Inverse frequencies [H/2] in float32, with Llama 3.1 scaling when configured."""
    h = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (np.arange(0, h, 2, dtype=np.float64) / h))
    s = config.rope_scaling
    if s is not None:
        low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
        high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
        smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
            s.high_freq_factor - s.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = np.where(medium, smoothed, scaled)
    return inv_freq.astype(np.float32)


def apply_rope(x_BxTxNxH: jax.Array, positions_BxT: jax.Array, inv_freq: np.ndarray) -> jax.Array:
    freqs = positions_BxT[..., None].astype(jnp.float32) * inv_freq  # [B, T, H/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]  # [B, T, 1, H]
    cos, sin = jnp.cos(emb).astype(x_BxTxNxH.dtype), jnp.sin(emb).astype(x_BxTxNxH.dtype)
    x1, x2 = jnp.split(x_BxTxNxH, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return x_BxTxNxH * cos + rotated * sin


def rope_tables(positions_BxT: jax.Array, inv_freq: np.ndarray, dtype) -> tuple[jax.Array, ...]:
    """cos and sin [B, T, H/2] of every position's rope angles, computed in float32 then cast
    to `dtype` (as `apply_rope` does). ModelConfig.fused_rope computes them once per forward."""
    freqs = positions_BxT[..., None].astype(jnp.float32) * inv_freq  # [B, T, H/2]
    return jnp.cos(freqs).astype(dtype), jnp.sin(freqs).astype(dtype)


def apply_rope_tables(x_BxTxNxH: jax.Array, cos_BxTxH2: jax.Array, sin_BxTxH2: jax.Array):
    """`apply_rope` from precomputed tables: the rotate-half of both halves in one expression
    (x1·cos − x2·sin, x2·cos + x1·sin), the same products and sums as apply_rope's."""
    c, s = cos_BxTxH2[:, :, None, :], sin_BxTxH2[:, :, None, :]  # [B, T, 1, H/2]
    x1, x2 = jnp.split(x_BxTxNxH, 2, axis=-1)
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def rms_norm(x_xW: jax.Array, scale_W: jax.Array, eps: float) -> jax.Array:
    """RMSNorm over the last axis with transformers' rounding (normalise in float32, cast
    back, then the weight) and a hand-written backward (ModelConfig.fused_norm).

    The backward keeps only x (compute dtype) and the per-token inverse RMS [..., 1] (float32),
    and computes in float32: dscale = Σ g·n, dx = r·(g·w − n·mean(g·w·n)) with n = x·r.
    """
    return _rms_norm_fwd(x_xW, scale_W, eps)[0]


def _rms_norm_fwd(x_xW, scale_W, eps):
    x = x_xW.astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)  # [..., 1]
    y = scale_W.astype(x_xW.dtype) * (x * inv_rms).astype(x_xW.dtype)
    return y, (x_xW, inv_rms, scale_W)


def _rms_norm_bwd(eps, residuals, g_xW):
    x_xW, inv_rms, scale_W = residuals
    n = x_xW.astype(jnp.float32) * inv_rms
    g = g_xW.astype(jnp.float32)
    d_scale = jnp.sum(g * n, axis=tuple(range(g.ndim - 1)))  # [W]
    dn = g * scale_W.astype(jnp.float32)
    dx = inv_rms * (dn - n * jnp.mean(dn * n, axis=-1, keepdims=True))
    return dx.astype(x_xW.dtype), d_scale.astype(scale_W.dtype)


rms_norm.defvjp(_rms_norm_fwd, _rms_norm_bwd)


def cudnn_fits(config: ModelConfig, dtype) -> bool:
    """Whether cuDNN's fused attention supports this dtype and head size (on an NVIDIA GPU)."""
    return (
        jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)
        and config.head_dim % 8 == 0
        and config.head_dim <= 128
    )


def use_cudnn(config: ModelConfig, dtype) -> bool:
    """Whether full-sequence attention runs cuDNN's fused kernel (see ModelConfig.attention)."""
    if config.attention in ("xla", "xla_blocked"):
        return False
    fits = cudnn_fits(config, dtype)
    if config.attention == "cudnn":
        if not fits or jax.default_backend() != "gpu":
            raise ValueError(
                f"ModelConfig.attention='cudnn' needs an NVIDIA GPU, dtype bfloat16 or float16 "
                f"and head_dim a multiple of 8 up to 128 (backend {jax.default_backend()}, "
                f"dtype {jnp.dtype(dtype).name}, head_dim {config.head_dim}); use 'auto' or 'xla'."
            )
        return True
    return fits and jax.default_backend() == "gpu"


def attention_block(config: ModelConfig, length: int) -> int:
    """Query block size of full-sequence einsum attention at `length` tokens; 0: one block.

    "xla_blocked" ("auto" on a CPU) runs the causal attention of a plain forward `block`
    queries at a time against the keys up to the block's end: the upper triangle's blocks are
    skipped and each block's scores stay cache-sized, which makes CPU train steps faster
    (docs/benchmarks.md, "On the CPU"). Blocks of 64 tokens, at most 16 of them (a longer
    sequence gets longer blocks, multiples of 64: every block is a separate piece of the
    compiled program).
    """
    blocked = config.attention == "xla_blocked" or (
        config.attention == "auto" and jax.default_backend() == "cpu"
    )
    return query_block(length) if blocked else 0


def query_block(length: int) -> int:
    """Queries per block for `length` queries: 64, or more so that there are at most 16 blocks
    (multiples of 64); 0 (one block) up to 64 queries."""
    return 0 if length <= 64 else 64 * math.ceil(length / (16 * 64))


def _einsum_attention(q_BxTxKxGxH, k, v, mask_BxTxS, kv_layout: str = "BSKH"):
    """Softmax attention over materialised float32 [B, K, G, T, S] scores.

    kv_layout: the keys' and values' axes, "BSKH" (a plain forward's [B, S, K, H]) or "BKSH"
    (the KV cache's [B, K, S, H], whose (B, K) batch axes lead, as the products want them).
    """
    h = q_BxTxKxGxH.shape[-1]
    scores = jnp.einsum(
        f"BTKGH,{kv_layout}->BKGTS", q_BxTxKxGxH, k, preferred_element_type=jnp.float32
    )
    scores = scores / math.sqrt(h)
    scores = jnp.where(mask_BxTxS[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(q_BxTxKxGxH.dtype)
    return jnp.einsum(f"BKGTS,{kv_layout}->BTKGH", probs, v)


def _summed_decode_attention(q_BxTxKxGxH, k_BxKxSxH, v_BxKxSxH, mask_BxTxS):
    """`_einsum_attention` of one query per row over the KV cache ([B, K, S, H]), with the
    scores and the weighted values as elementwise products summed over the head axis and the
    slot axis, in float32 (ModelConfig.decode_attention "sum"). The same numbers up to float
    rounding; XLA:CPU fuses each sum into one loop over the cache, where it runs the products
    as B x K separate [G, H] x [H, S] matrix products."""
    h = q_BxTxKxGxH.shape[-1]
    f32 = jnp.float32
    q = q_BxTxKxGxH[:, 0, :, :, None, :].astype(f32)  # [B, K, G, 1, H]
    scores = jnp.sum(q * k_BxKxSxH[:, :, None].astype(f32), axis=-1) / math.sqrt(h)  # [B,K,G,S]
    scores = jnp.where(mask_BxTxS[:, None], scores, jnp.finfo(f32).min)
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.sum(probs[..., None] * v_BxKxSxH[:, :, None].astype(f32), axis=-2)  # [B, K, G, H]
    return out[:, None].astype(q_BxTxKxGxH.dtype)


def use_summed_decode(config: ModelConfig) -> bool:
    """Whether a one-token step over the KV cache runs `_summed_decode_attention` (see
    ModelConfig.decode_attention)."""
    if config.decode_attention == "auto":
        return jax.default_backend() == "cpu"
    return config.decode_attention == "sum"


def _blocked_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, mask_BxTxT, block: int):
    """Causal attention, `block` queries at a time, each block against the keys up to its end.

    The same numbers as `_einsum_attention` for every query that sees at least one key (a
    causal mask never lets a query see a later slot, so the skipped keys had weight 0); it
    skips the upper triangle's blocks and keeps each block's scores small.
    """
    t = q_BxTxKxGxH.shape[1]
    outs = []
    for start in range(0, t, block):
        end = min(start + block, t)
        outs.append(
            _einsum_attention(
                q_BxTxKxGxH[:, start:end],
                k_BxTxKxH[:, :end],
                v_BxTxKxH[:, :end],
                mask_BxTxT[:, start:end, :end],
            )
        )
    return jnp.concatenate(outs, axis=1)


# A prefill into the KV cache whose float32 scores (rows x heads x queries x slots) would exceed
# this attends in query blocks (`_query_blocked_attention`); smaller ones in one block, which
# compiles and runs faster on a CPU (the tiny runs' prefills are a few MB).
PREFILL_SCORES_BYTES = 256 * 2**20


def _scores_bytes(q_BxTxKxGxH, slots: int) -> int:
    b, t, kh, g, _ = q_BxTxKxGxH.shape
    return 4 * b * kh * g * t * slots


def _query_blocked_attention(q_BxTxKxGxH, k_BxKxSxH, v_BxKxSxH, mask_BxTxS, block: int):
    """`_einsum_attention`, `block` queries at a time against every key, one block after
    another (`lax.map`): the same numbers, with one block's scores alive instead of all T x S
    (a cached prefill of 64 rows of 2048 prompt tokens over 4096 slots held 60 GB of float32
    scores per copy at 7B's 28 heads; unrolled blocks did not help, the compiler kept them all
    alive). Unlike `_blocked_attention` no key is skipped: a cache's slots are not in query
    order. T is padded to a multiple of `block` with queries that see no key, then cut."""
    b, t = q_BxTxKxGxH.shape[:2]
    nb = -(-t // block)
    pad = nb * block - t
    q = jnp.pad(q_BxTxKxGxH, ((0, 0), (0, pad), (0, 0), (0, 0), (0, 0)))
    mask = jnp.pad(mask_BxTxS, ((0, 0), (0, pad), (0, 0)))
    q_NxBxCxKxGxH = jnp.moveaxis(q.reshape(b, nb, block, *q.shape[2:]), 1, 0)
    mask_NxBxCxS = jnp.moveaxis(mask.reshape(b, nb, block, mask.shape[-1]), 1, 0)
    out = jax.lax.map(
        lambda qm: _einsum_attention(qm[0], k_BxKxSxH, v_BxKxSxH, qm[1], "BKSH"),
        (q_NxBxCxKxGxH, mask_NxBxCxS),
    )  # [N, B, C, K, G, H]
    return jnp.moveaxis(out, 0, 1).reshape(b, nb * block, *out.shape[3:])[:, :t]


def cudnn_attention(q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, frame):
    """cuDNN's fused flash attention, causal, in the layout it takes as it is (B, T, heads, H;
    grouped-query k/v with K heads): no transpose on the way in or out.

    The padding goes in as per-row lengths when the frame has them (ModelConfig.
    padding_as_lengths: real tokens at the front), else as the [B, 1, T, T] mask, which JAX
    (0.10) turns into a bias that cuDNN reads in both passes and differentiates
    (`should_export_dbias` is always true).
    """
    common = dict(is_causal=True, scale=1 / math.sqrt(q_BxTxNxH.shape[-1]))
    if frame.lengths is not None:
        common |= dict(query_seq_lengths=frame.lengths, key_value_seq_lengths=frame.lengths)
    else:
        common |= dict(mask=frame.mask[:, None])
    return jax.nn.dot_product_attention(
        q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, implementation="cudnn", **common
    )


def compact_padding(valid_BxT: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The stable order that puts each row's real tokens first ([B, T] slot indices) and its
    inverse: `take(x, order)` compacts, `take(compacted, inverse)` restores."""
    order = jnp.argsort(~valid_BxT.astype(bool), axis=1, stable=True)
    return order, jnp.argsort(order, axis=1)


# --- KV cache ----------------------------------------------------------------------------------


class KVCache(NamedTuple):
    """Per-layer key/value buffers plus slot bookkeeping (a pytree; donate it to jitted steps).

    k, v: L arrays [B, K, S, H] (heads before slots: a decode step's attention products then
    need no transposed copy of the cache; in the [B, S, K, H] order XLA:CPU copied the whole
    cache every step, and a SmolLM2 decode step of 64 rows over 320 slots took 0.64 s against
    0.2 s, docs/benchmarks.md). valid: [B, S] which slots hold real tokens. lengths: [B]
    number of real tokens so far (the next token's position). index: [] next slot to write.
    """

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    valid: jax.Array
    lengths: jax.Array
    index: jax.Array

    @classmethod
    def init(cls, config: ModelConfig, batch: int, length: int, dtype=None) -> KVCache:
        dtype = dtype or config.dtype
        shape = (batch, config.num_kv_heads, length, config.head_dim)
        return cls(
            k=tuple(jnp.zeros(shape, dtype) for _ in range(config.num_layers)),
            v=tuple(jnp.zeros(shape, dtype) for _ in range(config.num_layers)),
            valid=jnp.zeros((batch, length), bool),
            lengths=jnp.zeros((batch,), jnp.int32),
            index=jnp.zeros((), jnp.int32),
        )

    @property
    def size(self) -> int:
        return self.valid.shape[1]


class Frame(NamedTuple):
    """What every layer needs to know about the current call (computed once per call)."""

    positions: jax.Array  # [B, T] rope positions
    mask: jax.Array  # [B, T, S] query t may attend key slot s
    index: jax.Array | None  # [] slot of the first query token (None: no cache)
    rope: tuple[jax.Array, jax.Array] | None = None  # cos, sin [B, T, H/2] (fused_rope)
    lengths: jax.Array | None = None  # [B] real tokens, all at the front (padding_as_lengths)

    @classmethod
    def full_sequence(cls, valid_BxT: jax.Array, positions_BxT: jax.Array | None = None) -> Frame:
        """Frame of a plain forward: T tokens in slots 0..T-1, causal, padding masked.

        Positions default to the count of real tokens before each token, so left padding
        does not shift positions.
        """
        valid = valid_BxT.astype(bool)
        if positions_BxT is None:
            positions_BxT = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0)
        slots = jnp.arange(valid.shape[1])
        mask = valid[:, None, :] & (slots[None, None, :] <= slots[None, :, None])  # [B, T, S=T]
        return cls(positions_BxT, mask, None)


# --- modules -----------------------------------------------------------------------------------


class RMSNorm(nnx.Module):
    """RMSNorm over the last axis: of width D ("norm") by default, or of one attention head
    (H, "head_dim") for Qwen3's q/k norms, which normalise each head on its own."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs, per_head: bool = False):
        self.eps = config.rms_norm_eps
        self.fused = config.fused_norm
        width, logical = (config.head_dim, "head_dim") if per_head else (config.embed_dim, "norm")
        self.scale = _param(rngs, (width,), (logical,), config.param_dtype, nnx.initializers.ones)

    def __call__(self, x_xW: jax.Array) -> jax.Array:
        """[B, T, D] (or [B, T, N|K, H] per head) -> the same shape and dtype."""
        if self.fused:
            return rms_norm(x_xW, self.scale[...], self.eps)
        x = x_xW.astype(jnp.float32)
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return self.scale[...].astype(x_xW.dtype) * x.astype(x_xW.dtype)


class Attention(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        c, pd = config, config.param_dtype
        self.config = config
        self.q = _param(
            rngs, (c.embed_dim, c.num_heads, c.head_dim), ("embed", "q_heads", "head_dim"), pd
        )
        self.k = _param(
            rngs, (c.embed_dim, c.num_kv_heads, c.head_dim), ("embed", "kv_heads", "head_dim"), pd
        )
        self.v = _param(
            rngs, (c.embed_dim, c.num_kv_heads, c.head_dim), ("embed", "kv_heads", "head_dim"), pd
        )
        self.o = _param(
            rngs, (c.num_heads, c.head_dim, c.embed_dim), ("q_heads", "head_dim", "embed"), pd
        )
        if c.qkv_bias:
            zeros = nnx.initializers.zeros
            self.q_bias = _param(
                rngs, (c.num_heads, c.head_dim), ("q_heads", "head_dim"), pd, zeros
            )
            self.k_bias = _param(
                rngs, (c.num_kv_heads, c.head_dim), ("kv_heads", "head_dim"), pd, zeros
            )
            self.v_bias = _param(
                rngs, (c.num_kv_heads, c.head_dim), ("kv_heads", "head_dim"), pd, zeros
            )
        if c.qk_norm:  # Qwen3: one [H] scale each, shared by all heads, applied before rope
            self.q_norm = RMSNorm(c, rngs=rngs, per_head=True)
            self.k_norm = RMSNorm(c, rngs=rngs, per_head=True)
        nh, kh = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        shapes = {  # flattened (in, out) widths with their logical names
            "q": ("embed", c.embed_dim, "q_heads", nh),
            "k": ("embed", c.embed_dim, "kv_heads", kh),
            "v": ("embed", c.embed_dim, "kv_heads", kh),
            "o": ("q_heads", nh, "embed", c.embed_dim),
        }
        self.adapters = nnx.Dict(
            {
                name: make_adapter(c.lora, *shape, dtype=c.dtype, rngs=rngs)
                for name, shape in shapes.items()
                if c.lora.targets_param("attention", name)
            }
        )

    def _adapted(self, x, name: str, in_axes: int = 1):
        """x times the projection `name`, plus its LoRA adapter's term if it has one."""
        w = getattr(self, name)
        out = dense(x, w[...].astype(x.dtype), in_axes=in_axes)
        if name in self.adapters:
            out = out + adapter_delta(
                self.adapters[name], self.config.lora.scale, x, in_axes, w.shape[in_axes:]
            )
        return out

    def _project(self, x, name):
        out = self._adapted(x, name)
        if self.config.qkv_bias:
            out = out + getattr(self, f"{name}_bias")[...].astype(x.dtype)
        return out

    def __call__(self, x_BxTxD, frame: Frame, kv: tuple[jax.Array, jax.Array] | None):
        c = self.config
        inv_freq = rope_inv_freq(c)
        q = self._project(x_BxTxD, "q")  # [B, T, N, H]
        k = self._project(x_BxTxD, "k")  # [B, T, K, H]
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if c.fused_rope:
            cos, sin = (
                frame.rope
                if frame.rope is not None
                else rope_tables(frame.positions, inv_freq, q.dtype)
            )
            q, k = apply_rope_tables(q, cos, sin), apply_rope_tables(k, cos, sin)
        else:
            q = apply_rope(q, frame.positions, inv_freq)
            k = apply_rope(k, frame.positions, inv_freq)
        v = self._project(x_BxTxD, "v")
        q = constrain(q, ("batch", "act_len", "act_heads", None))
        b, t, n, h = q.shape
        if kv is not None:
            out, kv = self._attend_cache(q, k, v, frame, kv)
            return self._adapted(out.reshape(b, t, n, h), "o", in_axes=2), kv
        if use_cudnn(c, q.dtype):
            out = cudnn_attention(q, k.astype(q.dtype), v.astype(q.dtype), frame)
            return self._adapted(out, "o", in_axes=2), kv
        q = q.reshape(b, t, c.num_kv_heads, n // c.num_kv_heads, h)  # [B, T, K, G, H]
        if attention_block(c, t):
            out = _blocked_attention(q, k, v, frame.mask, attention_block(c, t))
        else:
            out = _einsum_attention(q, k, v, frame.mask)
        return self._adapted(out.reshape(b, t, n, h), "o", in_axes=2), kv

    def _attend_cache(self, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, frame: Frame, kv):
        """Writes the new keys/values into their cache slots ([B, K, S, H] buffers) and attends
        over the slots (all of them, or the filled prefix `frame.mask` spans). Returns the
        attention output [B, T, K, G, H] and the new (k, v) buffers."""
        b, t, n, h = q_BxTxNxH.shape
        kh = self.config.num_kv_heads
        k_cache, v_cache = (
            jax.lax.dynamic_update_slice(
                buf, jnp.swapaxes(new, 1, 2).astype(buf.dtype), (0, 0, frame.index, 0)
            )
            for buf, new in ((kv[0], k_BxTxKxH), (kv[1], v_BxTxKxH))
        )  # [B, K, S, H]
        span = frame.mask.shape[-1]  # slots read: all of them, or the filled prefix
        k, v = k_cache[:, :, :span], v_cache[:, :, :span]
        k, v = k.astype(q_BxTxNxH.dtype), v.astype(q_BxTxNxH.dtype)
        q = q_BxTxNxH.reshape(b, t, kh, n // kh, h)  # [B, T, K, G, H]
        if query_block(t) and _scores_bytes(q, span) > PREFILL_SCORES_BYTES:
            # a large prefill into the cache, on any backend
            out = _query_blocked_attention(q, k, v, frame.mask, query_block(t))
        elif t == 1 and use_summed_decode(self.config):
            out = _summed_decode_attention(q, k, v, frame.mask)
        else:
            out = _einsum_attention(q, k, v, frame.mask, "BKSH")
        return out, (k_cache, v_cache)


class MLP(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        d, f, pd = config.embed_dim, config.mlp_dim, config.param_dtype
        self.gate = _param(rngs, (d, f), ("embed", "mlp"), pd)
        self.up = _param(rngs, (d, f), ("embed", "mlp"), pd)
        self.down = _param(rngs, (f, d), ("mlp", "embed"), pd)
        self.fused = config.fused_mlp
        self.lora_scale = config.lora.scale if config.lora.enabled else 0.0
        shapes = {"gate": ("embed", d, "mlp", f), "up": ("embed", d, "mlp", f)}
        shapes["down"] = ("mlp", f, "embed", d)
        self.adapters = nnx.Dict(
            {
                name: make_adapter(config.lora, *shape, dtype=config.dtype, rngs=rngs)
                for name, shape in shapes.items()
                if config.lora.targets_param("mlp", name)
            }
        )

    def _plus_adapter(self, out, x, name: str):
        if name not in self.adapters:
            return out
        return out + adapter_delta(self.adapters[name], self.lora_scale, x, 1, out.shape[-1:])

    def __call__(self, x_BxTxD):
        dt = x_BxTxD.dtype
        if self.fused:  # one matmul; [D, F, 2] keeps each column pair on the F shard
            w = jnp.stack([self.gate[...], self.up[...]], axis=-1).astype(dt)  # [D, F, 2]
            gate_up = dense(x_BxTxD, w)  # [B, T, F, 2]
            gate, up = gate_up[..., 0], gate_up[..., 1]
        else:
            gate = dense(x_BxTxD, self.gate[...].astype(dt))
            up = dense(x_BxTxD, self.up[...].astype(dt))
        gate = self._plus_adapter(gate, x_BxTxD, "gate")
        up = self._plus_adapter(up, x_BxTxD, "up")
        hidden = constrain(jax.nn.silu(gate) * up, ("batch", "act_len", "act_mlp"))
        return self._plus_adapter(dense(hidden, self.down[...].astype(dt)), hidden, "down")


class DecoderLayer(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.input_norm = RMSNorm(config, rngs=rngs)
        self.attention = Attention(config, rngs=rngs)
        self.post_attention_norm = RMSNorm(config, rngs=rngs)
        self.mlp = MLP(config, rngs=rngs)

    def __call__(self, x_BxTxD, frame: Frame, kv=None):
        attn, kv = self.attention(self.input_norm(x_BxTxD), frame, kv)
        x = x_BxTxD + attn
        x = x + self.mlp(self.post_attention_norm(x))
        return constrain(x, ("batch", "act_len", "act_embed")), kv


def _run_layer(layer: DecoderLayer, x, frame, kv):
    return layer(x, frame, kv)


def _run_layer_remat(layer: DecoderLayer, x, frame, kv):
    """`_run_layer` with its activations recomputed in the backward pass.

    A pure `jax.checkpoint` over the layer's state rather than `nnx.remat`: the layer is only
    read, never mutated, so nothing flows back into the module, and it works when the model was
    merged inside an outer JAX transform (the trainer's jit / grad / eval_shape), where
    `nnx.remat` fails with "Cannot mutate Param from a different trace level".
    """
    graphdef, state = nnx.split(layer)

    def pure(state, x, frame, kv):
        return _run_layer(nnx.merge(graphdef, state), x, frame, kv)

    return jax.checkpoint(pure)(state, x, frame, kv)


class Transformer(nnx.Module):
    """The whole model. `model(tokens)` gives logits; `forward_with_cache` drives decoding."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        # Parameters carry logical axis names only; tango_jax.models.sharding places them on a
        # mesh explicitly, so construction never needs an ambient mesh.
        with nnx.use_eager_sharding(False):
            self.config = config
            self.embed = _param(
                rngs, (config.vocab_size, config.embed_dim), ("vocab", "embed"), config.param_dtype
            )
            self.layers = nnx.List(
                [DecoderLayer(config, rngs=rngs) for _ in range(config.num_layers)]
            )
            self.final_norm = RMSNorm(config, rngs=rngs)
            if not config.tie_word_embeddings:
                self.lm_head = _param(
                    rngs,
                    (config.embed_dim, config.vocab_size),
                    ("embed", "vocab"),
                    config.param_dtype,
                )

    # -- pieces shared by the plain and the cached forward --

    def embed_tokens(self, tokens_BxT) -> jax.Array:
        return jnp.take(self.embed[...], tokens_BxT, axis=0).astype(self.config.dtype)

    def _trunk(self, x_BxTxD, frame: Frame, cache: KVCache | None):
        x = constrain(x_BxTxD, ("batch", "act_len", "act_embed"))
        if self.config.fused_rope:  # once for all layers (and outside their remat)
            tables = rope_tables(frame.positions, rope_inv_freq(self.config), x.dtype)
            frame = frame._replace(rope=tables)
        run = _run_layer_remat if self.config.remat else _run_layer
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            kv = None if cache is None else (cache.k[i], cache.v[i])
            x, kv = run(layer, x, frame, kv)
            if kv is not None:
                new_k.append(kv[0])
                new_v.append(kv[1])
        return self.final_norm(x), (tuple(new_k), tuple(new_v))

    def lm_head_weight(self) -> jax.Array:
        """The output projection [D, V] in compute dtype (the embedding, transposed, if tied)."""
        w = self.embed[...].T if self.config.tie_word_embeddings else self.lm_head[...]
        return w.astype(self.config.dtype)

    def logits_from_hidden(self, h_BxTxD: jax.Array) -> jax.Array:
        """Logits [B, T, V] in float32 from final hidden states."""
        logits = dense(h_BxTxD, self.lm_head_weight(), preferred_element_type=jnp.float32)
        return constrain(logits, ("batch", "act_len", "act_vocab"))

    # -- public API --

    def hidden_states(
        self, tokens_BxT, positions_BxT=None, attention_mask_BxT=None, *, embeddings_BxTxD=None
    ) -> jax.Array:
        """Final (normed) hidden states [B, T, D] of a full sequence, no cache.

        attention_mask_BxT marks real tokens (True) vs padding; positions default to the count
        of real tokens before each token, so left padding does not shift positions.
        `embeddings_BxTxD`, if given, replaces the token embeddings (tokens_BxT may be None).
        """
        if self.config.padding_as_lengths:
            return self._hidden_states_compacted(
                tokens_BxT, positions_BxT, attention_mask_BxT, embeddings_BxTxD
            )
        x = self.embed_tokens(tokens_BxT) if embeddings_BxTxD is None else embeddings_BxTxD
        valid = jnp.ones(x.shape[:2], bool) if attention_mask_BxT is None else attention_mask_BxT
        h, _ = self._trunk(x, Frame.full_sequence(valid, positions_BxT), None)
        return h

    def _hidden_states_compacted(self, tokens_BxT, positions_BxT, valid_BxT, embeddings_BxTxD):
        """`hidden_states` with each row's real tokens moved to the front first (and back at
        the end), so the padding reaches attention as lengths (ModelConfig.padding_as_lengths).
        The same numbers: causal order and positions (counted over real tokens) are kept."""
        b, t = (tokens_BxT if embeddings_BxTxD is None else embeddings_BxTxD).shape[:2]
        if valid_BxT is None:  # no padding: nothing to move
            order = inverse = None
            valid = jnp.ones((b, t), bool)
        else:
            order, inverse = compact_padding(valid_BxT)
            valid = jnp.take_along_axis(valid_BxT.astype(bool), order, axis=1)
            if positions_BxT is None:  # counted over the real tokens, as full_sequence does
                positions_BxT = jnp.maximum(jnp.cumsum(valid_BxT.astype(bool), axis=1) - 1, 0)
            positions_BxT = jnp.take_along_axis(positions_BxT, order, axis=1)
            if embeddings_BxTxD is None:
                tokens_BxT = jnp.take_along_axis(tokens_BxT, order, axis=1)
            else:
                embeddings_BxTxD = jnp.take_along_axis(embeddings_BxTxD, order[..., None], 1)
        x = self.embed_tokens(tokens_BxT) if embeddings_BxTxD is None else embeddings_BxTxD
        frame = Frame.full_sequence(valid, positions_BxT)
        frame = frame._replace(lengths=valid.sum(axis=1, dtype=jnp.int32))
        h, _ = self._trunk(x, frame, None)
        return h if inverse is None else jnp.take_along_axis(h, inverse[..., None], axis=1)

    def __call__(self, tokens_BxT, positions_BxT=None, attention_mask_BxT=None) -> jax.Array:
        """Logits [B, T, V] (float32) for token ids [B, T]."""
        return self.logits_from_hidden(
            self.hidden_states(tokens_BxT, positions_BxT, attention_mask_BxT)
        )

    def forward_with_cache(
        self,
        tokens_BxT,
        cache: KVCache,
        token_valid_BxT=None,
        *,
        span: int | None = None,
        last_only: bool = False,
    ):
        """Runs T new tokens per row through the model, appending them to `cache`.

        Prefill: a fresh cache and the (left- or right-) padded prompts, with `token_valid`
        marking real tokens. Decode: T = 1 per call. Returns (logits [B, T, V] f32, new cache).

        last_only (static): logits of the last column only ([B, 1, V]): what a left-padded
        prefill samples from. The full [B, T, V] float32 logits of a prefill are B·T·V·4 bytes
        (159 GB for 64 rows of 4096 tokens at a 152K vocabulary), which XLA keeps even when
        the caller reads one column.

        span (static): attention reads only cache slots 0..span-1 (the filled prefix) instead
        of all S slots; None reads all of them. The caller guarantees `index + T <= span`
        (the sampler's chunked decode does, see jax_sampler.decode_chunks): a slot beyond
        `span` would otherwise be silently ignored. The slots beyond the filled prefix are
        masked anyway, so the logits are the same up to float summation order.
        """
        b, t = tokens_BxT.shape
        new_valid = (
            jnp.ones((b, t), bool) if token_valid_BxT is None else token_valid_BxT.astype(bool)
        )
        positions = cache.lengths[:, None] + jnp.maximum(jnp.cumsum(new_valid, axis=1) - 1, 0)
        valid = jax.lax.dynamic_update_slice(cache.valid, new_valid, (0, cache.index))
        q_slots = cache.index + jnp.arange(t)
        k_slots = jnp.arange(cache.size if span is None else min(span, cache.size))
        read = valid if span is None or span >= cache.size else valid[:, :span]
        mask = read[:, None, :] & (k_slots[None, None, :] <= q_slots[None, :, None])  # [B, T, S]
        h, (k, v) = self._trunk(
            self.embed_tokens(tokens_BxT), Frame(positions, mask, cache.index), cache
        )
        new_cache = KVCache(
            k=k,
            v=v,
            valid=valid,
            lengths=cache.lengths + new_valid.sum(axis=1, dtype=jnp.int32),
            index=cache.index + t,
        )
        return self.logits_from_hidden(h[:, -1:] if last_only else h), new_cache
