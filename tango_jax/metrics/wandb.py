"""Optional Weights & Biases logging beside metrics.jsonl and TensorBoard (config `wandb`).

    sink = wandb_sink(cfg.wandb, run_dir, run_name=cfg.name, config=to_dict(cfg))
                                              # None unless wandb.enable (and process 0)
    MetricsWriter(run_dir, wandb=sink)        # every written step is also logged to W&B
    RolloutLog(run_dir, cfg.log_rollouts, wandb=sink)   # and the rollout logs, as tables

Off by default. `wandb.enable=True` logs each step's metrics (same names, same step) to the W&B
run `wandb.name` (default: the config's `name`) of `wandb.project`; `wandb.mode=offline`
writes it under run_dir/wandb/ without a network (upload later: `wandb sync
run_dir/wandb/offline-run-*`). Only process 0 logs. The W&B run id is kept in
run_dir/wandb_run_id, so a resumed run continues the same W&B run; steps it already logged
before the crash are not logged again (W&B keeps its steps increasing; a resumed run repeats
them exactly). Only this module imports `wandb`, an optional dependency
(`pip install 'tango_jax[wandb]'`).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import json
import math
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tango_jax.schema import ConfigError, Rule, check_fields

RUN_ID_FILE = "wandb_run_id"


class WandbMode(enum.Enum):
    ONLINE = "online"  # streams to the W&B server (needs `wandb login` or WANDB_API_KEY)
    OFFLINE = "offline"  # writes run_dir/wandb/ only; `wandb sync` uploads it later


@dataclasses.dataclass(frozen=True)
class WandbConfig:
    enable: bool = False  # also log every step's metrics to Weights & Biases
    project: str = "tango_jax"
    entity: str = ""  # W&B team or user; "" = your default entity
    name: str = ""  # the W&B run's display name; "" = the config's `name`
    group: str = ""  # e.g. one group for the seeds of one experiment
    tags: tuple[str, ...] = ()
    mode: WandbMode = WandbMode.ONLINE  # online | offline (no network needed)

    def __post_init__(self):
        check_fields(self, {"project": Rule(bool, "must not be empty.")})


def installed() -> bool:
    return importlib.util.find_spec("wandb") is not None


def check_installed(cfg: WandbConfig) -> None:
    """ConfigError when W&B logging is on but the package is missing (called by preflight)."""
    if cfg.enable and not installed():
        raise ConfigError(
            "config.wandb.enable (True) needs the wandb package, which is not installed: "
            "pip install 'tango_jax[wandb]' (or pip install wandb), or set wandb.enable=False."
        )


def _run_id(run_dir: Path) -> str:
    """The W&B run id of this run directory, created on first use."""
    path = run_dir / RUN_ID_FILE
    if path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    run_id = secrets.token_hex(8)
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(run_id + "\n")
    return run_id


class WandbSink:
    """One W&B run that receives the rows a `MetricsWriter` writes."""

    def __init__(self, run: Any):
        self._run = run

    @property
    def run_id(self) -> str:
        return self._run.id

    def log(self, step: int, values: Mapping[str, float], phase: str | None) -> None:
        """Non-finite values are left out (metrics.jsonl records them as null)."""
        row = {k: v for k, v in values.items() if math.isfinite(v)}
        if phase is not None:
            row["phase"] = phase
        self._run.log(row, step=step)

    def log_table(self, step: int, key: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """`rows` (dicts, the first one's keys as columns) as the W&B table `key` at `step`;
        lists and dicts in cells become JSON text."""
        import wandb

        columns = list(rows[0])
        data = [[_cell(row.get(c)) for c in columns] for row in rows]
        self._run.log({key: wandb.Table(columns=columns, data=data)}, step=step)

    def close(self) -> None:
        self._run.finish()


def _cell(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, list | dict) else value


def wandb_sink(
    w: WandbConfig,
    run_dir: str | Path,
    *,
    run_name: str,
    config: Mapping[str, Any],
    job_type: str = "rl",
) -> WandbSink | None:
    """The W&B run for the metrics of `run_dir` (None when `w.enable` is off, or on processes
    other than 0): run `w.name` (default `run_name`, the config's `name`; SFT stages, job_type
    `sft_<role>`, get `<name>-<job_type>`), in group `w.group` (default `run_name`, so a run and
    its SFT stages are grouped), with `config` (the whole run config, as plain values) as the
    W&B run config. It takes only what it uses, so it knows nothing of the run config's type."""
    if not w.enable:
        return None
    import jax

    if jax.process_index() != 0:
        return None
    check_installed(w)
    import wandb

    run_dir = Path(run_dir)
    name = w.name or run_name
    run = wandb.init(
        project=w.project,
        entity=w.entity or None,
        name=name if job_type == "rl" else f"{name}-{job_type}",
        group=w.group or run_name,
        tags=list(w.tags) or None,
        job_type=job_type,
        config=dict(config),
        dir=str(run_dir),
        id=_run_id(run_dir),
        resume="allow",
        mode=w.mode.value,
        settings=wandb.Settings(console="off", silent=True),
    )
    return WandbSink(run)
