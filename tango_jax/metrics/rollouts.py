"""Rollout logs: what the generator wrote and what the verifier said about it, every k steps.

    log = RolloutLog(run_dir, cfg.log_rollouts, after_step=restored_step, wandb=sink)
    if log.due(step):
        log.write(step, rows, phase="generator")    # rows: JSON-able dicts, one per solution
    rows = read_rollouts(run_dir)                   # every logged row, in step order

Files in run_dir:
  rollouts/step_000012.jsonl   one JSON object per generator solution of global step 12, with
                               the verifier's judgments of it (the fields: run/rollout_rows.py,
                               docs/outputs.md)

Which steps: the first (step 1) and every `every_steps`-th; 0 turns the log off. Size: at most
`max_rows` rows per logged step (the caller takes whole groups of the first problems) and every
text cut at `max_chars` characters (a cut text ends with "...[+N chars]"), so a logged step
holds at most about max_rows x (2 + verifications per solution) x max_chars characters.

Resume: a step's file is written whole (a temporary file, then a rename). A run resumed from
checkpoint step N first removes the files of steps after N, written by the attempt that
crashed after its last checkpoint; the resumed run writes them again (the same rollouts, since
sampling seeds depend only on the step). So each logged step has exactly one file, from the
run that continued. W&B: with a sink (config `wandb.enable`), each logged step is also a W&B
table `rollouts/<phase>`, one row per solution, nested lists as JSON text.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tango_jax.schema import at_least, check_fields

if TYPE_CHECKING:
    from tango_jax.metrics.wandb import WandbSink

ROLLOUTS_SUBDIR = "rollouts"
_FILE = re.compile(r"step_(\d+)\.jsonl")


@dataclasses.dataclass(frozen=True)
class RolloutLogConfig:
    every_steps: int = 10  # log step 1 and every k-th global step (0: no rollout log)
    max_rows: int = 16  # generator solutions per logged step: whole groups of the first problems
    max_chars: int = 4000  # each text (prompt, solution, verification) cut to this length

    def __post_init__(self):
        check_fields(
            self,
            {
                "every_steps": at_least(0, " (0 turns the rollout log off)"),
                "max_rows": at_least(1),
                "max_chars": at_least(1),
            },
        )


def step_file(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / ROLLOUTS_SUBDIR / f"step_{step:06d}.jsonl"


def logged_steps(run_dir: str | os.PathLike) -> list[int]:
    """The steps with a rollout file, in order."""
    folder = Path(run_dir) / ROLLOUTS_SUBDIR
    found = (_FILE.fullmatch(p.name) for p in folder.glob("step_*.jsonl"))
    return sorted(int(m.group(1)) for m in found if m)


def read_rollouts(run_dir: str | os.PathLike, steps: Sequence[int] | None = None) -> list[dict]:
    """The logged rows of `steps` (default: every logged step), in step order."""
    rows = []
    for step in logged_steps(run_dir) if steps is None else steps:
        text = step_file(run_dir, step).read_text()
        rows += [json.loads(line) for line in text.splitlines() if line.strip()]
    return rows


def _bounded(value: Any, max_chars: int) -> Any:
    """`value` with every string longer than `max_chars` cut and every non-finite float as
    None (strict JSON, as in metrics.jsonl), in nested lists and dicts too."""
    if isinstance(value, str) and len(value) > max_chars:
        return f"{value[:max_chars]}...[+{len(value) - max_chars} chars]"
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _bounded(v, max_chars) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_bounded(v, max_chars) for v in value]
    return value


class RolloutLog:
    """Writes the rollout files of one run (process 0 only; the loop makes no log elsewhere).

    after_step: the checkpoint step the run continues from (0 for a new run); files of later
    steps are removed. wandb: also log each step as a W&B table (not closed here: the metrics
    writer owns the sink).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        cfg: RolloutLogConfig,
        *,
        after_step: int = 0,
        wandb: WandbSink | None = None,
    ):
        self.run_dir, self.cfg, self._wandb = Path(run_dir), cfg, wandb
        folder = self.run_dir / ROLLOUTS_SUBDIR
        for step in logged_steps(self.run_dir):
            if step > after_step:
                step_file(self.run_dir, step).unlink()
        for tmp in folder.glob(".step_*.tmp-*"):  # a write the crash interrupted
            tmp.unlink()

    @property
    def max_rows(self) -> int:
        return self.cfg.max_rows

    def due(self, step: int) -> bool:
        every = self.cfg.every_steps
        return every > 0 and (step == 1 or step % every == 0)

    def write(self, step: int, rows: Sequence[Mapping[str, Any]], *, phase: str) -> Path:
        """Step `step`'s rows (at most `max_rows`, texts cut at `max_chars`) as its file, and
        as a W&B table `rollouts/<phase>` when W&B is on. Returns the file's path."""
        rows = [_bounded(dict(r), self.cfg.max_chars) for r in rows[: self.cfg.max_rows]]
        path = step_file(self.run_dir, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text("".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))
        os.replace(tmp, path)
        if self._wandb is not None and rows:
            self._wandb.log_table(step, f"{ROLLOUTS_SUBDIR}/{phase}", rows)
        return path
