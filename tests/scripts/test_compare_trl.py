"""scripts/bench/compare_trl: the TRL run's config mapping and the comparison of two trainers'
metrics (no model runs: made-up metrics files, and the GRPOConfig built from the shipped
config)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scripts_loader import load_script

compare = load_script("bench/compare_trl", "compare_trl")


def _write_run(path, seed: int, offset: float) -> None:
    path.mkdir(parents=True)
    rows = [{"step": 0, "time": 0.0, "phase": "eval", "eval/generator/sampled_accuracy": 0.3}]
    for step in (1, 2, 3, 4):
        row = {
            "step": step,
            "time": float(step),
            "phase": "generator",
            "generator/reward/mean": 0.3 + 0.1 * step + offset,
            "perf/generate_s": 2.0 + offset,
            "perf/reward_s": 0.1,
            "perf/train_s": 4.0 * (10 if step == 1 else 1),  # the first step compiles
            "perf/step_s": 6.1,
        }
        if step in (2, 4):
            row["eval/generator/sampled_accuracy"] = 0.3 + 0.1 * step + offset + 0.01 * seed
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_comparison_pairs_seeds_and_times_steps_after_the_first(tmp_path):
    for seed in (1, 2):
        _write_run(tmp_path / f"ours_s{seed}", seed, 0.0)
        _write_run(tmp_path / f"trl_s{seed}", seed, 0.05 * seed)
    out = tmp_path / "out"
    compare.main(
        ["--seeds", "1,2", "--ours", str(tmp_path / "ours_s{seed}"),
         "--trl", str(tmp_path / "trl_s{seed}"), "--out", str(out)]
    )  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "curves.png").stat().st_size > 0
    acc = summary["tango_jax"]["eval/generator/sampled_accuracy"]
    assert acc["steps"] == [0, 2, 4]
    np.testing.assert_allclose(acc["mean"], [0.3, 0.515, 0.715])
    diffs = {d["step"]: d for d in summary["difference_sampled_accuracy"]}
    np.testing.assert_allclose(diffs[2]["diffs"], [-0.05, -0.10])  # ours - TRL, by seed
    assert diffs[2]["mean"] == pytest.approx(-0.075)
    assert diffs[2]["half"] > 0 and diffs[0]["mean"] == 0.0
    times = summary["tango_jax"]["times"]
    assert times["perf/train_s"] == {"mean_after_first": 4.0, "first": 40.0}
    ratio = summary["time_ratio_trl_over_tango_jax"]["perf/generate_s"]
    assert ratio == pytest.approx(2.075 / 2.0)
    gain = summary["gain_sampled_accuracy"]  # last evaluation (step 4) - zero-shot, per seed
    np.testing.assert_allclose(gain["tango_jax"]["per_seed"], [0.41, 0.42])
    np.testing.assert_allclose(gain["trl"]["per_seed"], [0.46, 0.52])
    assert gain["trl"]["gain"] == pytest.approx(0.49) and gain["trl"]["start"] == 0.3
    assert gain["tango_jax"]["half"] == pytest.approx(12.706 * 0.01 / 2, rel=1e-3)


def test_a_missing_run_names_its_path(tmp_path):
    with pytest.raises(SystemExit, match="ours_s1/metrics.jsonl: missing"):
        compare.main(["--seeds", "1", "--ours", str(tmp_path / "ours_s{seed}"),
                      "--trl", str(tmp_path / "trl_s{seed}"), "--out", str(tmp_path)])  # fmt: skip


@pytest.mark.parametrize("variant", ["grpo"])
def test_trl_arguments_follow_the_tango_jax_config(tmp_path, variant):
    pytest.importorskip("trl")
    trl_grpo = load_script("bench/compare_trl", "trl_grpo")
    cfg = trl_grpo.load_config(f"configs/smollm2_addition.py:{variant}", seed=3, steps=None)
    g = cfg.generator
    rows = cfg.data.prompts_per_step * g.rollout.n
    args = trl_grpo.grpo_config(cfg, tmp_path, rows)
    assert args.seed == 3 and args.max_steps == cfg.schedule.total_steps
    assert args.num_generations == g.rollout.n
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == rows
    assert (args.temperature, args.top_p, args.top_k) == (g.rollout.temperature, 1.0, 0)
    assert args.max_completion_length == g.rollout.max_tokens
    opt = g.trainer.optimizer
    assert (args.learning_rate, args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (
        opt.learning_rate, opt.b1, opt.b2, opt.eps)  # fmt: skip
    assert (args.weight_decay, args.max_grad_norm) == (opt.weight_decay, opt.grad_clip)
    assert getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type) == "constant"
    assert (args.beta, args.num_iterations, args.loss_type) == (0.0, 1, "dapo")
    assert (args.scale_rewards, args.mask_truncated_completions) == ("group", False)
    assert not args.bf16 and cfg.algorithm.eps == 1e-4  # TRL's std floor
    with pytest.raises(SystemExit, match="has a verifier"):
        trl_grpo.load_config("configs/smollm2_addition.py:tango", seed=0, steps=None)


def test_run_seeds_skips_recorded_runs_and_refuses_an_unknown_trainer_or_allocator(tmp_path):
    """scripts/bench/compare_trl/run_seeds.sh: a seed whose record exists is not run again (a
    stopped study resumes), and an unknown trainer or a missing allocator is named before
    anything runs."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = root / "scripts" / "bench" / "compare_trl" / "run_seeds.sh"
    for name in ("tango_jax_s7", "trl_s7"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("{}\n")
    env = {"PATH": "/usr/bin:/bin", "RECORDS": str(tmp_path)}
    done = subprocess.run(["bash", str(script), "7"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "tango_jax_s7: recorded already",
        "trl_s7: recorded already",
    ]
    bad = subprocess.run(
        ["bash", str(script), "8"],
        env={**env, "TRAINERS": "tango_jax verl"},
        capture_output=True,
        text=True,
    )
    assert (
        bad.returncode == 2
        and "unknown trainer verl (tango_jax | trl | tango | tango_recipe)" in bad.stderr
    )
    usage = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
    # an allocator named but not there is refused before anything runs (seed 7, recorded: a
    # script without the check exits 0 here instead of starting a run)
    missing = subprocess.run(["bash", str(script), "7"], env={**env, "JEMALLOC": "/nope.so"},
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith(
        "JEMALLOC=/nope.so: no such file; apt-get install libjemalloc2"
    )


def _metrics(path, rows) -> None:
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_tango_against_grpo_pairs_evaluations_by_generator_updates_and_scores_labels(tmp_path):
    """scripts/bench/compare_trl/tango_addition.py on made-up records: Tango's evaluation after
    2 generator updates (global step 3, a verifier warm-up step first) is paired with GRPO's at
    step 2; the answer step's labels give informedness by hand."""
    tango_addition = load_script("bench/compare_trl", "tango_addition")
    acc = "eval/generator/sampled_accuracy"
    probe = "eval/probe/balanced_accuracy"
    for seed, late, (start, end) in ((1, 0.6, (0.6, 0.8)), (2, 0.7, (0.5, 0.6))):
        _metrics(tmp_path / f"tango_s{seed}", [
            {"step": 0, acc: 0.3, "eval/verifier/verdict_accuracy": 0.5, probe: start},
            {"step": 1, "schedule/generator_updates": 0},
            {"step": 2, "schedule/generator_updates": 1,
             "verifier/collapse_guard/tripped": seed == 2},
            {"step": 3, "schedule/generator_updates": 2, acc: late, probe: end},
        ])  # fmt: skip
        _metrics(tmp_path / f"grpo_s{seed}", [
            {"step": 0, acc: 0.3}, {"step": 1, "schedule/generator_updates": 1},
            {"step": 2, "schedule/generator_updates": 2, acc: 0.5},
        ])  # fmt: skip
        rows = [
            # the answer is on the second line: its label counts (said right), not the first's
            ("7 + 5 = 12\nThe answer is 12.", True, [-1, 1], [-0.5, 0.5]),
            ("13", False, [1], [1.0]),  # wrong, said right
            ("11", False, [-1], [-1.0]),  # wrong, said wrong
            ("no idea", False, [-1], [-1.0]),  # no integer: no answer step
            ("12", True, [1, 1], None),  # two judgments of one line: no step reward
        ]
        logged = [{"step": 2, "phase": "generator", "solution": text, "correct": ok,
                   "verifications": [{"step_judgments": j, "step_rewards": r}]}
                  for text, ok, j, r in rows]  # fmt: skip
        (tmp_path / f"tango_s{seed}" / "rollouts").mkdir()
        (tmp_path / f"tango_s{seed}" / "rollouts" / "step_000002.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in logged)
        )
    out = tmp_path / "out"
    tango_addition.main(["--seeds", "1,2", "--tango", str(tmp_path / "tango_s{seed}"),
                         "--grpo", str(tmp_path / "grpo_s{seed}"), "--out", str(out)])  # fmt: skip
    summary = json.loads((out / "tango_summary.json").read_text())
    first, late = summary[acc]["evaluations"]
    assert (first["updates"], first["difference"]) == (0, 0.0)
    assert late["updates"] == 2 and late["difference"] == pytest.approx(0.15)
    assert late["per_seed"] == pytest.approx([0.1, 0.2])
    # the area under (0, 0.3)-(2, late): tango 0.45 / 0.5 against GRPO's 0.4
    assert summary[acc]["auc"]["difference"] == pytest.approx(0.075)
    [window] = summary["rollout_labels"]["1"]
    assert window["verifications"] == 5 and window["aligned"] == pytest.approx(3 / 5)
    assert window["right_share"] == pytest.approx(1 / 3)
    assert window["informedness"] == pytest.approx(1 + 1 / 2 - 1)
    # the probe: last - first per seed 0.2 and 0.1; the guard tripped on seed 2's step 2 only
    change = summary["probe_change"][probe]
    assert change["difference"] == pytest.approx(0.15)
    assert summary["verifier_eval"][probe]["1"] == {"0": 0.6, "2": 0.8}
    assert summary["guard_trips"] == {"1": [], "2": [2]}
    # a seed's informedness is the mean of its windows' (one here), equal in both seeds
    assert summary["rollout_informedness"]["per_seed"] == pytest.approx({"1": 0.5, "2": 0.5})
    assert summary["rollout_informedness"]["mean"] == pytest.approx(0.5)
