"""DAPO's dynamic sampling: which groups of a step's sampling rounds fill its train batch.

Yu et al. 2025, "DAPO", arXiv 2503.14476, Sec. 3.2 (Eq. 11: 0 < |{o_i correct}| < G): a group
whose rewards are all equal has zero group-relative advantage and gives no policy gradient, so
it is dropped and more prompts are sampled until the batch holds `target` groups that do.
A group is the n samples of one prompt (the generator) or the n judgments of one solution (the
verifier). Rounds are fresh prompt batches; groups are counted in the order they were
consumed, (round, index within the round).

The batch is always `target` groups, so the train step's shape (and its compiled program, its
micro-batches) never changes:

* enough kept groups: the first `target` of them, in consumption order; the rest are sampled
  and thrown away (veRL's DAPO recipe trims the same way, `batch[:traj_bsz]`);
* the cap on rounds hit first: the kept groups, topped up with the earliest dropped ones. Under
  a group-relative estimator a zero-variance group has zero advantage, so the padding only
  counts in the loss's token normaliser (and a KL term), as it would without dynamic sampling.
  veRL raises there instead ("Generated too many"); a run on a task the model has solved would
  then stop.

Host-side NumPy, like the rewards it reads. Shape legend: G groups of a round, N samples per
group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

EQUAL_ATOL = 1e-9  # rewards closer than this are equal (the `zero_var_groups` metric's rule)


def zero_variance(rewards_GxN: np.ndarray) -> np.ndarray:
    """Whether each group's rewards are all equal: float [G, N] -> bool [G]."""
    r = np.asarray(rewards_GxN, np.float64)
    if r.ndim != 2:
        raise ValueError(f"rewards must be [groups, samples per group]; got shape {r.shape}.")
    return r.max(axis=1) - r.min(axis=1) < EQUAL_ATOL


def enough(zero_var_by_round: Sequence[np.ndarray], target: int) -> bool:
    """Whether the rounds so far hold `target` groups with a learning signal."""
    return sum(int((~np.asarray(z, bool)).sum()) for z in zero_var_by_round) >= target


@dataclasses.dataclass(frozen=True)
class Selection:
    """The groups of a step's train batch, as (round, index within the round), in consumption
    order; `padded` of them are zero-variance groups topping up a batch the rounds could not
    fill."""

    groups: tuple[tuple[int, int], ...]
    padded: int


def select_groups(zero_var_by_round: Sequence[np.ndarray], target: int) -> Selection:
    """The `target` groups that fill the batch, from each round's `zero_variance` flags (bool
    [G_r] per round): the first `target` groups with unequal rewards, topped up with the
    earliest equal-reward groups when there are fewer (module docstring)."""
    if target < 1:
        raise ValueError(f"target ({target}) must be >= 1 group.")
    order = [(r, int(g)) for r, z in enumerate(zero_var_by_round) for g in range(len(z))]
    flags = [bool(zero_var_by_round[r][g]) for r, g in order]
    if len(order) < target:
        raise ValueError(
            f"the rounds hold {len(order)} groups, fewer than the batch's {target}: every round "
            "samples a whole batch of prompts."
        )
    kept = [rg for rg, zv in zip(order, flags) if not zv][:target]
    pad = [rg for rg, zv in zip(order, flags) if zv][: target - len(kept)]
    return Selection(tuple(sorted(kept + pad)), padded=len(pad))
