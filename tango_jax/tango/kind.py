"""The two roles of Tango, generator and verifier: one enum that configs, the schedule, the
loop, checkpoints and evaluation share (like tunix's `Role` in `common/datatypes.py`)."""

from __future__ import annotations

import enum


class Kind(enum.Enum):
    """A role, generator or verifier, and so what a global step trains; the value is the
    role's name in configs, metrics and run directories."""

    GENERATOR = "generator"
    VERIFIER = "verifier"
