"""The OutcomeScorer pool (tango_jax.text.scoring_pool, used as rewards.OutcomeScorer): it agrees
with the in-process reward functions, counts soft timeouts and errors, kills workers stuck in C
code, replaces dead workers and recovers from an interrupted call.
"""

import time

import numpy as np
import pytest

from tango_jax.tango import rewards as R

PATHOLOGICAL_MATH = "<answer>\\boxed{2^{2^{40}}}</answer>"  # sympy works on it for minutes


@pytest.fixture(scope="module")
def scorer():
    with R.OutcomeScorer(num_workers=2, timeout_s=2.0, grace_s=0.5) as pool:
        yield pool


CASES = [
    (R.RewardKind.MATH, "<answer>\\boxed{\\frac{1}{2}}</answer>", "0.5"),
    (R.RewardKind.MATH, "<answer>\\boxed{3}</answer>", "4"),
    (R.RewardKind.BOXED, "\\boxed{True}", "True"),
    (R.RewardKind.BOXED, "\\boxed{\\sqrt{4}}", "2"),
    (R.RewardKind.CRUXEVAL, "\\boxed{[1, 2]}", "[1,2]"),
    (R.RewardKind.CRUXEVAL, "\\boxed{(1, 2)}", "[1,2]"),
]
IN_PROCESS = {
    R.RewardKind.MATH: R.outcome_reward,
    R.RewardKind.BOXED: R.boxed_equal_reward,
    R.RewardKind.CRUXEVAL: R.cruxeval_reward,
}


def test_scorer_agrees_with_the_in_process_functions(scorer):
    for kind in IN_PROCESS:  # every built-in check (CUSTOM: test_reward_function.py)
        pairs = [(r, g) for k, r, g in CASES if k is kind] * 5
        batch = scorer.score([r for r, _ in pairs], [g for _, g in pairs], kind)
        expected = [IN_PROCESS[kind](r, g) for r, g in pairs]
        assert batch.scores.dtype == np.float32 and batch.scores.tolist() == expected
        assert batch.timeouts == batch.errors == 0


def test_scorer_counts_soft_timeouts_and_errors(scorer):
    before = scorer.stats
    batch = scorer.score(
        [PATHOLOGICAL_MATH, "\\boxed{5}", "\\boxed{1}"], ["1", "", "1"], timeout_s=0.3
    )
    assert batch.scores.tolist() == [0.0, 0.0, 1.0]
    assert batch.timed_out.tolist() == [True, False, False]
    assert batch.errored.tolist() == [False, True, False]
    assert batch.metrics("generator/outcome") == {
        "generator/outcome/mean": pytest.approx(1 / 3),
        "generator/outcome/timeouts": 1.0,
        "generator/outcome/errors": 1.0,
        "generator/outcome/out_of_range": 0.0,  # kinds only a custom reward function has
        "generator/outcome/not_a_number": 0.0,
        "generator/outcome/seconds": batch.seconds,
    }
    after = scorer.stats
    assert after.restarts == before.restarts  # the alarm stopped it: no worker was killed
    assert (after.items, after.timeouts, after.errors) == (
        before.items + 3,
        before.timeouts + 1,
        before.errors + 1,
    )


def test_scorer_kills_a_worker_stuck_in_c_code(scorer):
    """Parsing a 4M-element list literal is one C call (seconds) that the alarm cannot
    interrupt. Without a box the whole response is the answer: no other work comes first."""
    before = scorer.stats
    huge = "[" + "1," * 4_000_000 + "]"
    start = time.monotonic()
    batch = scorer.score([huge, "\\boxed{[1]}"], ["[1]", "[1]"], R.RewardKind.CRUXEVAL, 0.2)
    assert time.monotonic() - start < 5.0
    assert batch.scores.tolist() == [0.0, 1.0] and batch.timed_out.tolist() == [True, False]
    assert scorer.stats.restarts == before.restarts + 1
    again = scorer.score(["\\boxed{1}"] * 4, ["1"] * 4)  # the pool is whole again
    assert again.scores.tolist() == [1.0] * 4


def _kill(worker):
    worker.proc.kill()
    worker.proc.wait()


def test_scorer_replaces_workers_that_die_idle_or_starting(scorer):
    scorer.score(["\\boxed{1}"] * 8, ["1"] * 8)  # both workers ready
    before = scorer.stats
    _kill(scorer._workers[0])  # dies while idle
    scorer._replace(scorer._workers[1], kill=True)
    _kill(scorer._workers[1])  # its replacement dies while starting
    batch = scorer.score(["\\boxed{1}"] * 6, ["1"] * 6)
    assert batch.scores.tolist() == [1.0] * 6 and batch.errors == batch.timeouts == 0
    assert scorer.stats.restarts == before.restarts + 3


def test_scorer_recovers_from_an_interrupted_call(scorer, monkeypatch):
    """Results still in flight from an interrupted call must not leak into the next one."""
    scorer.score(["\\boxed{1}"] * 8, ["1"] * 8)  # both workers ready

    def interrupt():
        raise KeyboardInterrupt

    monkeypatch.setattr(scorer, "_collect", interrupt)
    with pytest.raises(KeyboardInterrupt):
        scorer.score(["\\boxed{7}"] * 2, ["7"] * 2)
    monkeypatch.undo()
    batch = scorer.score(["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"], ["2", "3", "3"])
    assert batch.scores.tolist() == [0.0, 0.0, 1.0]  # a stale result would put 1.0 first


def test_scorer_argument_errors():
    with pytest.raises(ValueError, match="num_workers"):
        R.OutcomeScorer(num_workers=0)
    pool = R.OutcomeScorer(num_workers=1)
    with pytest.raises(ValueError, match="same length"):
        pool.score(["a"], [])
    pool.close()
    with pytest.raises(RuntimeError, match="after close"):
        pool.score([], [])
