"""`python -m tango_jax.plan_memory`, run as a process as a user runs it: the per-device plan of
both roles' train steps and JAX samplers on the tiny config, its summary for every device size
asked about, and command-line mistakes refused in one line, as `train` refuses them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xla_flags import xla_flags

REPO = Path(__file__).resolve().parents[1]
TINY = str(REPO / "configs" / "tiny_arith.py")


def _command(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", f"tango_jax.{module}", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "XLA_FLAGS": xla_flags()},
        timeout=600,
        cwd=REPO,
    )


def test_plans_both_roles_and_samplers_and_sums_up_every_device_size(tmp_path):
    out = tmp_path / "plan.json"
    proc = _command(
        "plan_memory",
        *("--config", TINY, "--layers", "full", "--json_out", str(out)),
        *("--device_gb", "0.001,80,141"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "compiled at full depth (CPU compiler's plan, without its all-reduce combiner" in (
        proc.stdout
    )
    rows = {r["step"]: r for r in json.loads(out.read_text())}
    # the tiny config samples with the embedded JAX sampler: its generate is planned too
    assert set(rows) == {"generator", "verifier", "generator sampling", "verifier sampling"}
    for name in ("generator", "verifier"):
        r, s = rows[name], rows[f"{name} sampling"]
        other = rows["verifier" if name == "generator" else "generator"]
        resident = other["params"] + other["opt_state"] + other["ref_params"]
        assert s["params"] == r["params"]
        # the KV cache ("batch" of a sampling row) is most of what generate holds
        assert 0 < 0.5 * s["batch"] < s["xla_temporaries"] < 2 * s["batch"]
        # share_prefix (the default): the distinct prompts' caches held while the rows' cache
        # is laid out, fewer rows than the cache's own
        assert 0 < s["shared_prefill"] < s["batch"]
        assert s["step_peak"] == pytest.approx(
            s["xla_arguments"]
            + s["xla_outputs_not_aliased"]
            + s["xla_temporaries"]
            + s["shared_prefill"]
        )
        assert s["other_model_resident"] == pytest.approx(
            resident + r["opt_state"] + r["ref_params"]
        )
        assert s["device_total"] == pytest.approx(s["step_peak"] + s["other_model_resident"])
    for name in ("generator", "verifier"):
        r = rows[name]
        other = rows["verifier" if name == "generator" else "generator"]
        assert r["params"] > 0 and r["opt_state"] == pytest.approx(2 * r["params"], rel=0.01)
        assert r["step_peak"] == pytest.approx(
            r["xla_arguments"] + r["xla_outputs_not_aliased"] + r["xla_temporaries"]
        )
        assert r["device_total"] == pytest.approx(r["step_peak"] + r["other_model_resident"])
        assert r["headroom A100/H100 80GB"] == pytest.approx(1 - r["device_total"] / 80)
        assert r["headroom H200 141GB"] == pytest.approx(1 - r["device_total"] / 141)
        assert r["other_model_resident"] >= other["params"]
    # Issue 67: the summary named only the 80 GB shortfall; now one line per size asked about.
    summary = proc.stdout.split("headroom (at least 10% of each device free):\n")[1].splitlines()
    short = ", ".join(
        f"{step} ({rows[step]['headroom 0.001GB']:.0%})"
        for step in ("generator", "generator sampling", "verifier", "verifier sampling")
    )
    assert summary[0] == f"  0.001 GB devices: less than 10% free in {short}."
    assert summary[1].startswith("  80 GB devices (A100/H100): every step keeps at least 10%")
    assert summary[2].startswith("  141 GB devices (H200): every step keeps at least 10% free")
    assert len(summary) == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (
            [str(REPO / "configs" / "tiny_arth.py")],  # the case: a 35-line traceback
            f"config error: --config={REPO / 'configs' / 'tiny_arth.py'}: no such config file "
            f"'{REPO / 'configs' / 'tiny_arth.py'}'; config files there: ",
        ),
        (
            [TINY, "--config.generator.modle.path=/ckpt"],
            "config error: --config.generator.modle.path: unknown field; did you mean 'model'?",
        ),
        (
            [TINY, "--devices", "3"],
            "config error: config.generator.trainer.micro_batch_size (8) must be divisible by "
            "the data-parallel size (3 = mesh data x fsdp).",
        ),
        (
            [TINY, "--layers", "4"],
            "config error: --layers 4: give two different depths to extrapolate from (e.g. "
            "--layers 4,8), or --layers full.",
        ),
    ],
    ids=["config-file", "field", "devices", "layers"],
)
def test_mistakes_are_refused_in_one_line_as_train_refuses_them(args, message):
    proc = _command("plan_memory", "--config", *args)
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith(message), line
    if "--devices" not in args and "--layers" not in args:  # train's own words
        train = _command("train", "--config", *args, "--dry_run")
        assert train.stderr.strip().splitlines()[-1] == line
