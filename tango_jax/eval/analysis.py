"""Reading and plotting runs: the functions behind notebooks/analysis.ipynb.

    run_dirs, missing = label_runs(["runs/tiny_arith", ("baseline", "runs/tiny_arith_grpo")])
    runs = load_runs(run_dirs)  # {"Tango (tiny_arith)": columns, "baseline": columns}
    print(run_summary(runs, run_dirs))     # steps, and whether each run has a verifier
    plot_curves(runs, HELD_OUT_CURVES)     # held-out accuracy, step F1, ... over steps
    eval_table(runs)        # {run: {metric: (first value, last value)}}
    print(rollout_text("runs/tiny_arith", rows=3))   # a few rows of the rollout log

    print(data_table(runs, run_dirs))   # `evaluate --data` results beside the run's held-out
    evals = load_evaluations(find_evaluations({"tango": "runs/tiny_arith"}))
    print(table1(evals))    # `python -m tango_jax.evaluate` outputs: one row per evaluation
    print(table3(evals))
    generator_diagnostics(evals)   # format, length, truncation per benchmark

A run is its `metrics.jsonl` as columns (`tango_jax.metrics.writer.metric_columns`): "step" plus one
float array per metric, NaN where a step did not log it (evaluation metrics appear only on
evaluation steps; generator metrics only on generator steps). A run has a verifier when it
logged a verifier metric (GRPO baselines log none); verifier panels and columns are left out
for runs without one.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tango_jax.eval import report as R
from tango_jax.metrics.rollouts import logged_steps, read_rollouts
from tango_jax.metrics.writer import metric_columns, read_metrics

Run = dict[str, np.ndarray]

# Metrics a Tango run is usually judged by (names as the loop writes them).
EVAL_METRICS = (
    "eval/generator/accuracy",
    "eval/generator/format_score",
    "eval/verifier/verdict_accuracy",
    "eval/verifier/f1",
    "eval/verifier/f1_incorrect",
)
# Held-out evaluation over training (eval.every_generator_steps): greedy and sampled pass@1,
# the verifier's step F1 on the miniature ProcessBench (synthetic task only) and its verdicts.
HELD_OUT_CURVES = (
    "eval/generator/accuracy",
    "eval/generator/sampled_accuracy",
    "eval/verifier/step_f1",
    "eval/verifier/verdict_accuracy",
    "eval/verifier/f1",
    "eval/generator/response_len",
)
TRAINING_CURVES = (
    "generator/accuracy",
    "generator/reward/mean",
    "generator/alpha",
    "generator/step_rewards/aligned_frac",
    "verifier/verdict_accuracy",
    "verifier/f1",
    "verifier/reward/mean",
    "generator/train/loss/kl",  # KL to the reference model (only with trainer.loss.kl_coef > 0)
    "verifier/train/loss/kl",
    "generator/train/loss/entropy",  # token entropy (only with trainer.loss.entropy_coef != 0)
    "verifier/train/loss/entropy",
    "generator/response_len/mean",
)
# Throughput: tokens per second of each phase, and seconds per step.
THROUGHPUT_CURVES = (
    "perf/generate_tokens_per_s",
    "perf/verify_tokens_per_s",
    "perf/train_tokens_per_s",
    "perf/step_s",
)


# --- choosing and naming runs -------------------------------------------------------------------

METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
# A run directory, or (label, run directory).
RunChoice = str | os.PathLike | tuple[str, str | os.PathLike]


def config_label(run_dir: str | os.PathLike) -> str:
    """An arm's name from its run_dir/config.json: "Tango (<config name>)" when a verifier
    trains, "GRPO, frozen verifier (<name>)" when one only scores, "GRPO (<name>)" without one;
    "TRL GRPO (<config>:<variant>)" for scripts/bench/compare_trl/trl_grpo.py's record; the
    folder's name without a config.json."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return Path(run_dir).name
    config = json.loads(path.read_text())
    if "trl" in config:  # trl_grpo.py's: {"tango_jax_config": "configs/x.py:v", ...}
        return f"TRL GRPO ({Path(config['tango_jax_config']).name.replace('.py', '')})"
    verifier = config["verifier"]
    if verifier["enable"] and verifier["trainable"]:
        kind = "Tango"
    else:
        kind = "GRPO, frozen verifier" if verifier["enable"] else "GRPO"
    return f"{kind} ({config['name']})"


def _seed(run_dir: Path) -> int | None:
    path = run_dir / CONFIG_FILE
    return json.loads(path.read_text())["seed"] if path.is_file() else None


def label_runs(
    choices: Mapping[str, str | os.PathLike] | Sequence[RunChoice],
    root: str | os.PathLike = ".",
) -> tuple[dict[str, Path], list[Path]]:
    """The runs a user chose -> ({label: run directory} of those with a metrics.jsonl, in
    order; [the run directories without one]).

    `choices` is {label: run directory} or a list of run directories and (label, run
    directory) pairs; relative paths are read from `root`. A run without a label is named by
    `config_label`; runs whose names coincide get their seed added ("GRPO (x, seed 2)"), then
    their folder's name if that is not enough."""
    pairs = list(choices.items()) if isinstance(choices, Mapping) else list(choices)
    pairs = [p if isinstance(p, tuple) else (None, p) for p in pairs]
    pairs = [(label, Path(root) / path) for label, path in pairs]  # absolute paths stay absolute
    names = [config_label(path) if label is None else label for label, path in pairs]
    shared = {n for n in names if names.count(n) > 1}
    for i, (label, path) in enumerate(pairs):
        if label is None and names[i] in shared and (seed := _seed(path)) is not None:
            names[i] = f"{names[i].removesuffix(')')}, seed {seed})"
    shared = {n for n in names if names.count(n) > 1}
    for i, (label, path) in enumerate(pairs):
        if label is None and names[i] in shared:
            names[i] = f"{names[i]} {path.name}"
    if len(set(names)) < len(names):
        raise ValueError(f"runs {names}: two runs share a label; give each its own label.")
    found = {name: path for name, (_, path) in zip(names, pairs) if (path / METRICS_FILE).is_file()}
    missing = [path for _, path in pairs if not (path / METRICS_FILE).is_file()]
    return found, missing


def load_runs(run_dirs: Mapping[str, str | os.PathLike]) -> dict[str, Run]:
    """{name: run directory} -> {name: columns}."""
    return {name: metric_columns(read_metrics(path)) for name, path in run_dirs.items()}


def is_verifier_metric(metric: str) -> bool:
    """A metric only a run with a verifier logs (its training, evaluation and throughput)."""
    return metric.startswith(("verifier/", "eval/verifier/", "perf/verify"))


def has_verifier(run: Run) -> bool:
    """Whether the run logged a finite verifier metric: a Tango run, or GRPO scored by a frozen
    verifier; not a GRPO baseline."""
    return any(is_verifier_metric(m) and np.isfinite(v).any() for m, v in run.items())


def run_summary(runs: Mapping[str, Run], run_dirs: Mapping[str, str | os.PathLike]) -> str:
    """One line per run: its label, last step, whether it has a verifier, and its directory."""
    return "\n".join(
        f"{name}: {int(run['step'].max()) if run['step'].size else 0} steps, "
        f"{'with a verifier' if has_verifier(run) else 'no verifier'} ({run_dirs[name]})"
        for name, run in runs.items()
    )


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


def format_table(
    table: Mapping[str, Mapping[str, tuple[float, float]]], without_verifier: Collection[str] = ()
) -> str:
    """A markdown table of `eval_table` output: one row per run, 'first -> last' cells, "-"
    where a run never logged the metric. The runs named in `without_verifier` read "no
    verifier" in verifier columns, which are left out when no run has a verifier."""
    if not table:
        return "(no runs)"
    metrics = list(next(iter(table.values())))
    if set(table) <= set(without_verifier):
        metrics = [m for m in metrics if not is_verifier_metric(m)]
    lines = [
        "| run | " + " | ".join(m.removeprefix("eval/") for m in metrics) + " |",
        "|---" * (len(metrics) + 1) + "|",
    ]
    for name, row in table.items():
        cells = []
        for metric in metrics:
            first, last = row[metric]
            if name in without_verifier and is_verifier_metric(metric):
                cells.append("no verifier")
            else:
                cells.append("-" if math.isnan(last) else f"{first:.3f} -> {last:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def eval_summary(runs: Mapping[str, Run], metrics: Sequence[str] = EVAL_METRICS) -> str:
    """`format_table(eval_table(runs, metrics))`, verifier columns as the runs have them."""
    without = [name for name, run in runs.items() if not has_verifier(run)]
    return format_table(eval_table(runs, metrics), without)


def plot_curves(
    runs: Mapping[str, Run],
    metrics: Sequence[str] = TRAINING_CURVES,
    *,
    window: int = 1,
    columns: int = 3,
):
    """One panel per metric, one line per run (smoothed over `window` logged points); the
    verifier's panels only when a run has a verifier. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    if not any(has_verifier(run) for run in runs.values()):
        metrics = [m for m in metrics if not is_verifier_metric(m)]
    rows = max(1, -(-len(metrics) // columns))
    fig, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.2 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        logged = False
        for name, run in runs.items():
            steps, values = series(run, metric)
            if values.size:
                logged = True
                ax.plot(
                    steps,
                    smooth(values, window),
                    label=name,
                    marker="." if values.size < 30 else None,
                )
        if not logged:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("global step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    labelled = [ax for ax in axes.flat if ax.get_legend_handles_labels()[0]]
    if labelled:  # the run names, once, on the first panel with data
        labelled[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


# What a run's final log lines report: the held-out numbers of the paper's two claims before RL
# (the first evaluation, after SFT) and after it (the last evaluation).
CLAIM_METRICS = (
    ("eval/generator/sampled_accuracy", "generator accuracy, sampled at the training T"),
    ("eval/generator/accuracy", "generator accuracy, greedy"),
    # per length bucket (last-letter task: the RL range, and lengths never trained on)
    ("eval/generator/sampled_accuracy/in", "generator accuracy, sampled, trained lengths"),
    ("eval/generator/sampled_accuracy/unseen", "generator accuracy, sampled, unseen lengths"),
    ("eval/generator/accuracy/in", "generator accuracy, greedy, trained lengths"),
    ("eval/generator/accuracy/unseen", "generator accuracy, greedy, unseen lengths"),
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


def location_lines(run: Run, labels: Sequence[int], num_steps: Sequence[int]) -> list[str]:
    """At the first and the last evaluation: the verifier's first-error rate and step F1
    against the miniature ProcessBench's baselines (`process_bench.no_skill_baseline` at the
    verifier's own pass rate on correct solutions, and a uniformly random location)."""
    from tango_jax.text import process_bench as pb

    steps, found = series(run, "eval/verifier/step_acc_erroneous")
    _, passed = series(run, "eval/verifier/step_acc_correct")
    if not found.size or found.size != passed.size:
        return []
    random_f1 = pb.random_step_baseline(labels, num_steps).f1
    lines = []
    for i in sorted({0, found.size - 1}):
        q, f = float(passed[i]), float(found[i])
        base = pb.no_skill_baseline(labels, num_steps, q)
        lines.append(
            f"step {steps[i]}: first error found {f:.3f} (a verifier without location skill "
            f"that passes as many correct solutions, {q:.3f}: {base.acc_erroneous:.3f}); step "
            f"F1 {pb.harmonic_mean(f, q):.3f} (that verifier {base.f1:.3f}, a random location "
            f"{random_f1:.3f}, always CORRECT 0)"
        )
    return lines


# --- evaluation outputs (`python -m tango_jax.evaluate`) -------------------------------------
#
# An evaluation's out_dir (default run_dir/eval/<step>) holds results.json ({"generator":
# {"model", <benchmark>: {"accuracy", "correct", "total", ...}, "math_avg", "ood_avg"},
# "verifier": {"model", <split>: {"f1", "acc_erroneous", "acc_correct", ...}, "avg_f1"},
# "data": {"model", "file", "reward", "problems", "greedy_pass@1", "sampled_pass@1",
# "samples", ...}}: each part only when that evaluation ran), table1.md, table3.md, data.md,
# and one JSON line per benchmark problem in generator/<benchmark>.jsonl and
# verifier/<split>.jsonl.

RESULTS_FILE = "results.json"
# Table 3 and the verifier diagnostics of evaluations without verifier results (GRPO runs; or
# `--process_bench none`).
NO_VERIFIER_RESULTS = "no verifier results (a run without a verifier, or ProcessBench not run)\n"
# Table 1 and the generator diagnostics of evaluations without benchmark results (`--data`
# alone evaluates none: `data_table` shows those).
NO_BENCHMARK_RESULTS = "no benchmark results (`evaluate --data` runs none: see the data table)\n"
# The data table when no run has `--data` results.
NO_DATA_RESULTS = (
    "no `evaluate --data` results yet: python -m tango_jax.evaluate --run_dir RUN --step final "
    "--data FILE\n"
)


def _step_order(label: str) -> tuple[int, int]:
    """start, step_1, step_2, ..., final (anything else last, by name)."""
    if label == "start":
        return (0, 0)
    m = re.fullmatch(r"step_(\d+)", label)
    if m:
        return (1, int(m.group(1)))
    return (2, 0) if label == "final" else (3, 0)


def find_evaluations(run_dirs: Mapping[str, str | os.PathLike]) -> dict[str, Path]:
    """{run name: run directory} -> {"<run> <step>": out_dir} for every evaluation under
    run_dir/eval/ that wrote its results, in step order (start, step_N..., final)."""
    found = {}
    for name, run_dir in run_dirs.items():
        for step, out_dir in _evaluation_dirs(run_dir):
            found[f"{name} {step}"] = out_dir
    return found


def _evaluation_dirs(run_dir: str | os.PathLike) -> list[tuple[str, Path]]:
    """(step label, out_dir) of each evaluation under run_dir/eval/ with results, in step
    order."""
    evals = [p.parent for p in Path(run_dir).glob(f"eval/*/{RESULTS_FILE}")]
    return [(p.name, p) for p in sorted(evals, key=lambda p: (_step_order(p.name), p.name))]


def load_evaluation(out_dir: str | os.PathLike) -> dict[str, Any]:
    """An evaluation's results.json, with its per-problem records under "records":
    {"generator": {benchmark: [record, ...]}, "verifier": {split: [record, ...]}}."""
    out_dir = Path(out_dir)
    path = out_dir / RESULTS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no evaluation results; run `python -m tango_jax.evaluate` first "
            "(it writes them at the end of an evaluation)."
        )
    results = json.loads(path.read_text())
    records = {}
    for role in ("generator", "verifier"):
        records[role] = {
            f.stem: [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
            for f in sorted((out_dir / role).glob("*.jsonl"))
        }
    return results | {"records": records}


def load_evaluations(out_dirs: Mapping[str, str | os.PathLike]) -> dict[str, dict[str, Any]]:
    return {name: load_evaluation(path) for name, path in out_dirs.items()}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def table1(evals: Mapping[str, Mapping[str, Any]], *, reference: bool = True) -> str:
    """Table 1 (generator pass@1, %) with one row per evaluation that has generator results,
    then the paper's TANGO-Qwen-7B row; "-" where a benchmark was not evaluated."""
    cols = [*R.TABLE1_MATH, ("math_avg", "Avg"), *R.TABLE1_OOD, ("ood_avg", "Avg")]
    rows = []
    for name, ev in evals.items():
        g = ev.get("generator")
        if g:
            cells = [
                g.get(k)["accuracy"] if isinstance(g.get(k), dict) else g.get(k) for k, _ in cols
            ]
            rows.append([name, *(_pct(c) for c in cells)])
    if not rows:
        return NO_BENCHMARK_RESULTS
    if reference:
        rows.append(["TANGO-Qwen-7B (paper)", *(f"{R.PAPER_TABLE1[k]:.1f}" for k, _ in cols)])
    return _table(["Evaluation", *(h for _, h in cols)], rows)


def table3(evals: Mapping[str, Mapping[str, Any]], *, reference: bool = True) -> str:
    """Table 3 (verifier ProcessBench F1, %) with one row per evaluation that has verifier
    results, then the paper's row; `NO_VERIFIER_RESULTS` when no evaluation has any."""
    cols = [*R.TABLE3, ("avg", "Avg")]
    rows = []
    for name, ev in evals.items():
        v = ev.get("verifier")
        if v:
            cells = [v.get("avg_f1") if k == "avg" else (v.get(k) or {}).get("f1") for k, _ in cols]
            rows.append([name, *(_pct(c) for c in cells)])
    if not rows:
        return NO_VERIFIER_RESULTS
    if reference:
        rows.append(
            ["TANGO-Qwen-7B verifier (paper)", *(f"{R.PAPER_TABLE3[k]:.1f}" for k, _ in cols)]
        )
    return _table(["Evaluation", *(h for _, h in cols)], rows)


def generator_diagnostics(evals: Mapping[str, Mapping[str, Any]]) -> str:
    """Per evaluation and benchmark, from the per-problem records: pass@1, the mean format
    score, the mean response length, and the share cut at the token budget (truncated
    answers are a common reason for a low score)."""
    rows = []
    for name, ev in evals.items():
        for bench, recs in ev["records"]["generator"].items():
            if recs:
                rows.append(
                    [
                        name,
                        bench,
                        str(len(recs)),
                        _pct(np.mean([bool(r["correct"]) for r in recs])),
                        f"{np.mean([r['format_score'] for r in recs]):.2f}",
                        f"{np.mean([r['response_tokens'] for r in recs]):.0f}",
                        _pct(np.mean([r["finish_reason"] == "length" for r in recs])),
                    ]
                )
    if not rows:
        return NO_BENCHMARK_RESULTS
    header = ["Evaluation", "benchmark", "problems", "pass@1", "format", "tokens", "truncated"]
    return _table(header, rows)


def verifier_diagnostics(evals: Mapping[str, Mapping[str, Any]]) -> str:
    """Per evaluation and ProcessBench split: the two accuracies behind F1, the share of
    outputs with no readable prediction, and the share whose step judgments match the
    solution's step count."""
    rows = []
    for name, ev in evals.items():
        for split, recs in ev["records"]["verifier"].items():
            if recs:
                s = R.split_scores(recs)
                k_match = np.mean([r["num_judgments"] == r["num_steps"] for r in recs])
                rows.append(
                    [
                        name,
                        split,
                        f"{s.num_erroneous} / {s.num_correct}",
                        _pct(s.acc_erroneous),
                        _pct(s.acc_correct),
                        _pct(s.f1),
                        _pct(s.unreadable),
                        _pct(k_match),
                    ]
                )
    if not rows:
        return NO_VERIFIER_RESULTS
    header = ["Evaluation", "split", "erroneous / correct", "acc. err.", "acc. corr.", "F1"]
    return _table([*header, "unreadable", "K match"], rows)


def _last(run: Run, metric: str) -> tuple[int, float] | None:
    steps, values = series(run, metric)
    return (int(steps[-1]), float(values[-1])) if values.size else None


def _held_out(run: Run) -> str:
    """The run's last held-out evaluation during training: 'greedy / sampled (step N)'."""
    greedy = _last(run, "eval/generator/accuracy")
    sampled = _last(run, "eval/generator/sampled_accuracy")
    if greedy is None:
        return "not logged"
    cells = [f"{greedy[1]:.3f}"] + ([f"{sampled[1]:.3f}"] if sampled else ["-"])
    return f"{' / '.join(cells)} (step {greedy[0]})"


def data_table(runs: Mapping[str, Run], run_dirs: Mapping[str, str | os.PathLike]) -> str:
    """`python -m tango_jax.evaluate --data` results of each run (every run_dir/eval/<step>/
    whose results.json has them, in step order) beside the run's own held-out evaluation
    during training (its last greedy / sampled accuracy in metrics.jsonl): one row per
    evaluation, one row saying "none yet" for a run without any. pass@1 as fractions, like
    the metrics; sampled with its samples per problem."""
    rows = []
    for name, run_dir in run_dirs.items():
        held_out = _held_out(runs[name]) if name in runs else "not logged"
        found = [
            (step, json.loads((out_dir / RESULTS_FILE).read_text()).get("data"))
            for step, out_dir in _evaluation_dirs(run_dir)
        ]
        found = [(step, d) for step, d in found if d]
        if not found:
            rows.append([name, held_out, "none yet", *["-"] * 5])
        for step, d in found:
            sampled = f"{d['sampled_pass@1']:.3f} ({d['samples']})" if "samples" in d else "-"
            rows.append(
                [
                    name,
                    held_out,
                    step,
                    Path(d["file"]).name,
                    d["reward"],
                    str(d["problems"]),
                    f"{d['greedy_pass@1']:.3f}",
                    sampled,
                ]
            )
    if all(r[2] == "none yet" for r in rows):
        return NO_DATA_RESULTS
    header = ["run", "held-out in training: greedy / sampled", "evaluate --data", "file"]
    return _table([*header, "reward", "problems", "greedy pass@1", "sampled pass@1 (n)"], rows)


# --- rollout logs (run_dir/rollouts/, config log_rollouts) ------------------------------------


def _clip(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[:chars] + " ..."


def _verification_line(v: Mapping[str, Any]) -> str:
    verdict = {1: "CORRECT", 0: "INCORRECT", None: "unreadable"}[v["verdict"]]
    line = f"verdict {verdict}, step judgments {v['step_judgments']}"
    if v.get("step_rewards") is not None:
        line += f", step rewards {[round(x, 3) for x in v['step_rewards']]}"
    if "advantage" in v:
        line += f", advantage {v['advantage']:+.3f}"
    return line


def rollout_text(
    run_dir: str | os.PathLike, *, step: int | None = None, rows: int = 3, chars: int = 300
) -> str:
    """`rows` rows of the rollout log of `step` (default: the last logged step) as text: the
    question, the gold answer, the generator's solution and rewards, the verifier's judgments;
    texts shortened to `chars` characters."""
    steps = logged_steps(run_dir)
    if not steps:
        return f"no rollout log in {run_dir}/rollouts (config log_rollouts.every_steps)"
    step = steps[-1] if step is None else step
    out = []
    for r in read_rollouts(run_dir, [step])[:rows]:
        head = (
            f"step {r['step']} ({r['phase']}), problem {r['problem']} sample {r['sample']}: "
            f"outcome reward {r['outcome_reward']:.2f} ({'correct' if r['correct'] else 'wrong'})"
        )
        if "advantage" in r:
            head += f", advantage {r['advantage']:+.3f}"
        lines = [
            head,
            f"  question: {_clip(r['question'], chars)}",
            f"  answer:   {_clip(r['answer'], chars)}",
            f"  solution: {_clip(r['solution'], chars)}",
        ]
        lines += [f"  verifier: {_verification_line(v)}" for v in r["verifications"]]
        out.append("\n".join(lines))
    return "\n\n".join(out)
