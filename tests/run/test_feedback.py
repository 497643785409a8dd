"""Assembling verifier feedback into step-reward arrays, and verdict metrics."""

from __future__ import annotations

import numpy as np
import pytest

from tango_jax.data.datasets import Problem
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.rollout.base import Completion, FinishReason
from tango_jax.run.feedback import Judgment, Solution, step_reward_arrays, verdict_metrics
from tango_jax.text import formats

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


def test_verdict_metrics_by_hand():
    labels = [True, True, False, False, False]
    verdicts = [1, 0, 0, None, 1]  # TP, FN, TN, unparsable (counts as INCORRECT: TN), FP
    m = verdict_metrics(labels, verdicts)
    assert m["verdict_accuracy"] == pytest.approx(3 / 5)
    assert m["f1"] == pytest.approx(2 * 1 / (2 + 2))  # precision 1/2, recall 1/2
    assert m["f1_incorrect"] == pytest.approx(2 * 2 / (3 + 3))
    assert m["parse_fail"] == pytest.approx(1 / 5)
