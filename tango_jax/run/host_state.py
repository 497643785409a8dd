"""The loop's host state: what it keeps between steps besides the trainers' device state, and
saves with every checkpoint (as the JSON item `host_state`, so it resumes exactly).

    state = HostState()                                  # a fresh run
    ckpt.save(step, trainers, state.to_dict())
    state = HostState.from_dict(reader.host()["host_state"])   # resume

The JSON layout (`step`, `updates`, `class_balance`, `data`) is the one checkpoints have always
had, so checkpoints written before this class existed resume unchanged; `verifier_data` is
written only by runs with a verifier stream of its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tango_jax.data.datasets import StreamPosition
from tango_jax.tango.class_balance import ClassBalanceState
from tango_jax.tango.kind import Kind


def _no_updates() -> dict[str, int]:
    return {kind.value: 0 for kind in Kind}


@dataclasses.dataclass(frozen=True)
class HostState:
    """step: the last finished global step (0: none); updates: role name -> updates so far (the
    weight version its sampler serves); class_balance: the verifier's class-weight state;
    data: where the prompt stream stands (None before the first save: the stream's start);
    verifier_data: where the verifier's own stream stands (`data.verifier_stream`; None: the
    verifier shares `data`'s stream, or has not started its own)."""

    step: int = 0
    updates: dict[str, int] = dataclasses.field(default_factory=_no_updates)
    class_balance: ClassBalanceState = dataclasses.field(default_factory=ClassBalanceState)
    data: StreamPosition | None = None
    verifier_data: StreamPosition | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "step": self.step,
            "updates": dict(self.updates),  # a copy: a checkpoint is saved in the background
            "class_balance": self.class_balance.to_dict(),
        }
        if self.data is not None:
            out["data"] = dataclasses.asdict(self.data)
        if self.verifier_data is not None:
            out["verifier_data"] = dataclasses.asdict(self.verifier_data)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostState:
        return cls(
            step=int(d["step"]),
            updates={str(k): int(v) for k, v in d["updates"].items()},
            class_balance=ClassBalanceState.from_dict(d["class_balance"]),
            data=StreamPosition(**d["data"]) if "data" in d else None,
            verifier_data=StreamPosition(**d["verifier_data"]) if "verifier_data" in d else None,
        )
