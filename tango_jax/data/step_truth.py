"""The first wrong step of a solution to a problem of a task whose step truth is known.

The synthetic tasks (arithmetic chains, last letters) know every step's truth; `first_error`
dispatches on the problem's source. Used by the training diagnostics (`feedback.process_metrics`)
and by the oracle step labels (`tango/oracle_feedback.py`); never by a learned model's reward.
"""

from __future__ import annotations

from collections.abc import Sequence

from tango_jax.data import last_letter, synthetic, synthetic_labels
from tango_jax.data.datasets import Problem


def first_error(problem: Problem, steps: Sequence[str]) -> int | None:
    """The 0-based index of the first wrong step of `steps` (-1: all right, exactly K of them),
    or None when the problem's task has no step truth or its question does not parse."""
    if problem.source == synthetic.SOURCE:
        parsed = synthetic_labels.parse_question(problem.question)
        return None if parsed is None else synthetic_labels.first_error(parsed, steps)
    if problem.source == last_letter.SOURCE:
        parsed = last_letter.parse_question(problem.question)
        return None if parsed is None else last_letter.first_error(parsed, steps)
    return None
