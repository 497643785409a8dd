"""Token log-probs and entropy over the vocabulary in blocks: no [B, C, V] float32 logits.

    logp_BxC, ent_BxC = blockwise_logprobs(h_BxCxD, w_DxV, y_BxC, temperature, block=16384,
                                           with_entropy=True)

Shapes: B rows, C positions (one chunk of the sequence), D model dim, V vocab, U = `block`
vocabulary columns, M = ceil(V / U) blocks.

The forward makes the logits U columns at a time (`h @ w[:, block]`, accumulated in float32)
and keeps an online log-sum-exp: the running maximum m, s1 = Σ exp(z - m) and, for the
entropy, s2 = Σ exp(z - m)·z, rescaled whenever m grows (the streaming softmax of flash
attention). The target's logit is picked up in the block that holds it. Only [B, C] vectors
cross blocks, so the largest float32 buffer is [B, C, U], not [B, C, V] (152k columns for
Qwen2.5: a 2 x 256 chunk of float32 logits is 311 MB, a 16k block 34 MB).

The backward (`jax.custom_vjp`) recomputes each block's logits from h and w and the saved
[B, C] log-sum-exp and mean logit E[z] = lse - H, and forms the logits' cotangent directly,

    dz_j = g_logp·(1[j = y] - p_j) - g_ent·p_j·(z_j - E[z]),     p_j = exp(z_j - lse),

rounded to the operands' dtype (as `losses.head_logits` does, so bf16 models run the two
backward matmuls on bf16 units), then dh += dz @ w_blockᵀ and dw_block = hᵀ @ dz, both
accumulated in float32. Values and gradients equal `losses.token_logprobs`'s whole-vocabulary
path up to float rounding (tests/rl/test_vocab_blocks.py); the order of the float32 sums
differs, so results are not bit-identical.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from tango_jax.models.matmul import dense

f32 = jnp.float32


def _blocks(w_DxV: jax.Array, block: int) -> jax.Array:
    """[D, V] -> [M, D, U], the last block zero-padded (its pad columns are masked out)."""
    d, v = w_DxV.shape
    m = -(-v // block)
    w = jnp.pad(w_DxV, ((0, 0), (0, m * block - v)))
    return w.reshape(d, m, block).transpose(1, 0, 2)  # [M, D, U]


def _block_logits(h_BxCxD, w_DxU, j, block: int, vocab: int, temperature):
    """float32 logits of block j / temperature [B, C, U], -inf at the padding columns."""
    z = dense(h_BxCxD, w_DxU, preferred_element_type=f32) / temperature
    cols_U = j * block + jnp.arange(block)
    return jnp.where(cols_U < vocab, z, -jnp.inf), cols_U


def _forward(h_BxCxD, w_DxV, y_BxC, temperature, block: int):
    b, c, _ = h_BxCxD.shape
    vocab = w_DxV.shape[1]
    blocks = _blocks(w_DxV, block)

    def step(carry, xs):
        m_BxC, s1_BxC, s2_BxC, target_BxC = carry
        j, w_DxU = xs
        z, cols_U = _block_logits(h_BxCxD, w_DxU, j, block, vocab, temperature)
        new_m = jnp.maximum(m_BxC, z.max(axis=-1))
        scale = jnp.exp(m_BxC - new_m)  # m starts at -inf: exp(-inf) = 0, nothing to rescale
        e = jnp.exp(z - new_m[..., None])
        zf = jnp.where(jnp.isfinite(z), z, 0.0)  # 0 · -inf would be NaN at the padding
        s1_BxC = s1_BxC * scale + e.sum(axis=-1)
        s2_BxC = s2_BxC * scale + (e * zf).sum(axis=-1)
        hit = cols_U == y_BxC[..., None]  # [B, C, U]
        target_BxC = target_BxC + jnp.sum(jnp.where(hit, zf, 0.0), axis=-1)
        return (new_m, s1_BxC, s2_BxC, target_BxC), None

    init = (jnp.full((b, c), -jnp.inf, f32), *(jnp.zeros((b, c), f32) for _ in range(3)))
    (m, s1, s2, target), _ = jax.lax.scan(step, init, (jnp.arange(blocks.shape[0]), blocks))
    lse = m + jnp.log(s1)
    mean_z = s2 / s1  # E_p[z]
    return target - lse, lse - mean_z, lse, mean_z


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def blockwise_logprobs(h_BxCxD, w_DxV, y_BxC, temperature, block: int, with_entropy: bool):
    """log softmax(h @ w / temperature)[y] and its entropy, `block` vocabulary columns at a time.

    [B, C, D], [D, V], int [B, C], float scalar -> float32 [B, C], float32 [B, C] | None.
    `temperature` gets no gradient.
    """
    logp, ent, _, _ = _forward(h_BxCxD, w_DxV, y_BxC, temperature, block)
    return logp, (ent if with_entropy else None)


def _fwd(h_BxCxD, w_DxV, y_BxC, temperature, block, with_entropy):
    logp, ent, lse, mean_z = _forward(h_BxCxD, w_DxV, y_BxC, temperature, block)
    out = (logp, ent if with_entropy else None)
    return out, (h_BxCxD, w_DxV, y_BxC, temperature, lse, mean_z)


def _bwd(block, with_entropy, residuals, cotangents):
    h_BxCxD, w_DxV, y_BxC, temperature, lse_BxC, mean_z_BxC = residuals
    g_logp_BxC, g_ent_BxC = cotangents
    vocab = w_DxV.shape[1]
    dtype = jnp.promote_types(h_BxCxD.dtype, w_DxV.dtype)
    blocks = _blocks(w_DxV, block)

    def step(dh_BxCxD, xs):
        j, w_DxU = xs
        z, cols_U = _block_logits(h_BxCxD, w_DxU, j, block, vocab, temperature)
        p = jnp.exp(z - lse_BxC[..., None])  # 0 at the padding columns
        dz = g_logp_BxC[..., None] * ((cols_U == y_BxC[..., None]) - p)
        if with_entropy:
            zf = jnp.where(jnp.isfinite(z), z, 0.0)
            dz = dz - g_ent_BxC[..., None] * p * (zf - mean_z_BxC[..., None])
        dz = (dz / temperature).astype(dtype)  # d(h @ w) = dz / temperature
        dz_NxU = dz.reshape(-1, block)  # token axes flattened, as in `dense`
        h_NxD = h_BxCxD.reshape(-1, h_BxCxD.shape[-1])
        dh_NxD = jax.lax.dot_general(
            dz_NxU, w_DxU, (((1,), (1,)), ((), ())), preferred_element_type=f32
        )
        dw_DxU = jax.lax.dot_general(
            h_NxD, dz_NxU, (((0,), (0,)), ((), ())), preferred_element_type=f32
        )
        return dh_BxCxD + dh_NxD.reshape(dh_BxCxD.shape), dw_DxU.astype(w_DxV.dtype)

    dh, dw_MxDxU = jax.lax.scan(
        step, jnp.zeros(h_BxCxD.shape, f32), (jnp.arange(blocks.shape[0]), blocks)
    )
    d = w_DxV.shape[0]
    dw = dw_MxDxU.transpose(1, 0, 2).reshape(d, -1)[:, :vocab]  # [D, V]
    return dh.astype(h_BxCxD.dtype), dw, None, jnp.zeros_like(temperature)


blockwise_logprobs.defvjp(_fwd, _bwd)
