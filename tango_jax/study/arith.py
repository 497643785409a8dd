"""The miniature study: Tango against rule-reward GRPO and the fixed-verifier ablation, over
seeds, with 95% intervals (docs/miniature.md reports it).

    python -m tango_jax.study                                # seeds 1 2 3, runs/study/
    python -m tango_jax.study --seeds 1 2 3 4 5 --jobs 2 --root runs/study5
    python -m tango_jax.study --set schedule.total_steps=40  # any --config.<field> override
    python -m tango_jax.study --summary-only                 # tables and plots of finished runs

For each seed S it runs `python -m tango_jax.train --config configs/tiny_arith.py[:variant]
--config.seed=S` for the variants tango, grpo and fixed_verifier (a finished run is resumed,
i.e. skipped). All three start RL from the same SFT checkpoints, so the differences between
them are paired: by default the shipped ones (tango_jax/assets/tiny_arith_sft/, made on seed 0
by scripts/assets/make_tiny_sft.py), so the intervals cover the randomness of RL only; with
`--sft-from DIR` the checkpoints in DIR/generator and DIR/verifier; with `--sft-per-seed` each
seed first makes its own (make_tiny_sft.py --seed S, ~25 min each), so the intervals cover SFT
too.

Writes under --root: one run directory and log per (variant, seed), `results.json` (every
held-out evaluation of every run, indexed by generator updates), `table.md` (before -> after RL
per variant as mean ± 95% t-interval over seeds, the paired differences Tango - GRPO and
Tango - fixed verifier at the end, and the trivial baselines of the verifier's step F1),
`curves_generator.png` and `curves_verifier.png` (mean ± 95% interval against generator
updates), and the verifier's location skill: its first-error rate and F1 against a verifier
that passes as many correct solutions but names a random step otherwise, and `ranking.json`:
how well the verifier's P(INCORRECT) at each step judgment orders the steps (AUROC of the first
error against the other steps, first error ranked first) before and after RL, which a change
of threshold alone cannot move. Seed 0 is the tuning seed: do not report it.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tango_jax.eval import analysis
from tango_jax.eval.paired_study import mean_ci

VARIANTS = ("tango", "grpo", "fixed_verifier")
CONFIG = "configs/tiny_arith.py"
GENERATOR_METRICS = {
    "eval/generator/sampled_accuracy": "generator accuracy, sampled at T=1",
    "eval/generator/accuracy": "generator accuracy, greedy",
}
VERIFIER_METRICS = {
    "eval/verifier/step_f1": "verifier step F1 (ProcessBench-style)",
    "eval/verifier/step_acc_erroneous": "verifier: first error step found",
    "eval/verifier/step_acc_correct": "verifier: correct solutions passed",
    "eval/verifier/step_verdict_accuracy": "verifier verdict accuracy (ProcessBench, half wrong)",
    "eval/verifier/verdict_accuracy": "verifier verdict accuracy (generator's solutions)",
}


def fmt(mean: float, half: float) -> str:
    return f"{mean:.3f}" if np.isnan(half) else f"{mean:.3f} ± {half:.3f}"


def run_dir(root: Path, variant: str, seed: int) -> Path:
    return root / f"{variant}_s{seed}"


def command(
    root: Path,
    variant: str,
    seed: int,
    overrides: list[str],
    sft: str,
    config_file: str = CONFIG,
    options: str = "",
) -> list[str]:
    """`options`: appended to the config string (last_letter: ',study', the study's length)."""
    config = f"{config_file}:{variant}{options}"
    if variant == "tango" and not options:
        config = config_file
    start = []
    if sft:  # checkpoints other than the config's shipped ones
        start = [
            f"--config.{role}.model.path={Path(sft).resolve() / role}"
            for role in ("generator", "verifier")
        ]
    return [
        sys.executable,
        "-m",
        "tango_jax.train",
        "--config",
        config,
        f"--config.seed={seed}",
        f"--config.run_dir={run_dir(root, variant, seed)}",
        *start,
        *(f"--config.{o}" for o in overrides),
    ]


def sft_dir(root: Path, seed: int) -> Path:
    """Where --sft-per-seed puts seed `seed`'s SFT checkpoints."""
    return root / f"sft_s{seed}" / "out"


def make_sft(root: Path, seed: int) -> str:
    """make_tiny_sft.py for one seed (skipped when its checkpoints exist)."""
    out = sft_dir(root, seed)
    if (out / "recipe.json").exists():
        return f"SFT seed {seed}: done before"
    t0 = time.perf_counter()
    cmd = [
        sys.executable,
        str(Path(__file__).resolve().parents[2] / "scripts" / "assets" / "make_tiny_sft.py"),
        "--seed",
        str(seed),
    ]
    cmd += ["--work", str(out.parent), "--out", str(out)]
    with open(root / f"sft_s{seed}.log", "a") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        raise SystemExit(f"SFT of seed {seed} failed (exit {rc}): {root}/sft_s{seed}.log")
    return f"SFT seed {seed}: {(time.perf_counter() - t0) / 60:.1f} min"


def run(
    root: Path,
    variant: str,
    seed: int,
    overrides: list[str],
    sft: str,
    config_file: str = CONFIG,
    options: str = "",
) -> str:
    """One run, from the SFT checkpoints in `sft` (default: the config's shipped ones)."""
    t0 = time.perf_counter()
    with open(root / f"{variant}_s{seed}.log", "a") as log:
        cmd = command(root, variant, seed, overrides, sft, config_file, options)
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    minutes = (time.perf_counter() - t0) / 60
    return f"{variant} seed {seed}: rc {rc}, {minutes:.1f} min"


def updates_by_step(run: analysis.Run, key: str) -> dict[int, int]:
    """global step -> how many rows logging `key` (one per update of its role) came by then."""
    steps, _ = analysis.series(run, key)
    return {int(s): int(np.sum(steps <= s)) for s in run["step"]}


def generator_updates(run: analysis.Run) -> dict[int, int]:
    """global step -> generator updates done by then (from the rows the generator logged)."""
    return updates_by_step(run, "generator/accuracy")


def collect(root: Path, seeds: list[int]) -> dict:
    """{variant: {seed: {metric: [[generator updates, value], ...]}}} of the finished runs."""
    results: dict = {}
    for variant in VARIANTS:
        for seed in seeds:
            path = run_dir(root, variant, seed)
            if not (path / "metrics.jsonl").exists():
                continue
            run = analysis.load_runs({"r": path})["r"]
            updates = generator_updates(run)
            curves = {}
            for metric in {**GENERATOR_METRICS, **VERIFIER_METRICS}:
                steps, values = analysis.series(run, metric)
                if values.size:
                    curves[metric] = [[updates[int(s)], float(v)] for s, v in zip(steps, values)]
            results.setdefault(variant, {})[str(seed)] = curves
    return results


def bench_items() -> tuple[list[int], list[int]]:
    """(first-error labels, step counts) of the runs' miniature ProcessBench items."""
    from tango_jax.config.files import load_config_file
    from tango_jax.config.run import load_run_config
    from tango_jax.data import synthetic_labels

    cfg = load_run_config(load_config_file(CONFIG).get_config())
    items = synthetic_labels.process_items(
        cfg.data.arith, cfg.eval.process_bench_size, seed=cfg.data.seed
    )
    return [it.label for it in items], [it.num_steps for it in items]


def baselines(labels: list[int], steps: list[int]) -> dict[str, float]:
    """Step F1 of the trivial verifiers on the runs' miniature ProcessBench items."""
    from tango_jax.text import process_bench as pb

    return {
        "always CORRECT": pb.process_scores(labels, [pb.NO_ERROR] * len(labels)).f1,
        "always step 1 wrong": pb.process_scores(labels, [1] * len(labels)).f1,
        "random location": pb.random_step_baseline(labels, steps).f1,
    }


def location_skill(results: dict, seeds: list[int], items: tuple[list[int], list[int]]) -> str:
    """Each verifier (after SFT, after RL) against a verifier with no location skill that
    passes as many correct solutions (process_bench.no_skill_baseline): the first-error rate
    and the F1 above that baseline, per seed and as mean ± 95% interval."""
    from tango_jax.text import process_bench as pb

    found, passed = "eval/verifier/step_acc_erroneous", "eval/verifier/step_acc_correct"
    lines = [
        "| variant | when | first error found | no-skill at the same pass rate | excess | "
        "step F1 | no-skill F1 | F1 excess |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant, by_seed in results.items():
        runs = [by_seed[str(s)] for s in seeds if found in by_seed.get(str(s), {})]
        if not runs:
            continue
        for when, index in (("after SFT", 0), ("after RL", -1)):
            cols: dict[str, list[float]] = {k: [] for k in ("f", "nf", "F", "nF")}
            for r in runs:
                q = r[passed][index][1]
                base = pb.no_skill_baseline(*items, q)
                f = r[found][index][1]
                cols["f"].append(f)
                cols["nf"].append(base.acc_erroneous)
                cols["F"].append(pb.harmonic_mean(f, q))
                cols["nF"].append(base.f1)
            ex = np.subtract(cols["f"], cols["nf"])
            ex_f1 = np.subtract(cols["F"], cols["nF"])
            lines.append(
                f"| {variant} | {when} | {fmt(*mean_ci(cols['f']))} | {fmt(*mean_ci(cols['nf']))} "
                f"| {fmt(*mean_ci(ex))} | {fmt(*mean_ci(cols['F']))} | "
                f"{fmt(*mean_ci(cols['nF']))} | {fmt(*mean_ci(ex_f1))} |"
            )
    return "\n".join(lines)


RANKING = {
    "auroc": "AUROC, first error vs other steps",
    "top1": "first error ranked first",
    "gap": "P(INCORRECT) gap, first error - others",
}


def ranking(
    root: Path, seeds: list[int], items: int = 256, variants=VARIANTS, skip=frozenset()
) -> dict:
    """Threshold-free location skill of each run's verifier before and after RL
    (`process_bench.step_ranking` of `step_probe`'s teacher-forced P(INCORRECT) at
    every step judgment): {variant: {seed: {"start": {...}, "final": {...}}}}. The start is the
    SFT verifier the run began RL from; the items are the first `items` of the run's own
    miniature ProcessBench stream (its held-out evaluation's items come first), on either
    generated task (`step_probe.bench`). Runs in `skip` ((variant, seed) pairs: measured
    before) are left out."""
    from tango_jax.config.run import load_saved_run_config
    from tango_jax.eval import step_probe

    cache: dict[tuple, dict] = {}  # the shared SFT start is probed once

    def measure(checkpoint: Path, cfg) -> dict:
        d = cfg.data
        key = (str(checkpoint.resolve()), d.seed, d.source, repr(d.arith), repr(d.letters))
        if key not in cache:
            solutions, task = step_probe.bench(d, items)
            r = step_probe.probe(key[0], solutions, task, style=d.templates).ranking()
            cache[key] = {"auroc": r.auroc, "top1": r.top1, "gap": r.gap}
        return cache[key]

    out: dict = {}
    for variant in variants:
        for seed in seeds:
            if (variant, seed) in skip:
                continue
            path = run_dir(root, variant, seed)
            final = path / "hf" / "verifier"
            if not (final / "config.json").exists():
                continue  # no verifier (GRPO) or not finished
            cfg = load_saved_run_config(path / "config.json")
            start = step_probe.start_verifier(path, cfg.verifier.model.path)
            if start is None:
                continue  # nothing to compare with
            out.setdefault(variant, {})[str(seed)] = {
                "start": measure(start, cfg),
                "final": measure(final, cfg),
            }
    return out


def ranking_table(ranks: dict, seeds: list[int]) -> str:
    """Mean ± 95% interval over seeds of `ranking`'s numbers before and after RL, and of the
    paired change."""
    lines = [
        "| variant | metric | before RL | after RL | change | per seed, before -> after |",
        "|---|---|---|---|---|---|",
    ]
    for variant, by_seed in ranks.items():
        runs = [(s, by_seed[str(s)]) for s in seeds if str(s) in by_seed]
        for key, label in RANKING.items():
            a = [r["start"][key] for _, r in runs]
            b = [r["final"][key] for _, r in runs]
            cells = "; ".join(f"s{s} {x:.3f} -> {y:.3f}" for (s, _), x, y in zip(runs, a, b))
            lines.append(
                f"| {variant} | {label} | {fmt(*mean_ci(a))} | {fmt(*mean_ci(b))} | "
                f"{fmt(*mean_ci(np.subtract(b, a)))} | {cells} |"
            )
    return "\n".join(lines)


def table(results: dict, seeds: list[int]) -> str:
    lines = [
        f"Seeds {seeds}; mean ± 95% t-interval over seeds; 'before' = after SFT (step 0), "
        "'after' = the last evaluation.",
        "",
        "| variant | metric | before RL | after RL | change |",
        "|---|---|---|---|---|",
    ]
    finals: dict = {}
    for variant, by_seed in results.items():
        for metric, label in {**GENERATOR_METRICS, **VERIFIER_METRICS}.items():
            curves = [by_seed[str(s)].get(metric) for s in seeds if str(s) in by_seed]
            curves = [c for c in curves if c]
            if not curves:
                continue
            first = [c[0][1] for c in curves]
            last = [c[-1][1] for c in curves]
            finals[(variant, metric)] = {
                s: by_seed[str(s)][metric][-1][1]
                for s in seeds
                if metric in by_seed.get(str(s), {})
            }
            lines.append(
                f"| {variant} | {label} | {fmt(*mean_ci(first))} | {fmt(*mean_ci(last))} | "
                f"{fmt(*mean_ci(np.subtract(last, first)))} |"
            )
    lines += ["", "Per seed, before -> after:", ""]
    for (variant, metric), _ in finals.items():
        by_seed = results[variant]
        cells = [
            f"s{s} {by_seed[str(s)][metric][0][1]:.3f} -> {by_seed[str(s)][metric][-1][1]:.3f}"
            for s in seeds
            if metric in by_seed.get(str(s), {})
        ]
        label = {**GENERATOR_METRICS, **VERIFIER_METRICS}[metric]
        lines.append(f"- {variant}, {label}: " + "; ".join(cells))
    lines += ["", "Paired differences at the end (same seed, same SFT start):", ""]
    lines += ["| comparison | metric | difference |", "|---|---|---|"]
    for other in ("grpo", "fixed_verifier"):
        for metric, label in {**GENERATOR_METRICS, **VERIFIER_METRICS}.items():
            a, b = finals.get(("tango", metric), {}), finals.get((other, metric), {})
            common = sorted(a.keys() & b.keys())
            if common:
                diff = [a[s] - b[s] for s in common]
                lines.append(f"| tango - {other} | {label} | {fmt(*mean_ci(diff))} |")
    return "\n".join(lines)


def plot(results: dict, seeds: list[int], metrics: dict[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.2), squeeze=False)
    for ax, (metric, label) in zip(axes.flat, metrics.items()):
        for variant, by_seed in results.items():
            curves = [by_seed[str(s)].get(metric) for s in seeds if str(s) in by_seed]
            curves = [c for c in curves if c]
            if not curves:
                continue
            n = min(len(c) for c in curves)  # evaluations every run of the variant has
            x = np.array([p[0] for p in curves[0][:n]])
            stats = [mean_ci([c[i][1] for c in curves]) for i in range(n)]
            mean = np.array([m for m, _ in stats])
            half = np.nan_to_num(np.array([h for _, h in stats]))
            ax.plot(x, mean, marker=".", label=variant)
            ax.fill_between(x, mean - half, mean + half, alpha=0.2)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("generator updates")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(args) -> int:
    """The arithmetic study (`python -m tango_jax.study`; its arguments: study/__main__.py)."""
    args.variants = args.variants or list(VARIANTS)
    if set(args.variants) - set(VARIANTS):
        raise SystemExit(f"--variants: choose from {VARIANTS}")
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    if args.sft_from and args.sft_per_seed:
        raise SystemExit("--sft-from and --sft-per-seed exclude each other: choose one.")
    if not args.summary_only:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            if args.sft_per_seed:
                for done in concurrent.futures.as_completed(
                    [pool.submit(make_sft, root, s) for s in args.seeds]
                ):
                    print(done.result(), flush=True)
            # Tango runs first: they take longest.
            order = [(v, s) for v in VARIANTS for s in args.seeds if v in args.variants]
            jobs = []
            for v, s in order:
                sft = str(sft_dir(root, s)) if args.sft_per_seed else args.sft_from
                jobs.append(pool.submit(run, root, v, s, args.set, sft))
            for done in concurrent.futures.as_completed(jobs):
                print(done.result(), flush=True)
    results = collect(root, args.seeds)
    (root / "results.json").write_text(json.dumps(results, indent=1))
    text = table(results, args.seeds) + "\n\nStep F1 of trivial verifiers on the same items: "
    items = bench_items()
    text += ", ".join(f"{k} {v:.3f}" for k, v in baselines(*items).items()) + "\n"
    text += "\nLocation skill: the verifier against one that names a uniformly random step "
    text += "whenever it does not pass a solution, and passes as many correct solutions:\n\n"
    text += location_skill(results, args.seeds, items) + "\n"
    ranks = ranking(root, args.seeds)
    (root / "ranking.json").write_text(json.dumps(ranks, indent=1))
    text += "\nThreshold-free location skill (P(INCORRECT) at each step judgment of the ideal "
    text += "transcript, teacher-forced; 256 items; chance: AUROC 0.5, first error ranked first "
    text += "1/3):\n\n" + ranking_table(ranks, args.seeds) + "\n"
    (root / "table.md").write_text(text)
    plot(results, args.seeds, GENERATOR_METRICS, root / "curves_generator.png")
    plot(results, args.seeds, VERIFIER_METRICS, root / "curves_verifier.png")
    print(text)
    return 0
