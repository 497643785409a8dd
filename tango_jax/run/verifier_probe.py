"""A balanced held-out probe of the verifier: real replies of the start generator to the held-out
problems, half right and half wrong, fixed for the whole run and judged greedily at every
evaluation (`eval.verifier_probe_size`).

    probe = VerifierProbe.load_or_build(run_dir, generator, problems, score, size=64, ...)
    metrics = probe.measure(verifier, style=..., format_weight=0.8)   # eval/probe/...

The held-out evaluation's own verifier numbers judge the generator's greedy answers, whose mix
of right and wrong moves as the generator learns (and a fixed generator may be right on nearly
all of them). A probe with both classes in equal shares makes the verifier's `predicted_correct`
readable on its own (0.5 is unbiased; more than 0.8 either way is a one-sided verifier,
`one_sided`) and holds the question fixed from the SFT start to the end of RL, so a run's
change in `balanced_accuracy` is the verifier's, not the data's (docs/verifier.md).

The replies are written to `run_dir/verifier_probe.jsonl` (token ids and text, atomically), so a
resumed run judges the same ones; they are scored again with the run's answer check on load.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tango_jax.data.datasets import Problem
from tango_jax.rollout.base import Completion, FinishReason
from tango_jax.run import feedback
from tango_jax.run.roles import Role
from tango_jax.text import templates

log = logging.getLogger("tango_jax")

FILE = "verifier_probe.jsonl"
SEED_OFFSET = 104_729  # the probe's sampling seeds: seed + offset + round (not the eval's)
MAX_ROUNDS = 4  # sampling rounds before a probe settles for fewer replies of the rarer class
ONE_SIDED = 0.8  # a verifier that calls more than this share of the probe one class

Score = Callable[[Sequence[Problem], Sequence[Sequence[Completion]]], list[feedback.Solution]]


def answer_step(solution: feedback.Solution) -> int:
    """The step that holds the reply's answer: the last one with a digit in it (the line the
    last-number rewards read), or the last step when none has one."""
    with_digit = [i for i, s in enumerate(solution.steps) if any(ch.isdigit() for ch in s.text)]
    return with_digit[-1] if with_digit else len(solution.steps) - 1


def informedness(truth: Sequence[bool], said_right: Sequence[bool]) -> float | None:
    """Youden's J of binary labels against the truth: the share of right items labelled right
    plus the share of wrong ones labelled wrong, minus 1 (0 for labels that ignore the truth,
    1 for the truth itself); None without both kinds of item."""
    y, p = np.asarray(truth, bool), np.asarray(said_right, bool)
    if not y.any() or y.all():
        return None
    return float(p[y].mean() + (~p[~y]).mean() - 1.0)


class VerifierProbe:
    """The probe's replies (`solutions`: right ones first, then wrong ones, as drawn)."""

    def __init__(self, solutions: Sequence[feedback.Solution]):
        self.solutions = list(solutions)

    @property
    def counts(self) -> tuple[int, int]:
        right = sum(s.correct for s in self.solutions)
        return right, len(self.solutions) - right

    @classmethod
    def build(
        cls,
        generator: Role,
        problems: Sequence[Problem],
        score: Score,
        *,
        size: int,
        seed: int,
        style: templates.Templates,
    ) -> VerifierProbe:
        """Samples the generator at its training temperature on the held-out problems until
        `size // 2` right and `size // 2` wrong replies are drawn (at most MAX_ROUNDS rounds of
        enough samples per problem for `size` replies), spread over the problems: sample j of
        every problem comes before sample j + 1 of any."""
        from tango_jax.run.evaluation import generator_prompts

        half = size // 2
        per_problem = -(-size // len(problems))
        prompts = generator_prompts(generator, problems, style)
        right: list[feedback.Solution] = []
        wrong: list[feedback.Solution] = []
        for r in range(MAX_ROUNDS):
            outs = generator.generate(
                prompts, generator.train_params(seed + SEED_OFFSET + r, n=per_problem)
            )
            solutions = score(problems, outs)
            for j in range(per_problem):  # sample-major: every problem before its next sample
                for i in range(len(problems)):
                    s = solutions[i * per_problem + j]
                    pile = right if s.correct else wrong
                    if len(pile) < half:
                        pile.append(s)
            if len(right) == len(wrong) == half:
                break
        if len(right) < half or len(wrong) < half:
            log.warning(
                "the verifier probe has %d right and %d wrong replies where %d of each were "
                "asked for: the generator is right on nearly all or nearly none of the held-out "
                "problems after %d rounds of %d samples each",
                len(right),
                len(wrong),
                half,
                MAX_ROUNDS,
                per_problem,
            )
        return cls(right + wrong)

    def save(self, run_dir: Path, problems: Sequence[Problem]) -> None:
        index = {id(p): i for i, p in enumerate(problems)}
        path = Path(run_dir) / FILE
        tmp = path.with_suffix(".jsonl.tmp")
        with tmp.open("w") as f:
            for s in self.solutions:
                row = {
                    "problem": index[id(s.problem)],
                    "token_ids": list(s.completion.token_ids),
                    "text": s.completion.text,
                    "finish_reason": s.completion.finish_reason.value,
                    "correct": s.correct,
                }
                f.write(json.dumps(row) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, run_dir: Path, problems: Sequence[Problem], score: Score) -> VerifierProbe:
        """The saved replies, scored again by the run's answer check (a reply whose verdict
        changed keeps its new one, with a warning: the reward function changed)."""
        rows = [json.loads(line) for line in (Path(run_dir) / FILE).read_text().splitlines()]
        picked = [problems[r["problem"]] for r in rows]
        outs = [
            [
                Completion(
                    token_ids=tuple(r["token_ids"]),
                    text=r["text"],
                    logprobs=(),
                    finish_reason=FinishReason(r["finish_reason"]),
                    weight_version=0,
                )
            ]
            for r in rows
        ]
        solutions = score(picked, outs)
        changed = sum(s.correct != r["correct"] for s, r in zip(solutions, rows))
        if changed:
            log.warning(
                "%d of the %d verifier-probe replies in %s are scored differently by this run's "
                "answer check than when they were drawn",
                changed,
                len(rows),
                Path(run_dir) / FILE,
            )
        return cls(solutions)

    @classmethod
    def load_or_build(
        cls,
        run_dir: Path,
        generator: Role,
        problems: Sequence[Problem],
        score: Score,
        *,
        size: int,
        seed: int,
        style: templates.Templates,
        write: bool = True,
    ) -> VerifierProbe:
        if (Path(run_dir) / FILE).exists():
            return cls.load(run_dir, problems, score)
        probe = cls.build(generator, problems, score, size=size, seed=seed, style=style)
        if write:
            probe.save(run_dir, problems)
        return probe

    def measure(
        self, verifier: Role, *, style: templates.Templates, format_weight: float
    ) -> dict[str, float]:
        """The verifier's greedy verdicts on the probe (`eval/probe/...`): `balanced_accuracy`,
        `predicted_correct`, `parse_fail` and the rest of `feedback.verdict_metrics`; and the
        label its step judgments give the answer step (`answer_step`), where they match the
        reply's steps (`answer_label_aligned`, their share): `answer_label_informedness`
        against the replies' truth."""
        sols = self.solutions
        if not sols:
            return {}
        judged = feedback.judge(
            verifier,
            sols,
            feedback.verifier_prompts(verifier, sols, style, variant=templates.Variant.EVAL),
            n=1,
            seed=None,
            greedy=True,
            format_weight=format_weight,
        )
        verifications = [row[0].verification for row in judged]
        out = feedback.verdict_metrics(
            [s.correct for s in sols], [v.verdict for v in verifications]
        )
        truth, labels = [], []
        for s, v in zip(sols, verifications):
            if len(v.step_judgments) == len(s.steps) and s.steps:
                truth.append(s.correct)
                labels.append(v.step_judgments[answer_step(s)] > 0)
        out["answer_label_aligned"] = len(labels) / len(sols)
        if (j := informedness(truth, labels)) is not None:
            out["answer_label_informedness"] = j
        out["size"] = float(len(sols))
        return {f"eval/probe/{k}": v for k, v in out.items()}


def one_sided(metrics: dict[str, float]) -> str | None:
    """A line saying the verifier calls more than ONE_SIDED of the balanced probe one class,
    or None."""
    share = metrics.get("eval/probe/predicted_correct")
    if share is None or ONE_SIDED >= share >= 1 - ONE_SIDED:
        return None
    side = "CORRECT" if share > 0.5 else "INCORRECT or unparsable"
    n = int(metrics["eval/probe/size"])
    return (
        f"the verifier calls {max(share, 1 - share):.0%} of the {n} balanced probe replies "
        f"{side}: a one-sided verifier (more than {ONE_SIDED:.0%} one class; docs/verifier.md)"
    )
