"""One generator step and one verifier step, exactly as TANGO_SPEC §1.3 and §1.4 order them.

Generator step: n rollouts per prompt from the current generator -> rule-based outcome
rewards -> NV verifications of each rollout by the current verifier -> step rewards ±1/K at
step-end tokens -> advantages (outcome ⊕ α·step) -> one update of the generator -> weight sync.

Verifier step: 1 rollout per prompt from the current generator -> its rule-based correctness ->
n verifications of each by the current verifier -> verifier rewards -> outcome advantages ->
one update of the verifier, whose per-sequence loss is multiplied by its class weight (EMA of
correct/incorrect counts; `TrainBatch.sample_weights`, not the advantages) -> weight sync.

Each step is two halves: `collect` (everything sampled and scored: rollouts, outcome rewards,
the verifier's judgments) and the update (`generator_step` / `verifier_step`: advantages, one
update, weight sync). The loop runs them back to back, or, with `overlap_rollouts`, collects
the next step's rollouts while this step's update runs (run/overlap.py).

Both return flat metrics with hierarchical names; timings go to `perf/<phase>_s`. On the steps
the rollout log is due (`log_rollouts`), both also write what they trained on there
(rollout_rows.py).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from tango_jax.config.run import RunConfig, StepSource
from tango_jax.data.datasets import Problem
from tango_jax.metrics.rollouts import RolloutLog
from tango_jax.metrics.writer import PhaseTimer
from tango_jax.rl.advantages import outcome_advantages
from tango_jax.rl.batch import TrainBatch, make_batch
from tango_jax.rl.dynamic_sampling import enough, select_groups, zero_variance
from tango_jax.rl.overlong import overlong_penalty
from tango_jax.rollout.base import FinishReason, Prompt
from tango_jax.rollout.drift import logprob_drift
from tango_jax.run import feedback, oracle_feedback, rollout_rows
from tango_jax.run.dynamic_sampling import merge_rounds, sampling_metrics
from tango_jax.run.feedback import Rollouts
from tango_jax.run.roles import Role
from tango_jax.tango.class_balance import ClassBalanceState, class_weights, update_class_balance
from tango_jax.tango.kind import Kind
from tango_jax.tango.process_advantages import AlphaScheduleKind, blended_advantages
from tango_jax.tango.rewards import OutcomeScorer
from tango_jax.tango.schedule import Phase
from tango_jax.text import templates

if TYPE_CHECKING:
    from tango_jax.run.overlap import Prefetch


class Purpose(enum.IntEnum):
    """Which rollout call of a step a sampling seed is for."""

    GENERATOR_ROLLOUTS = 0  # G step: n samples per prompt
    FEEDBACK = 1  # G step: the verifier's judgments of those samples
    SOLUTIONS = 2  # V step: one generator sample per prompt
    VERIFICATIONS = 3  # V step: n verifications of each


def step_seed(run_seed: int, step: int, purpose: Purpose, round_index: int = 0) -> int:
    """Sampling seed of one rollout call: a pure function of (run seed, global step, purpose),
    so a resumed run samples exactly what an uninterrupted one would. `round_index` > 0: an
    extra sampling round of dynamic sampling (round 0 keeps the seeds runs always had)."""
    key = [run_seed, step, int(purpose)] + ([round_index] if round_index else [])
    return int(np.random.SeedSequence(key).generate_state(1)[0] >> 1)


@dataclasses.dataclass
class StepContext:
    cfg: RunConfig
    generator: Role
    verifier: Role | None
    scorer: OutcomeScorer
    rollout_log: RolloutLog | None = None  # process 0 of a run that logs rollouts


def _rollout_log_due(ctx: StepContext, step: int) -> RolloutLog | None:
    log = ctx.rollout_log
    return log if log is not None and log.due(step) else None


def _mean(xs) -> float:
    xs = list(xs)
    return float(np.mean(xs)) if xs else 0.0


def _generated_tokens(completions) -> int:
    return sum(len(c.token_ids) for c in completions)


def _rollout_metrics(prefix: str, completions) -> dict[str, float]:
    lengths = [len(c.token_ids) for c in completions]
    return {
        f"{prefix}/response_len/mean": _mean(lengths),
        f"{prefix}/response_len/max": float(max(lengths, default=0)),
        f"{prefix}/clip_frac": _mean(c.finish_reason.value == "length" for c in completions),
    }


def _sample_and_score(
    ctx: StepContext,
    problems: Sequence[Problem],
    n: int,
    purpose: Purpose,
    *,
    global_step: int,
    timer: PhaseTimer,
    round_index: int = 0,
) -> tuple[list[Prompt], list[feedback.Solution], dict[str, float]]:
    """The generator's `n` samples of each problem, seeded by (step, purpose), scored by the
    rule-based checker: (prompts [P], solutions [P x n, problem-major], reward metrics)."""
    cfg, gen = ctx.cfg, ctx.generator
    style = cfg.data.templates
    prompts = [
        gen.encode(templates.render_generator_prompt(p.question, style=style)) for p in problems
    ]
    with timer("generate") as rec:
        params = gen.train_params(step_seed(cfg.seed, global_step, purpose, round_index), n=n)
        outs = gen.generate(prompts, params)
        rec.tokens += _generated_tokens(c for group in outs for c in group)
    with timer("reward"):
        solutions, reward_metrics = feedback.score_solutions(
            ctx.scorer,
            problems,
            outs,
            timeout_s=cfg.scorer_timeout_s,
            kind=cfg.data.reward_kind,
            split=cfg.data.step_split,
        )
    return prompts, solutions, reward_metrics


def _judge(
    ctx: StepContext,
    solutions: Sequence[feedback.Solution],
    n: int,
    purpose: Purpose,
    *,
    global_step: int,
    timer: PhaseTimer,
    round_index: int = 0,
) -> tuple[list[Prompt], list[list[feedback.Judgment]]]:
    """The verifier's `n` judgments of each solution, seeded by (step, purpose): (verifier
    prompts [S], judgments [S][n])."""
    cfg, ver = ctx.cfg, ctx.verifier
    ver_prompts = feedback.verifier_prompts(ver, solutions, cfg.data.templates)
    with timer("verify") as rec:
        judged = feedback.judge(
            ver,
            solutions,
            ver_prompts,
            n=n,
            seed=step_seed(cfg.seed, global_step, purpose, round_index),
            format_weight=cfg.algorithm.verifier_format_weight,
            consistent_verdict=cfg.algorithm.verifier_consistent_verdict,
        )
        rec.tokens += _generated_tokens(j.completion for row in judged for j in row)
    return ver_prompts, judged


def _uses_feedback(ctx: StepContext, warmup: bool) -> bool:
    """Whether a G step gets step feedback: the verifier's (TANGO_SPEC §1.3) or the oracle's."""
    alg = ctx.cfg.algorithm
    if alg.step_source is StepSource.ORACLE:
        return alg.step_rewards and not warmup
    return (
        ctx.verifier is not None
        and not warmup
        and (alg.step_rewards or alg.ground_truth_weight < 1.0)
    )


def collect(
    ctx: StepContext,
    problems: Sequence[Problem],
    *,
    global_step: int,
    phase: Phase,
    timer,
    more: Callable[[int], Sequence[Problem]] | None = None,
) -> Rollouts:
    """The sampling half of global step `global_step`: seeded by (run seed, step, purpose), so
    it samples the same whenever it runs, given the same weights.

    With the phase role's `rollout.dynamic_sampling`, groups whose rewards are all equal are
    dropped and round r = 1, 2, ... samples `more(r)` (the next prompt batch:
    run/dynamic_sampling.StepBatches.extra) until the batch holds len(problems) groups that are
    not, or `dynamic_sampling_max_rounds` rounds were sampled (rl/dynamic_sampling.py). The
    share of equal-reward groups and the rounds are in `Rollouts.sampling` either way."""
    at = dict(global_step=global_step, phase=phase, timer=timer)
    rounds = [_collect_round(ctx, problems, round_index=0, **at)]
    zero_var = [zero_variance(_group_rewards(ctx, rounds[0]))]
    role = ctx.generator if phase.kind is Kind.GENERATOR else ctx.verifier
    rollout = role.config.rollout
    if not rollout.dynamic_sampling:
        return dataclasses.replace(rounds[0], sampling=sampling_metrics(zero_var, None))
    if more is None:
        raise ValueError(
            f"{role.name}.rollout.dynamic_sampling needs `more`: the source of extra batches."
        )
    target = len(problems)
    while not enough(zero_var, target) and len(rounds) < rollout.dynamic_sampling_max_rounds:
        r = len(rounds)
        rounds.append(_collect_round(ctx, more(r), round_index=r, **at))
        zero_var.append(zero_variance(_group_rewards(ctx, rounds[-1])))
    selection = select_groups(zero_var, target)
    return dataclasses.replace(
        merge_rounds(rounds, selection), sampling=sampling_metrics(zero_var, selection)
    )


def _collect_round(
    ctx: StepContext,
    problems: Sequence[Problem],
    *,
    global_step: int,
    phase: Phase,
    timer,
    round_index: int,
) -> Rollouts:
    """One sampling round of `collect` (round 0: the only one without dynamic sampling)."""
    at = dict(global_step=global_step, timer=timer, round_index=round_index)
    ver_prompts = judged = None
    if phase.kind is Kind.GENERATOR:
        n = ctx.generator.config.rollout.n
        prompts, solutions, reward_metrics = _sample_and_score(
            ctx, problems, n, Purpose.GENERATOR_ROLLOUTS, **at
        )
        if _uses_feedback(ctx, phase.warmup) and ctx.cfg.algorithm.step_source is StepSource.ORACLE:
            with timer("verify"):  # the oracle's judgments take the verifier's place
                judged = oracle_feedback.oracle_judged(
                    solutions,
                    flip_prob=ctx.cfg.algorithm.oracle_flip_prob,
                    closing_step=ctx.cfg.algorithm.oracle_closing_step,
                    # an extra round's flips are drawn apart from round 0's
                    seed=step_seed(ctx.cfg.seed, global_step, Purpose.FEEDBACK, round_index)
                    if round_index
                    else ctx.cfg.seed,
                    step=global_step,
                )
        elif _uses_feedback(ctx, phase.warmup):
            nv = ctx.cfg.algorithm.verifications_per_response
            ver_prompts, judged = _judge(ctx, solutions, nv, Purpose.FEEDBACK, **at)
    else:
        prompts, solutions, reward_metrics = _sample_and_score(
            ctx, problems, 1, Purpose.SOLUTIONS, **at
        )
        n = ctx.verifier.config.rollout.n
        ver_prompts, judged = _judge(ctx, solutions, n, Purpose.VERIFICATIONS, **at)
    return Rollouts(
        global_step, phase, problems, prompts, solutions, reward_metrics, ver_prompts, judged
    )


def _group_rewards(ctx: StepContext, rollouts: Rollouts) -> np.ndarray:
    """The rewards the update's advantages start from, one row per group ([G, n]): the
    generator's token scores of each prompt's n solutions (`generator_step`), the verifier's
    rewards of each solution's n judgments (`verifier_step`), with the soft overlong penalty
    where set. Step rewards are not part of it (DAPO's criterion is the sequence reward)."""
    if rollouts.phase.kind is Kind.GENERATOR:
        gen = ctx.generator
        rewards = _generator_rewards(rollouts.solutions, rollouts.judged, ctx.cfg.algorithm)
        completions = [s.completion for s in rollouts.solutions]
        rewards, _ = _with_overlong_penalty(gen, rewards, completions)
        return rewards.reshape(-1, gen.config.rollout.n)
    flat = [j for row in rollouts.judged for j in row]
    rewards = np.asarray([j.reward for j in flat], np.float32)
    rewards, _ = _with_overlong_penalty(ctx.verifier, rewards, [j.completion for j in flat])
    return rewards.reshape(-1, ctx.verifier.config.rollout.n)


def _lag(role: Role, completions) -> float:
    """Updates `role` has had since the oldest weights that produced `completions` (0: sampled
    by the weights being trained; 1: one update behind, the overlapped case)."""
    versions = [c.weight_version for c in completions]
    return float(role.version - min(versions)) if versions else 0.0


def _train(
    role: Role, batch: TrainBatch, timer: PhaseTimer, during_update: Prefetch | None = None
) -> dict[str, float]:
    """One update of `role` on `batch`, then the weight sync; train/drift/sync metrics.

    `during_update`: the next step's rollouts, collected while the update runs and finished
    before the sync (a sampler must not receive new weights in the middle of a batch)."""
    if during_update is not None:
        with timer("prefetch_wait"):  # a background prefetch only starts here
            during_update.start()
    with timer("train") as rec:
        metrics, logp = role.trainer.step(batch)
        rec.tokens += int(batch.attention_mask.sum())  # prompt + response tokens processed
    if during_update is not None:
        with timer("prefetch_wait"):  # what the update did not hide
            during_update.join()
    role.version += 1
    with timer("sync"):
        sync = role.sync()
    out = {f"{role.name}/train/{k}": v for k, v in metrics.items()}
    out |= {f"{role.name}/sync/{k}": v for k, v in sync.items()}
    drift = logprob_drift(batch.sampler_logprobs, logp, batch.response_mask)
    out |= {f"{role.name}/{k}": float(v) for k, v in drift.items()}
    return out


def _side_drift(
    ctx: StepContext, role: Role | None, prompts, completions, timer: PhaseTimer
) -> dict[str, float]:
    """Drift of a rollout batch that is not trained on (cfg.drift_all_batches)."""
    if not ctx.cfg.drift_all_batches or role is None or role.trainer is None:
        return {}
    batch = _batch(role, prompts, completions)
    with timer("drift"):
        logp = role.trainer.logprobs(batch)
    drift = logprob_drift(batch.sampler_logprobs, logp, batch.response_mask)
    return {f"{role.name}/untrained/{k}": float(v) for k, v in drift.items()}


def _batch(role: Role, prompts, completions, **kw) -> TrainBatch:
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


def generator_step(
    ctx: StepContext,
    rollouts: Rollouts,
    *,
    update_index: int,
    timer: PhaseTimer,
    during_update: Prefetch | None = None,
) -> dict[str, float]:
    """One generator update on `rollouts` (from `collect`). `update_index`: generator updates
    done before this one, minus the generator warm-up steps (sets α); `during_update`: the next
    step's collection, run beside this update (see `_train`)."""
    cfg, gen, ver = ctx.cfg, ctx.generator, ctx.verifier
    alg = cfg.algorithm
    n = gen.config.rollout.n
    warmup = rollouts.phase.warmup
    prompts, solutions, judged = rollouts.prompts, rollouts.solutions, rollouts.judged
    completions = [s.completion for s in solutions]
    metrics = {f"generator/{k}": v for k, v in rollouts.reward_metrics.items()}
    metrics |= {f"generator/{k}": v for k, v in rollouts.sampling.items()}
    metrics["generator/policy_lag"] = _lag(gen, completions)
    if judged is not None and ver is not None:  # verifier feedback (not the oracle's)
        nv = alg.verifications_per_response
        verdicts = [row[0].verification.verdict for row in judged]
        feedback_completions = [j.completion for row in judged for j in row]
        metrics["generator/feedback/verifier_lag"] = _lag(ver, feedback_completions)
        metrics |= _side_drift(
            ctx,
            ver,
            [p for p in rollouts.ver_prompts for _ in range(nv)],
            feedback_completions,
            timer,
        )
        metrics |= {
            f"generator/feedback/{k}": v
            for k, v in feedback.verdict_metrics([s.correct for s in solutions], verdicts).items()
        }
    if judged is not None:
        metrics |= {
            f"generator/feedback/{k}": v
            for k, v in feedback.process_metrics(solutions, judged).items()
        }
    rewards_b = _generator_rewards(solutions, judged, alg)
    rewards_b, overlong = _with_overlong_penalty(gen, rewards_b, completions)
    metrics |= overlong
    batch = _batch(gen, [p for p in prompts for _ in range(n)], completions)
    # The α blend applies when this run has a step term (TANGO_SPEC §2.3): then (1-α) scales
    # A_out even in a batch where no step reward aligned (§11). A run without one (no
    # verifier, step_rewards off, generator warm-up) uses the unscaled outcome advantage, as
    # the official code does.
    has_step_term = judged is not None and alg.step_rewards
    weights = alg.alpha.weights(update_index) if has_step_term else (1.0, 0.0)
    step_r = step_m = None
    if has_step_term:
        step_r, step_m, step_stats = feedback.step_reward_arrays(
            solutions, judged, gen.tokenizer, batch.response_mask.shape[1]
        )
        metrics |= {f"generator/{k}": v for k, v in step_stats.items()}
    a, a_out, a_step = blended_advantages(
        alg.estimator,
        jnp.asarray(rewards_b),
        jnp.asarray(batch.response_mask),
        n,
        weights,
        None if step_r is None else jnp.asarray(step_r),
        None if step_m is None else jnp.asarray(step_m),
        eps=alg.eps,
        rloo_step_scale=alg.rloo_step_scale,
        reinforce_pp_baseline=alg.reinforce_pp_baseline,
        scaling=alg.advantage_scaling,
    )
    batch = dataclasses.replace(batch, advantages=np.asarray(a, np.float32))
    if log := _rollout_log_due(ctx, rollouts.step):
        rows = rollout_rows.generator_rows(
            rollouts,
            rewards_b,
            batch.advantages,
            gen.tokenizer,
            group=n,
            with_step_advantages=has_step_term,
            max_rows=log.max_rows,
        )
        log.write(rollouts.step, rows, phase=rollout_rows.phase_name(rollouts))
    metrics |= _train(gen, batch, timer, during_update)
    mask = batch.response_mask > 0
    metrics |= {
        "generator/reward/mean": float(rewards_b.mean()),
        "generator/accuracy": _mean(s.correct for s in solutions),
        "generator/format_score": _mean(s.format_score for s in solutions),
        "generator/num_steps/mean": _mean(len(s.steps) for s in solutions),
        "generator/alpha": weights[1]
        if has_step_term and alg.alpha.kind is not AlphaScheduleKind.NONE
        else 0.0,
        "generator/adv/outcome_abs": float(np.abs(np.asarray(a_out))[mask].mean()),
        "generator/adv/step_abs": float(np.abs(np.asarray(a_step))[mask].mean()),
        "generator/warmup": float(warmup),
        "generator/zero_var_groups": _zero_var_share(rewards_b, n),
    } | _rollout_metrics("generator", completions)
    return metrics


def _with_overlong_penalty(
    role: Role, rewards: np.ndarray, completions
) -> tuple[np.ndarray, dict[str, float]]:
    """`rewards` plus DAPO's soft overlong penalty where the role's rollout sets a buffer (else
    unchanged), and its mean as a metric."""
    rollout = role.config.rollout
    if not rollout.overlong_buffer:
        return rewards, {}
    penalty = overlong_penalty(
        [len(c.token_ids) for c in completions],
        rollout.max_tokens,
        rollout.overlong_buffer,
        rollout.overlong_penalty,
    )
    return rewards + penalty, {f"{role.name}/overlong_penalty/mean": float(penalty.mean())}


def _zero_var_share(rewards_b: np.ndarray, group_size: int) -> float:
    """Share of groups whose rewards are all equal (zero advantage: no learning signal)."""
    groups = np.asarray(rewards_b, np.float64).reshape(-1, group_size)
    return float(np.mean(groups.max(axis=1) - groups.min(axis=1) < 1e-9))


def _generator_rewards(solutions, judged, alg) -> np.ndarray:
    """Token score of each rollout (TANGO_SPEC §2.5): per verification, gtw·r_out +
    (1-gtw)·verdict where the verdict parses, else r_out, averaged over the verifications (as
    the official code averages over verifier samples); plus the (official: zero) format
    weight."""
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


def verifier_step(
    ctx: StepContext,
    rollouts: Rollouts,
    *,
    class_state: ClassBalanceState,
    timer: PhaseTimer,
    during_update: Prefetch | None = None,
) -> tuple[dict[str, float], ClassBalanceState]:
    """One verifier update on `rollouts` (from `collect`); returns metrics and the updated
    class-balance EMA. `during_update`: as in `generator_step`."""
    cfg, gen, ver = ctx.cfg, ctx.generator, ctx.verifier
    alg = cfg.algorithm
    n = ver.config.rollout.n
    prompts, solutions, judged = rollouts.prompts, rollouts.solutions, rollouts.judged
    ver_prompts, reward_metrics = rollouts.ver_prompts, rollouts.reward_metrics
    flat = [j for row in judged for j in row]  # solution-major: rows i*n .. i*n+n-1
    labels = np.repeat([s.correct for s in solutions], n)
    rewards_v = np.asarray([j.reward for j in flat], np.float32)
    rewards_v, overlong = _with_overlong_penalty(ver, rewards_v, [j.completion for j in flat])
    weights = None
    if alg.class_reweight is not None:
        class_state = update_class_balance(class_state, labels, alg.class_ema_decay)
        weights = class_weights(class_state, labels, alg.class_reweight)
    batch = _batch(
        ver,
        [p for p in ver_prompts for _ in range(n)],
        [j.completion for j in flat],
        sample_weights=weights,
    )
    a = outcome_advantages(
        alg.estimator,
        jnp.asarray(rewards_v),
        jnp.asarray(batch.response_mask),
        n,
        eps=alg.eps,
        reinforce_pp_baseline=alg.reinforce_pp_baseline,
        scaling=alg.advantage_scaling,
    )
    batch = dataclasses.replace(batch, advantages=np.asarray(a, np.float32))
    if log := _rollout_log_due(ctx, rollouts.step):
        rows = rollout_rows.verifier_rows(rollouts, batch.advantages[:, 0], max_rows=log.max_rows)
        log.write(rollouts.step, rows, phase=rollout_rows.phase_name(rollouts))
    metrics = {f"verifier/solutions/{k}": v for k, v in reward_metrics.items()} | overlong
    metrics |= {f"verifier/{k}": v for k, v in rollouts.sampling.items()}
    metrics["verifier/policy_lag"] = _lag(ver, [j.completion for j in flat])
    metrics["verifier/solutions/generator_lag"] = _lag(gen, [s.completion for s in solutions])
    metrics |= _side_drift(ctx, gen, prompts, [s.completion for s in solutions], timer)
    metrics |= _train(ver, batch, timer, during_update)
    metrics |= {
        f"verifier/{k}": v
        for k, v in feedback.verdict_metrics(labels, [j.verification.verdict for j in flat]).items()
    }
    metrics |= {f"verifier/{k}": v for k, v in feedback.process_metrics(solutions, judged).items()}
    metrics |= {
        "verifier/reward/mean": float(rewards_v.mean()),
        "verifier/zero_var_groups": _zero_var_share(rewards_v, n),
        "verifier/format_score": _mean(j.format_score for j in flat),
        "verifier/solution_accuracy": _mean(s.correct for s in solutions),
        "verifier/step_judgments/correct_frac": _mean(
            x > 0 for j in flat for x in j.verification.step_judgments
        ),
        "verifier/step_judgments/k_match": _mean(
            len(j.verification.step_judgments) == len(s.steps)
            for s, row in zip(solutions, judged)
            for j in row
        ),
        "verifier/class_ema/pos": class_state.pos_ema,
        "verifier/class_ema/neg": class_state.neg_ema,
    } | _rollout_metrics("verifier", [j.completion for j in flat])
    if weights is not None:
        metrics["verifier/class_weight/pos"] = (
            float(weights[labels].mean()) if labels.any() else 0.0
        )
        metrics["verifier/class_weight/neg"] = (
            float(weights[~labels].mean()) if (~labels).any() else 0.0
        )
    return metrics, class_state
