"""scripts/bench/gpu_check.py's dry run: the GPU check's code paths on the CPU at toy sizes, so
that the script cannot break unnoticed between the (rare) GPU leases. No number is checked
against a speed; the twin's loss must agree, and every item must have run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench" / "gpu_check.py"


def _env():
    return {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device


def _dry_run(out: Path, *, budget_s: str, timeout: int) -> dict:
    """Runs `gpu_check.py --dry-run`; returns the JSON table it wrote beside `out`."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--out", str(out), "--budget-s", budget_s],
        capture_output=True, text=True, env=_env(), timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.with_suffix(".json").read_text())


def test_dry_run_runs_every_item_and_writes_one_dated_table(tmp_path):
    out = tmp_path / "check.md"
    # no time budget here: a loaded CI machine must not turn items into "skipped"
    table = _dry_run(out, budget_s="1e9", timeout=1800)
    env, rows = table["environment"], table["rows"]
    assert env["backend"] == "cpu" and env["date_utc"][:4].isdigit() and env["driver"] == "none"
    names = [r["item"] for r in rows]
    assert names == [
        "train tiny-qwen2 mb 2, vocab_block 0",
        "train tiny-qwen2 mb 2, vocab_block 128",
        "decode (JAX sampler)",
        "cuDNN attention test",
    ]
    assert not [r for r in rows if "error" in r or "skipped" in r]
    for row in rows[:2]:
        assert row["step_s"] > 0 and row["torch_step_s"] > 0 and row["ratio"] > 0
        jax_loss, torch_loss = row["first_step"]["loss"]
        assert jax_loss == pytest.approx(torch_loss, rel=1e-3, abs=1e-5)  # the same step
    # The blocked head computes the same step as the whole-vocabulary one.
    assert rows[0]["first_step"]["loss"][0] == pytest.approx(
        rows[1]["first_step"]["loss"][0], rel=1e-4, abs=1e-6
    )
    assert rows[2]["bandwidth_fraction"] > 0 and rows[2]["decode_tokens_per_s"] > 0
    assert "skipped" in rows[3]["result"] and "failed" not in rows[3]["result"]
    text = out.read_text()
    assert text.startswith("# gpu_check (dry run") and env["date_utc"] in text
    assert all(f"| {name} |" in text for name in names)


def test_without_dry_run_a_cpu_is_refused_in_one_line():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", "/nonexistent/x.md"],
        capture_output=True, text=True, env=_env(), timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "not 'gpu'" in proc.stderr and "--dry-run" in proc.stderr


def test_a_spent_budget_skips_the_remaining_items_and_still_writes_the_table(tmp_path):
    rows = _dry_run(tmp_path / "check.md", budget_s="-1", timeout=300)["rows"]
    assert len(rows) == 4 and all(r["skipped"].startswith("time budget") for r in rows)
