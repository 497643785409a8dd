"""Process-level scoring of a verifier, the way ProcessBench does it (Zheng et al., 2024).

Every item is a solution whose first wrong step is known: `label` is its 0-based index, or -1
when the solution is correct throughout. A verifier's predicted error location is its first
INCORRECT step judgment (TANGO_SPEC §11: tango_jax's convention for a generative verifier that
judges every step); a verifier that judges all K steps CORRECT predicts -1 ("no error"). A
prediction that cannot be read (fewer or more judgments than steps, and none of them
INCORRECT) is `None` and counts as wrong on either kind of item.

    acc_erroneous = share of erroneous items (label >= 0) whose prediction == label
    acc_correct   = share of correct items (label == -1) whose prediction == -1
    f1            = harmonic mean of the two (0 when either is 0)

Used by the held-out evaluation of every run on the synthetic task (`eval/verifier/step_f1`,
`step_acc_erroneous`, `step_acc_correct`) and by the real ProcessBench splits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

NO_ERROR = -1


@dataclasses.dataclass(frozen=True)
class ProcessItem:
    """One ProcessBench-style item: a problem, a solution in the generator's `<step>` format
    with `num_steps` steps, and the 0-based index of its first wrong step (-1: none)."""

    question: str
    solution: str
    num_steps: int
    label: int


def predicted_error_step(step_judgments: Sequence[int], num_steps: int) -> int | None:
    """The predicted first wrong step (0-based) from a verifier's step judgments (+1 / -1).

    The first -1 wins even when the judgment count differs from `num_steps` (the location is
    then still stated); all +1 with exactly `num_steps` judgments predicts NO_ERROR; anything
    else (too few or too many judgments, all +1) is unreadable: None.
    """
    if num_steps < 0:
        raise ValueError(f"num_steps ({num_steps}) must be >= 0.")
    for i, j in enumerate(step_judgments):
        if j not in (1, -1):
            raise ValueError(f"step judgments must be +1 or -1, got {tuple(step_judgments)}.")
        if j == -1:
            return i
    return NO_ERROR if len(step_judgments) == num_steps else None


@dataclasses.dataclass(frozen=True)
class ProcessScores:
    acc_erroneous: float  # exact first-error step on solutions with an error
    acc_correct: float  # "no error" on correct solutions
    f1: float  # harmonic mean of the two
    num_erroneous: int
    num_correct: int
    unreadable: float  # share of predictions that are None

    def metrics(self, prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}step_f1": self.f1,
            f"{prefix}step_acc_erroneous": self.acc_erroneous,
            f"{prefix}step_acc_correct": self.acc_correct,
            f"{prefix}step_unreadable": self.unreadable,
        }


def harmonic_mean(a: float, b: float) -> float:
    return 2 * a * b / (a + b) if a + b > 0 else 0.0


def process_scores(labels: Sequence[int], predictions: Sequence[int | None]) -> ProcessScores:
    """ProcessBench accuracies and F1 of `predictions` (from `predicted_error_step`) against
    `labels` (first wrong step, or -1). A side with no items scores 0 (and so does the F1)."""
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions.")
    if any(y < NO_ERROR for y in labels):
        raise ValueError(f"labels must be >= -1, got {min(labels)}.")
    erroneous = [p == y for y, p in zip(labels, predictions) if y != NO_ERROR]
    correct = [p == NO_ERROR for y, p in zip(labels, predictions) if y == NO_ERROR]
    acc_e = sum(erroneous) / len(erroneous) if erroneous else 0.0
    acc_c = sum(correct) / len(correct) if correct else 0.0
    unreadable = sum(p is None for p in predictions) / len(predictions) if predictions else 0.0
    return ProcessScores(
        acc_e, acc_c, harmonic_mean(acc_e, acc_c), len(erroneous), len(correct), unreadable
    )


def no_skill_baseline(
    labels: Sequence[int], num_steps: Sequence[int], pass_rate: float
) -> ProcessScores:
    """The expected scores of a verifier with no location skill that passes as many correct
    solutions as a given one: it answers "no error" with probability `pass_rate` on every item
    and otherwise names one of the K steps uniformly at random. A verifier can raise its F1 by
    passing more correct solutions alone; beating this baseline at its own pass rate is what
    shows that it finds where errors are."""
    if len(labels) != len(num_steps):
        raise ValueError(f"{len(labels)} labels but {len(num_steps)} step counts.")
    if not 0.0 <= pass_rate <= 1.0:
        raise ValueError(f"pass_rate must lie in [0, 1], got {pass_rate}.")
    hits_e = [(1 - pass_rate) / k for y, k in zip(labels, num_steps) if y != NO_ERROR]
    n_c = sum(1 for y in labels if y == NO_ERROR)
    acc_e = sum(hits_e) / len(hits_e) if hits_e else 0.0
    acc_c = pass_rate if n_c else 0.0
    return ProcessScores(acc_e, acc_c, harmonic_mean(acc_e, acc_c), len(hits_e), n_c, 0.0)


def random_step_baseline(labels: Sequence[int], num_steps: Sequence[int]) -> ProcessScores:
    """The expected scores of a verifier that names a uniformly random location among "no
    error" and the K steps of each item (1 / (K + 1) right on either kind of item): the chance
    level that a verifier's step F1 must beat."""
    if len(labels) != len(num_steps):
        raise ValueError(f"{len(labels)} labels but {len(num_steps)} step counts.")
    hits_e = [1 / (k + 1) for y, k in zip(labels, num_steps) if y != NO_ERROR]
    hits_c = [1 / (k + 1) for y, k in zip(labels, num_steps) if y == NO_ERROR]
    acc_e = sum(hits_e) / len(hits_e) if hits_e else 0.0
    acc_c = sum(hits_c) / len(hits_c) if hits_c else 0.0
    return ProcessScores(acc_e, acc_c, harmonic_mean(acc_e, acc_c), len(hits_e), len(hits_c), 0.0)


@dataclasses.dataclass(frozen=True)
class StepRanking:
    """Threshold-free location skill of per-step error scores (`step_ranking`)."""

    auroc: float  # P(a first-error step outscores a step that is not one); ties count half
    top1: float  # share of erroneous items whose first error has the item's highest score
    gap: float  # mean score at first-error steps minus the mean at every other step
    num_erroneous: int
    num_steps: int


def step_ranking(scores: Sequence[Sequence[float]], labels: Sequence[int]) -> StepRanking:
    """How well per-step error scores (e.g. a verifier's P(INCORRECT) at each step judgment,
    every earlier judgment teacher-forced CORRECT) single out the first wrong step, whatever
    threshold turns them into judgments. A verifier can move its step F1 by moving its
    threshold alone (passing more or fewer solutions); these numbers move only when the
    scores order the steps better:

        auroc = P(score at a first-error step > score at any other step, of any item)
                (+ half the ties): 0.5 = no location skill, 1 = every first error outscores
                every other step;
        top1  = share of erroneous items whose highest-scoring step is the first error (a tie
                of m steps counts 1/m): 1/K by chance for K-step items;
        gap   = mean score at first-error steps - mean score at the other steps.

    Steps after the first error of an erroneous item and every step of a correct item
    (label -1) are the "other" steps."""
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} score lists but {len(labels)} labels.")
    pos, neg, top1 = [], [], []
    for i, (s, y) in enumerate(zip(scores, labels)):
        if y < NO_ERROR or y >= len(s):
            raise ValueError(
                f"item {i}: label {y} is not -1 or a step index of its {len(s)} steps."
            )
        for k, v in enumerate(s):
            (pos if k == y else neg).append(float(v))
        if y != NO_ERROR:
            best = max(s)
            ties = sum(v == best for v in s)
            top1.append((s[y] == best) / ties)
    if not pos or not neg:
        raise ValueError("step_ranking needs at least one first-error step and one other step.")
    p, n = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
    auroc = float(((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size))
    gap = float(np.mean(pos) - np.mean(neg))
    return StepRanking(auroc, float(np.mean(top1)), gap, len(top1), len(pos) + len(neg))
