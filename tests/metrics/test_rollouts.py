"""The rollout log files (tango_jax.metrics.rollouts): which steps, bounded rows and texts,
strict JSON, and a resumed run that leaves exactly one file per logged step. The rows of a real
run are checked in tests/e2e/test_loop.py, the W&B table in
tests/metrics/test_wandb.py."""

from __future__ import annotations

import json

import pytest

from tango_jax.metrics.rollouts import (
    RolloutLog,
    RolloutLogConfig,
    logged_steps,
    read_rollouts,
    step_file,
)
from tango_jax.schema import ConfigError


def _rows(step: int, n: int) -> list[dict]:
    return [{"step": step, "sample": i, "solution": f"answer {i}"} for i in range(n)]


def test_due_at_step_one_and_every_k(tmp_path):
    log = RolloutLog(tmp_path, RolloutLogConfig(every_steps=3))
    assert [s for s in range(1, 11) if log.due(s)] == [1, 3, 6, 9]
    off = RolloutLog(tmp_path, RolloutLogConfig(every_steps=0))
    assert not any(off.due(s) for s in range(1, 11))


def test_rows_and_texts_are_bounded_and_json_is_strict(tmp_path):
    log = RolloutLog(tmp_path, RolloutLogConfig(max_rows=2, max_chars=5))
    rows = [
        {"solution": "abcdefgh", "verifications": [{"text": "0123456789"}], "advantage": 0.5},
        {"solution": "abc", "verifications": [], "advantage": float("nan")},
        {"solution": "dropped", "verifications": [], "advantage": 0.0},
    ]
    path = log.write(4, rows, phase="generator")
    assert path == step_file(tmp_path, 4) == tmp_path / "rollouts" / "step_000004.jsonl"
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"solution": "abcde...[+3 chars]", "verifications": [{"text": "01234...[+5 chars]"}],
         "advantage": 0.5},
        {"solution": "abc", "verifications": [], "advantage": None},
    ]  # fmt: skip
    assert "NaN" not in path.read_text()


def test_resume_removes_the_steps_after_the_checkpoint(tmp_path):
    log = RolloutLog(tmp_path, RolloutLogConfig(every_steps=2))
    for step in (1, 2, 4, 6):
        log.write(step, _rows(step, 2), phase="generator")
    (tmp_path / "rollouts" / ".step_000008.jsonl.tmp-1").write_text("torn")
    resumed = RolloutLog(tmp_path, RolloutLogConfig(every_steps=2), after_step=4)
    assert logged_steps(tmp_path) == [1, 2, 4]
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == [
        "step_000001.jsonl", "step_000002.jsonl", "step_000004.jsonl",
    ]  # fmt: skip
    resumed.write(6, _rows(6, 3), phase="verifier")
    assert [(r["step"], r["sample"]) for r in read_rollouts(tmp_path)] == [
        (1, 0), (1, 1), (2, 0), (2, 1), (4, 0), (4, 1), (6, 0), (6, 1), (6, 2),
    ]  # fmt: skip
    assert read_rollouts(tmp_path, [4]) == _rows(4, 2)
    RolloutLog(tmp_path, RolloutLogConfig())  # a new run in the same directory: all removed
    assert logged_steps(tmp_path) == [] and read_rollouts(tmp_path) == []


@pytest.mark.parametrize("field, value", [("every_steps", -1), ("max_rows", 0), ("max_chars", 0)])
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        RolloutLogConfig(**{field: value})
