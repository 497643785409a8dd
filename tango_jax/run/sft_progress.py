"""An SFT stage's progress on disk, so that a stopped stage continues where it stopped.

    progress = SFTProgress(run_dir / "sft_checkpoints" / "generator", "generator", stop=stop,
                           every_minutes=30)
    first = progress.restore(trainer, rng)        # 1, or the step after the saved one
    for step in range(first, steps + 1):
        ...
        progress.after_step(step, trainer, rng, model_info)   # raises SFTStopped on a signal
    progress.finished()                           # the stage's HF checkpoint is written

A checkpoint holds the trainer (params, optimizer state, step) and the example sampler's
NumPy generator state, so the continued stage draws the same batches and ends with the same
weights as an uninterrupted one. It is written on a stop signal (run/signals.py) and every
`checkpoint.every_minutes`, only the newest is kept, and the directory is deleted once the
stage's HF checkpoint (`run_dir/sft/<role>`) exists.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import jax
import numpy as np

from tango_jax.checkpoint.run import ModelInfo, RunCheckpointer
from tango_jax.run.signals import StopPoint, StopSignals

log = logging.getLogger("tango_jax")


class SFTStopped(Exception):
    """A stop signal ended an SFT stage after saving its progress."""


def saved_sft_step(directory: Path) -> int | None:
    """The step of the SFT progress saved in `directory` (None: nothing saved)."""
    if not directory.is_dir():
        return None
    with RunCheckpointer(directory, keep=1, read_only=True) as reader:
        return reader.latest_step()


class SFTProgress:
    def __init__(
        self, directory: Path, role: str, *, stop: StopSignals | None, every_minutes: float
    ):
        self.directory, self.role = directory, role
        self.point = StopPoint(stop, every_minutes)
        self.stop = stop
        self._writer: RunCheckpointer | None = None

    def restore(self, trainer, rng: np.random.Generator) -> int:
        """Loads the saved progress into `trainer` and `rng`; returns the first step to run."""
        if saved_sft_step(self.directory) is None:
            return 1
        with RunCheckpointer(self.directory, keep=1, read_only=True) as reader:
            states, host = reader.restore(None, {self.role: trainer.state_dict()})
        trainer.load_state_dict(states[self.role])
        rng.bit_generator.state = host["rng"]
        log.info("SFT of the %s continues after step %d", self.role, host["step"])
        return host["step"] + 1

    def after_step(self, step: int, trainer, rng: np.random.Generator, info: ModelInfo) -> None:
        """Saves on a stop signal or when `every_minutes` have passed (decided with the other
        processes: collective); raises SFTStopped after the save on a signal."""
        stop, timed = self.point.agree()
        if not (stop or timed):
            return
        if self._writer is None:
            self._writer = RunCheckpointer(self.directory, keep=1, models={self.role: info})
        host = {"step": step, "rng": rng.bit_generator.state}
        self._writer.save(step, {self.role: trainer.state_dict()}, host)
        self.point.saved()
        if stop:
            self._writer.close()
            self._writer = None
            raise SFTStopped(
                f"stopped ({self.stop.signal_name or 'a signal to another process'}) after SFT "
                f"step {step} of the {self.role}, "
                f"saved in {self.directory}"
            )

    def finished(self) -> None:
        """The stage's result is saved: its progress is no longer needed."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if jax.process_index() == 0:
            shutil.rmtree(self.directory, ignore_errors=True)
