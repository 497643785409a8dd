"""tango_jax's GRPO against TRL's GRPOTrainer, seed by seed: curves, paired differences, times.

    python scripts/bench/compare_trl/compare_trl.py              # seeds 1-3, default run dirs
    python scripts/bench/compare_trl/compare_trl.py --seeds 0 --out docs/compare_trl/seed0

Reads RUN/metrics.jsonl of both trainers for each seed (tango_jax's runs from
`python -m tango_jax.train --config configs/smollm2_addition.py:grpo --config.seed=S
--config.run_dir=runs/smollm2_addition_grpo_sS`, TRL's from
`python scripts/bench/compare_trl/trl_grpo.py --seed S`, which writes the same names) and
writes to --out:
  summary.json   per trainer: the mean over seeds of each step's training reward, each
                 evaluation's held-out accuracy (greedy and sampled), the seconds per step
                 (generation, reward, training apart; the first step, which compiles, apart);
                 per evaluation step the paired difference tango_jax - TRL with its 95%
                 t-interval (tango_jax.eval.paired_study.paired); the wall-time ratios TRL /
                 tango_jax;
  curves.png     training reward (a 5-step running mean) and held-out sampled accuracy against
                 the step, mean and min-max band over seeds, and the paired difference.
and prints the table that docs/real_model.md quotes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]

TRAINERS = {
    "tango_jax": "runs/smollm2_addition_grpo_s{seed}",
    "trl": "runs/trl_smollm2_addition_grpo_s{seed}",
}
REWARD = "generator/reward/mean"
EVALS = ("eval/generator/sampled_accuracy", "eval/generator/accuracy")
TIMES = ("perf/generate_s", "perf/reward_s", "perf/train_s", "perf/step_s")


def series(rows: list[dict], name: str) -> dict[int, float]:
    """step -> value of `name` on the steps that have it."""
    return {r["step"]: r[name] for r in rows if r.get(name) is not None}


def load(pattern: str, seeds: list[int]) -> dict[int, list[dict]]:
    from tango_jax.metrics.writer import read_metrics

    runs = {}
    for seed in seeds:
        path = ROOT / pattern.format(seed=seed)
        if not (path / "metrics.jsonl").exists():
            raise SystemExit(f"{path}/metrics.jsonl: missing; run that seed first (see --help).")
        runs[seed] = read_metrics(path)
    return runs


def summarise(runs: dict[int, list[dict]]) -> dict:
    """Mean over seeds of each metric per step, and of each step time (first step apart)."""
    out = {}
    for name in (REWARD, *EVALS):
        per_seed = [series(rows, name) for rows in runs.values()]
        steps = sorted(set.intersection(*(set(s) for s in per_seed)))
        out[name] = {
            "steps": steps,
            "mean": [float(np.mean([s[t] for s in per_seed])) for t in steps],
            "min": [float(np.min([s[t] for s in per_seed])) for t in steps],
            "max": [float(np.max([s[t] for s in per_seed])) for t in steps],
        }
    times = {}
    for name in TIMES:
        later = [v for rows in runs.values() for t, v in series(rows, name).items() if t > 1]
        first = [series(rows, name).get(1) for rows in runs.values()]
        times[name] = {
            "mean_after_first": float(np.mean(later)) if later else None,
            "first": float(np.mean([f for f in first if f is not None])) if any(first) else None,
        }
    out["times"] = times
    return out


def differences(ours: dict[int, list[dict]], theirs: dict[int, list[dict]], name: str):
    from tango_jax.eval.paired_study import paired

    a = {seed: series(rows, name) for seed, rows in ours.items()}
    b = {seed: series(rows, name) for seed, rows in theirs.items()}
    steps = sorted(set.intersection(*(set(s) for s in [*a.values(), *b.values()])))
    rows = []
    for t in steps:
        c = paired(f"{name}@{t}", {s: v[t] for s, v in a.items()}, {s: v[t] for s, v in b.items()})
        rows.append({"step": t, "mean": c.mean, "half": c.half, "p": c.p, "diffs": c.diffs})
    return rows


def gains(runs: dict[int, list[dict]], name: str) -> dict:
    """The last evaluation's `name` minus the zero-shot one (step 0), paired over seeds: the
    mean gain with its 95% t-interval."""
    from tango_jax.eval.paired_study import paired

    per_seed = {seed: series(rows, name) for seed, rows in runs.items()}
    missing = [seed for seed, s in per_seed.items() if 0 not in s or len(s) < 2]
    if missing:
        raise SystemExit(f"{name}: seeds {missing} lack the step-0 or a later evaluation.")
    last = {seed: s[max(s)] for seed, s in per_seed.items()}
    start = {seed: s[0] for seed, s in per_seed.items()}
    c = paired(f"{name} gain", last, start)
    return {
        "start": float(np.mean(list(start.values()))),
        "end": float(np.mean(list(last.values()))),
        **{"gain": c.mean, "half": c.half, "p": c.p, "per_seed": list(c.diffs)},
    }


def plot(summary: dict, diffs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for trainer, color in (("tango_jax", "C0"), ("trl", "C1")):
        s = summary[trainer]
        for ax, name, smooth in ((axes[0], REWARD, 5), (axes[1], EVALS[0], 1)):
            x, m = np.asarray(s[name]["steps"]), np.asarray(s[name]["mean"])
            lo, hi = np.asarray(s[name]["min"]), np.asarray(s[name]["max"])
            if smooth > 1 and len(m) >= smooth:
                kernel = np.ones(smooth) / smooth
                x, m, lo, hi = (x[smooth - 1 :], *(np.convolve(v, kernel, "valid")
                                                   for v in (m, lo, hi)))  # fmt: skip
            ax.plot(x, m, color=color, label=trainer)
            ax.fill_between(x, lo, hi, color=color, alpha=0.2)
    axes[0].set(title="training reward (5-step mean)", xlabel="step")
    axes[1].set(title="held-out sampled accuracy", xlabel="step")
    x = [d["step"] for d in diffs]
    axes[2].errorbar(x, [d["mean"] for d in diffs], yerr=[d["half"] for d in diffs], fmt="o-")
    axes[2].axhline(0, color="gray", lw=0.8)
    axes[2].set(title="tango_jax - TRL, sampled accuracy (95% CI)", xlabel="step")
    for ax in axes[:2]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--ours", default=TRAINERS["tango_jax"], help="run dir, {seed} filled")
    parser.add_argument("--trl", default=TRAINERS["trl"], help="run dir, {seed} filled")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "compare_trl")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    ours, theirs = load(args.ours, seeds), load(args.trl, seeds)
    summary = {"seeds": seeds, "tango_jax": summarise(ours), "trl": summarise(theirs)}
    diffs = differences(ours, theirs, EVALS[0])
    summary["difference_sampled_accuracy"] = diffs
    summary["gain_sampled_accuracy"] = {
        "tango_jax": gains(ours, EVALS[0]),
        "trl": gains(theirs, EVALS[0]),
    }
    t_ours, t_trl = summary["tango_jax"]["times"], summary["trl"]["times"]
    summary["time_ratio_trl_over_tango_jax"] = {
        name: (t_trl[name]["mean_after_first"] / t_ours[name]["mean_after_first"])
        if t_trl[name]["mean_after_first"] and t_ours[name]["mean_after_first"]
        else None
        for name in TIMES
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(summary, diffs, args.out / "curves.png")
    print(f"seeds {seeds}; held-out sampled accuracy (mean over seeds), tango_jax - TRL:")
    print("| step | tango_jax | TRL | difference (95% CI) |\n|---|---|---|---|")
    acc_ours, acc_trl = summary["tango_jax"][EVALS[0]], summary["trl"][EVALS[0]]
    for d in diffs:
        a = acc_ours["mean"][acc_ours["steps"].index(d["step"])]
        b = acc_trl["mean"][acc_trl["steps"].index(d["step"])]
        print(f"| {d['step']} | {a:.3f} | {b:.3f} | {d['mean']:+.3f} ± {d['half']:.3f} |")
    print("\nheld-out sampled accuracy, zero-shot -> last evaluation (gain, 95% CI over seeds):")
    for trainer, g in summary["gain_sampled_accuracy"].items():
        print(
            f"  {trainer}: {g['start']:.3f} -> {g['end']:.3f}, {g['gain']:+.3f} ± {g['half']:.3f}"
        )
    print("\nseconds per step after the first (TRL / tango_jax):")
    for name in TIMES:
        ratio = summary["time_ratio_trl_over_tango_jax"][name]
        a, b = t_ours[name]["mean_after_first"], t_trl[name]["mean_after_first"]
        if a is not None and b is not None:
            print(f"  {name}: tango_jax {a:.1f}, TRL {b:.1f}, ratio {ratio:.2f}")
    print(f"wrote {args.out}/summary.json and curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
