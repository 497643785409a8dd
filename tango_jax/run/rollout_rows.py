"""The rows of the rollout log (metrics/rollouts.py): one JSON object per generator solution of
a step, with the verifier's judgments of it and what each model was trained on.

Fields of a row (docs/outputs.md shows one):

    step, phase          the global step; generator | generator_warmup | verifier |
                         verifier_warmup
    problem, sample      the problem's index in the step's batch; the sample's in its group
    id, source           the problem's id and dataset
    question, answer     the clean question and its gold answer
    prompt               the generator's prompt, as sampled from (template included)
    solution             the generator's completion
    finish_reason        stop | length (cut at rollout.max_tokens)
    response_tokens, weight_version
    outcome_reward       r_out: the answer check (Math-Verify, or `data.reward`)
    correct              r_out > 0.5: the label the verifier is rewarded against
    format_score, num_steps
    reward               G steps: the score the generator trained on (r_out, blended with the
                         verdicts when algorithm.ground_truth_weight < 1, plus the format weight)
    advantage            G steps: the generator's advantage at the first response token
    step_advantages      G steps with step rewards: the advantage at each step's last token
    closing_advantage    G steps with the oracle's closing step: the advantage at the last token
    verifications        the verifier's outputs about this solution (G steps: its feedback,
                         none in the generator warm-up; V steps: the n samples trained on),
                         each {text, step_judgments (+1/-1), verdict (1 correct, 0
                         incorrect, null unreadable), format_score, reward, step_rewards (±1/K
                         per step, null when the judgments do not match the K steps), closing
                         (the last judgment is the oracle's, of the closing tokens)} and, in
                         V steps, advantage (the verifier's, for that output)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tango_jax.run.feedback import Judgment, Rollouts, Solution
from tango_jax.tango import rewards
from tango_jax.tango.kind import Kind


def phase_name(rollouts: Rollouts) -> str:
    """The step's phase as metrics.jsonl names it."""
    return rollouts.phase.kind.value + ("_warmup" if rollouts.phase.warmup else "")


def _judgment(sol: Solution, j: Judgment) -> dict[str, Any]:
    """One verification of a solution; the oracle's (algorithm.step_source=oracle) has no
    completion, as no model wrote it: its text is None."""
    v = j.verification
    return {
        "text": None if j.completion is None else j.completion.text,
        "step_judgments": list(v.step_judgments),
        "verdict": v.verdict,
        "format_score": j.format_score,
        "reward": j.reward,
        "step_rewards": j.step_rewards(len(sol.steps)),
        "closing": j.closing,
    }


def _solution(rollouts: Rollouts, i: int, group: int) -> dict[str, Any]:
    sol = rollouts.solutions[i]
    p, c = sol.problem, sol.completion
    return {
        "step": rollouts.step,
        "phase": phase_name(rollouts),
        "problem": i // group,
        "sample": i % group,
        "id": p.id,
        "source": p.source,
        "question": p.question,
        "answer": p.answer,
        "prompt": rollouts.prompts[i // group].text or "",
        "solution": c.text,
        "finish_reason": c.finish_reason.value,
        "response_tokens": len(c.token_ids),
        "weight_version": c.weight_version,
        "outcome_reward": sol.reward,
        "correct": sol.correct,
        "format_score": sol.format_score,
        "num_steps": len(sol.steps),
    }


def _rows_to_log(num_solutions: int, group: int, max_rows: int) -> int:
    """Whole groups of the first problems, at most max_rows rows (at least one group's first
    rows when a group is larger than max_rows)."""
    return min(num_solutions, max(group * (max_rows // group), min(group, max_rows)))


def generator_rows(
    rollouts: Rollouts,
    token_rewards_B: np.ndarray,
    advantages_BxT: np.ndarray,
    tokenizer,
    *,
    group: int,
    with_step_advantages: bool,
    max_rows: int,
) -> list[dict[str, Any]]:
    """Rows of a generator step: B solutions in problem-major order, `group` samples per
    problem; the token scores and advantages [B, T] the update used."""
    rows = []
    for i in range(_rows_to_log(len(rollouts.solutions), group, max_rows)):
        sol = rollouts.solutions[i]
        row = _solution(rollouts, i, group)
        row["reward"] = float(token_rewards_B[i])
        row["advantage"] = float(advantages_BxT[i, 0])
        if with_step_advantages:
            ends = rewards.step_end_token_indices(
                sol.steps, rewards.token_char_ends(tokenizer, sol.completion.token_ids)
            )
            t = advantages_BxT.shape[1]
            row["step_advantages"] = [float(advantages_BxT[i, e]) if e < t else None for e in ends]
        judged = rollouts.judged[i] if rollouts.judged is not None else []
        if with_step_advantages and any(j.closing for j in judged):
            last = len(sol.completion.token_ids) - 1
            row["closing_advantage"] = float(advantages_BxT[i, last]) if last < t else None
        row["verifications"] = [_judgment(sol, j) for j in judged]
        rows.append(row)
    return rows


def verifier_rows(
    rollouts: Rollouts, advantages_B: Sequence[float], *, max_rows: int
) -> list[dict[str, Any]]:
    """Rows of a verifier step: one generator sample per problem, each with its n
    verifications; `advantages_B` holds the verifier's advantage of each verification
    (solution-major, n per solution)."""
    assert rollouts.phase.kind is Kind.VERIFIER and rollouts.judged is not None
    n = len(rollouts.judged[0]) if rollouts.judged else 0
    rows = []
    for i in range(min(len(rollouts.solutions), max_rows)):
        sol = rollouts.solutions[i]
        row = _solution(rollouts, i, 1)
        row["verifications"] = [
            _judgment(sol, j) | {"advantage": float(advantages_B[i * n + k])}
            for k, j in enumerate(rollouts.judged[i])
        ]
        rows.append(row)
    return rows
