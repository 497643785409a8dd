"""One metrics path: a JSON line per step plus TensorBoard, phase timers and a progress line.

    writer = MetricsWriter(run_dir, resume_step=restored_step_or_None)
    timer = PhaseTimer()
    with timer("generate") as phase:
        rollouts = sampler.generate(...)
        phase.tokens = rollouts.num_tokens
    writer.write(step, {"generator/reward/mean": r, **timer.metrics()}, phase="generator")
    writer.close()

Files in `run_dir`:
  metrics.jsonl   one JSON object per step: {"step": int, "time": unix seconds, "phase": str
                  or null, "<hierarchical/name>": float or null, ...}. Non-finite values are
                  written as null, so every line is strict JSON (`read_metrics` turns them back
                  into NaN via `metric_columns`).
  tensorboard/    tensorboardX event files with the same names and steps.
  wandb/          with a `tracking.WandbSink` (config `wandb.enable`): the same steps in a
                  Weights & Biases run (offline runs are stored here).

Names are hierarchical (`generator/...`, `verifier/...`, `rollout/...`, `perf/...`): at least
two `/`-separated parts, no spaces. Steps are strictly increasing, one line per step.

Resume: a run restored from checkpoint step N opens the writer with `resume_step=N`. Lines of
steps > N (written by the crashed run after its last checkpoint) are removed from
metrics.jsonl, atomically, before appending; TensorBoard is told to purge its events from
step N + 1 on (`purge_step`). The loop must write step N's metrics before saving checkpoint N,
so that the line of every checkpointed step exists. Opening an existing non-empty metrics file
without `resume_step` is an error rather than a silent mix of two runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

if TYPE_CHECKING:
    from tango_jax.metrics.wandb import WandbSink

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_SUBDIR = "tensorboard"
_RESERVED = ("step", "time", "phase")


def _check_name(name: str) -> None:
    parts = name.split("/") if isinstance(name, str) else []
    if len(parts) < 2 or not all(parts) or any(c.isspace() for c in name):
        raise ValueError(
            f"metric name {name!r} must be hierarchical, like 'generator/reward/mean' or "
            "'perf/generate_s': two or more non-empty '/'-separated parts, no whitespace."
        )


def _as_float(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"metric {name!r} has value {value!r} ({type(value).__name__}); metrics are scalars "
            "(Python, NumPy or 0-d JAX numbers)."
        ) from None


def _read_lines(path: Path) -> list[dict]:
    """Parsed lines of a metrics file; a torn last line (a crash mid-write) is dropped."""
    lines = path.read_text().splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not a JSON line ({e}).") from e
    return rows


class NoMetrics:
    """The metrics writer of trainer processes other than 0 (jax.distributed): they compute
    the same metrics, process 0 alone writes them."""

    def write(self, step, metrics, *, phase=None) -> None:
        pass

    def close(self) -> None:
        pass


class MetricsWriter:
    """Appends one JSON line per step to `run_dir/metrics.jsonl` and mirrors it to TensorBoard.

    resume_step: the checkpoint step this run resumed from (None for a fresh run); see the
    module docstring. tensorboard: also write `run_dir/tensorboard/` event files. wandb: also
    log every step to this W&B run (`tracking.wandb_sink`; closed with the writer).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        tensorboard: bool = True,
        resume_step: int | None = None,
        wandb: WandbSink | None = None,
    ):
        self._wandb = wandb
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.last_step: int | None = None
        if self.path.exists() and self.path.stat().st_size:
            if resume_step is None:
                raise ValueError(
                    f"{self.path} already holds metrics: pass resume_step=<the restored "
                    "checkpoint step> to continue that run, or choose a new run directory."
                )
            kept = [row for row in _read_lines(self.path) if row["step"] <= resume_step]
            tmp = self.path.with_name(f".{METRICS_FILE}.tmp-{os.getpid()}")
            tmp.write_text("".join(json.dumps(row) + "\n" for row in kept))
            os.replace(tmp, self.path)
            self.last_step = resume_step
        self._file = self.path.open("a")
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            self._tb = SummaryWriter(str(self.run_dir / TENSORBOARD_SUBDIR), purge_step=purge)

    @property
    def wandb(self) -> WandbSink | None:
        """The W&B run this writer logs to (the rollout log adds its tables to it)."""
        return self._wandb

    def write(self, step: int, metrics: Mapping[str, Any], *, phase: str | None = None) -> None:
        """One line for `step` (strictly after the previous one): names -> scalars.

        phase: what the step trained (e.g. "generator", "verifier", "warmup"); stored in the
        JSON line only. The line is flushed and fsynced before returning.
        """
        step = int(step)
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(
                f"step {step} written after step {self.last_step}: write each step once, in "
                "order (merge a step's metrics into one dict first)."
            )
        values = {}
        for name, value in metrics.items():
            _check_name(name)
            values[name] = _as_float(name, value)
        row = {"step": step, "time": time.time(), "phase": phase}
        row |= {k: (v if math.isfinite(v) else None) for k, v in values.items()}
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        if self._tb is not None:
            for name, value in values.items():
                self._tb.add_scalar(name, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(step, values, phase)
        self.last_step = step

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """The rows of `run_dir/metrics.jsonl` (non-finite values are None)."""
    return _read_lines(Path(run_dir) / METRICS_FILE)


def metric_columns(rows: list[dict]) -> dict[str, np.ndarray]:
    """Rows -> columns for plotting: "step" int64 [S], every metric float64 [S] with NaN where a
    step lacks it or it was non-finite. ("time" stays float; "phase" is dropped.)"""
    names = sorted({k for row in rows for k in row} - set(_RESERVED))
    cols = {"step": np.asarray([r["step"] for r in rows], np.int64)}
    cols["time"] = np.asarray([r["time"] for r in rows], np.float64)
    for name in names:
        cols[name] = np.asarray(
            [np.nan if r.get(name) is None else r[name] for r in rows], np.float64
        )
    return cols


# --- timing -----------------------------------------------------------------------------------


@dataclasses.dataclass
class PhaseRecord:
    seconds: float = 0.0
    tokens: int = 0


class PhaseTimer:
    """Wall seconds (and tokens) per phase of one step, as `perf/...` metrics.

    JAX dispatches asynchronously: a phase's time is only right if its work is finished at
    the end of the block (fetch its results to the host, as `Trainer.step` does).
    """

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._phases: dict[str, PhaseRecord] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[PhaseRecord]:
        """Times the block into `phase` (repeated blocks add up); set `.tokens` inside it."""
        _check_name(f"perf/{phase}_s")
        record = self._phases.setdefault(phase, PhaseRecord())
        start = self._clock()
        try:
            yield record
        finally:
            record.seconds += self._clock() - start

    def metrics(self, *, reset: bool = True) -> dict[str, float]:
        """`perf/<phase>_s` per phase, `perf/<phase>_tokens_per_s` where tokens were counted,
        and `perf/step_s` (their sum); `reset` starts the next step from zero."""
        out = {}
        for phase, rec in self._phases.items():
            out[f"perf/{phase}_s"] = rec.seconds
            if rec.tokens:
                out[f"perf/{phase}_tokens_per_s"] = rec.tokens / max(rec.seconds, 1e-9)
        out["perf/step_s"] = sum(rec.seconds for rec in self._phases.values())
        if reset:
            self._phases = {}
        return out


# --- progress display --------------------------------------------------------------------------


class Progress:
    """A progress line for long phases (generation of thousands of samples, evaluation).

    On a terminal: one line on stderr redrawn at most every 0.1 s. Otherwise (log files): a
    line every `log_interval_s`, so short phases leave nothing in the log and long ones leave
    a heartbeat. `total=None` shows counts and rate only.

        with Progress("generate", total=len(prompts)) as bar:
            for batch in batches:
                ...
                bar.update(len(batch))
    """

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        *,
        stream: TextIO | None = None,
        log_interval_s: float = 60.0,
        clock=time.monotonic,
    ):
        self.desc, self.total, self.count = desc, total, 0
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._interval = 0.1 if self._tty else log_interval_s
        self._clock = clock
        self._start = self._last = clock()
        self._drawn_count: int | None = None  # count at the last line written

    def _line(self) -> str:
        elapsed = self._clock() - self._start
        rate = self.count / elapsed if elapsed > 0 else 0.0
        text = f"{self.desc}: {self.count}"
        if self.total:
            text += f"/{self.total} ({100 * self.count / self.total:.0f}%)"
        text += f" {rate:.1f}/s {elapsed:.0f}s"
        if self.total and rate > 0:
            text += f" eta {max(self.total - self.count, 0) / rate:.0f}s"
        return text

    def _emit(self) -> None:
        if self._tty:
            self._stream.write("\r\x1b[K" + self._line())
        else:
            self._stream.write(self._line() + "\n")
        self._stream.flush()
        self._drawn_count = self.count

    def update(self, n: int = 1) -> None:
        self.count += n
        now = self._clock()
        if now - self._last >= self._interval:
            self._last = now
            self._emit()

    def close(self) -> None:
        """Final state: the finished line on a terminal; in logs only after earlier lines and
        only if the count moved since the last one."""
        if self._tty:
            self._emit()
            self._stream.write("\n")
            self._stream.flush()
        elif self._drawn_count is not None and self._drawn_count != self.count:
            self._emit()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: 45s, 3m05s, 2h07m."""
    s = max(round(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class StepClock:
    """The time left, for the lines a long loop prints (`step 12/88 ... eta 3m05s`).

        clock = StepClock(total=88)
        ... step 12 finishes ...
        clock.eta(12)                             # "eta 3m05s"

    The estimate is the mean wall time per step since the first call, times the steps left.
    The first call comes after the first step, which compiles (minutes at 7B), so compilation
    is left out; before a second call there is no estimate ("eta ?"). It may be called every
    step or every k steps. Evaluations and checkpoints inside the loop count as part of the
    steps they follow, as they recur.
    """

    def __init__(self, total: int, *, clock=time.monotonic):
        self.total, self._clock = total, clock
        self._first: tuple[int, float] | None = None  # (step, time) of the first call

    def eta(self, step: int) -> str:
        """Call when `step` has finished."""
        now = self._clock()
        if self._first is None:
            self._first = (step, now)
        if step >= self.total:
            return "eta 0s"
        first_step, first_time = self._first
        if step <= first_step:
            return "eta ?"
        per_step = (now - first_time) / (step - first_step)
        return f"eta {duration_text(per_step * (self.total - step))}"
