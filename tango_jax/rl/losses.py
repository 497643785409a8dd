"""Policy-gradient loss pieces: PPO clip, KL estimators, entropy, token log-probs, aggregation.

Shapes: B sequences, T response length, D model dim, V vocab. Masks are [B, T] (bool or 0/1
float) and mark valid response tokens. Every function here is jittable (enum and float
arguments are static) and returns per-token [B, T] arrays; `aggregate` turns them into a
`(sum, count)` pair so that gradient accumulation can divide once by the global count:

    loss = sum over micro-batches of sums / sum over micro-batches of counts

The per-token loss of the official code (veRL's `dp_actor.py`) is

    pg_t - entropy_coef·H_t + kl_coef·KL_t        (see `total_loss_per_token`)

with the class weights of the verifier (if any) multiplying only the PPO term.
"""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp

from tango_jax.models.matmul import dense
from tango_jax.rl.vocab_blocks import blockwise_logprobs

# ----------------------------------------------------------------------------------------------
# PPO clipped surrogate.


class RatioLevel(enum.Enum):
    """Where the importance ratio ρ of the PPO surrogate lives."""

    # ρ_t = π(y_t)/π_old(y_t) per token (PPO, GRPO, DAPO).
    TOKEN = "token"
    # GSPO (Zheng et al. 2025, arXiv 2507.18071, Eq. 7): one ratio per sequence,
    # s = (π(y|x)/π_old(y|x))^(1/|y|) = exp(mean_t log ρ_t), clipped as a whole to
    # [1 - clip_low, 1 + clip_high]; its gradient is the sequence's mean token gradient times
    # s. The paper's clip ranges are ~1e-4 wide (3e-4 / 4e-4), not PPO's 0.2, and it averages
    # over sequences (`seq-mean-token-mean`).
    SEQUENCE = "sequence"


def ppo_policy_loss(
    logp_BxT: jax.Array,
    old_logp_BxT: jax.Array,
    advantages: jax.Array,
    mask_BxT: jax.Array,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    sample_weights_B: jax.Array | None = None,
    ratio_level: RatioLevel | str = "token",
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Per-token PPO loss `max(-A·ρ, -A·clip(ρ, 1 - clip_low, 1 + clip_high))`, ρ = exp(logp - old).

    `advantages` is [B, T] or [B] (broadcast over tokens). With `dual_clip = c > 1` the loss of
    tokens with A < 0 is further capped at `-A·c` (dual-clip PPO, Ye et al. 2020).
    `sample_weights_B` (>= 0, e.g. the verifier's class weights) multiplies each sequence's loss,
    which for positive weights equals the official code multiplying both clip branches.
    `ratio_level="sequence"` (GSPO) replaces each token's ρ by its sequence's
    `s = exp(mean over the valid tokens of (logp - old))` (see `RatioLevel`), clipped the same
    way, so every token of a sequence carries the same loss value.

    Returns (loss_BxT, stats) with 0 at masked-out tokens. stats, all [B, T] float32 (aggregate
    them with the same mask): `ratio` ρ; `clipfrac` 1 where the clipped branch is the larger
    (the official `pg_clipfrac`); `dual_clipfrac` 1 where the dual clip binds; `ppo_kl`
    old - new log-prob (the official `ppo_kl`).
    """
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ValueError(
            f"clip_low ({clip_low}) must be in [0, 1) and clip_high ({clip_high}) >= 0."
        )
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip ({dual_clip}) must be > 1 (typically 3), or None to disable.")
    m = mask_BxT.astype(bool)
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    # where() before exp: garbage log-probs at padding must not overflow into NaN gradients.
    log_ratio = jnp.where(m, logp_BxT - old_logp_BxT, 0.0)
    if RatioLevel(ratio_level) is RatioLevel.SEQUENCE:
        tokens_Bx1 = m.sum(axis=1, keepdims=True)
        log_ratio = jnp.broadcast_to(
            log_ratio.sum(axis=1, keepdims=True) / jnp.maximum(tokens_Bx1, 1), log_ratio.shape
        )
    ratio = jnp.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = jnp.maximum(loss_unclipped, loss_clipped)
    clipfrac = loss_clipped > loss_unclipped
    dual_clipfrac = jnp.zeros_like(clipfrac)
    if dual_clip is not None:
        loss_cap = -adv * dual_clip
        dual_clipfrac = (adv < 0) & (loss > loss_cap)
        loss = jnp.where(adv < 0, jnp.minimum(loss, loss_cap), loss)
    if sample_weights_B is not None:
        loss = loss * sample_weights_B[:, None]

    def masked(x):
        return jnp.where(m, x, 0.0).astype(jnp.float32)

    stats = {
        "ratio": masked(ratio),
        "clipfrac": masked(clipfrac),
        "dual_clipfrac": masked(dual_clipfrac),
        "ppo_kl": masked(-log_ratio),
    }
    return masked(loss), stats


# ----------------------------------------------------------------------------------------------
# KL to the reference policy and the total per-token loss.


class KLEstimator(enum.Enum):
    """Per-token estimators of KL(π || π_ref) from samples of π (Schulman, "Approximating KL
    divergence", 2020), as in veRL's `kl_penalty`; x = logp - ref_logp."""

    K1 = "kl"  # x
    ABS = "abs"  # |x|
    K2 = "mse"  # x² / 2 (the REINFORCE++ runs)
    K3 = "low_var_kl"  # exp(-x) + x - 1, clamped to [-10, 10] (the GRPO/RLOO runs)


def kl_estimate(
    logp_BxT: jax.Array, ref_logp_BxT: jax.Array, kind: KLEstimator | str = KLEstimator.K3
) -> jax.Array:
    """Per-token KL estimate of the policy against the reference. [B, T] x2 -> [B, T].

    Not masked: aggregate it with the response mask. Inputs must be finite at padding too.
    """
    kind = KLEstimator(kind)
    x = logp_BxT - ref_logp_BxT
    if kind is KLEstimator.K1:
        return x
    if kind is KLEstimator.ABS:
        return jnp.abs(x)
    if kind is KLEstimator.K2:
        return 0.5 * jnp.square(x)
    # k3 >= 10 (the official clamp) already for x < -2.4 or x > 11; clipping x to [-20, 20]
    # first changes no value, but keeps exp finite so the clamped region's zero gradient is
    # not 0 * inf = NaN (|x| > ~88 at a padding position would otherwise poison the step).
    x = jnp.clip(x, -20.0, 20.0)
    return jnp.clip(jnp.exp(-x) + x - 1.0, -10.0, 10.0)


def total_loss_per_token(
    pg_loss_BxT: jax.Array,
    *,
    entropy_BxT: jax.Array | None = None,
    entropy_coef: float = 0.0,
    kl_BxT: jax.Array | None = None,
    kl_coef: float = 0.0,
) -> jax.Array:
    """`pg - entropy_coef·H + kl_coef·KL` per token (the entropy is a bonus). [B, T] -> [B, T].

    Every term shares one mask, so aggregating this sum equals the official sum of three masked
    means (in every aggregation mode, all of which are linear in the values).
    """
    loss = pg_loss_BxT
    if entropy_BxT is not None and entropy_coef:
        loss = loss - entropy_coef * entropy_BxT
    if kl_BxT is not None and kl_coef:
        loss = loss + kl_coef * kl_BxT
    return loss


# ----------------------------------------------------------------------------------------------
# Aggregation over tokens, exact under micro-batching.


class LossAggMode(enum.Enum):
    # Global token mean over the mini-batch: Σ_tokens / #tokens (tango_jax's default).
    TOKEN_MEAN = "token-mean"
    # Mean over sequences of each sequence's token mean (sequences with no valid token skipped).
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    # Mean over micro-batches of each micro-batch's token mean: the official code, whose loss
    # therefore depends on the micro-batch size.
    MICROBATCH_TOKEN_MEAN = "microbatch-token-mean"
    # Dr. GRPO (Liu et al. 2025, arXiv 2503.20783, Sec. 3.1): Σ_tokens / (#sequences · L) with a
    # constant L (the generation budget, max_tokens), so no sequence's tokens weigh more for
    # being in a short response and the loss does not depend on the lengths in the batch.
    CONSTANT_NORM = "constant-norm"


def aggregate(
    values_BxT: jax.Array,
    mask_BxT: jax.Array,
    mode: LossAggMode | str = LossAggMode.TOKEN_MEAN,
    norm_tokens: int = 0,
) -> tuple[jax.Array, jax.Array]:
    """(sum, count) of one micro-batch such that Σ sums / Σ counts over micro-batches is the
    mode's mean over the whole mini-batch. [B, T] x2 -> two float32 scalars.

    token-mean: (Σ masked values, #valid tokens). seq-mean-token-mean: (Σ over sequences of
    their token means, #sequences with a valid token). microbatch-token-mean: (this
    micro-batch's token mean, 1); an empty micro-batch gives (0, 1), where the official code
    would produce NaN. constant-norm: (Σ masked values, B · `norm_tokens`), every row counted,
    empty or not (`norm_tokens` >= 1 is Dr. GRPO's constant L; only this mode reads it).
    """
    mode = LossAggMode(mode)
    m = mask_BxT.astype(bool)
    masked = jnp.where(m, values_BxT, 0.0).astype(jnp.float32)
    tokens_B = m.sum(axis=1).astype(jnp.float32)
    if mode is LossAggMode.TOKEN_MEAN:
        return masked.sum(), tokens_B.sum()
    if mode is LossAggMode.CONSTANT_NORM:
        if norm_tokens < 1:
            raise ValueError(
                f"`norm_tokens` ({norm_tokens}) must be >= 1 for constant-norm aggregation: "
                "Dr. GRPO's constant, the generation budget (max_tokens)."
            )
        return masked.sum(), jnp.asarray(m.shape[0] * norm_tokens, jnp.float32)
    if mode is LossAggMode.SEQ_MEAN_TOKEN_MEAN:
        seq_means_B = masked.sum(axis=1) / jnp.maximum(tokens_B, 1.0)
        return seq_means_B.sum(), (tokens_B > 0).sum().astype(jnp.float32)
    return masked.sum() / jnp.maximum(tokens_B.sum(), 1.0), jnp.ones((), jnp.float32)


# ----------------------------------------------------------------------------------------------
# Token log-probabilities and entropy without [B, T, V] logits.


def entropy_from_logits(logits: jax.Array) -> jax.Array:
    """Entropy of softmax(z) over the last axis: `logsumexp(z) - Σ softmax(z)·z`.

    [..., V] -> float32 [...].
    """
    logits = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    return lse - jnp.sum(jax.nn.softmax(logits, axis=-1) * logits, axis=-1)


@jax.custom_vjp
def head_logits(h_BxCxD: jax.Array, w_DxV: jax.Array) -> jax.Array:
    """h @ w [B, C, V], accumulated and returned in float32.

    The backward rounds the float32 cotangent to the operands' dtype before its two matmuls
    (dh = g @ wᵀ, dw = hᵀ @ g, both accumulated in float32), so with bf16 operands they run on
    the bf16 matrix units, as every other matmul of a mixed-precision step does; left to
    autodiff, the float32 cotangent promoted both to float32 (TF32 on GPUs, a measurable share
    of a GPU step: docs/benchmarks.md, "On one GPU"). With float32 operands nothing is rounded.
    """
    return dense(h_BxCxD, w_DxV, preferred_element_type=jnp.float32)


def _head_logits_fwd(h_BxCxD, w_DxV):
    return head_logits(h_BxCxD, w_DxV), (h_BxCxD, w_DxV)


def _head_logits_bwd(residuals, g_BxCxV):
    h_BxCxD, w_DxV = residuals
    g_BxCxV = g_BxCxV.astype(jnp.promote_types(h_BxCxD.dtype, w_DxV.dtype))
    f32 = jnp.float32
    g_NxV = g_BxCxV.reshape(-1, g_BxCxV.shape[-1])  # token axes flattened, as in `dense`
    h_NxD = h_BxCxD.reshape(-1, h_BxCxD.shape[-1])
    dh = jax.lax.dot_general(g_NxV, w_DxV, (((1,), (1,)), ((), ())), preferred_element_type=f32)
    dw = jax.lax.dot_general(h_NxD, g_NxV, (((0,), (0,)), ((), ())), preferred_element_type=f32)
    return dh.reshape(h_BxCxD.shape).astype(h_BxCxD.dtype), dw.astype(w_DxV.dtype)


head_logits.defvjp(_head_logits_fwd, _head_logits_bwd)


def token_logprobs(
    hidden_BxTxD: jax.Array,
    lm_head_DxV: jax.Array,
    targets_BxT: jax.Array,
    *,
    temperature: float = 1.0,
    chunk_size: int = 256,
    with_entropy: bool = False,
    vocab_block: int = 0,
) -> tuple[jax.Array, jax.Array | None]:
    """log softmax(hidden @ lm_head / temperature)[target], and optionally the entropy.

    [B, T, D], [D, V], int [B, T] -> float32 [B, T], float32 [B, T] | None.

    Sequences of up to `chunk_size` positions make all their logits at once, without remat
    (recomputing them would cost one more [B·T, D] x [D, V] matmul and save no peak memory).
    Longer ones make them `chunk_size` positions at a time (a `lax.map` over chunks of T, the
    last one zero-padded), in float32 (bf16 inputs accumulate in float32), and the per-chunk
    function is rematerialised (`jax.checkpoint`), so neither pass holds more than
    [B, chunk_size, V] logits. The gradient's scratch memory does not grow with T: about two
    float32 chunks of logits (2·B·chunk_size·V·4 bytes) plus float32 [D, V] buffers for the
    lm_head gradient (two in XLA's CPU plan). For B=4, T=2048, D=3584, V=152064 in bf16 with
    chunk 256 that plan is 5.4 GiB, against 16 GiB with full logits. Values and gradients equal
    the full-logits computation. The temperature scaling matches the sampler (the official code
    divides the training logits by the rollout temperature too).

    `vocab_block` > 0 (and < V): each chunk's logits are made `vocab_block` vocabulary columns
    at a time with an online log-sum-exp and a custom backward (`rl.vocab_blocks`), so no
    float32 [B, chunk, V] buffer exists at all; 0 makes the whole vocabulary at once. Same
    values and gradients up to float rounding.
    """
    if isinstance(temperature, int | float) and temperature <= 0:
        raise ValueError(f"`temperature` ({temperature}) must be > 0 to scale logits.")
    if chunk_size < 1:
        raise ValueError(f"`chunk_size` ({chunk_size}) must be >= 1.")
    if vocab_block < 0:
        raise ValueError(f"`vocab_block` ({vocab_block}) must be >= 0 (0: the whole vocabulary).")
    b, t, d = hidden_BxTxD.shape
    chunk = min(chunk_size, t)
    num_chunks = -(-t // chunk)
    pad = num_chunks * chunk - t
    hidden = jnp.pad(hidden_BxTxD, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets_BxT.astype(jnp.int32), ((0, 0), (0, pad)))
    hidden_NxBxCxD = hidden.reshape(b, num_chunks, chunk, d).transpose(1, 0, 2, 3)
    targets_NxBxC = targets.reshape(b, num_chunks, chunk).transpose(1, 0, 2)

    def one_chunk(lm_head, h_BxCxD, y_BxC):
        if 0 < vocab_block < lm_head.shape[1]:
            return blockwise_logprobs(
                h_BxCxD,
                lm_head,
                y_BxC,
                jnp.asarray(temperature, jnp.float32),
                vocab_block,
                with_entropy,
            )
        logits_BxCxV = head_logits(h_BxCxD, lm_head) / temperature
        lse_BxC = jax.nn.logsumexp(logits_BxCxV, axis=-1)
        target_BxC = jnp.take_along_axis(logits_BxCxV, y_BxC[..., None], axis=-1)[..., 0]
        logp_BxC = target_BxC - lse_BxC
        if not with_entropy:
            return logp_BxC, None
        probs = jnp.exp(logits_BxCxV - lse_BxC[..., None])
        return logp_BxC, lse_BxC - jnp.sum(probs * logits_BxCxV, axis=-1)

    if t <= chunk_size:  # one chunk: no map, no remat (see the docstring)
        return one_chunk(lm_head_DxV, hidden_BxTxD, targets_BxT.astype(jnp.int32))
    logp_NxBxC, ent_NxBxC = jax.lax.map(
        lambda xs: jax.checkpoint(one_chunk)(lm_head_DxV, *xs), (hidden_NxBxCxD, targets_NxBxC)
    )

    def unchunk(x_NxBxC):
        return x_NxBxC.transpose(1, 0, 2).reshape(b, num_chunks * chunk)[:, :t]  # [B, T]

    return unchunk(logp_NxBxC), (unchunk(ent_NxBxC) if with_entropy else None)
