"""Tango vs the rule-reward GRPO baseline on the tiny config, over seeds: the README's table.

    python scripts/tiny_sweep.py                       # seeds 0 1 2, runs under runs/sweep/
    python scripts/tiny_sweep.py --seeds 0 1 --root runs/sweep2 --summary-only

Runs `python -m tango_jax.train --config configs/tiny_arith.py[:grpo] --config.seed=S` for
each seed (sequentially; a finished run is resumed, i.e. skipped) and prints a markdown table
of the held-out evaluation before RL (step 0, after SFT) and after the last step, as mean ±
standard deviation over seeds. `--config.seed` changes the SFT data order and every sampling
seed; the initial random weights are fixed by model.init_seed, so for each seed both variants
start RL from the same SFT generator.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tango_jax import analysis

VARIANTS = {"tango": "configs/tiny_arith.py", "grpo": "configs/tiny_arith.py:grpo"}
METRICS = {
    "eval/generator/accuracy": "generator greedy accuracy",
    "eval/generator/sampled_accuracy": "generator sampled (T=1) accuracy",
    "eval/verifier/verdict_accuracy": "verifier verdict accuracy",
    "eval/verifier/f1": "verifier F1 (correct class)",
    "eval/verifier/f1_incorrect": "verifier F1 (incorrect class)",
}


def run(root: Path, variant: str, seed: int) -> float:
    run_dir = root / f"{variant}_s{seed}"
    cmd = [
        sys.executable,
        "-m",
        "tango_jax.train",
        "--config",
        VARIANTS[variant],
        f"--config.seed={seed}",
        f"--config.run_dir={run_dir}",
    ]
    t0 = time.perf_counter()
    with open(root / f"{variant}_s{seed}.log", "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    return time.perf_counter() - t0


def summary(root: Path, seeds: list[int]) -> str:
    lines = [
        "| variant | metric | after SFT (step 0) | after RL (last step) |",
        "|---|---|---|---|",
    ]
    for variant in VARIANTS:
        runs = analysis.load_runs({s: root / f"{variant}_s{s}" for s in seeds})
        table = analysis.eval_table(runs, list(METRICS))
        for metric, label in METRICS.items():
            first = np.array([table[s][metric][0] for s in seeds])
            last = np.array([table[s][metric][1] for s in seeds])
            if np.all(np.isnan(first)):
                continue
            lines.append(
                f"| {variant} | {label} | {first.mean():.3f} ± {first.std():.3f} | "
                f"{last.mean():.3f} ± {last.std():.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--root", default="runs/sweep")
    p.add_argument("--summary-only", action="store_true")
    args = p.parse_args(argv)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    if not args.summary_only:
        for seed in args.seeds:
            for variant in VARIANTS:
                seconds = run(root, variant, seed)
                print(f"{variant} seed {seed}: {seconds / 60:.1f} min", flush=True)
    print(summary(root, args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
