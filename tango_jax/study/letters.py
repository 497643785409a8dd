"""Claim 2 on the last-letter task: the arms of configs/tiny_letters.py over seeds, paired.

    python -m tango_jax.study --task last_letter --seeds 1 2 3 --root runs/letters
    python -m tango_jax.study --task last_letter --seeds 4 5 --root runs/letters  # later
    python -m tango_jax.study --task last_letter --variants grpo oracle --seeds 0  # gate pilot
    python -m tango_jax.study --task last_letter --length fast --seeds 1 2 3 \\
        --root runs/letters_fast --summary-dir docs/study/last_letter_fast  # a third the length
    python -m tango_jax.study --task last_letter --summary-only --seeds 1 2 3 4 5 \\
        --root runs/letters --summary-dir docs/study/last_letter

Every arm (ARMS, or --variants: any config string of configs/tiny_letters.py, such as
`noisy_oracle,q=0.1` or `oracle,alpha0=0.5`) runs once per seed from the same SFT checkpoints,
prompt stream and evaluation samples (a finished run is skipped, and so is a run with a record
in --summary-dir), so arms are paired by seed.
Runs can be added in chunks, on any machine: each finished run's record (its curves, its
verifier's step ranking, its config) is written to `--summary-dir/runs/ARM_sSEED.json`, and the
summary reads those records as well as the runs under --root (a run under --root replaces its
record). So with the records committed, later seeds can be run elsewhere and summarised with
the earlier ones, whose run directories are gone.

Writes to --summary-dir (default --root): `results.json` (every held-out evaluation of every
run: [generator updates, value, global step]), `table.md` (per arm: the SFT start, the final
accuracy, the primary metric, unseen lengths, greedy, steps to GRPO's final accuracy; the gate;
the planned contrasts as paired differences with 95% t-intervals and Holm-adjusted p-values;
for the arms that train the verifier, its threshold-free step ranking before and after RL,
also in `ranking.json`) and `fig4.png` (the paper's Fig. 4 panels: generator accuracy of each
arm on trained and on unseen lengths, greedy, and the verifier's step F1; then each arm's
sampled accuracy minus GRPO's in the same seed, the paired view of the claim; mean ± 95%
interval over seeds) and `dose.png` (each step-reward arm's AUC gain over GRPO against the
informedness of its step labels: the oracle, the noisy oracle's doses, and where the learned
verifiers sit on that curve; also a section of `table.md`).

Primary metric: the area under the held-out sampled accuracy (T = 1, trained lengths) against
generator updates, divided by the number of updates (the curve's mean height). Seed 0 is the
tuning seed: report seeds 1-10.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
from pathlib import Path

import numpy as np
from scipy import stats

from tango_jax.config.files import load_config_file
from tango_jax.eval import analysis
from tango_jax.eval import paired_study as ps
from tango_jax.study import arith as study

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "tiny_letters.py")
ARMS = ("grpo", "oracle", "tango", "fixed_verifier")
OPTIONS = ",study"  # the study's length: 36 generator updates, evaluated every 12
# --length: the config option of every run (configs/tiny_letters.py): `study` (above) or `fast`,
# 12 generator updates evaluated every 4 on the trained lengths only (about a third of the time)
PRIMARY = "eval/generator/sampled_accuracy/in"
METRICS = {
    PRIMARY: "sampled accuracy, trained lengths",
    "eval/generator/sampled_accuracy/unseen": "sampled accuracy, unseen lengths",
    "eval/generator/accuracy/in": "greedy accuracy, trained lengths",
    "eval/verifier/step_f1": "verifier step F1 (ProcessBench-style)",
}
F1 = "eval/verifier/step_f1"
# how right the step labels behind the step rewards were (the verifier's, the oracle's, the
# noisy oracle's), per generator update: share right, and informedness (1 - 2q for flips at q)
LABELS = "generator/feedback/process/step_label_accuracy"
INFORMED = "generator/feedback/process/step_label_informedness"
EXTRA = ("eval/generator/accuracy/unseen", "eval/generator/sampled_accuracy", LABELS, INFORMED)
CONTRASTS = (("oracle", "grpo"), ("tango", "grpo"), ("tango", "fixed_verifier"))
RL_VERIFIER = ("tango", "fixed_generator")  # the arms whose verifier is trained
RANKING_ITEMS = 128  # the size of the runs' own ProcessBench evaluation


def verifier_updates(run: analysis.Run) -> dict[int, int]:
    """global step -> verifier updates done by then (warm-up included)."""
    return study.updates_by_step(run, "verifier/reward/mean")  # logged by every verifier step


def finished(path: Path) -> bool:
    """Whether the run in `path` logged its config's last step (a run still going, or stopped
    and not yet resumed, is left out of the summary)."""
    if not (path / "metrics.jsonl").exists() or not (path / "config.json").exists():
        return False
    total = json.loads((path / "config.json").read_text())["schedule"]["total_steps"]
    with open(path / "metrics.jsonl") as f:
        last = max((json.loads(line).get("step", -1) for line in f if line.strip()), default=-1)
    return last >= total


def collect(root: Path, arms, seeds) -> dict:
    """{arm: {seed: {metric: [[generator updates, value, global step, verifier updates],
    ...]}}}."""
    out: dict = {}
    for arm in arms:
        for seed in seeds:
            path = study.run_dir(root, arm, seed)
            if not finished(path):
                continue
            run = analysis.load_runs({"r": path})["r"]
            updates, v_updates = study.generator_updates(run), verifier_updates(run)
            curves = {}
            for metric in (*METRICS, *EXTRA):
                steps, values = analysis.series(run, metric)
                if values.size:
                    curves[metric] = [
                        [updates[int(s)], float(v), int(s), v_updates[int(s)]]
                        for s, v in zip(steps, values)
                    ]
            out.setdefault(arm, {})[str(seed)] = curves
    return out


def record_path(out: Path, arm: str, seed: int) -> Path:
    return out / "runs" / f"{arm}_s{seed}.json"


def save_records(
    out: Path, root: Path, results: dict, ranks: dict, length: str | None = None
) -> None:
    """One record per finished run under `root` (`collect`'s curves, `study.ranking`'s numbers
    where its verifier was trained, its config), written atomically to `out/runs/`. With
    `length`, a run of another length stops it before any record is written."""
    records = []
    for arm, by_seed in results.items():
        for seed, curves in by_seed.items():
            rec = {"arm": arm, "seed": int(seed), "curves": curves}
            if seed in ranks.get(arm, {}):
                rec["ranking"] = ranks[arm][seed]
            cfg = study.run_dir(root, arm, int(seed)) / "config.json"
            rec["config"] = json.loads(cfg.read_text())
            if length is not None:
                check_length(cfg.parent, rec["config"], length)
            records.append(rec)
    for rec in records:
        path = record_path(out, rec["arm"], rec["seed"])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=1))
        tmp.replace(path)


def ranked_records(out: Path, root: Path, arms, seeds) -> dict:
    """`study.ranking`'s numbers of the runs under `root` whose record in `out` already has
    them and was written after the run's final verifier (the run has not changed since): the
    summary reuses them instead of probing the verifiers again (minutes a run)."""
    ranks: dict = {}
    for arm in arms:
        for seed in seeds:
            rec = record_path(out, arm, seed)
            done = study.run_dir(root, arm, seed) / "hf" / "verifier" / "config.json"
            if rec.exists() and done.exists() and rec.stat().st_mtime > done.stat().st_mtime:
                r = json.loads(rec.read_text()).get("ranking")
                if r:
                    ranks.setdefault(arm, {})[str(seed)] = r
    return ranks


def run_length(config: dict) -> str:
    """The length option a run was made with, read back from its config's name
    (configs/tiny_letters.py's LENGTH_SUFFIX): 'fast', 'quick' (neither option) or 'study'."""
    name = config.get("name", "")
    for length, suffix in letters_config().LENGTH_SUFFIX.items():
        if suffix and name.endswith(suffix):
            return length or "quick"
    return "study"


def check_length(where: Path, config: dict, length: str) -> None:
    """Stops a summary of `length` at a run (or its record, `where`) of another length."""
    if (made := run_length(config)) != length:
        raise SystemExit(
            f"{where}: a run of length {made!r}, not --length {length}; give each length its "
            "own --root and --summary-dir."
        )


def load_records(out: Path, arms, seeds, length: str = "study") -> tuple[dict, dict]:
    """(results as `collect` returns them, ranks as `study.ranking` returns them) from the
    records in `out/runs/` of the given arms and seeds, all of them runs of `length` (a record
    of the other length stops the summary: the two are not paired)."""
    results: dict = {}
    ranks: dict = {}
    for arm in arms:
        for seed in seeds:
            path = record_path(out, arm, seed)
            if not path.exists():
                continue
            rec = json.loads(path.read_text())
            if (rec.get("arm"), rec.get("seed")) != (arm, seed):
                raise SystemExit(
                    f"{path}: a record of arm {rec.get('arm')!r} seed {rec.get('seed')!r}, "
                    f"not of {arm!r} seed {seed}; remove or rename it."
                )
            check_length(path, rec.get("config", {}), length)
            results.setdefault(arm, {})[str(seed)] = rec["curves"]
            if "ranking" in rec:
                ranks.setdefault(arm, {})[str(seed)] = rec["ranking"]
    return results, ranks


def once_per_update(curve: list) -> list:
    """A generator curve with one point per generator-update count, the first: Tango evaluates
    again at the end of the verifier's warm-up, when the generator is still the SFT one."""
    seen, out = set(), []
    for point in curve:
        if point[0] not in seen:
            seen.add(point[0])
            out.append(point)
    return out


def per_run(results: dict, arm: str, seed: int) -> dict[str, float] | None:
    """The summaries of one finished run (None when it has no primary curve of 2+ points)."""
    curves = results.get(arm, {}).get(str(seed), {})
    c = once_per_update(curves.get(PRIMARY, []))
    if len(c) < 2:
        return None
    xy = [p[:2] for p in c]
    out = {"start": c[0][1], "final": c[-1][1], "auc": ps.area_under_curve(xy)}
    for key, metric in (
        ("unseen", "eval/generator/sampled_accuracy/unseen"),
        ("greedy", "eval/generator/accuracy/in"),
        ("greedy_unseen", "eval/generator/accuracy/unseen"),
        ("f1", "eval/verifier/step_f1"),
    ):
        if curves.get(metric):
            out[key] = curves[metric][-1][1]
            out[f"{key}_start"] = curves[metric][0][1]
    for key, metric in (("labels", LABELS), ("informed", INFORMED)):
        if curves.get(metric):
            out[key] = float(np.mean([p[1] for p in curves[metric]]))
    grpo = results.get("grpo", {}).get(str(seed), {}).get(PRIMARY, [])
    if grpo:  # generator updates and global steps to reach GRPO's final accuracy
        target = grpo[-1][1]
        out["to_grpo_final"] = ps.steps_to_reach(xy, target)
        out["to_grpo_final_global"] = ps.steps_to_reach([[p[2], p[1]] for p in c], target)
    return out


def verifier_rows(results: dict, arms, seeds) -> list[str]:
    """The verifier's step F1 per arm that has one: after SFT, its peak and its last value, and
    where the peak was (verifier updates): the paper's fixed-generator plateau."""
    rows = []
    for arm in arms:
        curves = [results.get(arm, {}).get(str(s), {}).get(F1) for s in seeds]
        curves = [c for c in curves if c and len(c) >= 2]
        if not curves:
            continue
        start, peak, final, at = (
            [c[0][1] for c in curves],
            [max(p[1] for p in c) for c in curves],
            [c[-1][1] for c in curves],
            [max(c, key=lambda p: p[1])[3] for c in curves],
        )
        rows.append(
            f"| {arm} | {len(curves)} | {_cell(start)} | {_cell(peak)} | {_cell(at)} | "
            f"{_cell(final)} | {curves[0][-1][3]} |"
        )
    if not rows:
        return []
    return [
        "",
        "Verifier step F1 (held-out ProcessBench-style items):",
        "",
        "| arm | n | after SFT | peak | peak at (verifier updates) | final | verifier updates |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


@functools.cache
def letters_config():
    """The configs/tiny_letters.py module, loaded once."""
    return load_config_file(CONFIG)


@functools.cache
def arm_config(arm: str):
    """configs/tiny_letters.py's config for `arm` (a config string)."""
    return letters_config().get_config(arm + OPTIONS)


def nominal_informedness(arm: str) -> float | None:
    """For an arm whose generator is trained on step rewards at the default α schedule: the
    informedness its step labels have by construction (the oracle 1, the noisy oracle 1 - 2q),
    NaN for a learned verifier's (known only as measured); None for the other arms (no step
    rewards, no generator updates, or another α0: not on the same dose-response curve)."""
    c, base = arm_config(arm), arm_config(arm.split(",")[0])
    if not (c.algorithm.step_rewards and c.generator.trainable):
        return None
    if c.algorithm.alpha.alpha0 != base.algorithm.alpha.alpha0:
        return None
    if c.algorithm.step_source == "oracle":
        return 1.0 - 2.0 * c.algorithm.oracle_flip_prob
    return float("nan")


def line_fit(x, y) -> dict:
    """Least squares y = a + b x with 95% t-intervals (n - 2 degrees of freedom) on a and b."""
    r = stats.linregress(x, y)
    t = stats.t.ppf(0.975, len(x) - 2)
    return {
        "a": r.intercept,
        "b": r.slope,
        "a_half": t * r.intercept_stderr,
        "b_half": t * r.stderr,
        "n": len(x),
    }


def dose_response(runs: dict, arms) -> tuple[list[dict], dict | None]:
    """Each step-reward arm's informedness (measured where its runs log it, else nominal) and
    its AUC gain over GRPO paired by seed; and a line through the per-seed gains of the oracle
    arms (oracle, noisy oracle) against their nominal informedness, where 2+ doses exist."""
    grpo = {s: x["auc"] for s, x in runs.get("grpo", {}).items()}
    rows, xs, ys = [], [], []
    for arm in arms:
        nominal = nominal_informedness(arm)
        if nominal is None or not runs.get(arm) or not grpo:
            continue
        measured = [x["informed"] for x in runs[arm].values() if "informed" in x]
        c = ps.paired(f"{arm} - grpo", {s: x["auc"] for s, x in runs[arm].items()}, grpo)
        if not c.n:
            continue
        rows.append(
            {
                "arm": arm,
                "nominal": nominal,
                "measured": study.mean_ci(measured) if measured else None,
                "n_measured": len(measured),
                "gain": c,
            }
        )
        if not np.isnan(nominal):
            xs += [nominal] * c.n
            ys += list(c.diffs)
    rows.sort(key=lambda r: r["measured"][0] if r["measured"] else r["nominal"])
    fit = line_fit(xs, ys) if len(set(xs)) >= 2 and len(xs) >= 3 else None
    return rows, fit


def dose_lines(rows: list[dict], fit: dict | None) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "Dose-response: AUC gain over GRPO (paired by seed) against the informedness of the "
        "step labels behind the step rewards (right steps labelled CORRECT + wrong ones "
        "INCORRECT - 1; measured over the run where logged, else by construction):",
        "",
        "| arm | informedness | n | AUC - GRPO | p |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        m, c = r["measured"], r["gain"]
        inf = f"{study.fmt(*m)} measured (n {r['n_measured']})" if m else ""
        if not np.isnan(r["nominal"]):
            inf = (inf + "; " if inf else "") + f"{r['nominal']:.1f} by construction"
        lines.append(f"| {r['arm']} | {inf} | {c.n} | {study.fmt(c.mean, c.half)} | {c.p:.3g} |")
    if fit:
        lines += [
            "",
            f"Line through the oracle arms' per-seed gains ({fit['n']} points; seeds taken as "
            "independent, so the intervals are approximate): AUC - GRPO = "
            f"{study.fmt(fit['a'], fit['a_half'])} + {study.fmt(fit['b'], fit['b_half'])} x "
            "informedness.",
        ]
        for r in rows:
            if np.isnan(r["nominal"]) and r["measured"]:
                x = r["measured"][0]
                lines.append(
                    f"- {r['arm']}: at its measured informedness {x:.3f} the line predicts "
                    f"{fit['a'] + fit['b'] * x:+.4f} (an extrapolation below the lowest dose); "
                    f"measured {r['gain'].mean:+.4f}."
                )
    return lines


def plot_dose(rows: list[dict], fit: dict | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for i, r in enumerate(rows):
        x = r["measured"][0] if r["measured"] else r["nominal"]
        c = r["gain"]
        ax.errorbar(
            x,
            c.mean,
            yerr=np.nan_to_num(c.half),
            fmt="o",
            color=f"C{i}",
            capsize=3,
            label=f"{r['arm']} (n={c.n})",
        )
    if fit:
        x = np.linspace(0, 1, 11)
        ax.plot(x, fit["a"] + fit["b"] * x, "k--", lw=0.8, label="line through the oracle arms")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("informedness of the step labels")
    ax.set_ylabel("AUC minus GRPO's, same seed")
    ax.set_title("generator gain against step-label quality", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _cell(values) -> str:
    return study.fmt(*study.mean_ci(values)) if len(values) else "-"


def summaries(results: dict, arms, seeds) -> dict:
    """{arm: {seed: per_run(...)}} of the finished runs."""
    return {a: {s: r for s in seeds if (r := per_run(results, a, s))} for a in arms}


def table(results: dict, arms, seeds) -> tuple[str, list[ps.Contrast]]:
    runs = summaries(results, arms, seeds)
    lines = [
        f"Seeds {seeds} (those finished per arm: n); mean ± 95% t-interval over seeds. "
        "Accuracy: held-out, T = 1, trained lengths unless said; AUC: area under that curve "
        "against generator updates / number of updates (the primary metric).",
        "",
        "| arm | n | after SFT | final | AUC (primary) | unseen lengths: after SFT -> final | "
        "greedy: after SFT -> final | G steps to GRPO's final | all steps to GRPO's final |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in arms:
        r = list(runs[arm].values())
        if not r:
            continue

        def col(key, rows=r):
            return [x[key] for x in rows if key in x and not np.isnan(x[key])]

        reached = col("to_grpo_final")
        lines.append(
            f"| {arm} | {len(r)} | {_cell(col('start'))} | {_cell(col('final'))} | "
            f"{_cell(col('auc'))} | {_cell(col('unseen_start'))} -> {_cell(col('unseen'))} | "
            f"{_cell(col('greedy_start'))} -> {_cell(col('greedy'))} | "
            f"{_cell(reached)} ({len(reached)}/{len(r)} reach it) | "
            f"{_cell(col('to_grpo_final_global'))} |"
        )
    lines += verifier_rows(results, arms, seeds)
    labelled = {a: [x for x in runs[a].values() if "labels" in x] for a in arms}
    if any(labelled.values()):
        lines += [
            "",
            "Step labels behind the step rewards, mean over each run's generator updates "
            "(where logged): share of the written steps labelled right; informedness (right "
            "steps labelled CORRECT + wrong ones INCORRECT - 1: 1 - 2q for labels flipped at q):",
            "",
        ]
        for a, rows in labelled.items():
            if rows:
                j = [x["informed"] for x in rows if "informed" in x]
                lines.append(
                    f"- {a}: right {_cell([x['labels'] for x in rows])}, informedness "
                    f"{_cell(j)} (n {len(rows)})"
                )
    lines += dose_lines(*dose_response(runs, arms))
    lines += ["", "Per seed (AUC; final):", ""]
    for arm in arms:
        cells = [f"s{s} {x['auc']:.3f}; {x['final']:.3f}" for s, x in runs[arm].items()]
        if cells:
            lines.append(f"- {arm}: " + " | ".join(cells))
    contrasts = []
    # the planned contrasts, then every other arm of the study against GRPO (secondary)
    extra = [(a, "grpo") for a in arms if a != "grpo" and (a, "grpo") not in CONTRASTS]
    for a, b in (*CONTRASTS, *extra):
        for key, label in (("auc", "AUC"), ("final", "final"), ("unseen", "unseen final")):
            av = {s: x[key] for s, x in runs.get(a, {}).items() if key in x}
            bv = {s: x[key] for s, x in runs.get(b, {}).items() if key in x}
            if av.keys() & bv.keys():
                contrasts.append(ps.paired(f"{a} - {b}, {label}", av, bv))
    planned = {f"{a} - {b}, AUC" for a, b in CONTRASTS}
    primary = ps.holm([c for c in contrasts if c.name in planned])
    others = [c for c in contrasts if c.name not in planned]
    lines += [
        "",
        "Contrasts (paired by seed; Holm over the planned AUC contrasts that exist: oracle - "
        "grpo, tango - grpo, tango - fixed_verifier; the others are secondary, unadjusted):",
        "",
        "| contrast | n | mean difference ± 95% t-interval | p | p (Holm) |",
        "|---|---|---|---|---|",
    ]
    for c in [*primary, *others]:
        lines.append(
            f"| {c.name} | {c.n} | {study.fmt(c.mean, c.half)} | {c.p:.3g} | "
            f"{'-' if np.isnan(c.p_holm) else f'{c.p_holm:.3g}'} |"
        )
    return "\n".join(lines), [*primary, *others]


def gate(results: dict, seeds, contrasts: list[ps.Contrast]) -> str:
    """(a) room after SFT (from every run's step-0 evaluation: one SFT, so one number per
    seed's sampling), (b) the oracle (each α0 run) beats GRPO on the primary metric.
    `contrasts`: all of the table's."""
    starts = {k: [] for k in ("start", "unseen_start", "greedy_start")}
    for arm in results:
        for s in seeds:
            r = per_run(results, arm, s)
            for k in starts:
                if r and k in r:
                    starts[k].append(r[k])
    a = (
        f"(a) room after SFT: sampled accuracy {_cell(starts['start'])} on trained lengths, "
        f"{_cell(starts['unseen_start'])} on unseen lengths, greedy "
        f"{_cell(starts['greedy_start'])} (over all runs' step-0 evaluations); the issue asks "
        "for ~0.2-0.5, lower on unseen lengths, greedy < 1."
    )
    b = [c for c in contrasts if c.name.startswith("oracle") and c.name.endswith(" - grpo, AUC")]
    if not b:
        return a + "\n(b) oracle vs GRPO: not run yet."
    lines = [a]
    for c in b:
        holds = c.n >= 5 and c.mean - c.half > 0
        verdict = "holds" if holds else ("fails" if c.n >= 5 else f"open (only {c.n} seeds)")
        lines.append(
            f"(b) {c.name.removesuffix(', AUC')} on the primary metric: "
            f"{study.fmt(c.mean, c.half)} over {c.n} seeds (p {c.p:.3g}): the gate {verdict} "
            "(needs >= 5 seeds and an interval above 0)."
        )
    return "\n".join(lines)


def paired_curve(results: dict, arm: str, base: str, seeds) -> list[list]:
    """Per seed that has both runs, `arm`'s primary curve minus `base`'s at the same generator
    updates: [[generator updates, difference], ...] each (the points both evaluated)."""
    out = []
    for s in seeds:
        a = once_per_update(results.get(arm, {}).get(str(s), {}).get(PRIMARY, []))
        b = {
            p[0]: p[1]
            for p in once_per_update(results.get(base, {}).get(str(s), {}).get(PRIMARY, []))
        }
        diff = [[p[0], p[1] - b[p[0]]] for p in a if p[0] in b]
        if len(diff) >= 2:
            out.append(diff)
    return out


def plot(results: dict, arms, seeds, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the panels with data (`--length fast` has no unseen-length bucket)
    panels = {
        m: label
        for m, label in METRICS.items()
        if any(results.get(a, {}).get(str(s), {}).get(m) for a in arms for s in seeds)
    }
    n = len(panels) + 1
    color = {arm: f"C{i}" for i, arm in enumerate(arms)}  # one colour per arm in every panel
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.3), squeeze=False)
    axes = axes[0]
    for ax, (metric, label) in zip(axes, panels.items()):
        for arm in arms:
            curves = [results.get(arm, {}).get(str(s), {}).get(metric) for s in seeds]
            curves = [c if metric == F1 else once_per_update(c) for c in curves if c]
            xi = 3 if metric == F1 else 0  # F1 against verifier updates
            _band(ax, curves, arm, color[arm], xi)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("verifier updates" if metric == F1 else "generator updates")
    ax = axes[-1]  # the claim: each arm against GRPO, paired by seed
    for arm in arms:
        if arm != "grpo":
            _band(ax, paired_curve(results, arm, "grpo", seeds), arm, color[arm], xi=0)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_title("sampled accuracy minus GRPO's, same seed (trained lengths)", fontsize=9)
    ax.set_xlabel("generator updates")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _band(ax, curves: list, label: str, color: str, xi: int) -> None:
    """Mean ± 95% t-interval over `curves` (lists of points; x at index `xi`, y at 1), over
    the points all of them have."""
    if not curves:
        return
    n = min(len(c) for c in curves)
    x = np.array([p[xi] if xi < len(p) else np.nan for p in curves[0][:n]])
    st = [study.mean_ci([c[i][1] for c in curves]) for i in range(n)]
    mean = np.array([m for m, _ in st])
    half = np.nan_to_num(np.array([h for _, h in st]))
    ax.plot(x, mean, marker=".", color=color, label=f"{label} (n={len(curves)})")
    ax.fill_between(x, mean - half, mean + half, color=color, alpha=0.15)


def main(args) -> int:
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    arms = args.variants or list(ARMS)
    if args.sft_per_seed:
        raise SystemExit("--sft-per-seed is not available for --task last_letter; use --sft-from.")
    out = Path(args.summary_dir or root)
    length = getattr(args, "length", "study")
    if not args.summary_only:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            jobs = [
                pool.submit(study.run, root, arm, s, args.set, args.sft_from, CONFIG, "," + length)
                for s in args.seeds
                for arm in arms
                if not record_path(out, arm, s).exists()  # recorded: finished elsewhere
            ]
            for done in concurrent.futures.as_completed(jobs):
                print(done.result(), flush=True)
    fresh = collect(root, arms, args.seeds)
    ranked = [a for a in arms if a in RL_VERIFIER]
    ranks = ranked_records(out, root, ranked, args.seeds)
    skip = {(a, int(s)) for a, by_seed in ranks.items() for s in by_seed}
    for a, by_seed in study.ranking(root, args.seeds, RANKING_ITEMS, ranked, skip).items():
        ranks.setdefault(a, {}).update(by_seed)
    save_records(out, root, fresh, ranks, length)
    results, ranks = load_records(out, arms, args.seeds, length)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    text, contrasts = table(results, arms, args.seeds)
    text = "Gate:\n\n" + gate(results, args.seeds, contrasts) + "\n\n" + text + "\n"
    if ranks:
        (out / "ranking.json").write_text(json.dumps(ranks, indent=1))
        text += (
            "\nThreshold-free step ranking of the verifier before and after its RL "
            "(P(INCORRECT) at each step judgment of the transcript its SFT writes for a right "
            f"solution, teacher-forced; {RANKING_ITEMS} items; chance AUROC 0.5):\n\n"
            + study.ranking_table(ranks, args.seeds)
            + "\n"
        )
    (out / "table.md").write_text(text)
    plot(results, arms, args.seeds, out / "fig4.png")
    rows, fit = dose_response(summaries(results, arms, args.seeds), arms)
    if rows:
        plot_dose(rows, fit, out / "dose.png")
    print(text)
    return 0
