"""scripts/bench/gpu_check.py's dry run: the GPU check's code paths on the CPU at toy sizes, so
that the script cannot break unnoticed between the (rare) GPU leases. No number is checked
against a speed; the twin's loss must agree, and every item must have run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xla_flags import xla_flags

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench" / "gpu_check.py"


def _env():
    return {**os.environ, "XLA_FLAGS": xla_flags()}  # one CPU device, a fast compile


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
    train = ["baseline", "vocab_block 128", "fused", "lengths", "all"]
    assert names == [
        *(f"train tiny-qwen2 mb 2, {s}" for s in train),
        "decode (JAX sampler), baseline",
        "decode (JAX sampler), decode_block 2",
        "decode (JAX sampler), decode sum",
        "cuDNN attention test",
    ]
    assert not [r for r in rows if "error" in r or "skipped" in r]
    for row in rows[:5]:
        assert row["step_s"] > 0 and row["torch_step_s"] > 0 and row["ratio"] > 0
        jax_loss, torch_loss = row["first_step"]["loss"]
        assert jax_loss == pytest.approx(torch_loss, rel=1e-3, abs=1e-5)  # the same step
        # Every switch computes the same step as the baseline.
        assert jax_loss == pytest.approx(rows[0]["first_step"]["loss"][0], rel=1e-4, abs=1e-6)
    # bench_train_step --against-torch, as the GPU runs it: the same loss and gradient norm
    (jax_loss, torch_loss), (jax_norm, torch_norm) = (
        rows[0]["first_step"]["loss"], rows[0]["first_step"]["grad_norm"])  # fmt: skip
    assert jax_loss == pytest.approx(torch_loss, rel=1e-4, abs=1e-6)
    assert jax_norm == pytest.approx(torch_norm, rel=1e-4)
    assert rows[0]["torch_device"] == "cpu" and rows[0]["length"] == 32 and rows[0]["mfu"] > 0
    # bench_samplers --decode (2 prompts x 2 samples, 64 tokens): consistent numbers
    for row in rows[5:8]:
        assert row["bandwidth_fraction"] > 0 and row["decode_tokens_per_s"] > 0
        assert row["rows"] == 4 and 0 < row["generated_tokens"] <= 4 * 64
        assert 0 <= row["decode_steps"] <= 63 and row["param_gb"] > 0 and row["kv_cache_gb"] > 0
        fraction = row["floor_step_ms"] / row["step_ms"]
        assert row["bandwidth_fraction"] == pytest.approx(fraction, rel=0.02, abs=2e-3)
        steps_s = row["decode_steps"] * row["step_ms"] / 1e3
        assert row["decode_s"] == pytest.approx(steps_s, rel=0.02, abs=1e-3)
    assert "skipped" in rows[8]["result"] and "failed" not in rows[8]["result"]
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
    assert len(rows) == 9 and all(r["skipped"].startswith("time budget") for r in rows)


def test_each_switch_reaches_the_config_and_sampler_the_benchmarks_build(monkeypatch):
    """The model and sampler switches are set on what bench_train_step / bench_samplers
    build (they have no flag for them), and only while their item runs."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import bench_samplers
    import bench_train_step
    import gpu_check
    import jax.numpy as jnp

    args = argparse.Namespace(
        preset="tiny-qwen2", dtype="float32", remat=False, attention="auto", lora_rank=0,
        **{a: 0 for a in bench_train_step.SIZE_FLAGS},
    )  # fmt: skip
    plain = bench_train_step.model_config(args)
    by_name = gpu_check.switches(dry_run=True)
    with gpu_check._switched(by_name["all"]):
        cfg = bench_train_step.model_config(args)
        assert bench_samplers.JaxSampler.keywords == {"decode_block": 0}
    assert cfg == plain.replace(
        fused_norm=True, fused_mlp=True, fused_rope=True, padding_as_lengths=True
    )
    assert by_name["all"].vocab_block == 128
    with gpu_check._switched(by_name["decode_block 2"]):
        assert bench_train_step.model_config(args) == plain
        assert bench_samplers.JaxSampler.keywords == {"decode_block": 2}
    with gpu_check._switched(by_name["decode sum"]):
        assert bench_train_step.model_config(args).decode_attention == "sum"
        assert bench_samplers.preset_config(args, jnp.float32).decode_attention == "sum"
    assert bench_train_step.model_config(args) == plain  # restored
    assert bench_samplers.preset_config(args, jnp.float32).decode_attention == "auto"
    assert not hasattr(bench_samplers.JaxSampler, "keywords")
