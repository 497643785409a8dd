"""Reading and plotting runs: the functions behind notebooks/analysis.ipynb.

    runs = load_runs({"tango": "runs/tiny_arith", "grpo": "runs/tiny_arith_grpo"})
    plot_curves(runs, ["generator/accuracy", "eval/generator/accuracy"])
    eval_table(runs)        # {run: {metric: (first value, last value)}}

A run is its `metrics.jsonl` as columns (`tango_jax.metrics.metric_columns`): "step" plus one
float array per metric, NaN where a step did not log it (evaluation metrics appear only on
evaluation steps; generator metrics only on generator steps).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np

from tango_jax.metrics import metric_columns, read_metrics

Run = dict[str, np.ndarray]

# Metrics a Tango run is usually judged by (names as the loop writes them).
EVAL_METRICS = (
    "eval/generator/accuracy",
    "eval/generator/format_score",
    "eval/verifier/verdict_accuracy",
    "eval/verifier/f1",
    "eval/verifier/f1_incorrect",
)
TRAINING_CURVES = (
    "generator/accuracy",
    "generator/reward/mean",
    "generator/alpha",
    "generator/step_rewards/aligned_frac",
    "verifier/verdict_accuracy",
    "verifier/f1",
    "verifier/reward/mean",
    "generator/train/kl",
    "generator/response_len/mean",
    "perf/step_s",
)


def load_runs(run_dirs: Mapping[str, str | os.PathLike]) -> dict[str, Run]:
    """{name: run directory} -> {name: columns}."""
    return {name: metric_columns(read_metrics(path)) for name, path in run_dirs.items()}


def series(run: Run, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) where `metric` was logged (NaNs dropped); empty arrays if never."""
    if metric not in run:
        return np.zeros(0, np.int64), np.zeros(0)
    keep = ~np.isnan(run[metric])
    return run["step"][keep], run[metric][keep]


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over `window` points (the first points average what exists)."""
    if window <= 1 or values.size == 0:
        return values
    csum = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, values.size + 1)
    lo = np.maximum(idx - window, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def eval_table(
    runs: Mapping[str, Run], metrics: Sequence[str] = EVAL_METRICS
) -> dict[str, dict[str, tuple[float, float]]]:
    """For each run and metric: (value at the first evaluation, value at the last)."""
    table = {}
    for name, run in runs.items():
        row = {}
        for metric in metrics:
            _, values = series(run, metric)
            row[metric] = (float(values[0]), float(values[-1])) if values.size else (math.nan,) * 2
        table[name] = row
    return table


def format_table(table: Mapping[str, Mapping[str, tuple[float, float]]]) -> str:
    """A markdown table of `eval_table` output: one row per run, 'first -> last' cells."""
    metrics = list(next(iter(table.values())))
    lines = [
        "| run | " + " | ".join(m.removeprefix("eval/") for m in metrics) + " |",
        "|---" * (len(metrics) + 1) + "|",
    ]
    for name, row in table.items():
        cells = [f"{a:.3f} -> {b:.3f}" for a, b in (row[m] for m in metrics)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(
    runs: Mapping[str, Run],
    metrics: Sequence[str] = TRAINING_CURVES,
    *,
    window: int = 1,
    columns: int = 3,
):
    """One panel per metric, one line per run (smoothed over `window` logged points).
    Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    rows = -(-len(metrics) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.2 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for name, run in runs.items():
            steps, values = series(run, metric)
            if values.size:
                ax.plot(
                    steps,
                    smooth(values, window),
                    label=name,
                    marker="." if values.size < 30 else None,
                )
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("global step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


# What a run's final log lines report: the held-out numbers of the paper's two claims before RL
# (the first evaluation, after SFT) and after it (the last evaluation).
CLAIM_METRICS = (
    ("eval/generator/sampled_accuracy", "generator accuracy, sampled at the training T"),
    ("eval/generator/accuracy", "generator accuracy, greedy"),
    ("eval/verifier/step_f1", "verifier step F1 (first INCORRECT step vs first error)"),
    ("eval/verifier/step_acc_erroneous", "verifier: exact first-error step found"),
    ("eval/verifier/step_acc_correct", "verifier: correct solutions passed"),
    ("eval/verifier/verdict_accuracy", "verifier verdict accuracy"),
)


def before_after_lines(run: Run) -> list[str]:
    """'name: first -> last (+gain)' for each claim metric the run logged at two evaluations
    or more (the first one is step 0, after SFT, when eval.before_train is on)."""
    lines = []
    for metric, name in CLAIM_METRICS:
        steps, values = series(run, metric)
        if values.size >= 2:
            lines.append(
                f"{name}: {values[0]:.3f} (step {steps[0]}) -> {values[-1]:.3f} (step {steps[-1]}),"
                f" {values[-1] - values[0]:+.3f}"
            )
    return lines
