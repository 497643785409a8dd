r"""tango_jax.tango.rewards: hand-worked rewards (TANGO_SPEC §2.1-2.2, §3.3, §4.3, §10) and the time
limits. Step-end token positions are tested in test_rewards_tokens.py, the OutcomeScorer pool in
test_scoring_pool.py.
"""

import signal
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tango_jax.tango import rewards as R
from tango_jax.text import formats as F

PATHOLOGICAL_MATH = "<answer>\\boxed{2^{2^{40}}}</answer>"  # sympy works on it for minutes

# ----------------------------------------------------------------------------------------------
# Outcome rewards.


@pytest.mark.parametrize(
    "response, gold, expected",
    [
        ("<answer>\\boxed{\\frac{1}{2}}</answer>", "0.5", 1.0),
        ("<answer>\\boxed{x^2+2x+1}</answer>", "(x+1)^2", 1.0),
        ("<answer>\\boxed{1,000}</answer>", "1000", 1.0),
        ("<think><step>\\boxed{1}</step></think><answer>\\boxed{2}</answer>", "2", 1.0),
        ("<think><step>\\boxed{1}</step></think><answer>\\boxed{2}</answer>", "1", 0.0),
        ("<answer>\\boxed{3}</answer>", "4", 0.0),
        ("no answer at all", "5", 0.0),
        ("\\boxed{5}", "", 0.0),  # unparsable gold: 0, counted as an error by the scorer
        ("", "5", 0.0),
    ],
)
def test_outcome_reward_by_hand(response, gold, expected):
    assert R.outcome_reward(response, gold) == expected


@pytest.mark.parametrize(
    "response, gold, expected",
    [
        ("so \\boxed{True}", "True", 1.0),
        ("\\boxed{False}", "True", 0.0),
        ("\\boxed{true}", "True", 0.0),  # words are not algebra: no sympy for them
        ("\\boxed{listen}", "silent", 0.0),
        ("\\boxed{\\dfrac{1}{2}}", "0.5", 1.0),  # dfrac -> frac, "0.5" -> \frac{1}{2}
        ("\\boxed{10\\%}", "10", 1.0),
        ("\\boxed{1,000}", "1000", 1.0),
        ("\\boxed{x = 3}", "3", 1.0),
        ("\\boxed{-3/4}", "\\frac{-3}{4}", 1.0),
        ("\\boxed{\\frac12}", "\\frac{1}{2}", 1.0),
        ("\\boxed{5 \\text{ cm}}", "5", 1.0),
        ("\\boxed{\\sqrt{4}}", "2", 1.0),  # sympy fallback
        ("\\boxed{0.50}", "\\frac{1}{2}", 1.0),  # sympy: equal values
        ("\\boxed{\\text{(B)}}", "(B)", 1.0),  # Minerva normalisation
        ("5", "5", 1.0),  # no box: the whole response is the answer
        ("The answer is 5", "5", 0.0),
        ("\\boxed{5} then \\boxed{6}", "\\boxed{6}", 1.0),
        ("\\box{5}", "5", 0.0),
    ],
)
def test_boxed_equal_reward_by_hand(response, gold, expected):
    assert R.boxed_equal_reward(response, gold) == expected


@pytest.mark.parametrize(
    "response, gold, expected",
    [
        ("\\boxed{[1, 2]}", "[1,2]", 1.0),
        ("\\boxed{'abc'}", "'abc'", 1.0),
        ('\\boxed{"abc"}', "'abc'", 1.0),
        ("\\boxed{abc}", "'abc'", 1.0),  # not a literal: compared as the raw string abc
        ("\\boxed{(1, 2)}", "[1, 2]", 0.0),
        ("\\boxed{{'a': 1}}", "{'a': 1}", 1.0),
        ("\\boxed{}", "''", 0.0),  # empty answer
        ("\\boxed{" + "9" * 10_000 + "}", "9" * 10_000, 1.0),  # over int's digit limit
        ("\\boxed{" + "[" * 10_000 + "}", "[", 0.0),  # too deep to parse
    ],
)
def test_cruxeval_reward_by_hand(response, gold, expected):
    assert R.cruxeval_reward(response, gold) == expected


def test_time_limit_scores_zero_and_restores_the_callers_timer():
    calls = []
    handler = lambda signum, frame: calls.append(signum)
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        start = time.monotonic()
        assert R.outcome_reward(PATHOLOGICAL_MATH, "1", timeout_s=0.3) == 0.0
        assert time.monotonic() - start < 3.0
        assert signal.getsignal(signal.SIGALRM) is handler
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 90.0 < left < 100.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert calls == []


def test_rewards_work_off_the_main_thread():
    """Math-Verify's own alarms raise off the main thread; ours are skipped there."""
    results = []
    thread = threading.Thread(
        target=lambda: results.append(R.outcome_reward("\\boxed{\\frac{2}{4}}", "1/2"))
    )
    thread.start()
    thread.join()
    assert results == [1.0]


def test_bad_timeout_is_an_error():
    with pytest.raises(ValueError, match="timeout_s"):
        R.outcome_reward("\\boxed{1}", "1", timeout_s=0)


@settings(max_examples=25, deadline=None)
@given(st.text(max_size=120), st.text(max_size=30))
def test_outcome_rewards_never_raise(response, gold):
    for fn in (R.outcome_reward, R.boxed_equal_reward, R.cruxeval_reward):
        assert fn(response, gold, timeout_s=2.0) in (0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# Step and verifier rewards.


@pytest.mark.parametrize(
    "num_steps, judgments, expected",
    [
        (3, [1, -1, 1], [1 / 3, -1 / 3, 1 / 3]),
        (1, [-1], [-1.0]),
        (3, [1, 1], None),  # K mismatch: no step rewards at all
        (2, [1, 1, 1], None),
        (0, [], None),
    ],
)
def test_step_rewards_by_hand(num_steps, judgments, expected):
    assert R.step_rewards(num_steps, judgments) == expected


def test_step_rewards_reject_bad_input():
    with pytest.raises(ValueError, match="judgments"):
        R.step_rewards(2, [1, 0])
    with pytest.raises(ValueError, match="num_steps"):
        R.step_rewards(-1, [])


def test_step_rewards_from_a_parsed_verification():
    """TANGO_SPEC §10.3: a verification with one judgment fewer than K gives nothing."""
    response = F.render_generator_response(["a", "b", "c"], "9")
    k = len(F.split_steps(response))
    good = F.parse_verification(F.render_verification([1, 1, -1], F.INCORRECT))
    short = F.parse_verification(F.render_verification([1, 1], F.INCORRECT))
    assert R.step_rewards(k, good.step_judgments) == [1 / 3, 1 / 3, -1 / 3]
    assert R.step_rewards(k, short.step_judgments) is None


@pytest.mark.parametrize(
    "verdict, correct, fmt, expected",
    [
        (F.CORRECT, True, 1.0, 1.8),
        (F.INCORRECT, False, 1.0, 1.8),
        (F.INCORRECT, True, 1.0, 0.8),
        (F.CORRECT, False, 0.2, 0.16),
        (F.INCORRECT, False, 0.6, 1.48),
        (None, True, 1.0, 0.0),  # unparsable verdict: 0, the format does not count either
        (None, False, 0.0, 0.0),
    ],
)
def test_verifier_reward_by_hand(verdict, correct, fmt, expected):
    v = F.Verification((), verdict, 0)
    reward = R.verifier_reward(v, solution_correct=correct, format_score=fmt)
    assert reward == pytest.approx(expected, abs=1e-12)


def test_verifier_reward_end_to_end_and_bad_format_score():
    text = F.render_verification([1, -1], F.INCORRECT)
    v = F.parse_verification(text)
    fmt = F.verifier_format_score(text, expected_steps=2, generator_format_score=1.0)
    assert R.verifier_reward(v, solution_correct=False, format_score=fmt) == 1.8
    with pytest.raises(ValueError, match="format_score"):
        R.verifier_reward(v, solution_correct=False, format_score=1.5)


@pytest.mark.parametrize(
    "judgments, verdict, correct, expected",
    [
        ((1, -1, 1), F.INCORRECT, False, 1.8),  # right and consistent
        ((1, 1, 1), F.INCORRECT, False, 0.8),  # right verdict, no INCORRECT step: no credit
        ((1, 1, 1), F.CORRECT, True, 1.8),
        ((1, -1, 1), F.CORRECT, True, 0.8),  # right verdict, an INCORRECT step: no credit
        ((1, -1, 1), F.CORRECT, False, 0.8),  # wrong verdict stays wrong
        ((), F.CORRECT, True, 0.8),  # no judgments never agree
        ((-1,), None, False, 0.0),  # unparsable verdict: 0 as before
    ],
)
def test_consistent_verdict_reward_by_hand(judgments, verdict, correct, expected):
    v = F.Verification(judgments, verdict, len(judgments))
    reward = R.verifier_reward(
        v, solution_correct=correct, format_score=1.0, consistent_verdict=True
    )
    assert reward == pytest.approx(expected, abs=1e-12)
    # the paper's reward ignores the step judgments
    plain = R.verifier_reward(v, solution_correct=correct, format_score=1.0)
    assert plain == pytest.approx(0.0 if verdict is None else 0.8 + (verdict == int(correct)))
