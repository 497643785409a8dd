"""The verifier's health metrics on hand-worked examples, and the collapse guard's rule."""

from __future__ import annotations

import numpy as np
import pytest

from tango_jax.checkpoint.divergence import GuardAction
from tango_jax.data.datasets import Problem
from tango_jax.rollout.base import Completion, FinishReason
from tango_jax.run import step_metrics
from tango_jax.run.feedback import Judgment, RolloutRewards, Rollouts, Solution, verdict_metrics
from tango_jax.run.verifier_health import CollapseGuard, UpdateVerdicts
from tango_jax.tango.kind import Kind
from tango_jax.tango.schedule import Phase
from tango_jax.text import formats


def test_balanced_accuracy_and_shares_by_hand():
    # 3 right, 1 wrong; verdicts C, C, I, unparsable: recall right 2/3, recall wrong 1/1
    m = verdict_metrics([True, True, True, False], [1, 1, 0, None])
    assert m["balanced_accuracy"] == pytest.approx((2 / 3 + 1) / 2)
    assert m["predicted_correct"] == 0.5 and m["solutions_right"] == 0.75
    assert m["parse_fail"] == 0.25
    # one verdict for everything: 0.5 whatever the shares (accuracy would say 0.9)
    labels = [True] * 9 + [False]
    assert verdict_metrics(labels, [1] * 10)["balanced_accuracy"] == 0.5
    assert verdict_metrics(labels, [1] * 10)["verdict_accuracy"] == 0.9
    assert verdict_metrics([True, True], [0, 1])["balanced_accuracy"] == 0.5  # one class: recall


def _completion(logprobs) -> Completion:
    return Completion(tuple(range(len(logprobs))), "", tuple(logprobs), FinishReason.STOP, 0)


def _judgment(verdict, reward, logprobs=(-1.0,)) -> Judgment:
    v = formats.Verification((), verdict, 0)
    return Judgment(_completion(logprobs), v, 1.0, reward)


def test_format_only_groups_and_entropy_by_hand():
    p = Problem("q", "1", "test", "0")
    right = Solution(p, _completion([-0.1]), 1.0, 1.0, ())
    wrong = Solution(p, _completion([-0.1]), 0.0, 1.0, ())
    judged = [
        # right solution: INCORRECT well formed (0.8) against unparsable (0): format only
        [_judgment(formats.INCORRECT, 0.8, (-0.5, -1.5)), _judgment(None, 0.0, (-2.0,))],
        # right solution: CORRECT (1.8) against INCORRECT (0.8): the verdicts differ
        [_judgment(formats.CORRECT, 1.8), _judgment(formats.INCORRECT, 0.8)],
        # wrong solution: INCORRECT twice, equal rewards: no variance at all
        [_judgment(formats.INCORRECT, 1.8), _judgment(formats.INCORRECT, 1.8)],
    ]
    rollouts = Rollouts(1, Phase(Kind.VERIFIER, False), [p] * 3, [], [right, right, wrong], {},
                        None, judged)  # fmt: skip
    rewards = RolloutRewards(np.asarray([0.8, 0.0, 1.8, 0.8, 1.8, 1.8], np.float32), None)
    assert step_metrics.format_only_share(rollouts, rewards) == pytest.approx(1 / 3)
    assert step_metrics.zero_var_share(rewards, 3) == pytest.approx(1 / 3)
    flat = [j.completion for row in judged for j in row]
    assert step_metrics.entropy_mc(flat) == pytest.approx((0.5 + 1.5 + 2.0 + 4 * 1.0) / 7)


def _update(said_correct: int, right: int, n: int = 16) -> UpdateVerdicts:
    return UpdateVerdicts(n, said_correct, right)


def test_a_one_sided_window_trips_only_when_both_classes_are_there():
    guard = CollapseGuard(GuardAction.STOP)
    assert guard.observe(_update(0, 8)) is None  # the window is not full yet
    assert guard.observe(_update(1, 8)) is None
    collapse = guard.observe(_update(1, 8))  # 2 of 48 CORRECT: 96% one class, half right
    assert collapse is not None and guard.tripped
    assert (collapse.updates, collapse.judgments) == (3, 48)
    assert collapse.said_correct == pytest.approx(2 / 48) and collapse.right == 0.5
    assert "called 96% of 48 judged solutions INCORRECT or unparsable" in collapse.message(7)
    assert "while 50% of them were right" in collapse.message(7)


def test_no_trip_when_the_verdicts_follow_the_solutions():
    guard = CollapseGuard(GuardAction.STOP)
    # almost every solution right and almost every verdict CORRECT: a good verifier
    for _ in range(5):
        assert guard.observe(_update(15, 15)) is None  # wrong solutions 6% < 10%
    guard = CollapseGuard(GuardAction.STOP)
    for said in (6, 8, 9, 7):
        assert guard.observe(_update(said, 8)) is None  # both verdicts used
    assert not guard.tripped


def test_warn_once_until_it_clears_and_off_never_trips():
    guard = CollapseGuard(GuardAction.WARN)
    seen = [guard.observe(_update(16, 8)) for _ in range(5)]
    assert [s is not None for s in seen] == [False, False, True, False, False]
    for _ in range(3):
        guard.observe(_update(8, 8))  # recovered: the pooled window is balanced again
    assert not guard.tripped
    assert [guard.observe(_update(16, 8)) is not None for _ in range(3)] == [False, False, True]
    off = CollapseGuard(GuardAction.OFF)
    assert all(off.observe(_update(0, 8)) is None for _ in range(5)) and not off.tripped


def test_update_verdicts_come_from_the_step_metrics():
    out = {"verifier/verdicts": 16.0, "verifier/predicted_correct": 0.125,
           "verifier/solutions_right": 0.75}  # fmt: skip
    assert UpdateVerdicts.from_metrics(out) == UpdateVerdicts(16, 2, 12)
