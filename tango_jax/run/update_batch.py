"""From a step's rollouts to what its update trains on: rewards -> advantages -> a TrainBatch.

Pure functions, no sampling and no training (run/steps.py calls them between the two):

    rewards = rollout_rewards(role, alg, rollouts)          # once, in `collect`
    update = generator_update(gen, alg, rollouts, rewards, update_index)   # G step
    update = verifier_update(ver, alg, rollouts, rewards, class_state)     # V step

The generator's reward per solution is its token score (TANGO_SPEC §2.5); its advantage is the
outcome term blended with the step term of the verifier's (or the oracle's) judgments by the α
schedule (§2.3-2.4). The verifier's reward per judgment is its verdict reward (§3.2); its
advantage is the outcome term alone, and its class weights (§3.4) multiply each row's loss
through `TrainBatch.sample_weights`, not the advantage. Shape legend: S solutions, NV
verifications per solution, R response slots of the training batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from tango_jax.config.run import AlgorithmConfig
from tango_jax.rl.advantages import outcome_advantages
from tango_jax.rl.batch import TrainBatch, make_batch
from tango_jax.rl.overlong import overlong_penalty
from tango_jax.rollout.base import FinishReason
from tango_jax.run import feedback
from tango_jax.run.feedback import RolloutRewards, Rollouts
from tango_jax.run.roles import Role
from tango_jax.tango.class_balance import ClassBalanceState, class_weights, update_class_balance
from tango_jax.tango.kind import Kind
from tango_jax.tango.process_advantages import AlphaScheduleKind, blended_advantages


def rollout_rewards(role: Role, alg: AlgorithmConfig, rollouts: Rollouts) -> RolloutRewards:
    """The rewards the update's advantages start from, one per trained row: the generator's
    token score of each solution (G step, `role` the generator) or the verifier's reward of
    each judgment (V step, `role` the verifier), with DAPO's soft overlong penalty where the
    role's rollout sets a buffer. Step rewards are not part of it."""
    if rollouts.phase.kind is Kind.GENERATOR:
        values = generator_rewards(rollouts.solutions, rollouts.judged, alg)
        completions = [s.completion for s in rollouts.solutions]
    else:
        flat = [j for row in rollouts.judged for j in row]
        values = np.asarray([j.reward for j in flat], np.float32)
        completions = [j.completion for j in flat]
    rollout = role.config.rollout
    if not rollout.overlong_buffer:
        return RolloutRewards(values, None)
    penalty = overlong_penalty(
        [len(c.token_ids) for c in completions],
        rollout.max_tokens,
        rollout.overlong_buffer,
        rollout.overlong_penalty,
    )
    return RolloutRewards(values + penalty, penalty)


def generator_rewards(
    solutions: Sequence[feedback.Solution],
    judged: Sequence[Sequence[feedback.Judgment]] | None,
    alg: AlgorithmConfig,
) -> np.ndarray:
    """Token score of each rollout, float32 [S] (TANGO_SPEC §2.5): per verification,
    gtw·r_out + (1-gtw)·verdict where the verdict parses, else r_out, averaged over the
    verifications (as the official code averages over verifier samples); plus the (official:
    zero) format weight."""
    out = np.asarray([s.reward for s in solutions], np.float32)
    if judged is not None and alg.ground_truth_weight < 1.0:
        gtw = alg.ground_truth_weight
        for i, row in enumerate(judged):
            r_out = float(out[i])
            verdicts = [j.verification.verdict for j in row]
            scores = [r_out if v is None else gtw * r_out + (1 - gtw) * v for v in verdicts]
            out[i] = np.mean(scores)
    if alg.generator_format_weight:
        out += alg.generator_format_weight * np.asarray([s.format_score for s in solutions])
    return out


def train_rows(role: Role, prompts, completions, **kw) -> TrainBatch:
    """Rows (prompt i, completion i) padded into the role's train-batch buckets."""
    return make_batch(
        [p.token_ids for p in prompts],
        [c.token_ids for c in completions],
        sampler_logprobs=[c.logprobs for c in completions],
        truncated=[c.finish_reason is FinishReason.LENGTH for c in completions],
        pad_id=role.model.config.pad_token_id or 0,
        prompt_bucket=role.config.sampler.prompt_bucket,
        response_bucket=role.config.response_bucket,
        **kw,
    )


@dataclasses.dataclass(frozen=True)
class GeneratorUpdate:
    """A generator step's training batch and the pieces of its advantage (for the metrics)."""

    batch: TrainBatch  # advantages [S, R] set
    has_step_term: bool  # the run blends a step term into this update
    alpha: float  # the step term's weight (0 without one, or with fixed weights)
    a_out: np.ndarray  # w_out·A_out [S, R]
    a_step: np.ndarray  # w_step·A_step [S, R]
    step_stats: dict[str, float]  # how the step rewards aligned (empty without a step term)


def generator_update(
    gen: Role,
    alg: AlgorithmConfig,
    rollouts: Rollouts,
    rewards: RolloutRewards,
    update_index: int,
) -> GeneratorUpdate:
    """The G step's batch: n rollouts per prompt, advantages (1 - α)·A_out + α·A_step.

    The α blend applies when this run has a step term (TANGO_SPEC §2.3): then (1-α) scales
    A_out even in a batch where no step reward aligned (§11). A run without one (no verifier,
    step_rewards off, generator warm-up) uses the unscaled outcome advantage, as the official
    code does. `update_index`: generator updates before this one, minus the warm-up (sets α)."""
    n = gen.config.rollout.n
    solutions, judged = rollouts.solutions, rollouts.judged
    prompts = [p for p in rollouts.prompts for _ in range(n)]
    batch = train_rows(gen, prompts, [s.completion for s in solutions])
    has_step_term = judged is not None and alg.step_rewards
    weights = alg.alpha.weights(update_index) if has_step_term else (1.0, 0.0)
    step_r = step_m = None
    step_stats: dict[str, float] = {}
    if has_step_term:
        step_r, step_m, step_stats = feedback.step_reward_arrays(
            solutions, judged, gen.tokenizer, batch.response_mask.shape[1]
        )
    a, a_out, a_step = blended_advantages(
        jnp.asarray(rewards.values),
        jnp.asarray(batch.response_mask),
        n,
        alg.advantage_options,
        weights,
        None if step_r is None else jnp.asarray(step_r),
        None if step_m is None else jnp.asarray(step_m),
    )
    fixed = alg.alpha.kind is AlphaScheduleKind.NONE  # fixed weights: no α to report
    return GeneratorUpdate(
        batch=dataclasses.replace(batch, advantages=np.asarray(a, np.float32)),
        has_step_term=has_step_term,
        alpha=weights[1] if has_step_term and not fixed else 0.0,
        a_out=np.asarray(a_out),
        a_step=np.asarray(a_step),
        step_stats=step_stats,
    )


@dataclasses.dataclass(frozen=True)
class VerifierUpdate:
    """A verifier step's training batch, its labels and class weights."""

    batch: TrainBatch  # advantages [S*NV, R], sample_weights the class weights
    labels: np.ndarray  # bool [S*NV]: whether the judged solution is right
    weights: np.ndarray | None  # the class weights (None: class_reweight off)
    class_state: ClassBalanceState  # the EMA after this batch


def verifier_update(
    ver: Role,
    alg: AlgorithmConfig,
    rollouts: Rollouts,
    rewards: RolloutRewards,
    class_state: ClassBalanceState,
) -> VerifierUpdate:
    """The V step's batch: NV judgments of each solution, outcome advantages of their verdict
    rewards, and each row's loss weighted by its solution's class (the EMA updated first, as
    the official code orders it)."""
    n = ver.config.rollout.n
    flat = [j for row in rollouts.judged for j in row]  # solution-major: rows i*n .. i*n+n-1
    labels = np.repeat([s.correct for s in rollouts.solutions], n)
    weights = None
    if alg.class_reweight is not None:
        class_state = update_class_balance(class_state, labels, alg.class_ema_decay)
        weights = class_weights(class_state, labels, alg.class_reweight)
    prompts = [p for p in rollouts.ver_prompts for _ in range(n)]
    batch = train_rows(ver, prompts, [j.completion for j in flat], sample_weights=weights)
    a = outcome_advantages(
        jnp.asarray(rewards.values), jnp.asarray(batch.response_mask), n, alg.advantage_options
    )
    batch = dataclasses.replace(batch, advantages=np.asarray(a, np.float32))
    return VerifierUpdate(batch, labels, weights, class_state)
