"""Dynamic sampling in the loop: a step's prompt batches and the train batch made of the groups
that `rl.dynamic_sampling.select_groups` picks from its sampling rounds.

    batches = StepBatches(stream)               # the step's first batch, drawn now
    rollouts = collect(ctx, batches.first, more=batches.extra, ...)   # steps.collect
    position = stream.position                  # after every batch the step consumed

`steps.collect` samples round 0 on the first batch and, while the role's
`rollout.dynamic_sampling` wants more groups, round r on `batches.extra(r)`. Each extra batch
is drawn from the stream once, the first time it is asked for, so the position saved with a
checkpoint counts every prompt consumed, the dropped ones included, and a collection run
again (an overlapped prefetch that failed, run/overlap.py) gets the same prompts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tango_jax.rl.dynamic_sampling import Selection
from tango_jax.run.feedback import RolloutRewards, Rollouts

if TYPE_CHECKING:
    from tango_jax.data.datasets import Problem, PromptStream


class StepBatches:
    """One global step's prompt batches from `stream`: the first drawn at construction (as the
    loop always did), extra ones on demand."""

    def __init__(self, stream: PromptStream):
        self._stream = stream
        self._batches = [stream.next_batch()]

    @property
    def first(self) -> list[Problem]:
        return self._batches[0]

    def extra(self, round_index: int) -> list[Problem]:
        """Batch `round_index` (>= 1) of the step, drawn from the stream the first time."""
        if round_index < 1:
            raise ValueError(f"round_index ({round_index}) must be >= 1: round 0 is `first`.")
        while len(self._batches) <= round_index:
            self._batches.append(self._stream.next_batch())
        return self._batches[round_index]

    @property
    def drawn(self) -> int:
        """Batches taken from the stream so far."""
        return len(self._batches)


def merge_rounds(rounds: Sequence[Rollouts], selection: Selection) -> Rollouts:
    """The Rollouts of the selected groups, in selection order. A group is one problem with
    its solutions (k per problem: the generator's n, the verifier step's 1), their verifier
    prompts, judgments and rewards; the step and phase are round 0's, the scorer's metrics
    cover every round (means averaged, counts and seconds summed)."""
    first = rounds[0]
    k = len(first.solutions) // len(first.problems)

    def take(field: str, per_problem: int) -> list | None:
        if getattr(first, field) is None:
            return None
        return [
            x
            for r, g in selection.groups
            for x in getattr(rounds[r], field)[g * per_problem : (g + 1) * per_problem]
        ]

    def take_rows(values: str) -> np.ndarray | None:  # the rewards' rows of each group
        if first.rewards is None or getattr(first.rewards, values) is None:
            return None
        by_group = [getattr(r.rewards, values).reshape(len(r.problems), -1) for r in rounds]
        return np.concatenate([by_group[r][g] for r, g in selection.groups])

    rewards = None
    if first.rewards is not None:
        rewards = RolloutRewards(take_rows("values"), take_rows("penalty"))
    return dataclasses.replace(
        first,
        problems=take("problems", 1),
        prompts=take("prompts", 1),
        solutions=take("solutions", k),
        reward_metrics=_merged_reward_metrics([r.reward_metrics for r in rounds]),
        ver_prompts=take("ver_prompts", k),
        judged=take("judged", k),
        rewards=rewards,
    )


def _merged_reward_metrics(per_round: Sequence[dict[str, float]]) -> dict[str, float]:
    """The scorer's metrics over equal-sized rounds: `.../mean` averaged, the rest (failure
    counts, seconds) summed."""
    return {
        key: float(np.mean(vals) if key.endswith("/mean") else np.sum(vals))
        for key in per_round[0]
        for vals in [[m[key] for m in per_round]]
    }


def sampling_metrics(
    zero_var_by_round: Sequence[np.ndarray], selection: Selection | None
) -> dict[str, float]:
    """Per step, without the role's prefix: the share of every sampled group (all rounds)
    whose rewards are all equal, the rounds sampled (1: no extra round), and the equal-reward
    groups topping up the batch (selection None: dynamic sampling off, nothing dropped)."""
    flags = np.concatenate([np.asarray(z, bool) for z in zero_var_by_round])
    return {
        "dynamic_sampling/zero_var_groups": float(flags.mean()) if flags.size else 0.0,
        "dynamic_sampling/rounds": float(len(zero_var_by_round)),
        "dynamic_sampling/padded_groups": float(selection.padded if selection else 0),
    }
