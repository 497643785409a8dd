"""The dynamic-sampling study (study/dynamic_sampling.py): its two arms' configs load and differ
only in dynamic sampling, its commands set exactly those fields, and its summary pairs the arms
by seed (on hand-written metrics of finished runs: no training here)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from tango_jax.config.run import RunConfig
from tango_jax.schema import check_path
from tango_jax.study import dynamic_sampling


def test_the_arms_differ_only_in_dynamic_sampling(tmp_path):
    off = dynamic_sampling.run_config(tmp_path, "off", 3, 4)
    on = dynamic_sampling.run_config(tmp_path, "on", 3, 4)
    for role in ("generator", "verifier"):
        assert not getattr(off, role).rollout.dynamic_sampling
        r = getattr(on, role).rollout
        assert r.dynamic_sampling and r.dynamic_sampling_max_rounds == 4
        same = dataclasses.replace(r, dynamic_sampling=False, dynamic_sampling_max_rounds=4)
        assert same == getattr(off, role).rollout
    assert off.seed == on.seed == 3
    assert off.run_dir == str(tmp_path / "off" / "tango_s3")
    assert on.run_dir == str(tmp_path / "on" / "tango_s3")
    with pytest.raises(ValueError, match="dynamic_sampling_max_rounds \\(1\\) must be >= 2"):
        dynamic_sampling.run_config(tmp_path, "on", 3, 1)


def test_the_commands_set_the_arm_fields_and_the_extra_settings(tmp_path):
    cmd = dynamic_sampling.command(tmp_path, "on", 2, 3, ["schedule.total_steps=60"])
    flags = [a for a in cmd if a.startswith("--config.")]
    assert cmd[cmd.index("--config") + 1] == "configs/tiny_arith.py"
    assert "--config.verifier.rollout.dynamic_sampling=True" in flags
    assert "--config.generator.rollout.dynamic_sampling_max_rounds=3" in flags
    assert flags[-1] == "--config.schedule.total_steps=60"
    for flag in flags:
        check_path(RunConfig, flag.removeprefix("--config.").split("=")[0])
    off = [a for a in dynamic_sampling.command(tmp_path, "off", 2, 3) if a.startswith("--config.")]
    assert [f.split("=")[0] for f in off] == ["--config.seed", "--config.run_dir"]
    cfg = dynamic_sampling.run_config(tmp_path, "on", 2, 3, ["schedule.total_steps=60"])
    assert cfg.schedule.total_steps == 60


def _finished_run(path, zero_var: float, accuracy: float) -> None:
    """metrics.jsonl of a finished run: eval, one V and two G steps, evaluated at the end."""
    rows = [
        {"step": 0, "phase": "eval", "eval/generator/sampled_accuracy": 0.5},
        {"step": 1, "phase": "verifier", "verifier/dynamic_sampling/zero_var_groups": zero_var},
        {"step": 2, "phase": "generator", "generator/accuracy": 0.6},
        {"step": 3, "phase": "generator", "generator/accuracy": 0.7}
        | {"eval/generator/sampled_accuracy": accuracy},
    ]
    path.mkdir(parents=True)
    lines = [json.dumps({"time": 0.0} | r) + "\n" for r in rows]
    (path / "metrics.jsonl").write_text("".join(lines))
    (path / "hf" / "verifier").mkdir(parents=True)
    (path / "hf" / "verifier" / "config.json").write_text("{}")


def test_the_summary_pairs_the_arms_by_seed(tmp_path):
    numbers = {1: (0.8, 0.7, 0.6, 0.7), 2: (0.6, 0.6, 0.6, 0.8)}
    for seed, (zv_off, zv_on, acc_off, acc_on) in numbers.items():
        _finished_run(tmp_path / "off" / f"tango_s{seed}", zv_off, acc_off)
        _finished_run(tmp_path / "on" / f"tango_s{seed}", zv_on, acc_on)
    results = dynamic_sampling.collect(tmp_path, [1, 2], auroc=False)
    assert results["on"]["2"]["sampled_accuracy/final"] == 0.8
    # mean height over generator updates 0 (0.5) and 2 (final): (0.5 + 0.8) / 2
    assert results["on"]["2"]["sampled_accuracy/mean_height"] == pytest.approx(0.65)
    assert results["off"]["1"]["verifier/dynamic_sampling/zero_var_groups"] == 0.8
    text = dynamic_sampling.table(results, [1, 2])
    row = next(line for line in text.splitlines() if "| sampled_accuracy/final |" in line)
    # off 0.6, 0.6; on 0.7, 0.8; differences 0.1, 0.2: mean 0.15, t(1) 12.706 x 0.05 = 0.635
    assert row.startswith(
        "| sampled_accuracy/final | 0.600 ± 0.000 | 0.750 ± 0.635 | 0.150 ± 0.635 |"
    )


def test_saved_seeds_stand_in_for_runs_on_another_machine_and_local_runs_win():
    local = {"on": {"2": {"m": 0.9}}}
    saved = {"on": {"1": {"m": 0.1}, "2": {"m": 0.2}, "7": {"m": 0.7}}, "off": {"1": {"m": 0.3}}}
    merged = dynamic_sampling.with_saved(local, saved, [1, 2])
    assert merged == {"on": {"1": {"m": 0.1}, "2": {"m": 0.9}}, "off": {"1": {"m": 0.3}}}
    assert local == {"on": {"2": {"m": 0.9}}}  # not changed in place


def test_it_runs_as_a_module():
    done = subprocess.run(
        [sys.executable, "-m", "tango_jax.study.dynamic_sampling", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m tango_jax.study.dynamic_sampling")
    assert "--max-rounds" in done.stdout
