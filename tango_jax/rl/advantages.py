"""Outcome advantage estimators: GRPO, RLOO and REINFORCE++, behind one table.

Shapes: B sequences (responses), T response length, G group size, P = B // G groups.
Groups are contiguous rows: rows [g*G, (g+1)*G) are the G responses to prompt g.
`response_mask_BxT` marks valid response tokens and is a prefix of each row (right padding).

What each function returns, and why:

* GRPO and RLOO outcome advantages are one scalar per sequence, `[B]`. With γ = 1 the official
  code's "reward on the last token, reverse cumsum" gives exactly that scalar on every valid
  token, so `broadcast_to_tokens` is all the trainer needs.
* REINFORCE++ whitens over all valid *tokens* of the batch (a long response weighs more in the
  batch mean), so it needs the response mask and returns `[B, T]`.
* `outcome_advantages(rewards, mask, group_size, options)` runs the estimator an
  `AdvantageOptions` names, with the options it uses, and always returns `[B, T]`.

All array functions are jittable (`group_size` and `eps` are static Python values) and return
float32; the trainer calls them once per step on small arrays. γ = 1 throughout (the official
configuration); discounting is not supported. The group statistics, whitening and reverse
cumulative sum are public: Tango's step (process) advantages in `tango/process_advantages.py`
are built from them.

Official code: `verl/trainer/ppo/core_algos.py` of github.com/kaiwenzha/RL-Tango
(TANGO_SPEC.md §2.3-2.4, §10.11-10.13).
"""

from __future__ import annotations

import dataclasses
import enum
import functools

import jax
import jax.numpy as jnp

# masked_whiten's variance floor in the official code: (x - mean) * rsqrt(var + 1e-8).
_WHITEN_EPS = 1e-8


# ----------------------------------------------------------------------------------------------
# Shared pieces.


def check_groups(batch_size: int, group_size: int) -> int:
    """Returns the number of groups P; raises if B is not a multiple of G."""
    if group_size < 1:
        raise ValueError(f"`group_size` ({group_size}) must be >= 1.")
    if batch_size % group_size:
        raise ValueError(
            f"the batch size ({batch_size}) must be divisible by `group_size` ({group_size}): "
            "groups are contiguous rows, so pass whole groups."
        )
    return batch_size // group_size


def broadcast_to_tokens(a_B: jax.Array, response_mask_BxT: jax.Array) -> jax.Array:
    """Places a per-sequence advantage on every valid token: [B], [B, T] -> [B, T]."""
    return jnp.where(response_mask_BxT.astype(bool), a_B[:, None], 0.0).astype(jnp.float32)


def reverse_cumsum(x: jax.Array) -> jax.Array:
    """`out[..., t] = sum_{s >= t} x[..., s]` (undiscounted return-to-go over the last axis)."""
    return jax.lax.cumsum(x, axis=x.ndim - 1, reverse=True)


def group_stats(x_PxN: jax.Array, m_PxN: jax.Array):
    """Masked mean and unbiased std per row of [P, N], computed on values shifted by the row max.

    The shift makes the result exact when all values are equal (deviations 0, std 0), where
    float32 rounding of a plain mean of e.g. 1.8 or 1/3 would leave a ~1e-8 residue that
    `/ (std + 1e-6)` blows up to ~1e-2. Mathematically it changes nothing.
    Returns (d_PxN, mean_P, std_P, n_P) where d = (x - shift) on masked entries, 0 elsewhere.
    """
    n_P = m_PxN.sum(axis=1)
    shift_P = jnp.max(jnp.where(m_PxN, x_PxN, -jnp.inf), axis=1)
    shift_P = jnp.where(n_P > 0, shift_P, 0.0)
    d_PxN = jnp.where(m_PxN, x_PxN - shift_P[:, None], 0.0)
    mean_P = d_PxN.sum(axis=1) / jnp.maximum(n_P, 1)
    var_P = jnp.where(m_PxN, (d_PxN - mean_P[:, None]) ** 2, 0.0).sum(axis=1)
    std_P = jnp.sqrt(var_P / jnp.maximum(n_P - 1, 1))
    return d_PxN, mean_P, std_P, n_P


def _group_deviations(rewards_B: jax.Array, group_size: int):
    """`r - mean_g` and the group's unbiased std: [B] -> [P, G], [P] (group_size > 1)."""
    num_groups = check_groups(rewards_B.shape[0], group_size)
    r_PxG = rewards_B.reshape(num_groups, group_size)  # [P, G]
    d_PxG, mean_P, std_P, _ = group_stats(r_PxG, jnp.ones_like(r_PxG, dtype=bool))
    return d_PxG - mean_P[:, None], std_P


def masked_whiten(x_BxT: jax.Array, mask_BxT: jax.Array) -> jax.Array:
    """`(x - mean) * rsqrt(var + 1e-8)` over all masked entries, 0 elsewhere: [B, T] -> [B, T].

    As veRL's `masked_whiten` (unbiased variance). veRL raises when fewer than two entries are
    masked; here the Bessel factor is n / max(n - 1, 1) and an empty mask gives zeros. Like the
    group statistics, it works on max-shifted values so that constant inputs give exactly 0.
    """
    m_1xN = mask_BxT.reshape(1, -1).astype(bool)
    d_1xN, mean_1, std_1, _ = group_stats(x_BxT.reshape(1, -1), m_1xN)
    white = (d_1xN - mean_1[:, None]) * jax.lax.rsqrt(std_1[:, None] ** 2 + _WHITEN_EPS)
    return jnp.where(mask_BxT.astype(bool), white.reshape(x_BxT.shape), 0.0)


# ----------------------------------------------------------------------------------------------
# Outcome advantages.


class AdvantageScaling(enum.Enum):
    """What GRPO divides `r - mean_g` by."""

    GROUP = "group"  # the group's std (GRPO, Shao et al. 2024, arXiv 2402.03300)
    # The std of every reward in the batch (Hu et al. 2025, REINFORCE++'s and Liu et al.'s
    # robust alternative: a group of near-equal rewards is not blown up to unit scale)
    BATCH = "batch"
    # Nothing (Dr. GRPO, Liu et al. 2025, arXiv 2503.20783, Sec. 3.1: the std division
    # up-weights groups of too easy or too hard questions)
    NONE = "none"


@functools.partial(jax.jit, static_argnames=("group_size", "eps", "scaling"))
def grpo_outcome_advantages(
    rewards_B: jax.Array,
    group_size: int,
    eps: float = 1e-6,
    scaling: AdvantageScaling = AdvantageScaling.GROUP,
) -> jax.Array:
    """GRPO group z-score: `(r - mean_g) / (std_g + eps)`, unbiased std. [B] -> [B].

    A group of one uses mean 0 and std 1 (the official convention), so its advantage is
    `r / (1 + eps)`. All-equal rewards in a group give exactly 0. `scaling` batch divides by
    `std_batch + eps` instead (the unbiased std of all B rewards; a group of one still has mean
    0), none by nothing (a group of one then gets r).
    """
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    check_groups(rewards_B.shape[0], group_size)
    scaling = AdvantageScaling(scaling)
    if scaling is AdvantageScaling.GROUP:
        if group_size == 1:
            return rewards_B / (1.0 + eps)
        dev_PxG, std_P = _group_deviations(rewards_B, group_size)
        return (dev_PxG / (std_P[:, None] + eps)).reshape(-1)
    dev_B = rewards_B if group_size == 1 else _group_deviations(rewards_B, group_size)[0]
    dev_B = dev_B.reshape(-1)
    if scaling is AdvantageScaling.NONE:
        return dev_B
    _, _, std_1, _ = group_stats(rewards_B[None, :], jnp.ones((1, rewards_B.shape[0]), bool))
    return dev_B / (std_1[0] + eps)


@functools.partial(jax.jit, static_argnames=("group_size",))
def rloo_outcome_advantages(rewards_B: jax.Array, group_size: int) -> jax.Array:
    """RLOO leave-one-out baseline: `r_i - mean_{j != i} r_j = G/(G-1)·(r_i - mean_g)`. [B] -> [B].

    No std normalisation. A group of one gets 0 (as the official Tango branch
    `compute_rloo_advantage`; veRL's outcome-only RLOO would return r unchanged).
    """
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    check_groups(rewards_B.shape[0], group_size)
    if group_size == 1:
        return jnp.zeros_like(rewards_B)
    dev_PxG, _ = _group_deviations(rewards_B, group_size)
    return (group_size / (group_size - 1) * dev_PxG).reshape(-1)


@functools.partial(jax.jit, static_argnames=("group_size",))
def reinforce_pp_outcome_advantages(
    rewards_B: jax.Array, response_mask_BxT: jax.Array, group_size: int | None = None
) -> jax.Array:
    """REINFORCE++: the return (= r with γ = 1) on every valid token, whitened over all valid
    tokens of the batch. [B], [B, T] -> [B, T].

    `group_size=None` is the official Tango code (no baseline). With `group_size` set, each
    reward first has its group mean subtracted (REINFORCE++-baseline, as later veRL versions;
    a group of one subtracts 0), then the batch whitening follows.
    """
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    if group_size is not None:
        check_groups(rewards_B.shape[0], group_size)
        if group_size > 1:
            rewards_B = _group_deviations(rewards_B, group_size)[0].reshape(-1)
    return masked_whiten(broadcast_to_tokens(rewards_B, response_mask_BxT), response_mask_BxT)


# ----------------------------------------------------------------------------------------------
# The estimator and its options -> outcome advantage on tokens.


class AdvantageEstimator(enum.Enum):
    GRPO = "grpo"
    RLOO = "rloo"
    REINFORCE_PP = "reinforce_plus_plus"


@dataclasses.dataclass(frozen=True)
class AdvantageOptions:
    """How advantages are estimated: the estimator and its options, built once from the run's
    `algorithm` config (`AlgorithmConfig.advantage_options`). Each estimator reads only its
    own options: GRPO `eps` and `scaling`, REINFORCE++ `reinforce_pp_baseline`, and Tango's RLOO
    step term `rloo_step_scale` (tango/process_advantages.py)."""

    estimator: AdvantageEstimator = AdvantageEstimator.GRPO
    eps: float = 1e-6  # GRPO's std floor
    scaling: AdvantageScaling = AdvantageScaling.GROUP  # what GRPO divides r - mean by
    reinforce_pp_baseline: bool = False  # subtract the group mean before the batch whitening
    rloo_step_scale: float = 10.0  # the official x10 on RLOO's step advantage

    def __post_init__(self):
        object.__setattr__(self, "estimator", AdvantageEstimator(self.estimator))
        object.__setattr__(self, "scaling", AdvantageScaling(self.scaling))


def outcome_advantages(
    rewards_B: jax.Array,
    response_mask_BxT: jax.Array,
    group_size: int,
    options: AdvantageOptions,
) -> jax.Array:
    """The outcome advantage of `options.estimator` on every valid token: [B], [B, T] -> [B, T]."""
    o = options
    if o.estimator is AdvantageEstimator.GRPO:
        a_B = grpo_outcome_advantages(rewards_B, group_size, o.eps, o.scaling)
        return broadcast_to_tokens(a_B, response_mask_BxT)
    if o.estimator is AdvantageEstimator.RLOO:
        a_B = rloo_outcome_advantages(rewards_B, group_size)
        return broadcast_to_tokens(a_B, response_mask_BxT)
    baseline = group_size if o.reinforce_pp_baseline else None
    return reinforce_pp_outcome_advantages(rewards_B, response_mask_BxT, baseline)
