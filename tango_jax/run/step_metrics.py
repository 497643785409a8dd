"""What a step reports about its rollouts, rewards and advantages (run/steps.py adds the
update's own train, sync and drift metrics).

One flat dict per step with hierarchical names: `generator/...` for a G step (its rollouts'
rewards, the verifier's feedback on them, the advantage terms), `verifier/...` for a V step
(its verdicts against the rule-based truth, its rewards, the class-balance EMA and weights).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tango_jax.rollout.base import Completion
from tango_jax.run import feedback
from tango_jax.run.feedback import RolloutRewards, Rollouts
from tango_jax.run.roles import Role
from tango_jax.run.update_batch import GeneratorUpdate, VerifierUpdate


def mean(xs: Iterable) -> float:
    xs = list(xs)
    return float(np.mean(xs)) if xs else 0.0


def lag(role: Role, completions: Sequence[Completion]) -> float:
    """Updates `role` has had since the oldest weights that produced `completions` (0: sampled
    by the weights being trained; 1: one update behind, the overlapped case)."""
    versions = [c.weight_version for c in completions]
    return float(role.version - min(versions)) if versions else 0.0


def rollout_metrics(prefix: str, completions: Sequence[Completion]) -> dict[str, float]:
    """Response lengths and the share cut at max_tokens."""
    lengths = [len(c.token_ids) for c in completions]
    return {
        f"{prefix}/response_len/mean": mean(lengths),
        f"{prefix}/response_len/max": float(max(lengths, default=0)),
        f"{prefix}/clip_frac": mean(c.finish_reason.value == "length" for c in completions),
    }


def zero_var_share(rewards: RolloutRewards, groups: int) -> float:
    """Share of groups whose rewards are all equal (zero advantage: no learning signal)."""
    by_group = np.asarray(rewards.by_group(groups), np.float64)
    return float(np.mean(by_group.max(axis=1) - by_group.min(axis=1) < 1e-9))


def entropy_mc(completions: Sequence[Completion]) -> float:
    """The mean -log p of the sampled tokens: a Monte Carlo estimate of the policy's per-token
    entropy at the sampling temperature, free from the sampler's log-probs (a verifier that
    collapses to one template drives it towards 0)."""
    logprobs = [lp for c in completions for lp in c.logprobs]
    return float(-np.mean(logprobs)) if logprobs else 0.0


def format_only_share(rollouts: Rollouts, rewards: RolloutRewards) -> float:
    """Share of a V step's groups (one solution's NV judgments) whose rewards differ although
    every judgment's verdict term is the same (all right, or all wrong or unparsable): only
    format separates them, and the update learns format, not verdicts."""
    if not rollouts.judged:
        return 0.0
    groups = rewards.by_group(len(rollouts.solutions))
    only = []
    for sol, row, r in zip(rollouts.solutions, rollouts.judged, groups):
        terms = {j.verification.verdict is not None and j.verification.verdict == sol.correct
                 for j in row}  # fmt: skip
        only.append(len(terms) == 1 and float(r.max() - r.min()) > 1e-9)
    return mean(only)


def overlong_metrics(role: Role, rewards: RolloutRewards) -> dict[str, float]:
    if rewards.penalty is None:
        return {}
    return {f"{role.name}/overlong_penalty/mean": float(rewards.penalty.mean())}


def generator_metrics(
    gen: Role,
    ver: Role | None,
    rollouts: Rollouts,
    rewards: RolloutRewards,
    update: GeneratorUpdate,
) -> dict[str, float]:
    """A G step's rollouts, the verifier's feedback on them and the advantage terms."""
    solutions, judged = rollouts.solutions, rollouts.judged
    completions = [s.completion for s in solutions]
    out = {f"generator/{k}": v for k, v in rollouts.reward_metrics.items()}
    out |= {f"generator/{k}": v for k, v in rollouts.sampling.items()}
    out["generator/policy_lag"] = lag(gen, completions)
    if judged is not None and ver is not None:  # the verifier's feedback (not the oracle's)
        verdicts = [row[0].verification.verdict for row in judged]
        out["generator/feedback/verifier_lag"] = lag(ver, [j.completion for r in judged for j in r])
        truth = [s.correct for s in solutions]
        verdict = feedback.verdict_metrics(truth, verdicts)
        out |= {f"generator/feedback/{k}": v for k, v in verdict.items()}
        out["generator/feedback/entropy_mc"] = entropy_mc([j.completion for r in judged for j in r])
    if judged is not None:
        process = feedback.process_metrics(solutions, judged)
        out |= {f"generator/feedback/{k}": v for k, v in process.items()}
    out |= overlong_metrics(gen, rewards)
    out |= {f"generator/{k}": v for k, v in update.step_stats.items()}
    mask = update.batch.response_mask > 0
    return (
        out
        | {
            "generator/reward/mean": float(rewards.values.mean()),  # the scorer's mean before it
            "generator/accuracy": mean(s.correct for s in solutions),
            "generator/format_score": mean(s.format_score for s in solutions),
            "generator/num_steps/mean": mean(len(s.steps) for s in solutions),
            "generator/alpha": update.alpha,
            "generator/adv/outcome_abs": float(np.abs(update.a_out)[mask].mean()),
            "generator/adv/step_abs": float(np.abs(update.a_step)[mask].mean()),
            "generator/warmup": float(rollouts.phase.warmup),
            "generator/zero_var_groups": zero_var_share(rewards, len(rollouts.problems)),
        }
        | rollout_metrics("generator", completions)
    )


def verifier_metrics(
    gen: Role,
    ver: Role,
    rollouts: Rollouts,
    rewards: RolloutRewards,
    update: VerifierUpdate,
) -> dict[str, float]:
    """A V step's verdicts against the truth, its rewards, and the class balance."""
    solutions, judged = rollouts.solutions, rollouts.judged
    flat = [j for row in judged for j in row]
    out = {f"verifier/solutions/{k}": v for k, v in rollouts.reward_metrics.items()}
    out |= overlong_metrics(ver, rewards)
    out |= {f"verifier/{k}": v for k, v in rollouts.sampling.items()}
    out["verifier/policy_lag"] = lag(ver, [j.completion for j in flat])
    out["verifier/solutions/generator_lag"] = lag(gen, [s.completion for s in solutions])
    verdicts = feedback.verdict_metrics(update.labels, [j.verification.verdict for j in flat])
    out |= {f"verifier/{k}": v for k, v in verdicts.items()}
    out["verifier/verdicts"] = float(len(flat))  # the judgments behind those shares
    out["verifier/entropy_mc"] = entropy_mc([j.completion for j in flat])
    out["verifier/format_only_groups"] = format_only_share(rollouts, rewards)
    out |= {f"verifier/{k}": v for k, v in feedback.process_metrics(solutions, judged).items()}
    labels, weights, state = update.labels, update.weights, update.class_state
    out |= {
        "verifier/reward/mean": float(rewards.values.mean()),
        "verifier/zero_var_groups": zero_var_share(rewards, len(rollouts.problems)),
        "verifier/format_score": mean(j.format_score for j in flat),
        "verifier/solution_accuracy": mean(s.correct for s in solutions),
        "verifier/step_judgments/correct_frac": mean(
            x > 0 for j in flat for x in j.verification.step_judgments
        ),
        "verifier/step_judgments/k_match": mean(
            len(j.verification.step_judgments) == len(s.steps)
            for s, row in zip(solutions, judged)
            for j in row
        ),
        "verifier/class_ema/pos": state.pos_ema,
        "verifier/class_ema/neg": state.neg_ema,
    } | rollout_metrics("verifier", [j.completion for j in flat])
    if weights is not None:
        out["verifier/class_weight/pos"] = float(weights[labels].mean()) if labels.any() else 0.0
        out["verifier/class_weight/neg"] = (
            float(weights[~labels].mean()) if (~labels).any() else 0.0
        )
    return out
