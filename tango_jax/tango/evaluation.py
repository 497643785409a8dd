"""Held-out evaluation: greedy pass@1 of the generator, and the verifier's greedy verdicts on
those solutions against the rule-based truth (TANGO_SPEC §7: zero-shot, greedy, one sample)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tango_jax.data.datasets import Problem
from tango_jax.metrics import PhaseTimer
from tango_jax.tango import feedback, formats
from tango_jax.tango.rewards import OutcomeScorer
from tango_jax.tango.roles import Role


def evaluate(
    generator: Role,
    verifier: Role | None,
    problems: Sequence[Problem],
    scorer: OutcomeScorer,
    *,
    timeout_s: float,
    timer: PhaseTimer,
    style: formats.PromptStyle = formats.PromptStyle.FULL,
    format_weight: float = 0.8,
    sampled_seed: int | None = None,
) -> dict[str, float]:
    """Greedy pass@1 of the generator and the verifier's greedy verdicts on those solutions;
    with `sampled_seed`, also `eval/generator/sampled_accuracy`: one sample per problem at the
    training temperature."""
    prompts = [
        generator.encode(formats.render_generator_prompt(p.question, evaluation=True, style=style))
        for p in problems
    ]
    with timer("eval_generate"):
        outs = generator.generate(prompts, generator.eval_params())
    solutions, reward_metrics = feedback.score_solutions(
        scorer, problems, outs, timeout_s=timeout_s
    )
    metrics = {
        "eval/generator/accuracy": float(np.mean([s.correct for s in solutions])),
        "eval/generator/format_score": float(np.mean([s.format_score for s in solutions])),
        "eval/generator/num_steps": float(np.mean([len(s.steps) for s in solutions])),
        "eval/generator/response_len": float(
            np.mean([len(s.completion.token_ids) for s in solutions])
        ),
        "eval/generator/num_problems": float(len(problems)),
    } | {f"eval/generator/{k}": v for k, v in reward_metrics.items()}
    if verifier is not None:
        with timer("eval_verify"):
            judged = feedback.judge(
                verifier,
                solutions,
                feedback.verifier_prompts(verifier, solutions, style),
                n=1,
                seed=None,
                greedy=True,
                format_weight=format_weight,
            )
        verdicts = [row[0].verification.verdict for row in judged]
        metrics |= {
            f"eval/verifier/{k}": v
            for k, v in feedback.verdict_metrics([s.correct for s in solutions], verdicts).items()
        }
        metrics["eval/verifier/format_score"] = float(np.mean([r[0].format_score for r in judged]))
        k_match = [
            len(r[0].verification.step_judgments) == len(s.steps) for s, r in zip(solutions, judged)
        ]
        metrics["eval/verifier/k_match"] = float(np.mean(k_match))
    if sampled_seed is not None:
        with timer("eval_generate"):
            sampled = generator.generate(prompts, generator.train_params(sampled_seed, n=1))
        scored, _ = feedback.score_solutions(scorer, problems, sampled, timeout_s=timeout_s)
        metrics["eval/generator/sampled_accuracy"] = float(np.mean([s.correct for s in scored]))
    return metrics
