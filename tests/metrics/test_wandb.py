"""Weights & Biases logging (tango_jax/metrics/wandb.py, config `wandb`): off by default; when on,
every step MetricsWriter writes reaches a W&B run with the same names, steps and values, read
back from the offline run's own record file (W&B's LevelDB-style log of protobuf records); a
resumed run continues the same W&B run; on without the package, preflight says how to fix it.

The tests that run W&B skip when `wandb` is not installed (it is an optional extra,
`pip install 'tango_jax[wandb]'`; CI does not install it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tango_jax.config import preflight
from tango_jax.config.run import base_config, load_run_config
from tango_jax.metrics import wandb as tracking
from tango_jax.metrics.rollouts import RolloutLog, RolloutLogConfig
from tango_jax.metrics.writer import MetricsWriter, read_metrics
from tango_jax.schema import ConfigError, to_dict

ROWS = [
    (1, {"generator/reward/mean": 0.25, "perf/step_s": 1.5}, "warmup"),
    (2, {"generator/reward/mean": 0.5, "perf/step_s": float("nan")}, "generator"),
    (3, {"generator/reward/mean": 0.75, "verifier/f1": 0.125}, "verifier"),
]


def _sink(cfg, run_dir):
    return tracking.wandb_sink(cfg.wandb, run_dir, run_name=cfg.name, config=to_dict(cfg))


def _config(run_dir: Path, **wandb):
    c = base_config()
    c.generator.model.preset = c.verifier.model.preset = "tiny-qwen2"
    c.name, c.run_dir = "tracked", str(run_dir)
    for k, v in wandb.items():
        setattr(c.wandb, k, v)
    return load_run_config(c)


def test_off_by_default_and_a_clear_error_without_the_package(tmp_path, monkeypatch):
    cfg = _config(tmp_path)
    assert not cfg.wandb.enable and _sink(cfg, tmp_path) is None
    with MetricsWriter(tmp_path, tensorboard=False, wandb=_sink(cfg, tmp_path)) as w:
        w.write(1, ROWS[0][1])
    assert not (tmp_path / "wandb").exists() and not (tmp_path / tracking.RUN_ID_FILE).exists()
    on = _config(tmp_path, enable=True, mode="offline")
    monkeypatch.setattr(tracking, "installed", lambda: False)  # as on a machine without it
    with pytest.raises(
        ConfigError, match=r"config.wandb.enable \(True\) needs the wandb package.*pip install"
    ):
        preflight.check_paths(on)


def _records(path: Path) -> list:
    """The protobuf records of a .wandb file: a 7-byte header (":W&B", magic, version), then
    LevelDB log records (crc32 4, length 2 LE, type 1: full/first/middle/last) in 32 KiB
    blocks."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, part, out = 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if kind == 0:  # zero fill
            break
        part += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(part)
            out.append(record)
            part = b""
    return out


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def _history(run_dir: Path) -> tuple[list[dict], list]:
    import wandb

    wandb.teardown()  # finish() returns before W&B's service has written the file; this waits
    (file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    records = _records(file)
    rows = [
        {_key(item): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    return rows, records


def test_offline_run_receives_every_step(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = _config(tmp_path, enable=True, mode="offline", project="tango-test", tags=("ci",))
    sink = _sink(cfg, tmp_path)
    with MetricsWriter(tmp_path, tensorboard=False, wandb=sink) as writer:
        for step, values, phase in ROWS:
            writer.write(step, values, phase=phase)
    run_id = (tmp_path / tracking.RUN_ID_FILE).read_text().strip()
    assert sink.run_id == run_id
    history, records = _history(tmp_path)
    assert [h["_step"] for h in history] == [1, 2, 3]
    for h, row in zip(history, read_metrics(tmp_path)):  # what metrics.jsonl holds
        assert h["phase"] == row["phase"]
        for name, value in row.items():
            if name in ("step", "time", "phase"):
                continue
            assert (h.get(name) is None) if value is None else h[name] == value, name
    assert "perf/step_s" not in history[1]  # NaN: left out, as jsonl's null
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.run_id, run.project, run.display_name, run.run_group, run.job_type) == (
        run_id,
        "tango-test",
        "tracked",
        "tracked",
        "rl",
    )
    assert list(run.tags) == ["ci"]
    config = {_key(i): json.loads(i.value_json) for i in run.config.update}
    assert config["name"] == "tracked" and config["wandb"]["mode"] == "offline"
    assert math.isclose(config["algorithm"]["verifier_format_weight"], 0.8)


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = _config(tmp_path, enable=True, mode="offline")
    with MetricsWriter(tmp_path, tensorboard=False, wandb=_sink(cfg, tmp_path)) as w:
        w.write(1, ROWS[0][1])
    first = (tmp_path / tracking.RUN_ID_FILE).read_text()
    sink = _sink(cfg, tmp_path)
    with MetricsWriter(tmp_path, tensorboard=False, resume_step=1, wandb=sink) as w:
        w.write(2, ROWS[1][1])
    assert sink.run_id == first.strip()
    wandb.teardown()  # the file written (see _history)
    files = sorted(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))  # one per attempt
    runs = [r.run for f in files for r in _records(f) if r.WhichOneof("record_type") == "run"]
    assert runs and {r.run_id for r in runs} == {first.strip()}
    steps = [
        int(i.value_json)
        for f in files
        for r in _records(f)
        if r.WhichOneof("record_type") == "history"
        for i in r.history.item
        if _key(i) == "_step"
    ]
    assert 2 in steps


def test_rollout_logs_become_wandb_tables(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = _config(tmp_path, enable=True, mode="offline")
    rows = [
        {"step": 1, "solution": "so 3", "correct": True, "verifications": [{"verdict": 1}]},
        {"step": 1, "solution": "so 4", "correct": False, "verifications": []},
    ]
    with MetricsWriter(tmp_path, tensorboard=False, wandb=_sink(cfg, tmp_path)) as writer:
        RolloutLog(tmp_path, RolloutLogConfig(), wandb=writer.wandb).write(
            1, rows, phase="generator"
        )
        writer.write(1, ROWS[0][1], phase="generator")
    (step,) = _history(tmp_path)[0]  # the table and the metrics of step 1: one history row
    assert step["_step"] == 1 and step["generator/reward/mean"] == 0.25
    assert step["rollouts/generator/_type"] == "table-file"
    assert step["rollouts/generator/nrows"] == 2
    (table_file,) = tmp_path.glob("wandb/offline-run-*/files/" + step["rollouts/generator/path"])
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["step", "solution", "correct", "verifications"]
    assert table["data"] == [[1, "so 3", True, '[{"verdict": 1}]'], [1, "so 4", False, "[]"]]
