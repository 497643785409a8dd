"""Sampler-vs-trainer log-prob drift of one rollout batch.

The sampler (vLLM, or the embedded JAX sampler) reports log q(t) of each token it generated;
the trainer recomputes log p(t) of the same tokens with its own model and numerics. With
synced weights p = q up to kernel and precision differences; the gap is what truncated
importance sampling corrects and what a stale or broken weight sync blows up, so the loop
logs these metrics for every rollout batch.

Shapes: B sequences, T token positions (padded); mask 1 on generated tokens, 0 on padding.
"""

from __future__ import annotations

import jax.numpy as jnp


def logprob_drift(
    sampler_logp_BxT, trainer_logp_BxT, mask_BxT, *, threshold: float = 0.2
) -> dict[str, jnp.ndarray]:
    """Drift metrics over the masked tokens (float32 scalars; all 0 for an empty mask).

    rollout/drift_mean_abs: mean |log p - log q|.
    rollout/drift_max_abs: max |log p - log q|.
    rollout/drift_k3_kl: k3 estimate of KL(q || p) = E_q[r - 1 - log r], r = p / q (the
      tokens were sampled from q, the sampler), >= 0 per token.
    rollout/drift_frac_above: fraction of tokens with |log p - log q| > `threshold` (0.2,
      about the PPO clip range: such tokens would have importance ratios near or outside it).
    rollout/drift_tokens: number of masked tokens.
    Padding may hold anything finite or not: it is masked out before any arithmetic.
    """
    mask = jnp.asarray(mask_BxT).astype(bool)
    log_ratio = jnp.where(
        mask,
        jnp.asarray(trainer_logp_BxT, jnp.float32) - jnp.asarray(sampler_logp_BxT, jnp.float32),
        0.0,
    )  # [B, T]
    count = mask.sum()
    denom = jnp.maximum(count, 1).astype(jnp.float32)
    abs_diff = jnp.abs(log_ratio)
    k3 = jnp.where(mask, jnp.expm1(log_ratio) - log_ratio, 0.0)
    return {
        "rollout/drift_mean_abs": abs_diff.sum() / denom,
        "rollout/drift_max_abs": abs_diff.max(initial=0.0),
        "rollout/drift_k3_kl": k3.sum() / denom,
        "rollout/drift_frac_above": (mask & (abs_diff > threshold)).sum() / denom,
        "rollout/drift_tokens": count.astype(jnp.float32),
    }
