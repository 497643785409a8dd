"""Stopping a run on a signal, with a checkpoint, at a step every process agrees on.

    with StopSignals() as stop:                  # SIGTERM, SIGINT, SIGUSR1
        TangoLoop(cfg, mesh, stop=stop).run()    # ends after the step in flight, saved
    sys.exit(ExitStatus.STOPPED if stop.requested else ExitStatus.OK)

What a cluster sends: SLURM sends SIGTERM on preemption, `scancel` and the time limit (then
SIGKILL after its KillWait, 30 s by default), and the signal asked for by
`sbatch --signal=B:USR1@SECONDS` ahead of the time limit; a terminal sends SIGINT (Ctrl-C).
The first of them only sets a flag (a Python handler runs between bytecodes of the main thread,
so a jitted step in flight is never cut); the loop looks at the flag at the end of every step,
saves that step as a checkpoint (both roles, host state, data position, like a periodic one),
flushes the metrics, stops the vLLM servers it started and returns; the process then exits
with `ExitStatus.STOPPED`. A second signal exits at once (the default action of that signal,
so the status is 128 + its number: 143 for SIGTERM, 130 for SIGINT) without a checkpoint.

Several trainer processes (`jax.distributed`): a signal may reach some of them only, or reach
them at different steps. `StopPoint.agree` gathers every process's flags at the end of each
step (one all-gather of a few integers), so all of them stop after the same step and write one
consistent checkpoint; the time-based checkpoint (`checkpoint.every_minutes`) is decided by
process 0's clock the same way.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import time
from types import FrameType

import jax
import numpy as np
from jax.experimental import multihost_utils

log = logging.getLogger("tango_jax")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class ExitStatus(enum.IntEnum):
    """The statuses `python -m tango_jax.train` exits with (docs/cluster.md)."""

    OK = 0  # the run finished
    ERROR = 1  # a config error, a refused resume, a stop on a non-finite or diverged step
    RUN_DIR_LOCKED = 73  # another live run holds run_dir (run/lock.py); nothing was written
    STOPPED = 75  # stopped by a signal after saving a checkpoint: launch again to resume
    # the verifier collapsed to one verdict (verifier.collapse_guard=stop); the step is saved
    VERIFIER_COLLAPSED = 76
    # 128 + N: a second signal N (143 SIGTERM, 130 SIGINT, 138 SIGUSR1): no checkpoint


class StopSignals:
    """Catches STOP_SIGNALS while entered (main thread only). `requested`: the first signal
    arrived; its name is `signal_name`. A second signal restores the default action and
    re-sends itself: the process ends at once."""

    def __init__(self, signals: tuple[signal.Signals, ...] = STOP_SIGNALS):
        self.signals = signals
        self.signal_name: str | None = None
        self._previous: dict[signal.Signals, object] = {}

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            log.warning("%s again: exiting at once, without a checkpoint", name)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signal_name = name
        log.warning(
            "%s: the run stops after the step in flight and saves it as a checkpoint; send "
            "it again to exit at once without one",
            name,
        )

    def __enter__(self) -> StopSignals:
        for s in self.signals:
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()


class StopPoint:
    """The end-of-step decisions every process must take together: stop (a signal reached any
    process) and save because `every_minutes` have passed since the last save (process 0's
    clock). `stop` None: no signal handling (library use, tests of the loop alone)."""

    def __init__(self, stop: StopSignals | None, every_minutes: float):
        self.stop, self.every_s = stop, every_minutes * 60.0
        self.last_save = time.monotonic()

    def saved(self) -> None:
        """A checkpoint was just saved: the time-based clock restarts."""
        self.last_save = time.monotonic()

    def agree(self) -> tuple[bool, bool]:
        """(stop now, save now for the time), the same on every process. Collective when there
        are several processes: every process calls it once at the end of every step."""
        stop = self.stop is not None and self.stop.requested
        due = self.every_s > 0 and time.monotonic() - self.last_save >= self.every_s
        if jax.process_count() == 1:
            return stop, due
        flags = np.asarray(multihost_utils.process_allgather(np.array([stop, due], np.int32)))
        return bool(flags[:, 0].any()), bool(flags[0, 1])
