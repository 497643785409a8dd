"""The benchmark scripts run and measure what they claim (tiny sizes; no timing is checked).

The train-step benchmark's PyTorch twin must compute the same step as tango_jax (it prints the
first step's loss and gradient norm from both); the sampler benchmark's decode numbers must be
self-consistent. Both are checked on the GPU check's dry run (tests/scripts/test_gpu_check.py),
which runs the two benchmarks with these settings; the rest is here. A broken benchmark would
otherwise only show on a lent GPU machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xla_flags import xla_flags

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> dict:
    env = {**os.environ, "XLA_FLAGS": xla_flags()}  # one CPU device
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench" / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_train_step_benchmark_with_lora_trains_and_keeps_state_for_the_adapters_alone():
    from tango_jax.models import presets

    rank = 2
    out = _run(
        "bench_train_step.py",
        *("--preset", "tiny-qwen2", "--batch", "2", "--prompt-len", "8", "--response-len", "8"),
        *("--no-kl", "--steps", "1", "--lora-rank", str(rank)),
    )
    c = presets.get("tiny-qwen2")
    d, q, kv, f = c.embed_dim, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.mlp_dim
    # A [in, r] and B [r, out] of q, k, v, o, gate, up, down in every layer
    widths = (d + q) + 2 * (d + kv) + (q + d) + 3 * (d + f)
    assert out["trained_params"] == c.num_layers * rank * widths
    # AdamW's two float32 moments of the adapters, plus a few scalars (step counts)
    assert 0 <= out["opt_state_bytes"] - 2 * 4 * out["trained_params"] < 64
    assert out["lora_rank"] == rank and out["step_s"] > 0 and out["peak_rss_gb"] > 0


def test_sampler_benchmark_rejects_a_preset_for_vllm():
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench" / "bench_samplers.py"),
            "--preset",
            "tiny-qwen2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "--preset has no checkpoint for vLLM" in proc.stderr


def test_sampler_benchmark_rejects_a_copy_of_nothing(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "scripts" / "bench"))
    import bench_samplers

    with pytest.raises(SystemExit) as stop:
        bench_samplers.main(["--preset", "tiny-qwen2", "--backends", "jax", "--copy-gib", "0"])
    assert stop.value.code == 2
    assert "--copy-gib 0.0: the copy needs a buffer; give a size > 0" in capsys.readouterr().err


def test_decode_step_benchmark_times_every_rows_slots_and_span(tmp_path):
    """bench_decode_step.py prints a line per (rows, slots) and, with --span below the slots,
    one more reading the first span slots only (the sampler's segmented decode)."""
    from tango_jax.models.tiny import write_tiny_checkpoint

    write_tiny_checkpoint(tmp_path / "tiny")
    env = {**os.environ, "XLA_FLAGS": xla_flags()}  # one CPU device
    proc = subprocess.run(
        [
            *(sys.executable, str(ROOT / "scripts" / "bench" / "bench_decode_step.py")),
            *("--model", str(tmp_path / "tiny"), "--rows", "8", "--slots", "16,32"),
            *("--span", "24", "--repeats", "1", "--decode-attention", "dot,sum"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "rows   8 slots   16 all slots  dot",
        "rows   8 slots   16 all slots  sum",
        "rows   8 slots   32 all slots  dot",
        "rows   8 slots   32 all slots  sum",
        "rows   8 slots   32 span   24  dot",
        "rows   8 slots   32 span   24  sum",
    ]
    assert all("ms per row-step" in line for line in lines)
