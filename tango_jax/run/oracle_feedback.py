"""Oracle step judgments: the task's step truth in place of the verifier's (the claim-2 control).

A generator step with `algorithm.step_source = oracle` asks no verifier. Each rollout gets one
`feedback.Judgment` whose step judgments are the ground truth: +1 for every step before the
first wrong one, -1 from it on (under a perfect prover, progress changes only at the first
error). A solution that stops early (its first error is a missing step) is wrong from its last
written step: the decision to stop comes after that step's end, where Tango's step advantage is
0, so the last step is the nearest place a step label can reach it; labelling every written
step +1 instead would give a truncated wrong solution a right one's step rewards, and within a
group of truncated solutions the ±1/K rewards would favour the shortest (the tiny SFT
generator's commonest error on longer lists is exactly this: it stops after 2-3 steps).
With `oracle_closing_step` the oracle judges one more step, the closing tokens after the last
`</step>` (the decision to answer, and the answer): -1 unless the solution is right. A solution
that stops early then keeps +1 on its correct written steps and is wrong at its closing, where
the error is; the closing judgment's reward sits on the response's last token
(`feedback.step_reward_arrays`), so the closing tokens get a step advantage of their own.
With `oracle_flip_prob` q each judgment is flipped independently with probability q (the noisy
oracle: a dose-response curve against step-label accuracy). These judgments then
take exactly the verifier's path: `feedback.step_reward_arrays` (±1/K at step ends),
`process_advantages.blended_advantages` (group-pooled z-scores, reverse cumsum, α blend).
"""

from __future__ import annotations

from collections.abc import Sequence

from tango_jax.data import step_truth
from tango_jax.data.synthetic import Draws
from tango_jax.run.feedback import Judgment, Solution
from tango_jax.text import formats


def oracle_judgments(
    first_error: int, num_steps: int, *, closing: bool = False, correct: bool = True
) -> tuple[int, ...]:
    """+1 before step `first_error`, -1 from it on (-1 means no wrong step: all +1).

    Without `closing`: `num_steps` judgments; a first error at or beyond `num_steps` (a missing
    step: the solution stopped early) makes the last written step -1 (see the module doc).
    With `closing`: `num_steps + 1` judgments, the last for the closing tokens; a missing step
    is wrong at the closing, and the closing is also -1 when the solution is wrong with every
    step right (`correct` False: a wrong answer after right steps)."""
    if num_steps < 0 or first_error < -1:
        raise ValueError(
            f"num_steps ({num_steps}) must be >= 0 and first_error ({first_error}) >= -1."
        )
    judged = num_steps + closing  # the closing tokens are judgment num_steps, if judged
    if first_error == -1:
        wrong_from = num_steps + (closing and correct)  # a wrong answer after right steps
    else:  # at or beyond num_steps: a missing step, wrong at the closing or the last step
        wrong_from = min(first_error, judged - 1)
    return tuple(1 if k < wrong_from else -1 for k in range(judged))


def flipped(judgments: Sequence[int], flip_prob: float, draws: Draws) -> tuple[int, ...]:
    """Each judgment negated with probability `flip_prob` (one draw per judgment, in order)."""
    return tuple(-j if draws.chance(flip_prob) else j for j in judgments)


def oracle_judged(
    solutions: Sequence[Solution],
    *,
    flip_prob: float,
    seed: int,
    step: int,
    closing_step: bool = False,
) -> list[list[Judgment]]:
    """One oracle judgment per solution (result[i][0] is solution i's), flips seeded by (run
    seed, global step, solution index); `closing_step`: one more judgment, of the closing
    tokens (`oracle_judgments`; the Judgment's `closing` is set). The verdict is CORRECT when
    every judgment is +1; it plays no part in the generator's reward (ground_truth_weight 1).
    No completion: no model wrote it. Raises for a problem whose task has no step truth."""
    out = []
    for i, sol in enumerate(solutions):
        first = step_truth.first_error(sol.problem, [s.text for s in sol.steps])
        if first is None:
            raise ValueError(
                f"algorithm.step_source='oracle' needs step truth, which problems of source "
                f"{sol.problem.source!r} do not have; use a generated task (data.source "
                "'synthetic', 'last_letter', or a 'custom' one with step truth)."
            )
        judgments = oracle_judgments(
            first, len(sol.steps), closing=closing_step, correct=sol.correct
        )
        if flip_prob:
            judgments = flipped(judgments, flip_prob, Draws("oracle-flip", seed, step, i))
        verdict = formats.CORRECT if all(j == 1 for j in judgments) else formats.INCORRECT
        verification = formats.Verification(judgments, verdict, len(judgments))
        out.append([Judgment(None, verification, 1.0, 0.0, closing=closing_step)])
    return out
