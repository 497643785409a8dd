"""Reward functions of a user's own, for `data.reward` (tango_jax.text.reward_function): the
pool test scores them in worker processes, the end-to-end test trains with one."""

from __future__ import annotations

import re
import time

NOT_A_FUNCTION = 3


def last_number(completion: str, answer: str, question: str) -> float:
    """1 when the last integer in the completion is the gold answer; the question must be
    passed through (it is checked, so a run that drops it scores 0)."""
    if not question:
        return 0.0
    numbers = re.findall(r"-?\d+", completion)
    return float(bool(numbers) and numbers[-1] == answer.strip())


def half(completion: str, answer: str, question: str) -> float:
    return 0.5


def returns_two(completion: str, answer: str, question: str) -> float:
    return 2.0


def raises(completion: str, answer: str, question: str) -> float:
    raise RuntimeError(f"cannot grade {answer!r}")


def sleeps(completion: str, answer: str, question: str) -> float:
    time.sleep(30)
    return 1.0


def two_arguments(completion: str, answer: str) -> float:
    return 1.0


def digit_share(completion: str, answer: str, question: str) -> float:
    """The share of digits in the completion, smoothed to lie strictly between 0 and 1: a
    reward Math-Verify could not give (it gives 0 or 1), so a run whose rewards match it used
    this function. Needs the question."""
    if not question:
        raise ValueError("no question passed")
    return (sum(ch.isdigit() for ch in completion) + 1) / (len(completion) + 2)


def every_failure(completion: str, answer: str, question: str):
    """One kind of failure per completion: "raise" raises, "big" returns 2.0, "text" returns
    a string, "nan" returns NaN, anything else scores 1 (a user's reward with every bug)."""
    if completion == "raise":
        raise KeyError("no such case")
    return {"big": 2.0, "text": "yes", "nan": float("nan")}.get(completion, 1.0)
