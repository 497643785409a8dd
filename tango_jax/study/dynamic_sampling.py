"""DAPO's dynamic sampling on the arithmetic miniature, paired over seeds.

    python -m tango_jax.study.dynamic_sampling                      # seeds 1-5, runs/study_ds/
    python -m tango_jax.study.dynamic_sampling --seeds 1 2 --jobs 2 --max-rounds 4
    python -m tango_jax.study.dynamic_sampling --summary-only       # tables of finished runs
    python -m tango_jax.study.dynamic_sampling --saved docs/dynamic_sampling/results.json

Two arms per seed on configs/tiny_arith.py (Tango), both from the shipped SFT checkpoints, so
arm `on` and arm `off` on seed S form a pair: `off` is the config as it is, `on` sets
`generator.rollout.dynamic_sampling` and `verifier.rollout.dynamic_sampling` (at most
--max-rounds sampling rounds per step). Runs go to ROOT/<arm>/tango_s<S> (a finished run is
resumed, i.e. skipped). Per run:

* the share of zero-variance groups over the run: the mean over the role's steps of
  `<role>/dynamic_sampling/zero_var_groups` (every group sampled, all rounds; logged by both
  arms), and of `<role>/zero_var_groups` (the batch trained on: ~0 with dynamic sampling);
* the rounds per step (`<role>/dynamic_sampling/rounds`: 1 without);
* the generator's held-out sampled accuracy (`eval/generator/sampled_accuracy`): at the last
  evaluation, and its mean height against generator updates (`paired_study.area_under_curve`);
* the verifier's step-ranking AUROC after RL (`tango_jax.study.arith.ranking`: its teacher-forced
  P(INCORRECT) of the first error against the other steps, on the run's miniature
  ProcessBench), and its change from the SFT verifier.

--saved FILE: a results.json written before (the committed docs/dynamic_sampling/results.json):
its (arm, seed) pairs are not run again, and their numbers stand in for runs not under ROOT, so
a study resumes on another machine without the finished runs' checkpoints (a finished run under
ROOT wins over its saved numbers).

Writes ROOT/results.json (every number per arm and seed) and ROOT/table.md: each arm's mean ±
95% t-interval over seeds, and the paired differences on - off with their 95% t-intervals and
Holm-adjusted p-values (`tango_jax.eval.paired_study`). Seed 0 is the tuning seed: not used.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import json
import math
from pathlib import Path

from tango_jax.config.files import load_config_file
from tango_jax.config.run import RunConfig, load_run_config
from tango_jax.eval import analysis
from tango_jax.eval.paired_study import area_under_curve, holm, paired
from tango_jax.study import arith

REPO = Path(__file__).resolve().parents[2]
ARMS = ("off", "on")
VARIANT = "tango"  # configs/tiny_arith.py's variant both arms run


def arm_overrides(arm: str, max_rounds: int) -> dict[str, object]:
    """The config fields arm `arm` sets on top of configs/tiny_arith.py (`off`: none)."""
    if arm not in ARMS:
        raise ValueError(f"arm {arm!r}: choose from {ARMS}.")
    if arm == "off":
        return {}
    return {
        f"{role}.rollout.{field}": value
        for role in ("generator", "verifier")
        for field, value in (
            ("dynamic_sampling", True),
            ("dynamic_sampling_max_rounds", max_rounds),
        )
    }


def arm_root(root: Path, arm: str) -> Path:
    return root / arm


def run_config(root: Path, arm: str, seed: int, max_rounds: int, sets=()) -> RunConfig:
    """The validated config `python -m tango_jax.train` gets for (arm, seed): checked before
    anything is launched. `sets`: --set's FIELD=VALUE strings (a Python literal, else text)."""
    c = load_config_file(REPO / "configs" / "tiny_arith.py").get_config(VARIANT)
    fields = arm_overrides(arm, max_rounds)
    fields |= {"seed": seed, "run_dir": str(arith.run_dir(arm_root(root, arm), VARIANT, seed))}
    for item in sets:
        key, _, value = item.partition("=")
        try:
            fields[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            fields[key] = value
    c.update_from_flattened_dict(fields)
    return load_run_config(c)


def overrides(arm: str, max_rounds: int, sets=()) -> list[str]:
    """The arm's fields and --set's as FIELD=VALUE (`arith.command` makes them flags)."""
    return [f"{k}={v}" for k, v in arm_overrides(arm, max_rounds).items()] + list(sets)


def command(root: Path, arm: str, seed: int, max_rounds: int, sets=()) -> list[str]:
    """The train command of (arm, seed) (what `arith.run` launches)."""
    return arith.command(
        arm_root(root, arm), VARIANT, seed, overrides(arm, max_rounds, sets), sft=""
    )


def _mean(run: analysis.Run, key: str) -> float:
    _, values = analysis.series(run, key)
    return float(values.mean()) if values.size else math.nan


def run_numbers(path: Path) -> dict[str, float]:
    """One finished run's numbers (the module docstring's list, without the AUROC)."""
    run = analysis.load_runs({"r": path})["r"]
    out = {
        f"{role}/{key}": _mean(run, f"{role}/{key}")
        for role in ("generator", "verifier")
        for key in (
            "dynamic_sampling/zero_var_groups",
            "zero_var_groups",
            "dynamic_sampling/rounds",
        )
    }
    steps, acc = analysis.series(run, "eval/generator/sampled_accuracy")
    updates = arith.generator_updates(run)
    curve = {updates[int(s)]: float(a) for s, a in zip(steps, acc)}  # the last at each x
    out["sampled_accuracy/final"] = float(acc[-1]) if acc.size else math.nan
    out["sampled_accuracy/mean_height"] = (
        area_under_curve(sorted(curve.items())) if curve else math.nan
    )
    return out


def collect(root: Path, seeds: list[int], *, auroc: bool = True) -> dict:
    """{arm: {seed: numbers}} of the finished runs; `auroc`: with the verifier's step ranking
    before and after RL (loads each final verifier: minutes)."""
    results: dict = {}
    for arm in ARMS:
        ranks = arith.ranking(arm_root(root, arm), seeds, variants=(VARIANT,)) if auroc else {}
        for seed in seeds:
            path = arith.run_dir(arm_root(root, arm), VARIANT, seed)
            if not (path / "hf" / "verifier" / "config.json").exists():
                continue  # not finished
            numbers = run_numbers(path)
            rank = ranks.get(VARIANT, {}).get(str(seed))
            if rank is not None:
                numbers["verifier/auroc/final"] = rank["final"]["auroc"]
                numbers["verifier/auroc/change"] = rank["final"]["auroc"] - rank["start"]["auroc"]
            results.setdefault(arm, {})[str(seed)] = numbers
    return results


def with_saved(results: dict, saved: dict, seeds: list[int]) -> dict:
    """`results` plus `saved`'s numbers of the `seeds` that `results` lacks, per arm."""
    merged = {arm: dict(by_seed) for arm, by_seed in results.items()}
    for arm, by_seed in saved.items():
        for seed, numbers in by_seed.items():
            if int(seed) in seeds:
                merged.setdefault(arm, {}).setdefault(seed, numbers)
    return merged


def table(results: dict, seeds: list[int]) -> str:
    """Per arm mean ± 95% interval over seeds, and the paired on - off differences."""
    metrics = sorted({k for by_seed in results.values() for n in by_seed.values() for k in n})
    by = {
        arm: {m: {int(s): n[m] for s, n in results.get(arm, {}).items() if m in n} for m in metrics}
        for arm in ARMS
    }
    contrasts = holm([paired(m, by["on"][m], by["off"][m]) for m in metrics])
    lines = [
        f"Seeds {seeds}; mean ± 95% t-interval over seeds; on - off paired by seed "
        "(Holm-adjusted p over the rows).",
        "",
        "| metric | off | on | on - off | p (Holm) |",
        "|---|---|---|---|---|",
    ]
    for m, c in zip(metrics, contrasts):
        off, on = (arith.fmt(*arith.mean_ci(by[a][m].values())) for a in ("off", "on"))
        lines.append(f"| {m} | {off} | {on} | {arith.fmt(c.mean, c.half)} | {c.p_holm:.3g} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tango_jax.study.dynamic_sampling", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--root", type=Path, default=Path("runs/study_ds"))
    p.add_argument("--jobs", type=int, default=1, help="runs at a time")
    p.add_argument("--max-rounds", type=int, default=4, help="dynamic_sampling_max_rounds")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--summary-only", action="store_true")
    p.add_argument("--saved", type=Path, help="an earlier results.json for runs not under ROOT")
    args = p.parse_args(argv)
    saved = json.loads(args.saved.read_text()) if args.saved else {}
    pairs = [(a, s) for s in args.seeds for a in ARMS if str(s) not in saved.get(a, {})]
    for arm, seed in pairs:  # every config checked before the first run starts
        run_config(args.root, arm, seed, args.max_rounds, args.set)
    if not args.summary_only:
        for arm in ARMS:
            arm_root(args.root, arm).mkdir(parents=True, exist_ok=True)

        def one(arm_seed):
            arm, seed = arm_seed
            fields = overrides(arm, args.max_rounds, args.set)
            return f"{arm}: " + arith.run(arm_root(args.root, arm), VARIANT, seed, fields, "")

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for line in pool.map(one, pairs):
                print(line, flush=True)
    results = with_saved(collect(args.root, args.seeds), saved, args.seeds)
    args.root.mkdir(parents=True, exist_ok=True)
    (args.root / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    text = table(results, args.seeds)
    (args.root / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
