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

import numpy as np

from tango_jax.config.run import RunConfig, StepSource
from tango_jax.data.datasets import Problem
from tango_jax.metrics.rollouts import RolloutLog
from tango_jax.metrics.writer import PhaseTimer
from tango_jax.rl.batch import TrainBatch
from tango_jax.rl.dynamic_sampling import enough, select_groups, zero_variance
from tango_jax.rollout.base import Prompt
from tango_jax.rollout.drift import logprob_drift
from tango_jax.run import feedback, oracle_feedback, rollout_rows, step_metrics, update_batch
from tango_jax.run.dynamic_sampling import merge_rounds, sampling_metrics
from tango_jax.run.feedback import Rollouts
from tango_jax.run.roles import Role
from tango_jax.tango.class_balance import ClassBalanceState
from tango_jax.tango.kind import Kind
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


def _generated_tokens(completions) -> int:
    return sum(len(c.token_ids) for c in completions)


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

    def sample(batch: Sequence[Problem], round_index: int) -> Rollouts:
        return _collect_round(
            ctx, batch, global_step=global_step, phase=phase, timer=timer, round_index=round_index
        )

    def groups_without_signal(r: Rollouts) -> np.ndarray:
        return zero_variance(r.rewards.by_group(len(r.problems)))

    rounds = [sample(problems, 0)]
    zero_var = [groups_without_signal(rounds[0])]
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
        rounds.append(sample(more(len(rounds)), len(rounds)))
        zero_var.append(groups_without_signal(rounds[-1]))
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
    rollouts = Rollouts(
        global_step, phase, problems, prompts, solutions, reward_metrics, ver_prompts, judged
    )
    role = ctx.generator if phase.kind is Kind.GENERATOR else ctx.verifier
    rewards = update_batch.rollout_rewards(role, ctx.cfg.algorithm, rollouts)
    return dataclasses.replace(rollouts, rewards=rewards)


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
    batch = update_batch.train_rows(role, prompts, completions)
    with timer("drift"):
        logp = role.trainer.logprobs(batch)
    drift = logprob_drift(batch.sampler_logprobs, logp, batch.response_mask)
    return {f"{role.name}/untrained/{k}": float(v) for k, v in drift.items()}


def generator_step(
    ctx: StepContext,
    rollouts: Rollouts,
    *,
    update_index: int,
    timer: PhaseTimer,
    during_update: Prefetch | None = None,
) -> dict[str, float]:
    """One generator update on `rollouts` (from `collect`, with their rewards): advantages ->
    batch -> update -> sync. `update_index`: generator updates done before this one, minus the
    generator warm-up steps (sets α); `during_update`: the next step's collection, run beside
    this update (see `_train`)."""
    gen, ver, rewards = ctx.generator, ctx.verifier, rollouts.rewards
    update = update_batch.generator_update(gen, ctx.cfg.algorithm, rollouts, rewards, update_index)
    if log := _rollout_log_due(ctx, rollouts.step):
        rows = rollout_rows.generator_rows(
            rollouts,
            rewards.values,
            update.batch.advantages,
            gen.tokenizer,
            group=gen.config.rollout.n,
            with_step_advantages=update.has_step_term,
            max_rows=log.max_rows,
        )
        log.write(rollouts.step, rows, phase=rollout_rows.phase_name(rollouts))
    metrics = step_metrics.generator_metrics(gen, ver, rollouts, rewards, update)
    if rollouts.judged is not None and ver is not None:  # the verifier's feedback batch
        nv = ctx.cfg.algorithm.verifications_per_response
        prompts = [p for p in rollouts.ver_prompts for _ in range(nv)]
        judgments = [j.completion for row in rollouts.judged for j in row]
        metrics |= _side_drift(ctx, ver, prompts, judgments, timer)
    return metrics | _train(gen, update.batch, timer, during_update)


def verifier_step(
    ctx: StepContext,
    rollouts: Rollouts,
    *,
    class_state: ClassBalanceState,
    timer: PhaseTimer,
    during_update: Prefetch | None = None,
) -> tuple[dict[str, float], ClassBalanceState]:
    """One verifier update on `rollouts` (from `collect`, with their rewards): class weights
    and advantages -> batch -> update -> sync; returns metrics and the updated class-balance
    EMA. `during_update`: as in `generator_step`."""
    gen, ver, rewards = ctx.generator, ctx.verifier, rollouts.rewards
    update = update_batch.verifier_update(ver, ctx.cfg.algorithm, rollouts, rewards, class_state)
    if log := _rollout_log_due(ctx, rollouts.step):
        advantages = update.batch.advantages[:, 0]
        rows = rollout_rows.verifier_rows(rollouts, advantages, max_rows=log.max_rows)
        log.write(rollouts.step, rows, phase=rollout_rows.phase_name(rollouts))
    metrics = step_metrics.verifier_metrics(gen, ver, rollouts, rewards, update)
    solutions = [s.completion for s in rollouts.solutions]
    metrics |= _side_drift(ctx, gen, rollouts.prompts, solutions, timer)
    return metrics | _train(ver, update.batch, timer, during_update), update.class_state
