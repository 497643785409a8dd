"""Tango's step (process) advantages, their blend with the outcome advantage, and the α schedule.

Shapes: B sequences (responses), T response length, G group size, P = B // G groups,
NV verifier samples per response. Groups are contiguous rows (as in `rl/advantages.py`);
`response_mask_BxT` is a prefix of each row, and step masks must lie inside it (anything
outside is ignored). Step advantages vary along the sequence and are `[B, T]`.

The verifier's step judgments give step rewards ±1/K at step-end tokens (`[B, NV, T]`); each
estimator turns them into a step advantage (`step_advantages`, for the estimator an
`AdvantageOptions` names, as the outcome advantage), and `blended_advantages` weights and sums the
outcome and step terms with the weights of the α schedule (paper Eq. 7,
`(1 - α)·A_out + α·A_step`). The α schedule runs on the host in plain Python.

Official code: `verl/trainer/ppo/core_algos.py` and `rl_tango_trainer.py` of
github.com/kaiwenzha/RL-Tango (TANGO_SPEC.md §2.3-2.4, §3.4, §10.11-10.13). Deviations (§11):
the blend always applies `(1 - α)` (also when no response has step rewards), and REINFORCE++'s
step returns are a true reverse cumulative sum over tokens (the official loop runs over the
wrong axis and makes them zero).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math

import jax
import jax.numpy as jnp

from tango_jax.rl.advantages import (
    AdvantageEstimator,
    AdvantageOptions,
    check_groups,
    group_stats,
    masked_whiten,
    outcome_advantages,
    reverse_cumsum,
)

# ----------------------------------------------------------------------------------------------
# Step (process) advantages from the verifier's step judgments.


def _step_inputs(step_rewards_BxNxT, step_mask_BxNxT, response_mask_BxT):
    """float32 rewards [B, NV, T] and a bool step mask restricted to valid response tokens."""
    if step_rewards_BxNxT.ndim != 3 or step_rewards_BxNxT.shape != step_mask_BxNxT.shape:
        raise ValueError(
            f"step rewards {step_rewards_BxNxT.shape} and step mask {step_mask_BxNxT.shape} "
            "must both be [B, NV, T]; add an NV axis of 1 for a single verifier sample."
        )
    m = step_mask_BxNxT.astype(bool) & response_mask_BxT.astype(bool)[:, None, :]
    return jnp.asarray(step_rewards_BxNxT, jnp.float32), m


def _pooled_by_group(step_rewards_BxNxT, step_mask_BxNxT, response_mask_BxT, group_size):
    """Each group's step rewards and mask as one row: -> [P, G*NV*T] x2."""
    r, m = _step_inputs(step_rewards_BxNxT, step_mask_BxNxT, response_mask_BxT)
    num_groups = check_groups(r.shape[0], group_size)
    return r.reshape(num_groups, -1), m.reshape(num_groups, -1)  # [P, G*NV*T]


@functools.partial(jax.jit, static_argnames=("group_size", "eps"))
def grpo_step_advantages(
    step_rewards_BxNxT: jax.Array,
    step_mask_BxNxT: jax.Array,
    response_mask_BxT: jax.Array,
    group_size: int,
    eps: float = 1e-6,
) -> jax.Array:
    """Tango's GRPO step advantage (paper Eqs. 5-6). [B, NV, T] x2, [B, T] -> [B, T].

    1. Mean and unbiased std of all step rewards in the group (all responses, all verifier
       samples, all step ends); mean 0 and std 1 when the group has at most one.
    2. `r~ = (r - mean) / (std + eps)` at step ends, 0 elsewhere.
    3. Reverse cumulative sum over tokens, then the mean over the NV verifier samples.
    Tokens after a response's last step end, and responses without step rewards, get 0;
    all-equal step rewards in a group give 0.
    """
    r_PxN, m_PxN = _pooled_by_group(
        step_rewards_BxNxT, step_mask_BxNxT, response_mask_BxT, group_size
    )
    d_PxN, mean_P, std_P, n_P = group_stats(r_PxN, m_PxN)
    few = n_P <= 1  # at most one value: mean 0, std 1 on the raw rewards
    centred = jnp.where(few[:, None], jnp.where(m_PxN, r_PxN, 0.0), d_PxN - mean_P[:, None])
    scale_P = jnp.where(few, 1.0, std_P) + eps
    z = jnp.where(m_PxN, centred / scale_P[:, None], 0.0)
    z = z.reshape(step_rewards_BxNxT.shape)  # [B, NV, T]
    return reverse_cumsum(z).mean(axis=1)


@functools.partial(jax.jit, static_argnames=("group_size", "step_scale"))
def rloo_step_advantages(
    step_rewards_BxNxT: jax.Array,
    step_mask_BxNxT: jax.Array,
    response_mask_BxT: jax.Array,
    group_size: int,
    step_scale: float = 10.0,
) -> jax.Array:
    """Tango's RLOO step advantage. [B, NV, T] x2, [B, T] -> [B, T].

    Leave-one-out over the pool of the group's n step rewards: `n/(n-1)·(r - mean)` at step ends
    (0 when n <= 1), reverse cumsum over tokens, mean over NV, times `step_scale`. The official
    code hard-codes `step_scale = 10` ("according to observed scale", TANGO_SPEC §10.12).
    """
    r_PxN, m_PxN = _pooled_by_group(
        step_rewards_BxNxT, step_mask_BxNxT, response_mask_BxT, group_size
    )
    d_PxN, mean_P, _, n_P = group_stats(r_PxN, m_PxN)
    loo_P = jnp.where(n_P > 1, n_P / jnp.maximum(n_P - 1, 1), 0.0)
    z = jnp.where(m_PxN, loo_P[:, None] * (d_PxN - mean_P[:, None]), 0.0)
    z = z.reshape(step_rewards_BxNxT.shape)  # [B, NV, T]
    return step_scale * reverse_cumsum(z).mean(axis=1)


@jax.jit
def reinforce_pp_step_advantages(
    step_rewards_BxNxT: jax.Array, step_mask_BxNxT: jax.Array, response_mask_BxT: jax.Array
) -> jax.Array:
    """Tango's REINFORCE++ step advantage. [B, NV, T] x2, [B, T] -> [B, T].

    Raw step rewards (no group normalisation), reverse cumsum over tokens, mean over NV, then
    whitened over all valid tokens of the batch. The official loop runs over the NV axis instead
    of tokens, which makes it zero (TANGO_SPEC §10.11); this is the intended computation. Note
    that whitening gives responses without step rewards a non-zero value, `-mean / std`.
    """
    r, m = _step_inputs(step_rewards_BxNxT, step_mask_BxNxT, response_mask_BxT)
    returns_BxT = reverse_cumsum(jnp.where(m, r, 0.0)).mean(axis=1)
    return masked_whiten(returns_BxT, response_mask_BxT)


def step_advantages(
    step_rewards_BxNxT: jax.Array,
    step_mask_BxNxT: jax.Array,
    response_mask_BxT: jax.Array,
    group_size: int,
    options: AdvantageOptions,
) -> jax.Array:
    """The step advantage of `options.estimator`, with the options it uses. -> [B, T]."""
    args = (step_rewards_BxNxT, step_mask_BxNxT, response_mask_BxT)
    if options.estimator is AdvantageEstimator.GRPO:
        return grpo_step_advantages(*args, group_size, options.eps)
    if options.estimator is AdvantageEstimator.RLOO:
        return rloo_step_advantages(*args, group_size, options.rloo_step_scale)
    return reinforce_pp_step_advantages(*args)


# ----------------------------------------------------------------------------------------------
# The α schedule: the weights of the outcome and step terms.


class AlphaScheduleKind(enum.Enum):
    EXPONENTIAL = "exp"  # the paper's: α0·exp(-k·t), reaching α_min at exp_target_frac·T
    LINEAR = "linear"  # α0 -> α_min linearly over total_steps
    COSINE = "cosine"  # α_min + (α0 - α_min)·(1 + cos(π t / T)) / 2
    NONE = "none"  # no α: fixed weights outcome_weight·A_out + process_weight·A_step


@dataclasses.dataclass(frozen=True)
class AlphaSchedule:
    """The weight α of the step advantage as a function of the generator update count t.

    t counts generator updates done before this one, minus generator warm-up steps; t < 0
    (generator warm-up) gives α = 0. `total_steps` is T_g = generator steps - warm-up steps.
    Every decaying schedule is floored at `alpha_min`. Exponential, with the script's values
    (α0 0.1, α_min 1e-3, T_g 300): α = 0.1, 0.068, 0.046, 0.022, 0.010, 0.0046, 0.001 at
    t = 0, 25, 50, 100, 150, 200, 300 (TANGO_SPEC §2.4). REINFORCE++ runs use α0 = 0.5.
    """

    kind: AlphaScheduleKind = AlphaScheduleKind.EXPONENTIAL
    total_steps: int = 300
    alpha0: float = 0.1
    alpha_min: float = 1e-3
    exp_target_frac: float = 1.0
    outcome_weight: float = 1.0  # NONE only
    process_weight: float = 1.0  # NONE only

    def __post_init__(self):
        if not isinstance(self.kind, AlphaScheduleKind):
            object.__setattr__(self, "kind", AlphaScheduleKind(self.kind))
        if self.kind is AlphaScheduleKind.NONE:
            return
        if self.total_steps < 1:
            raise ValueError(f"AlphaSchedule.total_steps ({self.total_steps}) must be >= 1.")
        if not 0.0 < self.alpha_min <= self.alpha0 <= 1.0:
            raise ValueError(
                f"AlphaSchedule needs 0 < alpha_min ({self.alpha_min}) <= alpha0 ({self.alpha0})"
                " <= 1."
            )
        if self.exp_target_frac <= 0:
            raise ValueError(f"AlphaSchedule.exp_target_frac ({self.exp_target_frac}) must be > 0.")

    def __call__(self, t: int | float) -> float:
        """α at generator update t. Raises for NONE, which has fixed weights (see `weights`)."""
        a0, a_min, total = self.alpha0, self.alpha_min, self.total_steps
        if self.kind is AlphaScheduleKind.NONE:
            raise ValueError(
                "AlphaSchedule(kind=NONE) has no α; use `weights(t)` for its fixed weights."
            )
        if t < 0:
            return 0.0
        if self.kind is AlphaScheduleKind.EXPONENTIAL:
            k = math.log(a0 / a_min) / (self.exp_target_frac * total)
            alpha = a0 * math.exp(-k * t)
        elif self.kind is AlphaScheduleKind.LINEAR:
            alpha = a0 - (a0 - a_min) * t / total
        else:
            # Clamped at T: the official cosine rises again after T (cos is periodic).
            alpha = a_min + 0.5 * (a0 - a_min) * (1.0 + math.cos(math.pi * min(t, total) / total))
        return max(a_min, alpha)

    def weights(self, t: int | float) -> tuple[float, float]:
        """(outcome weight, process weight) at generator update t: `(1 - α, α)`, or NONE's fixed
        weights."""
        if self.kind is AlphaScheduleKind.NONE:
            return self.outcome_weight, self.process_weight
        alpha = self(t)
        return 1.0 - alpha, alpha


# ----------------------------------------------------------------------------------------------
# Blending: outcome and step advantages of one estimator, weighted and summed.


def combine_advantages(
    a_out_BxT: jax.Array, a_step_BxT: jax.Array, outcome_weight: float, process_weight: float
) -> jax.Array:
    """`w_out·A_out + w_step·A_step`. [B, T] x2 -> [B, T].

    With the α schedule's weights `(1 - α, α)` this is paper Eq. 7. `(1 - α)` is applied even
    when no response has step rewards (A_step = 0); the official GRPO code returns the unscaled
    A_out in that case (TANGO_SPEC §10.13, §11).
    """
    return outcome_weight * a_out_BxT + process_weight * a_step_BxT


def blended_advantages(
    rewards_B: jax.Array,
    response_mask_BxT: jax.Array,
    group_size: int,
    options: AdvantageOptions,
    weights: tuple[float, float] = (1.0, 0.0),
    step_rewards_BxNxT: jax.Array | None = None,
    step_mask_BxNxT: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Outcome and step advantages of one estimator, weighted and summed. -> 3 x [B, T].

    Returns (A, w_out·A_out, w_step·A_step), the last two for metrics. `weights` comes from
    `AlphaSchedule.weights(t)`; without step rewards A_step is 0 and A = w_out·A_out.
    `options.scaling` is GRPO's outcome scaling only (the step term keeps its group std).
    """
    a_out = outcome_advantages(rewards_B, response_mask_BxT, group_size, options)
    if step_rewards_BxNxT is None:
        a_step = jnp.zeros_like(a_out)
    else:
        a_step = step_advantages(
            step_rewards_BxNxT, step_mask_BxNxT, response_mask_BxT, group_size, options
        )
    w_out, w_step = weights
    return combine_advantages(a_out, a_step, w_out, w_step), w_out * a_out, w_step * a_step
