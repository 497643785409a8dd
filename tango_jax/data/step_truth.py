"""The first wrong step of a solution to a problem of a task whose step truth is known.

The generated tasks (arithmetic chains, last letters, a generated task of one's own) know every
step's truth; `first_error` asks the task the problem comes from (`tasks.by_source`). Used by
the training diagnostics (`feedback.process_metrics`) and by the oracle step labels
(`run/oracle_feedback.py`); never by a learned model's reward.
"""

from __future__ import annotations

from collections.abc import Sequence

from tango_jax.data.datasets import Problem
from tango_jax.data.tasks import by_source


def first_error(problem: Problem, steps: Sequence[str]) -> int | None:
    """The 0-based index of the first wrong step of `steps` (-1: all right, exactly K of them),
    or None when the problem's task has no step truth or its question does not parse."""
    task = by_source(problem.source)
    return None if task is None else task.first_error(problem, steps)
