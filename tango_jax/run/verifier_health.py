"""Whether the verifier still tells right from wrong: the collapse guard.

A verifier rewarded only for its final verdict can settle on one verdict for every solution
(the SmolLM2 runs of docs/real_model.md called nearly every reply wrong while ~95% were right,
and nothing warned). The guard watches each verifier update's verdicts against the truth:

    trips when, pooled over the last WINDOW verifier updates, at least ONE_CLASS of the
    verdicts are one class (CORRECT, or not CORRECT: INCORRECT or unparsable, the official
    default label) while each class of solutions (right, wrong) is at least MIN_CLASS of them.

`verifier.collapse_guard`: warn (one warning with the numbers when it trips, again only after
it has recovered), stop (the loop saves the step and exits with ExitStatus.VERIFIER_COLLAPSED,
as a preempted run exits with STOPPED), or off. The window starts empty at a resume.
"""

from __future__ import annotations

import collections
import dataclasses
import logging

from tango_jax.checkpoint.divergence import GuardAction

log = logging.getLogger(__name__)

WINDOW = 3  # verifier updates pooled
ONE_CLASS = 0.95  # share of verdicts in one class that counts as one-sided
MIN_CLASS = 0.10  # each class of solutions must be at least this share for the test to apply


@dataclasses.dataclass(frozen=True)
class UpdateVerdicts:
    """One verifier update's counts: its judgments, those that say CORRECT, and those whose
    solution is right."""

    judgments: int
    said_correct: int
    right: int

    @classmethod
    def from_metrics(cls, out: dict[str, float]) -> UpdateVerdicts:
        """From a verifier step's metrics (`verifier/verdicts`, `verifier/predicted_correct`,
        `verifier/solutions_right`)."""
        n = int(out["verifier/verdicts"])
        said = round(out["verifier/predicted_correct"] * n)
        return cls(n, said, round(out["verifier/solutions_right"] * n))


@dataclasses.dataclass(frozen=True)
class Collapse:
    """What tripped the guard: the pooled shares over `updates` verifier updates."""

    updates: int
    judgments: int
    said_correct: float  # share of verdicts CORRECT
    right: float  # share of judged solutions that are right

    def message(self, step: int) -> str:
        one = "CORRECT" if self.said_correct >= 0.5 else "INCORRECT or unparsable"
        share = max(self.said_correct, 1 - self.said_correct)
        return (
            f"the verifier has collapsed to one verdict at step {step}: over its last "
            f"{self.updates} updates it called {share:.0%} of {self.judgments} judged solutions "
            f"{one}, while {self.right:.0%} of them were right. Its verdicts no longer tell "
            "right from wrong, so its step rewards carry no information (docs/verifier.md: "
            "a balanced start, a lower learning rate, a KL anchor, more verifications)."
        )


class CollapseGuard:
    """Feeds on each verifier update's verdicts (`observe`); says when they are one-sided."""

    def __init__(self, action: GuardAction | str = GuardAction.WARN, window: int = WINDOW):
        self.action = GuardAction(action)
        self.window: collections.deque[UpdateVerdicts] = collections.deque(maxlen=window)
        self.tripped = False  # tripped at the last update (warn: no second warning until clear)

    def observe(self, update: UpdateVerdicts) -> Collapse | None:
        """The collapse seen over the last `window` updates including `update`, else None.
        Off: always None. Only a newly tripped guard returns it (warn logs it once)."""
        if self.action is GuardAction.OFF:
            return None
        self.window.append(update)
        collapse = self.collapse()
        newly = collapse is not None and not self.tripped
        self.tripped = collapse is not None
        return collapse if newly else None

    def collapse(self) -> Collapse | None:
        """The pooled window, if it is full and one-sided while both classes are present."""
        if len(self.window) < self.window.maxlen:
            return None
        n = sum(u.judgments for u in self.window)
        if n == 0:
            return None
        said = sum(u.said_correct for u in self.window) / n
        right = sum(u.right for u in self.window) / n
        one_sided = max(said, 1 - said) >= ONE_CLASS
        both_classes = min(right, 1 - right) >= MIN_CLASS
        return Collapse(len(self.window), n, said, right) if one_sided and both_classes else None
