"""What keeps a run's checkpoints good: a non-finite step stops the run before it is saved,
and a damaged step is skipped on restore and moved aside (never deleted).

    check_finite(metrics, role="generator", step=step, checkpointer=ckpt)  # before saving

Damage: `restore(None, ...)` and `host(None)` verify the latest step (every item readable,
every restored float array finite); if it fails (one log line), the previous step is tried,
down to the oldest. Once one is read, the newer ones that failed are moved aside, whole, to
`<directory>_damaged/<step>` (never deleted). If none is readable, `NoReadableCheckpointError`
and nothing is moved (every step failing points at the reader: memory, devices). A target
that does not match the stored tree (`CheckpointMismatchError`) is the caller's error and
never moves a checkpoint. A read-only checkpointer skips a damaged step without moving it.
With several processes a step that fails on any of them fails on all (`on_every_process`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from tango_jax.parallel.distributed import fetch

log = logging.getLogger(__name__)

DAMAGED_SUFFIX = "_damaged"  # an unreadable step is moved to <directory>_damaged/<step>


class NonFiniteError(RuntimeError):
    """A train step produced a non-finite loss or gradient norm; the run must stop."""


class NoReadableCheckpointError(RuntimeError):
    """Every checkpoint of the run was unreadable (each was moved aside, none deleted)."""


class CheckpointMismatchError(ValueError):
    """The restore target differs from the stored tree (a different model or optimizer): a
    wrong target, not a damaged checkpoint, so no fall-back to an older step."""


# --- damage ------------------------------------------------------------------------------------


def latest_readable(
    directory: Path, steps: list[int], read: Callable[[int], Any], set_aside: Callable[[int], None]
) -> tuple[int, Any]:
    """(step, read(step)) for the newest of `steps` (ascending, finalised) that `read` reads.
    The newer steps that failed are set aside (kept, never deleted) once an older one has been
    read: when every step fails, the cause is more likely the reader's (memory, devices) than
    damage to all of them, and nothing is moved. A target mismatch propagates: it is no
    damage."""
    if not steps:
        raise FileNotFoundError(f"{directory}: no finalised checkpoint to restore.")
    failed: dict[int, Exception] = {}
    for step in reversed(steps):
        try:
            value, error = read(step), None
        except CheckpointMismatchError:
            raise
        except Exception as e:  # orbax, tensorstore and JSON raise many error types
            value, error = None, e
        # Every process takes the same decision: a step unreadable on any one of them is
        # unreadable for all (each reads only its own shards, so one may fail alone).
        if not on_every_process(error is None):
            error = error or RuntimeError("unreadable on another process")
            log.warning("checkpoint step %d is unreadable (%s)", step, _one_line(error))
            failed[step] = error
            continue
        for bad in failed:
            set_aside(bad)
        return step, value
    errors = "; ".join(f"step {s}: {_one_line(e)}" for s, e in failed.items())
    raise NoReadableCheckpointError(
        f"no readable checkpoint in {directory}: every step failed to restore "
        f"({errors}). Nothing was moved or deleted. If the files are damaged, move the run's "
        "checkpoints aside and start the RL over from its SFT checkpoints (a new run_dir)."
    )


def on_every_process(flag: bool) -> bool:
    """`flag` and-ed over all processes (a collective when there are several)."""
    if jax.process_count() == 1:
        return flag
    return bool(np.all(multihost_utils.process_allgather(np.array(flag))))


def move_aside(directory: Path, step: int) -> Path:
    """Moves `directory`/<step> to <directory>_damaged/<step> (a suffix .1, .2, ... if that is
    taken); returns where it went. The caller reloads its checkpoint manager."""
    root = directory.with_name(directory.name + DAMAGED_SUFFIX)
    root.mkdir(exist_ok=True)
    dest, k = root / str(step), 1
    while dest.exists():  # a step damaged twice (resumed, saved again, damaged again)
        dest, k = root / f"{step}.{k}", k + 1
    os.replace(directory / str(step), dest)
    return dest


@jax.jit
def _finite_flags(leaves: list[jax.Array]) -> jax.Array:
    return jnp.stack([jnp.isfinite(x).all() for x in leaves])


def all_finite(leaves: list[Any]) -> list[bool]:
    """Whether each leaf is finite everywhere. One jitted program per device set: an array
    spread over several processes is reduced with collectives, which must run in the same
    order on every process (separate eager reductions, each with its own collective, deadlock
    gloo on CPUs); its small result is then read on every process (`fetch`)."""
    ok: list[bool] = [True] * len(leaves)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, x in enumerate(leaves):
        if isinstance(x, jax.Array):
            groups.setdefault(tuple(sorted(d.id for d in x.sharding.device_set)), []).append(i)
        else:
            ok[i] = bool(np.isfinite(np.asarray(x)).all())
    for idx in groups.values():  # insertion order: the tree's, the same on every process
        flags = fetch(_finite_flags([leaves[i] for i in idx]))
        for i, good in zip(idx, flags):
            ok[i] = bool(good)
    return ok


def _one_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"
