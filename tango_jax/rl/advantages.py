"""Advantage estimators: GRPO, RLOO and REINFORCE++, with Tango's step-level (process) branch.

Shapes: B sequences (responses), T response length, G group size, P = B // G groups,
NV verifier samples per response. Groups are contiguous rows: rows [g*G, (g+1)*G) are the G
responses to prompt g. `response_mask_BxT` marks valid response tokens and is a prefix of each
row (right padding); step masks must lie inside it (anything outside is ignored).

What each function returns, and why:

* GRPO and RLOO outcome advantages are one scalar per sequence, `[B]`. With γ = 1 the official
  code's "reward on the last token, reverse cumsum" gives exactly that scalar on every valid
  token, so `broadcast_to_tokens` is all the trainer needs.
* REINFORCE++ whitens over all valid *tokens* of the batch (a long response weighs more in the
  batch mean), so it needs the response mask and returns `[B, T]`.
* Step (process) advantages vary along the sequence and are `[B, T]`.

All array functions are jittable (`group_size`, `step_scale` and `eps` are static Python values)
and return float32; the trainer calls them once per step on small arrays. γ = 1 throughout (the
official configuration); discounting is not supported. The α schedule and the verifier's class
reweighting run on the host in plain Python/NumPy.

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
import numpy as np

# masked_whiten's variance floor in the official code: (x - mean) * rsqrt(var + 1e-8).
_WHITEN_EPS = 1e-8


# ----------------------------------------------------------------------------------------------
# Shared pieces.


def _check_groups(batch_size: int, group_size: int) -> int:
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


def _group_stats(x_PxN: jax.Array, m_PxN: jax.Array):
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
    num_groups = _check_groups(rewards_B.shape[0], group_size)
    r_PxG = rewards_B.reshape(num_groups, group_size)  # [P, G]
    d_PxG, mean_P, std_P, _ = _group_stats(r_PxG, jnp.ones_like(r_PxG, dtype=bool))
    return d_PxG - mean_P[:, None], std_P


def masked_whiten(x_BxT: jax.Array, mask_BxT: jax.Array) -> jax.Array:
    """`(x - mean) * rsqrt(var + 1e-8)` over all masked entries, 0 elsewhere: [B, T] -> [B, T].

    As veRL's `masked_whiten` (unbiased variance). veRL raises when fewer than two entries are
    masked; here the Bessel factor is n / max(n - 1, 1) and an empty mask gives zeros. Like the
    group statistics, it works on max-shifted values so that constant inputs give exactly 0.
    """
    m_1xN = mask_BxT.reshape(1, -1).astype(bool)
    d_1xN, mean_1, std_1, _ = _group_stats(x_BxT.reshape(1, -1), m_1xN)
    white = (d_1xN - mean_1[:, None]) * jax.lax.rsqrt(std_1[:, None] ** 2 + _WHITEN_EPS)
    return jnp.where(mask_BxT.astype(bool), white.reshape(x_BxT.shape), 0.0)


# ----------------------------------------------------------------------------------------------
# Outcome advantages.


@functools.partial(jax.jit, static_argnames=("group_size", "eps"))
def grpo_outcome_advantages(rewards_B: jax.Array, group_size: int, eps: float = 1e-6) -> jax.Array:
    """GRPO group z-score: `(r - mean_g) / (std_g + eps)`, unbiased std. [B] -> [B].

    A group of one uses mean 0 and std 1 (the official convention), so its advantage is
    `r / (1 + eps)`. All-equal rewards in a group give exactly 0.
    """
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    _check_groups(rewards_B.shape[0], group_size)
    if group_size == 1:
        return rewards_B / (1.0 + eps)
    dev_PxG, std_P = _group_deviations(rewards_B, group_size)
    return (dev_PxG / (std_P[:, None] + eps)).reshape(-1)


@functools.partial(jax.jit, static_argnames=("group_size",))
def rloo_outcome_advantages(rewards_B: jax.Array, group_size: int) -> jax.Array:
    """RLOO leave-one-out baseline: `r_i - mean_{j != i} r_j = G/(G-1)·(r_i - mean_g)`. [B] -> [B].

    No std normalisation. A group of one gets 0 (as the official Tango branch
    `compute_rloo_advantage`; veRL's outcome-only RLOO would return r unchanged).
    """
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    _check_groups(rewards_B.shape[0], group_size)
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
        _check_groups(rewards_B.shape[0], group_size)
        if group_size > 1:
            rewards_B = _group_deviations(rewards_B, group_size)[0].reshape(-1)
    return masked_whiten(broadcast_to_tokens(rewards_B, response_mask_BxT), response_mask_BxT)


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
    num_groups = _check_groups(r.shape[0], group_size)
    return r.reshape(num_groups, -1), m.reshape(num_groups, -1)  # [P, G*NV*T]


@functools.partial(jax.jit, static_argnames=("group_size", "eps"))
def tango_step_advantages(
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
    d_PxN, mean_P, std_P, n_P = _group_stats(r_PxN, m_PxN)
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
    d_PxN, mean_P, _, n_P = _group_stats(r_PxN, m_PxN)
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


# ----------------------------------------------------------------------------------------------
# Blending and the α schedule.


def combine_advantages(
    a_out_BxT: jax.Array, a_step_BxT: jax.Array, outcome_weight: float, process_weight: float
) -> jax.Array:
    """`w_out·A_out + w_step·A_step`. [B, T] x2 -> [B, T]."""
    return outcome_weight * a_out_BxT + process_weight * a_step_BxT


def blend_advantages(a_out_BxT: jax.Array, a_step_BxT: jax.Array, alpha: float) -> jax.Array:
    """Paper Eq. 7: `(1 - α)·A_out + α·A_step`. [B, T] x2 -> [B, T].

    `(1 - α)` is applied even when no response has step rewards (A_step = 0); the official GRPO
    code returns the unscaled A_out in that case (TANGO_SPEC §10.13, §11).
    """
    return combine_advantages(a_out_BxT, a_step_BxT, 1.0 - alpha, alpha)


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
# One call for the trainer.


class AdvantageEstimator(enum.Enum):
    GRPO = "grpo"
    RLOO = "rloo"
    REINFORCE_PP = "reinforce_plus_plus"


def generator_advantages(
    estimator: AdvantageEstimator,
    rewards_B: jax.Array,
    response_mask_BxT: jax.Array,
    group_size: int,
    weights: tuple[float, float] = (1.0, 0.0),
    step_rewards_BxNxT: jax.Array | None = None,
    step_mask_BxNxT: jax.Array | None = None,
    *,
    eps: float = 1e-6,
    rloo_step_scale: float = 10.0,
    reinforce_pp_baseline: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Outcome and step advantages of one estimator, weighted and summed. -> 3 x [B, T].

    Returns (A, w_out·A_out, w_step·A_step), the last two for metrics. `weights` comes from
    `AlphaSchedule.weights(t)`; without step rewards (the verifier's own updates, or a plain
    outcome-only run) A_step is 0 and A = w_out·A_out. `reinforce_pp_baseline` subtracts the
    group mean before REINFORCE++'s batch whitening (off in the official code).
    """
    estimator = AdvantageEstimator(estimator)
    mask = response_mask_BxT
    if estimator is AdvantageEstimator.GRPO:
        a_out = broadcast_to_tokens(grpo_outcome_advantages(rewards_B, group_size, eps), mask)
    elif estimator is AdvantageEstimator.RLOO:
        a_out = broadcast_to_tokens(rloo_outcome_advantages(rewards_B, group_size), mask)
    else:
        baseline_group = group_size if reinforce_pp_baseline else None
        a_out = reinforce_pp_outcome_advantages(rewards_B, mask, baseline_group)
    if step_rewards_BxNxT is None:
        a_step = jnp.zeros_like(a_out)
    elif estimator is AdvantageEstimator.GRPO:
        a_step = tango_step_advantages(step_rewards_BxNxT, step_mask_BxNxT, mask, group_size, eps)
    elif estimator is AdvantageEstimator.RLOO:
        a_step = rloo_step_advantages(
            step_rewards_BxNxT, step_mask_BxNxT, mask, group_size, rloo_step_scale
        )
    else:
        a_step = reinforce_pp_step_advantages(step_rewards_BxNxT, step_mask_BxNxT, mask)
    w_out, w_step = weights
    a_out, a_step = w_out * a_out, w_step * a_step
    return a_out + a_step, a_out, a_step


# ----------------------------------------------------------------------------------------------
# The verifier's class reweighting (host side, once per verifier step).


class ReweightMethod(enum.Enum):
    SQRT_INVERSE = "sqrt_inverse"  # s± = 1 / (sqrt(ema±) + 1e-6): the script's choice
    INVERSE = "inverse"  # s± = 1 / (ema± + 1e-6): the YAML default


@dataclasses.dataclass(frozen=True)
class ClassBalanceState:
    """EMA of the number of correct (pos) and incorrect (neg) generator solutions per verifier
    batch. Plain floats so a checkpoint can save `to_dict()` as is."""

    pos_ema: float = 0.0
    neg_ema: float = 0.0
    initialized: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ClassBalanceState:
        return cls(float(d["pos_ema"]), float(d["neg_ema"]), bool(d["initialized"]))


def _positives(labels_B) -> np.ndarray:
    labels = np.asarray(labels_B, dtype=np.float64).reshape(-1)
    if labels.size == 0:
        raise ValueError("`labels_B` is empty: class reweighting needs at least one sample.")
    return labels > 0.5


def update_class_balance(
    state: ClassBalanceState, labels_B, decay: float = 0.8
) -> ClassBalanceState:
    """One EMA update with this batch's counts; the first batch initialises the EMA.

    `labels_B` [B]: the generator solution's ground-truth correctness per verifier row (> 0.5 is
    positive). `ema ← decay·ema + (1 - decay)·count`.
    """
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"`decay` ({decay}) must be in [0, 1).")
    pos = _positives(labels_B)
    n_pos, n_neg = float(pos.sum()), float(pos.size - pos.sum())
    if not state.initialized:
        return ClassBalanceState(n_pos, n_neg, True)
    return ClassBalanceState(
        decay * state.pos_ema + (1.0 - decay) * n_pos,
        decay * state.neg_ema + (1.0 - decay) * n_neg,
        True,
    )


def class_weights(
    state: ClassBalanceState,
    labels_B,
    method: ReweightMethod | str = ReweightMethod.SQRT_INVERSE,
) -> np.ndarray:
    """Per-sample loss weights s+ (correct solution) or s- (incorrect), mean 1 over the batch.

    [B] -> [B] float32. Call `update_class_balance` with the same batch first (the official
    order). With `sqrt_inverse`, s+/s- = (sqrt(ema-) + 1e-6) / (sqrt(ema+) + 1e-6).
    """
    if not state.initialized:
        raise ValueError(
            "ClassBalanceState is not initialized: call update_class_balance(state, labels_B) "
            "before class_weights."
        )
    method = ReweightMethod(method)
    pos = _positives(labels_B)
    f = math.sqrt if method is ReweightMethod.SQRT_INVERSE else float
    pos_coef = 1.0 / (f(state.pos_ema) + 1e-6)
    neg_coef = 1.0 / (f(state.neg_ema) + 1e-6)
    coefs = np.where(pos, pos_coef, neg_coef)
    return (coefs * (coefs.size / coefs.sum())).astype(np.float32)
