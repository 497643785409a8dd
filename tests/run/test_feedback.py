"""Assembling verifier feedback into step-reward arrays, and verdict metrics."""

from __future__ import annotations

import numpy as np
import pytest

from tango_jax.data.datasets import Problem
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.rollout.base import Completion, FinishReason
from tango_jax.run.feedback import (
    Judgment,
    Solution,
    score_solutions,
    step_reward_arrays,
    verdict_metrics,
)
from tango_jax.text import formats
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.scoring_pool import OutcomeScorer

TEXT = (
    "<think><step>7 + 5 = 12</step><step>12 * 3 = 36</step><step>36 - 4 = 32</step>"
    "</think><answer>\\boxed{32}</answer>"
)


def _solution(tok, text=TEXT):
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
    c = Completion(ids, text, (0.0,) * len(ids), FinishReason.STOP, 0)
    return Solution(
        Problem("q", "32", "test", "0"),
        c,
        1.0,
        formats.generator_format_score(text),
        tuple(formats.split_steps(text)),
    )


def _judgment(judgments, verdict=1):
    text = formats.render_verification(list(judgments), verdict)
    v = formats.parse_verification(text)
    return Judgment(Completion((), text, (), FinishReason.STOP, 0), v, 1.0, 1.8)


def _closing_token_index(tok, ids, nth):
    """Independent reference: the first prefix of ids whose decoding contains the nth '</step>'
    completely is the token that completes it."""
    for i in range(1, len(ids) + 1):
        if tok.decode(ids[:i]).count("</step>") > nth:
            return i - 1
    raise AssertionError


def test_step_rewards_land_on_the_tokens_completing_each_step():
    tok = tiny_tokenizer()
    sol = _solution(tok)
    ids = list(sol.completion.token_ids)
    judged = [[_judgment([1, -1, 1]), _judgment([1, 1, 1, 1])]]  # second: K mismatch
    values, mask, stats = step_reward_arrays([sol], judged, tok, response_slots=len(ids) + 5)
    expected = [_closing_token_index(tok, ids, k) for k in range(3)]
    assert list(np.flatnonzero(mask[0, 0])) == expected
    np.testing.assert_allclose(values[0, 0, expected], [1 / 3, -1 / 3, 1 / 3])
    assert mask[0, 1].sum() == 0 and values[0, 1].sum() == 0  # no partial alignment
    assert stats["step_rewards/aligned_frac"] == 0.5
    assert stats["step_rewards/correct_frac"] == pytest.approx(2 / 3)


def test_a_solution_without_steps_gets_no_step_rewards():
    tok = tiny_tokenizer()
    sol = _solution(tok, "<answer>\\boxed{32}</answer>")
    values, mask, _ = step_reward_arrays([sol], [[_judgment([1])]], tok, response_slots=40)
    assert mask.sum() == 0 and values.sum() == 0


def test_line_steps_reward_the_token_ending_each_line_and_show_the_verifier_tagged_lines():
    """data.step_split=lines: a reply without tags has its non-blank lines as steps; the
    verifier sees one <step> per line, and each step reward sits on the token that ends its
    line (the newline after it is not part of the step)."""
    tok = tiny_tokenizer()
    text = "7 + 5 = 12\n\n12 * 3 = 36  \nso 36"
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
    c = Completion(ids, text, (0.0,) * len(ids), FinishReason.STOP, 0)
    reward = "tango_jax.data.addition:last_integer_reward"
    with OutcomeScorer(num_workers=1, reward_function=reward) as scorer:
        [sol], _ = score_solutions(scorer, [Problem("q", "36", "test", "0")], [[c]],
                                   timeout_s=5.0, kind=RewardKind.CUSTOM,
                                   split=formats.StepSplit.LINES)  # fmt: skip
    assert sol.reward == 1.0
    assert [s.text for s in sol.steps] == ["7 + 5 = 12", "12 * 3 = 36", "so 36"]
    shown = "<step>7 + 5 = 12</step>\n<step>12 * 3 = 36</step>\n<step>so 36</step>"
    assert sol.verifier_text == shown
    assert sol.format_score == 0.0 and sol.count_gate == 1.0  # K is exact: mismatches count
    values, mask, _ = step_reward_arrays([sol], [[_judgment([1, -1, 1])]], tok, len(ids))
    # reference: the first prefix whose decoding holds the whole line
    expected = [
        next(i for i in range(len(ids)) if tok.decode(ids[: i + 1]).rstrip().endswith(line))
        for line in ("7 + 5 = 12", "12 * 3 = 36", "so 36")
    ]
    assert list(np.flatnonzero(mask[0, 0])) == expected
    np.testing.assert_allclose(values[0, 0, expected], [1 / 3, -1 / 3, 1 / 3])


def test_verdict_metrics_by_hand():
    labels = [True, True, False, False, False]
    verdicts = [1, 0, 0, None, 1]  # TP, FN, TN, unparsable (counts as INCORRECT: TN), FP
    m = verdict_metrics(labels, verdicts)
    assert m["verdict_accuracy"] == pytest.approx(3 / 5)
    assert m["f1"] == pytest.approx(2 * 1 / (2 + 2))  # precision 1/2, recall 1/2
    assert m["f1_incorrect"] == pytest.approx(2 * 2 / (3 + 3))
    assert m["parse_fail"] == pytest.approx(1 / 5)
