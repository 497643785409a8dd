"""Scoring generator solutions and collecting the verifier's judgments of them.

Shared by the generator step (verifier feedback -> step rewards), the verifier step (verdicts ->
verifier rewards) and evaluation. Shape legend: B solutions, NV verifications per solution,
R response slots of the generator's training batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tango_jax.data import last_letter, step_truth
from tango_jax.data.datasets import Problem
from tango_jax.rollout.base import Completion, Prompt
from tango_jax.run.roles import Role
from tango_jax.tango import rewards
from tango_jax.tango.schedule import Phase
from tango_jax.text import formats, templates
from tango_jax.text.process_bench import predicted_error_step, process_scores


@dataclasses.dataclass(frozen=True)
class Solution:
    """One generator completion with its rule-based score."""

    problem: Problem
    completion: Completion
    reward: float  # rule-based outcome reward r_out in {0, 1}
    format_score: float  # generator format score (gates the verifier's format penalty)
    steps: tuple[formats.Step, ...]
    split: formats.StepSplit = formats.StepSplit.TAGS  # where `steps` came from

    @property
    def correct(self) -> bool:
        return self.reward > 0.5

    @property
    def verifier_text(self) -> str:
        """The solution as the verifier's prompt shows it (`formats.tagged_solution`)."""
        return formats.tagged_solution(self.completion.text, self.split)

    @property
    def count_gate(self) -> float:
        """What gates the verifier's step-count penalty: the generator's format score for
        tagged steps (a badly formatted solution has no reliable K); 1 for line steps, whose K
        is exact by construction."""
        return self.format_score if self.split is formats.StepSplit.TAGS else 1.0


@dataclasses.dataclass(frozen=True)
class Judgment:
    """One verifier completion about one solution."""

    completion: Completion
    verification: formats.Verification
    format_score: float  # verifier format score
    reward: float  # 1[verdict == correct] + γ·format, 0 if the verdict is unparsable
    # the last step judgment is of the closing tokens after the last step (only the oracle
    # gives one: algorithm.oracle_closing_step); its reward sits on the response's last token
    closing: bool = False

    def step_rewards(self, num_steps: int) -> list[float] | None:
        """±1/K' step rewards of a solution with `num_steps` steps, K' counting the closing
        judgment if there is one (`rewards.step_rewards`)."""
        return rewards.step_rewards(num_steps + self.closing, self.verification.step_judgments)


@dataclasses.dataclass(frozen=True)
class RolloutRewards:
    """The sequence rewards an update's advantages start from, one per trained row
    (`update_batch.rollout_rewards`): the generator's token score of each solution (G step) or
    the verifier's reward of each judgment (V step), DAPO's soft overlong penalty included."""

    values: np.ndarray  # float32 [rows]
    penalty: np.ndarray | None  # float32 [rows], the overlong penalty in `values`; None: no buffer

    def by_group(self, groups: int) -> np.ndarray:
        """[groups, rows per group]: each prompt's n solutions (G) or solution's n judgments (V)."""
        return self.values.reshape(groups, -1)


@dataclasses.dataclass(frozen=True)
class Rollouts:
    """Everything one global step samples and scores before its update (`collect`).

    G step: `solutions` are the generator's n samples per problem, `judged` the verifier's
    feedback on them (None in the generator warm-up or without a step term). V step:
    `solutions` are one generator sample per problem, `judged` the verifier's n judgments of
    each. Every completion carries the weight version that produced it. `steps.collect` makes
    it; the step's update and the rollout log (rollout_rows.py) read it."""

    step: int
    phase: Phase
    problems: Sequence[Problem]
    prompts: list[Prompt]  # generator prompts [P]
    solutions: list[Solution]
    reward_metrics: dict[str, float]
    ver_prompts: list[Prompt] | None  # verifier prompts [S], one per solution
    judged: list[list[Judgment]] | None  # [S][n]
    # dynamic sampling's per-step metrics, without the role's prefix (run/dynamic_sampling.py)
    sampling: dict[str, float] = dataclasses.field(default_factory=dict)
    rewards: RolloutRewards | None = None  # what the update starts from; set by `collect`


def score_solutions(
    scorer: rewards.OutcomeScorer,
    problems: Sequence[Problem],
    completions: Sequence[Sequence[Completion]],
    *,
    timeout_s: float,
    kind: rewards.RewardKind,
    split: formats.StepSplit = formats.StepSplit.TAGS,
) -> tuple[list[Solution], dict[str, float]]:
    """Rule-based rewards of every completion (in the scoring pool), and their steps (`split`:
    `data.step_split`). `kind` is the answer check and has no default, so that no pass can
    fall back to another check than its run's: a run's `data.reward_kind` (CUSTOM for its own
    reward function), an OOD benchmark's check, or a task's own (`task_reward_kind`).
    Flattened in prompt-major order: solution i*n + j is sample j of problem i."""
    flat = [(p, c) for p, cs in zip(problems, completions) for c in cs]
    scored = scorer.score(
        [c.text for _, c in flat],
        [p.answer for p, _ in flat],
        kind,
        timeout_s=timeout_s,
        questions=[p.question for p, _ in flat],
    )
    solutions = [
        Solution(
            p,
            c,
            float(r),
            formats.generator_format_score(c.text),
            tuple(formats.response_steps(c.text, split)),
            split,
        )
        for (p, c), r in zip(flat, scored.scores)
    ]
    return solutions, scored.metrics("reward")


def task_reward_kind(problems: Sequence[Problem]) -> rewards.RewardKind:
    """The answer check of the problems' task: exact string equality for last letters (a
    symbolic checker would accept a permutation), Math-Verify for everything else."""
    if problems and all(p.source == last_letter.SOURCE for p in problems):
        return rewards.RewardKind.EXACT
    return rewards.RewardKind.MATH


def verifier_prompts(
    verifier: Role,
    solutions: Sequence[Solution],
    style: templates.Templates,
    *,
    variant: templates.Variant = templates.Variant.TRAIN,
) -> list[Prompt]:
    """The verifier's prompt for each solution (problem, solution text, K counted from it)."""
    return [
        verifier.encode(
            templates.render_verifier_prompt(
                s.problem.question, s.verifier_text, variant=variant, style=style
            ),
            truncate=True,  # right-truncated like the official verifier prompts (§3.1)
        )
        for s in solutions
    ]


def judge(
    verifier: Role,
    solutions: Sequence[Solution],
    prompts: Sequence[Prompt],
    *,
    n: int,
    seed: int | None,
    greedy: bool = False,
    format_weight: float = 0.8,
    consistent_verdict: bool = False,
) -> list[list[Judgment]]:
    """`n` verifications of each solution (prompts from `verifier_prompts`) by the current
    verifier; result[i][j] is sample j of solution i. `consistent_verdict`: see
    `rewards.verifier_reward`."""
    params = verifier.eval_params() if greedy else verifier.train_params(seed, n=n)
    outputs = verifier.generate(prompts, params)
    judged = []
    for sol, outs in zip(solutions, outputs):
        row = []
        for c in outs:
            v = formats.parse_verification(c.text)
            fmt = formats.verifier_format_score(
                c.text, expected_steps=len(sol.steps), generator_format_score=sol.count_gate
            )
            r = rewards.verifier_reward(
                v,
                solution_correct=sol.correct,
                format_score=fmt,
                format_weight=format_weight,
                consistent_verdict=consistent_verdict,
            )
            row.append(Judgment(c, v, fmt, r))
        judged.append(row)
    return judged


def step_reward_arrays(
    solutions: Sequence[Solution],
    judged: Sequence[Sequence[Judgment]],
    tokenizer,
    response_slots: int,
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Step rewards ±1/K at the token that completes each step's `</step>` (and, for a
    judgment with a closing step, at the response's last token).

    Returns step_rewards [B, NV, R], step_mask [B, NV, R] (1 where a step reward sits) and
    statistics. A (solution, verification) pair contributes only if the verifier returned
    exactly K judgments for K > 0 steps (TANGO_SPEC §2.2).
    """
    b, nv = len(solutions), (len(judged[0]) if judged else 0)
    values = np.zeros((b, nv, response_slots), np.float32)
    mask = np.zeros((b, nv, response_slots), np.float32)
    aligned, positive, total = 0, 0, 0
    for i, (sol, row) in enumerate(zip(solutions, judged)):
        if not sol.steps:
            continue
        ends = rewards.step_end_token_indices(
            sol.steps, rewards.token_char_ends(tokenizer, sol.completion.token_ids)
        )
        last = len(sol.completion.token_ids) - 1
        for j, jd in enumerate(row):
            r = jd.step_rewards(len(sol.steps))
            if r is None:
                continue
            aligned += 1
            for pos, value in zip([*ends, last] if jd.closing else ends, r):
                if pos < response_slots:
                    values[i, j, pos] += value
                    mask[i, j, pos] = 1.0
            positive += sum(v > 0 for v in r)
            total += len(r)
    stats = {
        "step_rewards/aligned_frac": aligned / max(b * nv, 1),
        "step_rewards/correct_frac": positive / max(total, 1),
        "step_rewards/count": float(total),
    }
    return values, mask, stats


def verdict_metrics(labels: Sequence[bool], verdicts: Sequence[int | None]) -> dict[str, float]:
    """Verdict accuracy and F1 against the rule-based truth. An unparsable verdict counts as
    INCORRECT (the official default label) and is also reported as `parse_fail`.

    The verifier's health beside them: `predicted_correct` (the share of verdicts CORRECT)
    against `solutions_right` (the share of solutions that are right), and
    `balanced_accuracy`, the mean of the two class recalls (right solutions called CORRECT,
    wrong ones not), which a verifier giving one verdict to everything holds at 0.5 whatever
    the classes' shares (with one class present: that class's recall)."""
    y = np.asarray(labels, bool)
    pred = np.asarray([v == formats.CORRECT for v in verdicts], bool)
    classes = ((True, y), (False, ~y))  # (the verdict a class should get, its members)
    recalls = [float((pred[m] == want).mean()) for want, m in classes if m.any()]

    def f1(pos_true, pos_pred):
        tp = float((pos_true & pos_pred).sum())
        denom = float(pos_true.sum() + pos_pred.sum())
        return 2 * tp / denom if denom else 1.0

    return {
        "verdict_accuracy": float((y == pred).mean()) if y.size else 0.0,
        "f1": f1(y, pred),  # positive class: the solution is correct
        "f1_incorrect": f1(~y, ~pred),
        "parse_fail": float(np.mean([v is None for v in verdicts])) if y.size else 0.0,
        "predicted_correct": float(pred.mean()) if y.size else 0.0,
        "solutions_right": float(y.mean()) if y.size else 0.0,
        "balanced_accuracy": float(np.mean(recalls)) if recalls else 0.0,
    }


def process_metrics(
    solutions: Sequence[Solution], judged: Sequence[Sequence[Judgment]]
) -> dict[str, float]:
    """Step-level truth of the rollouts, where it is known (the synthetic tasks): ProcessBench
    scores (`process/step_f1`, ...) of the verifier's sampled judgments of these solutions,
    against each solution's first wrong step (`step_truth.first_error`), and
    `step_label_scores` of the judgments that become step rewards (one per written step, plus
    the oracle's closing one, not counted). Empty for other data sources. A training-time
    diagnostic: no reward uses it."""
    labels, predictions, labelled = [], [], []
    for sol, row in zip(solutions, judged):
        label = step_truth.first_error(sol.problem, [st.text for st in sol.steps])
        if label is None:
            return {}
        k = len(sol.steps)
        for j in row:
            judgments = j.verification.step_judgments
            labels.append(label)
            # the oracle's closing judgment (`closing`) is one step more: the missing line
            # after a reply that stopped early, which `first_error` places at index k
            predictions.append(predicted_error_step(judgments, k + j.closing))
            if len(judgments) == k + j.closing:  # what `step_rewards` accepts
                labelled.append((label, judgments[:k]))
    if not labels:
        return {}
    return process_scores(labels, predictions).metrics("process/") | step_label_scores(labelled)


def step_label_scores(labelled) -> dict[str, float]:
    """How right step labels are, from (first wrong step, -1 for none, ±1 label per written
    step) pairs: `process/step_label_accuracy`, the share of written steps labelled as they are
    (right before the first wrong step; a missing step leaves every written one right), and
    `process/step_label_informedness`, the share of right steps labelled CORRECT plus of wrong
    ones labelled INCORRECT, minus 1 (Youden's J: 1 - 2q for labels flipped with probability q,
    0 for labels that ignore the truth, whatever the share of wrong steps; only when both kinds
    of step occur). Empty without any labelled step."""
    pairs = [(first == -1 or i < first, x > 0) for first, xs in labelled for i, x in enumerate(xs)]
    if not pairs:
        return {}
    right, said_right = np.asarray(pairs).T
    hit = right == said_right
    out = {"process/step_label_accuracy": float(hit.mean())}
    if right.any() and not right.all():
        j = hit[right].mean() + hit[~right].mean() - 1.0
        out["process/step_label_informedness"] = float(j)
    return out
