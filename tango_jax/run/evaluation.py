"""Held-out evaluation: greedy pass@1 of the generator, and the verifier's greedy verdicts on
those solutions against the rule-based truth (TANGO_SPEC §7: zero-shot, greedy, one sample).

    settings = EvalSettings.from_config(cfg)       # the run's answer check, split, prompts
    evaluate(generator, verifier, problems, scorer, settings, timer=PhaseTimer())
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from tango_jax.config.run import RunConfig
from tango_jax.data.datasets import Problem
from tango_jax.data.tasks import task_of
from tango_jax.metrics.writer import PhaseTimer
from tango_jax.rollout.base import Completion, Prompt
from tango_jax.run import feedback
from tango_jax.run.roles import Role
from tango_jax.tango.rewards import OutcomeScorer, RewardKind
from tango_jax.text import formats, templates
from tango_jax.text.process_bench import (
    ProcessItem,
    predicted_error_step,
    process_scores,
)


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """How a held-out evaluation prompts, samples and scores, besides the models and problems:
    built from the run's config (`from_config`), so that every pass, greedy and sampled,
    scores with the run's own answer check (`kind`) and step split."""

    kind: RewardKind  # the outcome reward's check: data.reward_kind (CUSTOM: its function)
    split: formats.StepSplit  # where the solutions' steps are: data.step_split
    style: templates.Templates  # the prompt templates: data.templates
    timeout_s: float  # the answer check's limit per completion: scorer_timeout_s
    format_weight: float = 0.8  # the verifier's format weight: algorithm.verifier_format_weight
    # With a seed, a sampled pass too: `sampled_n` samples per problem at the training
    # temperature (eval.sampled, eval.sampled_n; the seed is the run's).
    sampled_seed: int | None = None
    sampled_n: int = 1
    # problem -> its bucket's name (None: in none): both accuracies per bucket too
    bucket: Callable[[Problem], str | None] | None = None

    @classmethod
    def from_config(cls, cfg: RunConfig) -> EvalSettings:
        """The run's evaluation settings, every field from `cfg`."""
        return cls(
            kind=cfg.data.reward_kind,
            split=cfg.data.step_split,
            style=cfg.data.templates,
            timeout_s=cfg.scorer_timeout_s,
            format_weight=cfg.algorithm.verifier_format_weight,
            sampled_seed=cfg.seed if cfg.eval.sampled else None,
            sampled_n=cfg.eval.sampled_n,
            bucket=task_of(cfg.data).bucket,  # accuracy per length bucket, if the task has any
        )


def evaluate(
    generator: Role,
    verifier: Role | None,
    problems: Sequence[Problem],
    scorer: OutcomeScorer,
    settings: EvalSettings,
    *,
    timer: PhaseTimer,
    process_items: Sequence[ProcessItem] = (),
) -> dict[str, float]:
    """Greedy pass@1 of the generator and the verifier's greedy verdicts on those solutions;
    with `settings.sampled_seed`, also `eval/generator/sampled_accuracy`: the mean over
    `settings.sampled_n` samples per problem at the training temperature; with
    `process_items`, the verifier's ProcessBench-style scores on them (`eval/verifier/step_f1`
    and its two accuracies, `process_bench.py`). Both passes score through the one `score`
    below, with the settings' answer check and step split. With `settings.bucket`, both
    accuracies per bucket too (`eval/generator/accuracy/<name>`,
    `eval/generator/sampled_accuracy/<name>`)."""
    style, bucket, sampled_seed = settings.style, settings.bucket, settings.sampled_seed

    def score(outs: Sequence[Sequence[Completion]]):  # the run's answer check, every pass
        return feedback.score_solutions(
            scorer,
            problems,
            outs,
            timeout_s=settings.timeout_s,
            kind=settings.kind,
            split=settings.split,
        )

    prompts = generator_prompts(generator, problems, style)
    with timer("eval_generate"):
        outs = generator.generate(prompts, generator.eval_params())
    solutions, reward_metrics = score(outs)
    metrics = {
        "eval/generator/accuracy": float(np.mean([s.correct for s in solutions])),
        "eval/generator/format_score": float(np.mean([s.format_score for s in solutions])),
        "eval/generator/num_steps": float(np.mean([len(s.steps) for s in solutions])),
        "eval/generator/response_len": float(
            np.mean([len(s.completion.token_ids) for s in solutions])
        ),
        "eval/generator/num_problems": float(len(problems)),
    } | {f"eval/generator/{k}": v for k, v in reward_metrics.items()}
    if bucket is not None:
        metrics |= bucket_accuracy("eval/generator/accuracy", solutions, bucket)
    if verifier is not None:
        with timer("eval_verify"):
            judged = feedback.judge(
                verifier,
                solutions,
                feedback.verifier_prompts(
                    verifier, solutions, style, variant=templates.Variant.EVAL
                ),
                n=1,
                seed=None,
                greedy=True,
                format_weight=settings.format_weight,
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
    if verifier is not None and process_items:
        with timer("eval_verify"):
            metrics |= evaluate_process(verifier, process_items, style=style)
    if sampled_seed is not None:
        with timer("eval_generate"):
            params = generator.train_params(sampled_seed, n=settings.sampled_n)
            sampled = generator.generate(prompts, params)
        scored, _ = score(sampled)
        metrics["eval/generator/sampled_accuracy"] = float(np.mean([s.correct for s in scored]))
        if bucket is not None:
            metrics |= bucket_accuracy("eval/generator/sampled_accuracy", scored, bucket)
    return metrics


def bucket_accuracy(
    name: str, solutions: Sequence[feedback.Solution], bucket: Callable[[Problem], str | None]
) -> dict[str, float]:
    """{name/<bucket>: mean correctness of the solutions whose problem is in that bucket}
    (a problem in no bucket, None, is in none of them: a task without buckets gives {})."""
    groups: dict[str, list[bool]] = {}
    for s in solutions:
        if (b := bucket(s.problem)) is not None:
            groups.setdefault(b, []).append(s.correct)
    return {f"{name}/{b}": float(np.mean(v)) for b, v in sorted(groups.items())}


def generator_prompts(
    generator: Role,
    problems: Sequence[Problem],
    style: templates.Templates,
    variant: templates.Variant = templates.Variant.EVAL,
) -> list[Prompt]:
    """The evaluation template around each question (built in: TANGO_SPEC §4.1, "mathematical "
    deleted; `variant=OOD` for the out-of-domain benchmarks); shared by the held-out evaluation
    and `tango_jax.evaluate`."""
    return [
        generator.encode(
            templates.render_generator_prompt(p.question, variant=variant, style=style)
        )
        for p in problems
    ]


@dataclasses.dataclass(frozen=True)
class ProcessVerification:
    """The verifier's greedy output on one ProcessBench item and what it predicts."""

    completion: Completion
    verification: formats.Verification
    prediction: int | None  # first INCORRECT step, -1 (no error), None (unreadable)


def verify_process_items(
    verifier: Role, items: Sequence[ProcessItem], *, style: templates.Templates
) -> list[ProcessVerification]:
    """Greedy verification of each item (prompt right-truncated like every verifier prompt);
    the predicted error location is the first INCORRECT step (`predicted_error_step`)."""
    prompts = [
        verifier.encode(
            templates.render_verifier_prompt(
                it.question, it.solution, variant=templates.Variant.EVAL, style=style
            ),
            truncate=True,
        )
        for it in items
    ]
    outs = verifier.generate(prompts, verifier.eval_params())
    out = []
    for row, it in zip(outs, items):
        v = formats.parse_verification(row[0].text)
        out.append(
            ProcessVerification(row[0], v, predicted_error_step(v.step_judgments, it.num_steps))
        )
    return out


def evaluate_process(
    verifier: Role, items: Sequence[ProcessItem], *, style: templates.Templates
) -> dict[str, float]:
    """The verifier's greedy verification of each item: the predicted error location is its
    first INCORRECT step; ProcessBench accuracies and F1, plus the verdict accuracy on the same
    items (against label == -1)."""
    verified = verify_process_items(verifier, items, style=style)
    labels = [it.label for it in items]
    scores = process_scores(labels, [v.prediction for v in verified])
    verdicts = [v.verification.verdict == formats.CORRECT for v in verified]
    out = scores.metrics("eval/verifier/")
    out["eval/verifier/step_verdict_accuracy"] = float(
        np.mean([v == (y == -1) for v, y in zip(verdicts, labels)])
    )
    return out
